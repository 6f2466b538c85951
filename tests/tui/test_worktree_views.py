"""Worktree runs in the TUI: a task's diff per file, the run's changes by role and task, merge as an action,
and the bell with a banner when a run ends or stops.

The runs are real git: a repository, task branches with commits merged into the run's
branch (tests/tui/worktree_fixture.py); merging goes through the same command path as
`agentbox merge`.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import Button, Static, Tree

from agentbox.core import watch
from agentbox.core.engine.models import Run
from agentbox.core.engine.run_store import RunStore
from agentbox.core.paths import ProjectPaths
from agentbox.tui import action_table, model
from agentbox.tui import messages as msg
from agentbox.tui.app import AgentboxApp
from agentbox.tui.commands import dashboard_commands
from agentbox.tui.diffs import split_patch
from agentbox.tui.factory import make_app
from agentbox.tui.screens.changes import ChangesScreen
from agentbox.tui.screens.modals import ConfirmDialog, MergeDialog
from agentbox.tui.screens.task import TaskDetailScreen
from agentbox.tui.widgets.diff_view import DiffView
from tests.tui.builders import RUN_ID as DEMO_RUN_ID
from tests.tui.conftest import dashboard_loaded, frozen_app, plain, wait_for
from tests.tui.worktree_fixture import RUN_ID, build_worktree_run, git


def quiet_app(project: ProjectPaths, *, live: bool = False) -> AgentboxApp:
    return make_app(project, live=live, sample_interval_s=None)


def notices(app: AgentboxApp) -> list[str]:
    return [f"{n.title}: {n.message}" for n in app._notifications]


async def open_task(pilot: Pilot[None], task_id: str) -> TaskDetailScreen:
    app = pilot.app
    assert isinstance(app, AgentboxApp) and app.dashboard is not None
    app.dashboard.action_task_detail(task_id)
    await wait_for(pilot, lambda: isinstance(app.screen, TaskDetailScreen), f"the detail of {task_id}")
    screen = app.screen
    assert isinstance(screen, TaskDetailScreen)
    await wait_for(pilot, lambda: screen.is_mounted and screen.query(DiffView), "the detail drawn")
    return screen


def diff_text(screen: TaskDetailScreen) -> str:
    return "\n".join(plain(w) for w in screen.query_one(DiffView).query(Static))


# ----------------------------------------------------------------------------- the task's diff
async def test_the_task_detail_shows_the_diff_of_each_file(tmp_path: Path) -> None:
    project = build_worktree_run(tmp_path / "repo")
    app = quiet_app(project)
    async with app.run_test(size=(120, 30)) as pilot:
        await dashboard_loaded(pilot)
        screen = await open_task(pilot, "greet")
        view = screen.query_one(DiffView)
        await wait_for(pilot, lambda: view.file_paths, "the diff read from git")
        assert view.file_paths == ("OLD.md", "src/app.py", "src/greet.py")  # git's order, one part per file
        headings = [plain(h).strip() for h in view.file_headings()]
        assert headings == ["D  OLD.md  +0 −1", "M  src/app.py  +3 −1", "A  src/greet.py  +6 −0"]
        shown = diff_text(screen)
        assert "Changes  agentbox/run-20260101-130000-c3d4@greet  3 file(s) +9 −2  merged" in shown
        assert "1   -print('app')" in shown  # old line number, the removed line
        assert "  1 +from src.greet import greet" in shown  # new line number, the added line
        bodies = view.query(".diff-file-body").results(Static)
        greet_body = list(bodies)[2].content
        assert any(span.style and "on #10301a" in str(span.style) for span in greet_body.spans)  # added lines marked
        assert len({str(span.style) for span in greet_body.spans}) > 3  # and the Python in them highlighted
        body = screen.query_one("#task-body")
        await pilot.press("right_square_bracket", "right_square_bracket", "right_square_bracket")
        await pilot.pause()
        assert body.max_scroll_y > 0 and body.scroll_y > 0  # jumped to the last file's heading
        assert screen._file_index == 2
        await pilot.press("left_square_bracket", "left_square_bracket", "left_square_bracket")
        await pilot.pause()
        assert screen._file_index == 0


async def test_a_big_diff_shows_what_fits_and_the_command_for_the_rest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("agentbox.tui.loaders.DIFF_SHOWN_BYTES", 300)
    app = quiet_app(build_worktree_run(tmp_path / "repo"))
    async with app.run_test(size=(140, 40)) as pilot:
        await dashboard_loaded(pilot)
        screen = await open_task(pilot, "greet")
        view = screen.query_one(DiffView)
        await wait_for(pilot, lambda: view.file_paths, "the diff read from git")
        await pilot.pause()
        assert view.file_paths == ("OLD.md", "src/app.py")  # the patch was cut inside the second file
        run = _run(app.dashboard.project)  # type: ignore[union-attr]
        base, head = run.tasks["greet"].base, run.tasks["greet"].head
        assert base and head
        assert f"the diff is cut here. The whole diff: git diff {base[:12]} {head[:12]}" in diff_text(screen)


@pytest.mark.parametrize(("task_id", "note"), [
    ("docs", "no commits yet: its work turns have changed nothing so far"),
    ("plan", "no branch: this task writes nothing"),
])
async def test_a_task_without_commits_says_why_there_is_no_diff(tmp_path: Path, task_id: str, note: str) -> None:
    app = quiet_app(build_worktree_run(tmp_path / "repo", status="running"))
    async with app.run_test(size=(140, 40)) as pilot:
        await dashboard_loaded(pilot)
        screen = await open_task(pilot, task_id)
        await pilot.pause()
        assert note in diff_text(screen)
        assert screen.query_one(DiffView).file_paths == ()
        assert not screen.check_action("next_file", ())


async def test_a_shared_run_task_says_it_has_no_branch(project_at: Callable[[str], ProjectPaths]) -> None:
    app = quiet_app(project_at("waiting"))
    async with app.run_test(size=(140, 40)) as pilot:
        await dashboard_loaded(pilot)
        screen = await open_task(pilot, "greet")
        await pilot.pause()
        assert "works in the live tree (shared workspace)" in diff_text(screen)
        assert app.dashboard is not None
        assert not app.dashboard.check_action("changes", ()) and not app.dashboard.check_action("merge", ())


def test_a_patch_is_split_at_each_file_header_whatever_the_names() -> None:
    patch = ('diff --git a/old name.md b/new name.md\nsimilarity index 90%\nrename from old name.md\n'
             'rename to new name.md\n--- a/old name.md\t\n+++ b/new name.md\t\n@@ -1 +1 @@\n-a\n+b\n'
             'diff --git "a/q\\"uote.txt" "b/q\\"uote.txt"\nnew file mode 100644\n--- /dev/null\n'
             '+++ "b/q\\"uote.txt"\n@@ -0,0 +1,2 @@\n+x\n+diff --git looks like a header inside a hunk? no: it has a +\n'
             'diff --git a/img.png b/img.png\nBinary files a/img.png and b/img.png differ\n')
    files = split_patch(patch)
    assert [(f.path, f.change, f.old_path, f.added, f.removed, f.binary) for f in files] == [
        ("new name.md", "R", "old name.md", 1, 1, False),
        ('q"uote.txt', "A", None, 2, 0, False),
        ("img.png", "M", None, 0, 0, True),
    ]


# ----------------------------------------------------------------------------- the run's changes
async def test_the_changes_view_lists_files_by_role_and_task(tmp_path: Path) -> None:
    project = build_worktree_run(tmp_path / "repo")
    app = quiet_app(project)
    async with app.run_test(size=(140, 44)) as pilot:
        await dashboard_loaded(pilot)
        await pilot.press("c")
        await wait_for(pilot, lambda: isinstance(app.screen, ChangesScreen), "the changes view")
        screen = app.screen
        summary = screen.query_one("#changes-summary", Static)
        await wait_for(pilot, lambda: "4 files changed" in plain(summary), "the run's stat from git")
        assert "agentbox/run-20260101-130000-c3d4 → main" in plain(summary)
        assert "not merged yet: press m to merge" in plain(summary)
        assert screen.query_one("#changes-body").border_subtitle.startswith("enter opens the selected task")
        tree: Tree[str] = screen.query_one(Tree)
        shown = {str(role.label).split()[0]: {str(task.label).split()[0]: [str(f.label).strip() for f in task.children]
                                              for task in role.children}
                 for role in tree.root.children}
        assert shown == {
            "builder": {"greet": ["D  OLD.md  +0 −1", "M  src/app.py  +3 −1", "A  src/greet.py  +6 −0"], "docs": []},
            "tester": {"tests": ["A  tests/test_greet.py  +5 −0"]},
        }
        assert "no commits yet" in str(tree.root.children[0].children[1].label)
        await pilot.press("m")  # merge from here too: the dashboard asks, over this view
        await wait_for(pilot, lambda: isinstance(app.screen, MergeDialog), "the merge confirmation")
        await pilot.press("n")
        await wait_for(pilot, lambda: app.screen is screen, "back to the changes")
        tree.focus()
        tree.move_cursor(tree.root.children[1].children[0].children[0])  # tests/test_greet.py
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, TaskDetailScreen), "the task's diff")
        assert app.screen.task_id == "tests"  # type: ignore[attr-defined]


# ----------------------------------------------------------------------------- merging
def _run(project: ProjectPaths) -> Run:
    return RunStore(project).load(RUN_ID)


@pytest.mark.parametrize(("status", "delivered", "merged", "offered"), [
    ("done", False, True, True),
    ("failed", False, True, True),  # approved work is worth keeping when the rest failed
    ("running", False, True, False),  # merging now would mark it delivered with more to come
    ("waiting_user", False, True, False),
    ("done", True, True, False),  # merged already
    ("done", False, False, False),  # no approved work on its branch
])
def test_merge_is_offered_once_a_run_with_approved_work_has_ended(
        tmp_path: Path, status: str, delivered: bool, merged: bool, offered: bool) -> None:
    run = _run(build_worktree_run(tmp_path / "repo", status=status))
    assert run.git is not None
    if delivered:
        run.git = run.git.model_copy(update={"delivered": run.git.head})
    if not merged:
        for task in run.tasks.values():
            task.merged = None
    assert action_table.enabled("merge", run) is offered
    assert model.can_merge(run) is offered


async def test_merge_asks_with_the_stat_then_brings_the_run_into_main(tmp_path: Path) -> None:
    project = build_worktree_run(tmp_path / "repo")
    root = project.root
    main_before = git(root, "rev-parse", "main").strip()
    app = quiet_app(project, live=True)
    async with app.run_test(size=(140, 44)) as pilot:
        await dashboard_loaded(pilot)
        board = app.dashboard
        assert board is not None
        assert board.check_action("merge", ()) and board.check_action("changes", ())
        titles = [title for title, _, _ in dashboard_commands(board)]
        assert "Merge the run into main…" in titles and "Changes of the run" in titles
        await pilot.press("m")
        await wait_for(pilot, lambda: isinstance(app.screen, MergeDialog), "the confirmation")
        question = plain(app.screen.query_one(".dialog-question Static"))
        assert "Merge agentbox/run-20260101-130000-c3d4 into main?" in question
        assert "4 files changed, 14 insertions(+), 2 deletions(-)" in question and "src/greet.py" in question
        assert git(root, "rev-parse", "main").strip() == main_before  # nothing merged while it asks
        await pilot.press("y")
        await wait_for(pilot, lambda: board.run is not None and board.run.git is not None
                       and board.run.git.delivered is not None, "the run to be merged")
        assert any(n.startswith("merge: agentbox/run-20260101-130000-c3d4 merged into main") for n in notices(app))
        assert board.run.git is not None and board.run.git.delivered == git(root, "rev-parse", "main").strip()
        assert git(root, "show", "main:src/greet.py").startswith('"""Greetings."""')
        assert (root / "tests" / "test_greet.py").exists() and not (root / "OLD.md").exists()  # main's tree too
        await wait_for(pilot, lambda: not board.check_action("merge", ()), "merge no longer offered")


async def test_quit_asks_first_while_a_finished_run_is_not_merged(tmp_path: Path) -> None:
    project = build_worktree_run(tmp_path / "repo")
    app = quiet_app(project)
    exits: list[bool] = []
    async with app.run_test(size=(140, 44)) as pilot:
        await dashboard_loaded(pilot)
        app.exit = lambda *a, **k: exits.append(True)  # type: ignore[method-assign]  # see the ask, keep the app
        await pilot.press("q")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmDialog), "the question")
        question = plain(app.screen.query_one(".dialog-question Static"))
        assert "not merged" in question and "agentbox/run-20260101-130000-c3d4" in question
        assert exits == []
        await pilot.press("n")
        await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmDialog), "back to the dashboard")
        assert exits == []
        await pilot.press("q")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmDialog), "the question again")
        await pilot.press("y")
        await wait_for(pilot, lambda: exits == [True], "the quit")


async def test_quit_is_at_once_without_unmerged_work(tmp_path: Path) -> None:
    project = build_worktree_run(tmp_path / "repo", status="running")
    app = quiet_app(project)
    exits: list[bool] = []
    async with app.run_test(size=(140, 44)) as pilot:
        await dashboard_loaded(pilot)
        app.exit = lambda *a, **k: exits.append(True)  # type: ignore[method-assign]
        await pilot.press("q")
        await wait_for(pilot, lambda: exits == [True], "the quit")
        assert not isinstance(app.screen, ConfirmDialog)


async def test_the_merge_dialog_can_squash_the_run_into_one_commit(tmp_path: Path) -> None:
    project = build_worktree_run(tmp_path / "repo")
    root = project.root
    main_before = git(root, "rev-parse", "main").strip()
    app = quiet_app(project, live=True)
    async with app.run_test(size=(140, 44)) as pilot:
        await dashboard_loaded(pilot)
        board = app.dashboard
        assert board is not None
        await pilot.press("m")
        await wait_for(pilot, lambda: isinstance(app.screen, MergeDialog), "the merge dialog")
        assert [str(b.label) for b in app.screen.query(Button)] == ["merge", "squash", "no"]
        await pilot.press("s")
        await wait_for(pilot, lambda: board.run is not None and board.run.git is not None
                       and board.run.git.delivered is not None, "the run to be squashed in")
    parents = git(root, "rev-list", "--parents", "-n", "1", "main").split()
    assert parents[1:] == [main_before], "a squash is one commit on main, not a merge"
    assert git(root, "show", "main:src/greet.py").startswith('"""Greetings."""')


async def test_merge_is_refused_when_uncommitted_changes_are_in_the_way(tmp_path: Path) -> None:
    project = build_worktree_run(tmp_path / "repo")
    root = project.root
    (root / "src" / "app.py").write_text("print('my own unsaved work')\n")
    main_before = git(root, "rev-parse", "main").strip()
    app = quiet_app(project)
    async with app.run_test(size=(140, 44)) as pilot:
        await dashboard_loaded(pilot)
        await pilot.press("m")
        await wait_for(pilot, lambda: isinstance(app.screen, MergeDialog), "the confirmation")
        await pilot.press("y")
        await wait_for(pilot, lambda: any(n.startswith("merge:") for n in notices(app)), "the refusal")
        [refusal] = [n for n in app._notifications if n.title == "merge"]
        assert refusal.severity == "error"
        assert "would overwrite your uncommitted changes to src/app.py" in refusal.message and "src/app.py" in refusal.message
        assert "stash" in refusal.message
    assert git(root, "rev-parse", "main").strip() == main_before
    assert (root / "src" / "app.py").read_text() == "print('my own unsaved work')\n"
    assert _run(project).git.delivered is None  # type: ignore[union-attr]


# ----------------------------------------------------------------------------- the bell and a banner
def _set_status(project: ProjectPaths, run_id: str, status: str, reason: str | None = None, **changes: object) -> None:
    store = RunStore(project)
    run = store.load(run_id)
    run.status, run.status_reason = status, reason  # type: ignore[assignment]
    for name, value in changes.items():
        setattr(run, name, value)
    store.save(run)


async def _reload(pilot: Pilot[None], run_id: str) -> None:
    board = pilot.app.dashboard  # type: ignore[attr-defined]
    saves = board.run.saves
    board.post_message(msg.BoxChanged([watch.RunChanged(run_id)]))
    await wait_for(pilot, lambda: board.run.saves != saves, "the run read again")
    await pilot.pause()


@pytest.mark.parametrize(("status", "reason", "title", "severity"), [
    ("done", None, "run-20260101-120000-a1b2 is done", "information"),
    ("failed", "the plan could not be read", "run-20260101-120000-a1b2 failed", "error"),
    ("circuit_broken", "run token budget exhausted", "run-20260101-120000-a1b2 stopped: its token budget is spent",
     "error"),
    ("paused", "disk full: no space left", "run-20260101-120000-a1b2 is paused", "warning"),
])
async def test_a_run_that_ends_or_stops_rings_the_bell_once_with_a_banner(
        project_at: Callable[[str], ProjectPaths], monkeypatch: pytest.MonkeyPatch,
        status: str, reason: str | None, title: str, severity: str) -> None:
    project = project_at("executing")
    app = quiet_app(project)
    bells: list[None] = []
    monkeypatch.setattr(app, "bell", lambda: bells.append(None))
    async with app.run_test(size=(140, 40)) as pilot:
        await dashboard_loaded(pilot)
        assert not bells
        _set_status(project, DEMO_RUN_ID, status, reason)
        await _reload(pilot, DEMO_RUN_ID)
        banners = [n for n in app._notifications if n.title == f"run {title}"]
        assert len(banners) == 1 and len(bells) == 1
        assert banners[0].severity == severity
        assert (reason or "greeting") in banners[0].message
        _set_status(project, DEMO_RUN_ID, status, reason, budget_extra=10)  # saved again, same status
        await _reload(pilot, DEMO_RUN_ID)
        assert len([n for n in app._notifications if n.title == f"run {title}"]) == 1 and len(bells) == 1


async def test_no_banner_for_a_run_opened_already_ended_nor_for_a_pause_of_the_persons(
        project_at: Callable[[str], ProjectPaths], monkeypatch: pytest.MonkeyPatch) -> None:
    project = project_at("executing")
    _set_status(project, DEMO_RUN_ID, "failed", "it broke")
    app = quiet_app(project)
    bells: list[None] = []
    monkeypatch.setattr(app, "bell", lambda: bells.append(None))
    async with app.run_test(size=(140, 40)) as pilot:
        await dashboard_loaded(pilot)
        await pilot.pause()
        assert not bells and not [n for n in notices(app) if "failed" in n]
        _set_status(project, DEMO_RUN_ID, "paused", "paused by the human", paused=True)
        await _reload(pilot, DEMO_RUN_ID)
        assert not bells and not [n for n in notices(app) if "paused" in n]


async def test_a_done_worktree_run_says_how_to_merge_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = build_worktree_run(tmp_path / "repo", status="running")
    app = quiet_app(project)
    async with app.run_test(size=(140, 40)) as pilot:
        await dashboard_loaded(pilot)
        _set_status(project, RUN_ID, "done")
        await _reload(pilot, RUN_ID)
        [banner] = [n for n in app._notifications if n.title == f"run {RUN_ID} is done"]
        assert "press m to merge it into main" in banner.message
        assert app.dashboard is not None and app.dashboard.check_action("merge", ())


def test_the_fixture_is_real_git(tmp_path: Path) -> None:
    """The branches the run state names exist and hold the commits it records."""
    project = build_worktree_run(tmp_path / "repo")
    run = _run(project)
    for task in ("greet", "tests"):
        head = run.tasks[task].head
        assert head and subprocess.run(["git", "-C", str(project.root), "merge-base", "--is-ancestor", head,
                                        f"agentbox/{RUN_ID}"]).returncode == 0


# ----------------------------------------------------------------------------- snapshots
def test_snapshot_of_a_task_diff(tmp_path: Path, snap_compare: Callable[..., bool]) -> None:
    """Task greet's diff: a deletion, a change and a new Python file, highlighted, with line numbers."""

    async def show_diff(pilot: Pilot[None]) -> None:
        await dashboard_loaded(pilot)
        screen = await open_task(pilot, "greet")
        await wait_for(pilot, lambda: screen.query_one(DiffView).file_paths, "the diff read from git")
        await pilot.pause()
        await pilot.press("right_square_bracket", "right_square_bracket", "right_square_bracket")
        await pilot.pause()

    assert snap_compare(frozen_app(build_worktree_run(tmp_path / "repo")), terminal_size=(120, 36),
                        run_before=show_diff)


def test_snapshot_of_the_changes_view(tmp_path: Path, snap_compare: Callable[..., bool]) -> None:
    """The run's stat and its files by role and task."""

    async def show_changes(pilot: Pilot[None]) -> None:
        await dashboard_loaded(pilot)
        await pilot.press("c")
        await wait_for(pilot, lambda: "files changed" in plain(pilot.app.screen.query_one("#changes-summary")),
                       "the run's stat")
        await pilot.pause()

    assert snap_compare(frozen_app(build_worktree_run(tmp_path / "repo")), terminal_size=(120, 30),
                        run_before=show_changes)


def test_a_person_deciding_on_a_task_sees_what_its_branch_changes(tmp_path: Path) -> None:
    """The approve and rework dialogs list the task's changed files, as git recorded them."""
    run = _run(build_worktree_run(tmp_path))
    text = model.changes_summary(run, "greet")
    assert "What its branch changes (from git" in text
    assert all(f" {c.change} {c.path}" in text for c in run.tasks["greet"].changed_files)
    assert model.changes_summary(run, "docs") == "\nIts branch changes no file."
    assert model.changes_summary(run, "no-such-task") == ""
