"""Snapshots of the dashboard at several stages of a run, the session history and a task's detail.

Fixed run ids, session ids and timestamps; a frozen clock; times in UTC. Update with
`pytest tests/tui/test_snapshots.py --snapshot-update`, then look at the SVGs.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from textual.pilot import Pilot

from agentbox.core.paths import ProjectPaths
from tests.tui.conftest import dashboard_loaded, frozen_app, wait_for


@pytest.mark.parametrize("stage", ["planning", "executing", "waiting", "done"])
def test_dashboard(stage: str, project_at: Callable[[str], ProjectPaths], snap_compare: Callable[..., bool]) -> None:
    """The dashboard, wide, at each stage of the demo run."""
    assert snap_compare(frozen_app(project_at(stage)), terminal_size=(160, 44), run_before=dashboard_loaded)


@pytest.mark.parametrize("stage", ["executing", "waiting"])
def test_dashboard_80x24(stage: str, project_at: Callable[[str], ProjectPaths], snap_compare: Callable[..., bool]) -> None:
    """The dashboard in a small terminal: every panel still there, nothing overlapping."""
    assert snap_compare(frozen_app(project_at(stage)), terminal_size=(80, 24), run_before=dashboard_loaded)


def test_dashboard_without_run(project: ProjectPaths, snap_compare: Callable[..., bool]) -> None:
    """A project with no run yet."""
    assert snap_compare(frozen_app(project), terminal_size=(120, 30), run_before=dashboard_loaded)


def test_session_history(project_at: Callable[[str], ProjectPaths], snap_compare: Callable[..., bool]) -> None:
    """The lead's session: its plan and synthesis turns, the plan's prompt and result."""

    async def open_history(pilot: Pilot[None]) -> None:
        await dashboard_loaded(pilot)
        board = pilot.app.dashboard  # type: ignore[attr-defined]
        board.action_history("lead")
        await wait_for(pilot, lambda: getattr(pilot.app.screen, "turns", None), "the turns of the lead's session")
        await pilot.press("tab", "up")  # the plan turn: its prompt names no temp path
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()

    assert snap_compare(frozen_app(project_at("done")), terminal_size=(140, 40), run_before=open_history)


def test_task_detail(project_at: Callable[[str], ProjectPaths], snap_compare: Callable[..., bool]) -> None:
    """Task greet: rejected once, reworked, approved; its verdicts, failure and events."""

    async def open_task(pilot: Pilot[None]) -> None:
        await dashboard_loaded(pilot)
        pilot.app.dashboard.action_task_detail("greet")  # type: ignore[union-attr]
        await wait_for(pilot, lambda: getattr(pilot.app.screen, "events_shown", None), "the task's events")
        await pilot.pause()

    assert snap_compare(frozen_app(project_at("waiting")), terminal_size=(140, 50), run_before=open_task)
