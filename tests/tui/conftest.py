"""TUI fixtures: projects with runs at fixed stages, UTC times, and waiting helpers."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from textual.message import Message
from textual.pilot import Pilot
from textual.screen import Screen
from textual.widgets import DataTable

from agentbox.core.paths import ProjectPaths
from agentbox.tui.app import AgentboxApp
from agentbox.tui.factory import make_app
from agentbox.tui.screens.dashboard import DashboardScreen
from agentbox.tui.widgets.events import EventLog
from agentbox.tui.widgets.queue import QueueList
from tests.tui.builders import T0, build_run, copy_example

FROZEN_NOW = T0 + 95
"""The frozen clock of snapshot tests: 1 min 35 s after the fixture run started."""


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Times on screen in UTC, whatever the machine's zone."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def project(tmp_path: Path) -> ProjectPaths:
    """A project made from `.agent-box.example/` with no run."""
    return copy_example(tmp_path / "repo")


@pytest.fixture
def project_at(tmp_path: Path) -> Callable[[str], ProjectPaths]:
    """A project whose one run is at a stage: planning, executing, waiting or done."""

    def make(stage: str) -> ProjectPaths:
        proj = copy_example(tmp_path / "repo")
        build_run(proj, stage)
        return proj

    return make


def frozen_app(project: ProjectPaths | None) -> AgentboxApp:
    """The TUI with a frozen clock, no watcher and no process sampling (for snapshots); its fixture
    runs are shown as an engine drives them (no engine process runs in a snapshot)."""
    return make_app(project, clock=lambda: FROZEN_NOW, live=False, sample_interval_s=None,
                    engine_probe=lambda _project, _run_id: True)


async def wait_for(pilot: Pilot[None], condition: Callable[[], object], what: str, timeout: float = 10.0) -> None:
    """Let the app run until `condition()` holds; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        await pilot.pause(0.02)


def tables_settled(screen: Screen[object]) -> bool:
    """No table on `screen` has a rebuild or a re-measure of its columns still to run.

    A DataTable sizes its columns when the app is idle; a screenshot taken before that
    shows the header at the old widths over rows at the new ones, and only under load.
    """
    for table in screen.query(DataTable):
        if getattr(table, "_scheduled", False):  # MembersTable: a rebuild waits for the next refresh
            return False
        if table._require_update_dimensions or table._updated_cells or table._new_rows:
            return False
    return True


async def dashboard_loaded(pilot: Pilot[None]) -> None:
    """Wait until every first read of the dashboard has landed and the workers are idle."""
    app = pilot.app
    assert isinstance(app, AgentboxApp)
    board = app.dashboard
    assert board is not None

    def loaded() -> bool:
        run_read = board.run_id is None or (board.run is not None and board._events_offset is not None
                                            and board._manifest_offset is not None)
        return (board.crew is not None and board._sessions_complete and board._listed_once and run_read
                and not any(w.is_running for w in app.workers if w.name != "watcher"))

    await wait_for(pilot, loaded, "the dashboard's first reads")
    await pilot.pause()
    others = [w for w in app.workers if w.name != "watcher"]
    if others:  # an empty list would mean every worker, the never-ending watcher included
        await app.workers.wait_for_complete(others)
    await pilot.pause()
    await wait_for(pilot, lambda: tables_settled(app.screen), "the tables to size their columns")
    await pilot.pause()


def plain(widget: object) -> str:
    """The text a Static shows (its content rendered without styles)."""
    from rich.console import Console

    console = Console(width=200, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(widget.content)  # type: ignore[attr-defined]
    return console.export_text()


def record(node: DashboardScreen | Screen[None]) -> list[Message]:
    """Every message `node` handles from now on."""
    seen: list[Message] = []
    node.message_signal.subscribe(node, seen.append, immediate=True)
    return seen


def queue_states(board: DashboardScreen) -> dict[str, str]:
    """Task id → the state group the queue shows it under."""
    shown = board.query_one(QueueList).groups
    return {task_id: state for state, task_ids in shown.items() for task_id in task_ids}


def log_text(board: DashboardScreen) -> str:
    """The lines the events panel holds."""
    return "\n".join(strip.text for strip in board.query_one(EventLog).lines)
