"""Pilot tests of the dashboard on fixture runs: steering a run, detail screens, live updates.

No agent runs here: the fixture runs have no engine, so commands from the TUI are
applied directly by the core (as `agentbox approve` would), and the dashboard sees the
result through the real file watcher.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.widgets import DataTable, Input

from agentbox.core.engine.run_store import RunStore
from agentbox.core.paths import ProjectPaths
from agentbox.tui import messages as msg
from agentbox.tui.app import AgentboxApp
from agentbox.tui.commands import dashboard_commands
from agentbox.tui.factory import make_app
from agentbox.tui.screens.dashboard import DashboardScreen
from agentbox.tui.screens.modals import AnswerDialog, ConfirmDialog, NoteDialog
from agentbox.tui.screens.profiles import ProfilesScreen
from agentbox.tui.screens.sessions import SessionHistoryScreen
from agentbox.tui.screens.task import TaskDetailScreen
from agentbox.tui.widgets.checkpoints import CheckpointBar
from agentbox.tui.widgets.events import EventLog
from agentbox.tui.widgets.members import MembersTable
from agentbox.tui.widgets.queue import QueueList
from tests.tui.builders import RUN_ID, build_run, copy_example
from tests.tui.conftest import dashboard_loaded, log_text, plain, queue_states, record, wait_for


def live_app(project: ProjectPaths) -> AgentboxApp:
    """The TUI as a person gets it: real watcher and sampler."""
    return make_app(project, sample_interval_s=0.2)


async def test_approve_a_task_in_review(project_at: Callable[[str], ProjectPaths]) -> None:
    project = project_at("executing")
    app = live_app(project)
    async with app.run_test(size=(140, 40)) as pilot:
        await dashboard_loaded(pilot)
        board = app.dashboard
        assert board is not None
        seen = record(board)
        assert queue_states(board)["tests"] == "reviewing"
        await pilot.press("y")
        await wait_for(pilot, lambda: isinstance(app.screen, NoteDialog), "the approval note dialog")
        app.screen.query_one(Input).value = "checked the test by hand"
        await pilot.press("enter")
        await wait_for(pilot, lambda: any(isinstance(m, msg.CommandApplied) for m in seen), "the command's outcome")
        applied = next(m for m in seen if isinstance(m, msg.CommandApplied))
        assert (applied.action, applied.ok, applied.target) == ("approve", True, "tests")
        await wait_for(pilot, lambda: queue_states(board).get("tests") == "approved", "the queue to show it approved")
        task = board.run.tasks["tests"]  # type: ignore[union-attr]
        assert task.verdicts[-1].by == "human" and task.verdicts[-1].note == "checked the test by hand"
        assert any(isinstance(m, msg.BoxChanged) for m in seen), "the change came through the watcher"
        await wait_for(pilot, lambda: "approve applied: task tests approved" in log_text(board), "the decision log line")


async def test_send_a_task_back_for_rework(project_at: Callable[[str], ProjectPaths]) -> None:
    project = project_at("executing")
    app = live_app(project)
    async with app.run_test(size=(140, 40)) as pilot:
        await dashboard_loaded(pilot)
        board = app.dashboard
        assert board is not None
        await pilot.press("w")
        await wait_for(pilot, lambda: isinstance(app.screen, NoteDialog), "the rework dialog")
        await pilot.press("enter")  # a rework needs a note: the dialog stays
        assert isinstance(app.screen, NoteDialog)
        app.screen.query_one(Input).value = "also test an empty name"
        await pilot.press("enter")
        await wait_for(pilot, lambda: queue_states(board).get("tests") == "rework", "the task back in rework")
        task = board.run.tasks["tests"]  # type: ignore[union-attr]
        assert task.verdicts[-1].verdict == "reject" and task.verdicts[-1].note == "also test an empty name"
        assert "tests" not in [t.id for t in board.run.tasks.values() if t.state == "reviewing"]  # type: ignore[union-attr]


async def test_answer_a_checkpoint(project_at: Callable[[str], ProjectPaths]) -> None:
    project = project_at("waiting")
    app = live_app(project)
    async with app.run_test(size=(140, 40)) as pilot:
        await dashboard_loaded(pilot)
        board = app.dashboard
        assert board is not None
        bar = board.query_one(CheckpointBar)
        assert bar.has_class("-open") and "English or in French" in plain(bar)
        await pilot.press("a")
        await wait_for(pilot, lambda: isinstance(app.screen, AnswerDialog), "the answer dialog")
        await pilot.press(*"English")
        await pilot.press("enter")
        await wait_for(pilot, lambda: not bar.has_class("-open"), "the checkpoint bar to close")
        cp = board.run.checkpoints["cp-1"]  # type: ignore[union-attr]
        assert (cp.status, cp.answer) == ("answered", "English")
        assert queue_states(board)["docs"] == "queued"


async def test_a_new_checkpoint_rings_and_notifies(project_at: Callable[[str], ProjectPaths]) -> None:
    project = project_at("waiting")
    app = make_app(project, live=False, sample_interval_s=None)
    bells: list[bool] = []
    app.bell = lambda: bells.append(True)  # type: ignore[method-assign]
    async with app.run_test(size=(120, 36)) as pilot:
        await dashboard_loaded(pilot)
        assert bells == [True]
        assert any(n.title == "cp-1 waits on you" for n in app._notifications)


async def test_session_history_of_a_role(project_at: Callable[[str], ProjectPaths]) -> None:
    project = project_at("done")
    app = make_app(project, live=False, sample_interval_s=None)
    async with app.run_test(size=(140, 40)) as pilot:
        await dashboard_loaded(pilot)
        board = app.dashboard
        assert board is not None
        table = board.query_one(MembersTable)
        table.move_cursor(row=[r.role for r in table.rows_shown].index("builder"))
        await pilot.press("s")
        await wait_for(pilot, lambda: isinstance(app.screen, SessionHistoryScreen), "the history screen")
        screen = app.screen
        assert isinstance(screen, SessionHistoryScreen)
        await wait_for(pilot, lambda: screen.turns, "the turns")
        assert [r.task_id for r in screen.records] == ["docs", "greet"]
        assert screen.query_one("#session-list", DataTable).row_count == 2
        assert [t["turn"] for t in screen.turns] == [1, 2]
        detail = plain(screen.query_one("#turn-text"))
        assert "[agentbox:work task=docs" in detail and "Wrote docs/usage.md" in detail
        await pilot.press("down")  # the greet session: rejected once, reworked
        await wait_for(pilot, lambda: screen.turns and "greet" in screen.turns[0]["prompt"], "the greet session's turns")
        await pilot.press("escape")
        assert isinstance(app.screen, DashboardScreen)


async def test_task_detail_shows_verdicts_failures_and_events(project_at: Callable[[str], ProjectPaths]) -> None:
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
        text = plain(screen.query_one("#task-info"))
        for expected in ("the module has a docstring", "src/**", "reject", "approve", "implementation_defect",
                         "[a2] src/greet.py has no module docstring"):
            assert expected in text
        assert {e["task"] for e in screen.events_shown} == {"greet"}
        assert not screen.check_action("approve", ())  # approved already: nothing to approve


def test_palette_offers_every_action(project_at: Callable[[str], ProjectPaths]) -> None:
    import asyncio

    async def run() -> list[str]:
        app = make_app(project_at("executing"), live=False, sample_interval_s=None)
        async with app.run_test(size=(120, 36)) as pilot:
            await dashboard_loaded(pilot)
            assert app.dashboard is not None
            return [title for title, _, _ in dashboard_commands(app.dashboard)]

    titles = asyncio.run(run())
    for expected in ("Start a run…", "Pause the run", "Cancel the run…", "Approve task tests…",
                     "Send task tests back for rework…", "Cancel task greet…", "Task detail: docs", "Talk to builder",
                     "Session history of lead", "Attach to reviewer", "View artifact tests/test_greet.py",
                     "Edit artifact tests/test_greet.py in $EDITOR", "Profiles"):
        assert expected in titles


async def test_a_change_by_another_process_shows_up(project_at: Callable[[str], ProjectPaths]) -> None:
    """`agentbox approve` in another terminal, and a writer thread: both reach the dashboard via the watcher."""
    project = project_at("executing")
    app = live_app(project)
    async with app.run_test(size=(140, 40)) as pilot:
        await dashboard_loaded(pilot)
        board = app.dashboard
        assert board is not None
        proc = subprocess.run([sys.executable, "-m", "agentbox", "--project", str(project.root), "approve", "tests",
                               "--note", "from another terminal"], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        await wait_for(pilot, lambda: queue_states(board).get("tests") == "approved", "the approval from outside")

        def writer() -> None:
            store = RunStore(project)
            run = store.load(RUN_ID)
            run.status_reason = "written by another thread"
            run.seq += 1
            run.outbox.append({"seq": run.seq, "at": run.created + 200, "run": RUN_ID, "type": "note",
                               "what": "a line from another writer", "why": None, "task": None})
            store.save(run)

        thread = threading.Thread(target=writer)
        thread.start()
        thread.join()
        await wait_for(pilot, lambda: "a line from another writer" in log_text(board), "the appended event")
        await wait_for(pilot, lambda: board.run is not None and board.run.status_reason == "written by another thread",
                       "the new run state")


async def test_outside_a_project_shows_profiles_and_init() -> None:
    app = make_app(None, live=False, sample_interval_s=None)
    async with app.run_test(size=(100, 40)) as pilot:
        await wait_for(pilot, lambda: app.screen.query(DataTable) and app.screen.query_one(DataTable).row_count,
                       "the profiles")
        assert isinstance(app.screen, ProfilesScreen)
        assert app.dashboard is None
        names = [str(app.screen.query_one(DataTable).get_row_at(i)[0]) for i in range(app.screen.query_one(DataTable).row_count)]
        assert "demo-lead" in names and "claude" in names
        assert "agentbox init" in app.screen.query_one("#no-project").source  # type: ignore[attr-defined]


async def test_an_edited_profile_yaml_shows_in_the_open_profiles_view(
        project_at: Callable[[str], ProjectPaths], agent_box_home: Path) -> None:
    profile = agent_box_home / "profiles" / "mine"
    profile.mkdir(parents=True)
    (profile / "profile.yaml").write_text('{"name": "mine", "runtime": {"tool": "claude", "model": "model-one"}}\n')
    app = live_app(project_at("executing"))
    async with app.run_test(size=(140, 40)) as pilot:
        await dashboard_loaded(pilot)
        await pilot.press("f")

        def model_of_mine() -> str | None:
            if not isinstance(app.screen, ProfilesScreen):
                return None
            table = app.screen.query_one(DataTable)
            rows = [table.get_row_at(i) for i in range(table.row_count)]
            return next((str(row[3]) for row in rows if str(row[0]) == "mine"), None)

        await wait_for(pilot, lambda: model_of_mine() == "model-one", "the profile as it was")
        (profile / "profile.yaml").write_text('{"name": "mine", "runtime": {"tool": "claude", "model": "model-two"}}\n')
        await wait_for(pilot, lambda: model_of_mine() == "model-two", "the edited profile.yaml")


async def test_pause_resume_and_cancel_the_run(project_at: Callable[[str], ProjectPaths]) -> None:
    project = project_at("executing")
    app = live_app(project)
    async with app.run_test(size=(140, 40)) as pilot:
        await dashboard_loaded(pilot)
        board = app.dashboard
        assert board is not None
        await pilot.press("p")
        await wait_for(pilot, lambda: board.run is not None and board.run.paused, "the run to be paused")
        assert not board.check_action("pause", ()) and board.check_action("resume", ())
        await pilot.press("p")
        await wait_for(pilot, lambda: board.run is not None and not board.run.paused, "the run to resume")
        await pilot.press("x")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmDialog), "the confirmation")
        await pilot.press("y")
        await wait_for(pilot, lambda: board.run is not None and board.run.status == "cancelled", "the cancelled run")
        assert set(queue_states(board).values()) == {"cancelled"}
        assert not board.check_action("approve", ()) and not board.check_action("cancel_run", ())


async def test_a_run_started_elsewhere_is_followed(project_at: Callable[[str], ProjectPaths]) -> None:
    """The shown run is over; a new one created by another process is opened on its own."""
    project = project_at("done")
    app = live_app(project)
    async with app.run_test(size=(140, 40)) as pilot:
        await dashboard_loaded(pilot)
        board = app.dashboard
        assert board is not None and board.run_id == RUN_ID
        code = ("from pathlib import Path; from agentbox.core import runs; from agentbox.core.paths import ProjectPaths;"
                f"print(runs.create_run(ProjectPaths(Path({str(project.root)!r})), 'a second goal').id)")
        new_id = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        await wait_for(pilot, lambda: board.run is not None and board.run.id == new_id, "the new run to be shown")
        assert board.run_ids == (RUN_ID, new_id)
        assert board.run.contract.goal == "a second goal"
        assert queue_states(board) == {} and board.query_one(EventLog).records_shown == 0


async def test_members_columns_fit_their_rows_in_the_same_frame(project_at: Callable[[str], ProjectPaths]) -> None:
    """A rebuild of the members table sizes its columns itself: no frame shows the header
    and the rows at different widths while the table waits to be idle to measure them."""
    project = project_at("waiting")
    app = make_app(project, live=False, sample_interval_s=None)
    async with app.run_test(size=(160, 40)) as pilot:
        await dashboard_loaded(pilot)
        board = app.dashboard
        assert board is not None
        table = board.query_one(MembersTable)
        for narrow in (True, False):  # each switch lays the columns out afresh
            table.narrow = narrow
            table._rebuild()  # noqa: SLF001 - synchronously, with no idle in between
            assert table.row_count == len(table.rows_shown) > 0
            for key, column in table.columns.items():
                widest = max([len(str(key.value))] + [table.get_cell(row.role, key.value).cell_len
                                                      for row in table.rows_shown])
                assert column.get_render_width(table) - 2 * table.cell_padding >= widest, key.value


async def test_notifications_never_cover_the_events_panel(project_at: Callable[[str], ProjectPaths]) -> None:
    project = project_at("waiting")
    app = make_app(project, live=False, sample_interval_s=None)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await dashboard_loaded(pilot)
        for n in range(5):
            app.notify(f"a notice that is long enough to wrap over two lines of a toast, number {n}", timeout=30)
        await wait_for(pilot, lambda: len(list(app.screen.query("Toast"))) == 2, "the newest two notices")
        assert len(list(app._notifications)) >= 5, "older ones are kept, only not shown"
        await pilot.pause()
        events = app.screen.query_one(EventLog).region
        on_top = {type(app.screen.get_widget_at(x, y)[0]).__name__
                  for x in range(events.x, events.right) for y in range(events.y, events.bottom)}
        assert not on_top & {"Toast", "ToastHolder", "ToastRack"}, on_top
        newest = next(t for t in app.screen.query("Toast") if "number 4" in str(t.render()))

        def newest_on_top() -> bool:
            try:
                return app.screen.get_widget_at(newest.region.x + 2, newest.region.y + 1)[0] is newest
            except Exception:  # NoWidget: not in view yet
                return False

        await wait_for(pilot, newest_on_top, "the newest notice in view")


async def test_members_are_the_runs_crew_not_every_role_of_crew_yaml(
        project_at: Callable[[str], ProjectPaths]) -> None:
    project = project_at("executing")
    app = make_app(project, live=False, sample_interval_s=None)
    async with app.run_test(size=(140, 40)) as pilot:
        await dashboard_loaded(pilot)
        board = app.dashboard
        assert board is not None and board.run is not None
        shown = {row.role for row in board.query_one(MembersTable).rows_shown}
        assignees = {task.assignee for task in board.run.tasks.values()}
        assert shown == {"lead", "reviewer"} | assignees, shown
        assert not shown & {"host", "architect", "skeptic", "designer", "checker"}  # other modes' roles


async def test_a_run_made_before_the_watcher_watches_is_still_shown(
        project: ProjectPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first reads and the watcher's start race: what changed between them is read once it watches."""
    from agentbox.core import watch

    made = copy_example(tmp_path / "other")
    build_run(made, "done")
    real, go = watch._changes, threading.Event()

    def late(paths: list[Path], *args: object) -> object:
        if paths == [project.box]:  # the dashboard's first reads are over: a run appears, unseen by any watch
            assert go.wait(30)
            shutil.copytree(made.runs_dir / RUN_ID, project.runs_dir / RUN_ID)
        yield from real(paths, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(watch, "_changes", late)
    app = live_app(project)
    async with app.run_test(size=(140, 44)) as pilot:
        await dashboard_loaded(pilot)
        board = app.dashboard
        assert board is not None and board.run_id is None, "no run yet"
        go.set()
        await wait_for(pilot, lambda: board.run_id == RUN_ID and board.run is not None, "the run made meanwhile")
        assert board.run is not None and board.run.status == "done"
