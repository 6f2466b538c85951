"""The dashboard's ask action: a question in a dialog, the liaison's answer under its data time."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from textual.widgets import Input

from agentbox.core.paths import ProjectPaths
from agentbox.tui.commands import dashboard_commands
from agentbox.tui.factory import make_app
from agentbox.tui.screens.modals import ConfirmDialog, NoteDialog
from tests.tui.conftest import dashboard_loaded, plain, wait_for

pytestmark = pytest.mark.bwrap


async def test_ask_the_liaison_from_the_dashboard(project_at: Callable[[str], ProjectPaths]) -> None:
    project = project_at("waiting")
    app = make_app(project, live=False, sample_interval_s=None)
    async with app.run_test(size=(120, 36)) as pilot:
        await dashboard_loaded(pilot)
        board = app.dashboard
        assert board is not None
        assert "Ask the liaison where things stand…" in [title for title, _, _ in dashboard_commands(board)]
        await pilot.press("k")
        await wait_for(pilot, lambda: isinstance(app.screen, NoteDialog), "the question dialog")
        app.screen.query_one(Input).value = "what is blocked?"
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmDialog)
                       and bool(app.screen.query(".dialog-question Static")), "the answer", timeout=60)
        shown = plain(app.screen.query_one(".dialog-question Static"))
        assert shown.startswith("liaison · data as of 20") and "As of " in shown and "1 blocked" in shown
        assert "960 tokens" in shown
