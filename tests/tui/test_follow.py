"""The dashboard and the task screen follow their run through the door's follower (`runs.RunFollower`).

Its offsets are the screen's: what the log and the manifest were read up to, and a look the
follower has moved past (or another follower's) is dropped rather than shown twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from agentbox.core import runs, store
from agentbox.core.engine.run_store import RunStore
from agentbox.core.paths import ProjectPaths
from agentbox.tui import loaders
from agentbox.tui.factory import make_app
from agentbox.tui.screens.task import TaskDetailScreen
from agentbox.tui.widgets.events import EventLog
from agentbox.tui.widgets.queue import QueueList
from tests.tui.builders import RUN_ID
from tests.tui.conftest import dashboard_loaded, log_text, wait_for


def append_event(project: ProjectPaths, what: str, task: str | None = None) -> None:
    """A line appended to the run's decision log, as the engine's save writes it."""
    log = RunStore(project).events_path(RUN_ID)
    store.append_jsonl(log, {"seq": 10_000 + len(log.read_bytes()), "at": time.time(), "run": RUN_ID, "type": "note",
                             "what": what, "why": None, "task": task, "role": None, "session": None,
                             "fingerprint": None, "tokens": None, "human_required": False})


async def test_the_dashboard_follows_its_run_through_the_doors_follower(
        project_at: Callable[[str], ProjectPaths]) -> None:
    project = project_at("executing")
    app = make_app(project, sample_interval_s=None)
    async with app.run_test(size=(140, 40)) as pilot:
        await dashboard_loaded(pilot)
        board = app.dashboard
        assert board is not None
        follower = board._follower
        assert isinstance(follower, runs.RunFollower) and follower.run_id == board.run_id == RUN_ID
        log = RunStore(project).events_path(RUN_ID)
        assert board._events_offset == follower.offset == log.stat().st_size
        assert board._manifest_offset == follower.manifest_offset is not None
        assert follower.run is board.run  # the state the follower last took is the one shown
        append_event(project, "followed through the door")
        await wait_for(pilot, lambda: "followed through the door" in log_text(board), "the line, through the watcher")
        assert board._events_offset == log.stat().st_size


async def test_a_big_log_opens_at_its_end(project_at: Callable[[str], ProjectPaths]) -> None:
    project = project_at("executing")
    for n in range(loaders.EVENTS_SHOWN + 150):
        append_event(project, f"old line {n}")
    app = make_app(project, live=False, sample_interval_s=None)
    async with app.run_test(size=(140, 40)) as pilot:
        await dashboard_loaded(pilot)
        board = app.dashboard
        assert board is not None
        assert board.query_one(EventLog).records_shown == loaders.EVENTS_SHOWN
        assert f"old line {loaders.EVENTS_SHOWN + 149}" in log_text(board) and "old line 149\n" not in log_text(board)
        assert board._events_offset == RunStore(project).events_path(RUN_ID).stat().st_size


async def test_a_look_the_follower_moved_past_is_dropped(project_at: Callable[[str], ProjectPaths]) -> None:
    """Two reads of the same lines (a look overtaken, another follower's) show them once."""
    project = project_at("executing")
    app = make_app(project, live=False, sample_interval_s=None)
    async with app.run_test(size=(140, 40)) as pilot:
        await dashboard_loaded(pilot)
        board = app.dashboard
        assert board is not None and board._follower is not None
        events = board.query_one(EventLog)
        shown = events.records_shown
        reader = board._follower.reader("events")
        append_event(project, "read twice")
        board.post_message(loaders.follow_read(reader))
        await wait_for(pilot, lambda: events.records_shown == shown + 1, "the new line")
        board.post_message(loaders.follow_read(reader))  # the same look again: the follower has left its start
        stranger = runs.RunFollower(project, RUN_ID, events="all")
        board.post_message(loaders.follow_read(stranger.reader("events")))  # not the dashboard's follower
        await pilot.pause()
        await pilot.pause()
        assert events.records_shown == shown + 1 and log_text(board).count("read twice") == 1


async def test_the_task_screen_follows_the_tasks_records_through_a_follower(
        project_at: Callable[[str], ProjectPaths]) -> None:
    project = project_at("waiting")
    app = make_app(project, live=False, sample_interval_s=None)
    async with app.run_test(size=(140, 44)) as pilot:
        await dashboard_loaded(pilot)
        board = app.dashboard
        assert board is not None
        board.query_one(QueueList).select_task("greet")
        board.query_one(QueueList).focus()
        await pilot.pause()
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, TaskDetailScreen), "the task detail")
        screen = app.screen
        assert isinstance(screen, TaskDetailScreen)
        await wait_for(pilot, lambda: screen.events_shown, "the task's events")
        follower = screen._follower
        assert isinstance(follower, runs.RunFollower) and follower.run_id == RUN_ID
        before = len(screen.events_shown)
        append_event(project, "about another task", task="other")
        append_event(project, "about greet", task="greet")
        reader = follower.reader("events")
        screen.post_message(loaders.follow_read(reader, "greet"))
        screen.post_message(loaders.follow_read(reader, "greet"))  # read twice: shown once
        await wait_for(pilot, lambda: len(screen.events_shown) > before, "the task's new record")
        await pilot.pause()
        await pilot.pause()
        assert [e["what"] for e in screen.events_shown[before:]] == ["about greet"]
        assert follower.offset == RunStore(project).events_path(RUN_ID).stat().st_size
