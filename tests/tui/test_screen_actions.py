"""Screens opened from the dashboard ask it to act by message, and the one action table decides what is offered."""

from __future__ import annotations

from collections.abc import Callable

from agentbox.core.paths import ProjectPaths
from agentbox.tui import action_table
from agentbox.tui import messages as msg
from agentbox.tui.factory import make_app
from agentbox.tui.screens.modals import NoteDialog
from agentbox.tui.screens.task import TaskDetailScreen
from agentbox.tui.widgets.queue import QueueList
from tests.tui.conftest import dashboard_loaded, record, wait_for


async def test_a_key_in_the_task_detail_reaches_the_dashboards_action(
        project_at: Callable[[str], ProjectPaths]) -> None:
    app = make_app(project_at("executing"), live=False, sample_interval_s=None)
    async with app.run_test(size=(140, 44)) as pilot:
        await dashboard_loaded(pilot)
        board = app.dashboard
        assert board is not None
        board.query_one(QueueList).select_task("tests")  # in review
        board.query_one(QueueList).focus()
        await pilot.pause()
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, TaskDetailScreen), "the task detail")
        detail = app.screen
        sent = record(detail)
        await pilot.press("y")
        await wait_for(pilot, lambda: isinstance(app.screen, NoteDialog), "the approve dialog")
        [request] = [m for m in sent if isinstance(m, msg.ActionRequested)]
        assert request.call == "approve('tests')"
        assert "Approve tests" in str(app.screen.query_one(".dialog-title").render())


async def test_footer_check_action_and_palette_follow_one_table(project_at: Callable[[str], ProjectPaths]) -> None:
    from agentbox.tui.commands import dashboard_commands

    app = make_app(project_at("done"), live=False, sample_interval_s=None)
    async with app.run_test(size=(140, 44)) as pilot:
        await dashboard_loaded(pilot)
        board = app.dashboard
        assert board is not None and board.run is not None
        assert [b.action for b in board.BINDINGS] == [a.name for a in action_table.ACTIONS]
        titles = [title for title, _, _ in dashboard_commands(board)]
        for name in action_table.CONTEXT_ACTIONS:  # a finished run: none of them is offered anywhere
            assert not action_table.enabled(name, board.run)
            assert not board.check_action(name, ())
        assert not any(t.startswith(("Pause", "Resume", "Cancel", "Approve", "Answer")) for t in titles), titles
