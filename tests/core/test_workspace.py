"""The git plumbing of worktree workspaces, on real repositories (one small repo per test)."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentbox.core.config import project
from agentbox.core.errors import StateError, UsageError
from agentbox.core.workspace import (
    Base,
    Change,
    GitError,
    MergeConflictError,
    OrphanKind,
    WorktreeOrigin,
    changed_files,
    clean,
    commit_turn,
    copy_setup_files,
    deliver,
    diff_text,
    ensure_integration_branch,
    ensure_task_worktree,
    ensure_view_worktree,
    integration_branch,
    merge_task,
    orphans,
    recover_run,
    remove_spares,
    remove_task_worktree,
    remove_view_worktree,
    repo_info,
    sandbox_git_view,
    snapshot_base,
    sync_task,
    task_branch,
    task_heads,
    unresolved_conflicts,
)
from agentbox.core.workspace.layout import admin_dir, task_worktree_path, view_worktree_path
from agentbox.core.workspace.worktrees import VIEW_HEAD

ROLE = {"author_name": "worker (profile coder)", "author_email": "worker@agentbox"}


@pytest.fixture(autouse=True)
def git_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A HOME of its own with the person's git identity; no system config."""
    home = tmp_path_factory.mktemp("home")
    (home / ".gitconfig").write_text("[user]\n\tname = Pat Person\n\temail = pat@example.com\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name in list(os.environ):
        if name.startswith("GIT_") and name != "GIT_CONFIG_NOSYSTEM":
            monkeypatch.delenv(name)
    return home


def sh(cwd: Path, *args: str, ok: bool = True) -> str:
    """Run the person's git (no optional locks: looking never rewrites their index)."""
    proc = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True,
                          env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"})
    if ok:
        assert proc.returncode == 0, proc.stderr
    return proc.stdout


def write(root: Path, relative: str, text: str | bytes) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    sh(root, "init", "-q", "-b", "main")
    write(root, "a.txt", "one\ntwo\nthree\n")
    write(root, "b.txt", "bee\n")
    write(root, ".gitignore", "*.log\n.env\nnode_modules/\n")
    sh(root, "add", "-A")
    sh(root, "commit", "-qm", "start")
    return root


def start(repo: Path, run_id: str = "r1") -> Base:
    base = snapshot_base(repo)
    ensure_integration_branch(repo, run_id, base)
    return base


def work(repo: Path, task_id: str, files: dict[str, str], run_id: str = "r1") -> str:
    """A task that writes `files` in its worktree; its committed head."""
    tree = ensure_task_worktree(repo, run_id, task_id)
    for relative, text in files.items():
        write(tree.path, relative, text)
    commit = commit_turn(tree.path, message=f"{task_id}: work", **ROLE)
    assert commit is not None
    return commit


def head(repo: Path, ref: str = "HEAD") -> str:
    return sh(repo, "rev-parse", ref).strip()


def user_state(repo: Path) -> dict[str, object]:
    """Everything of the person's that a run must leave byte-for-byte alone."""
    files = {str(p.relative_to(repo)): p.read_bytes() for p in sorted(repo.rglob("*"))
             if p.is_file() and ".git" not in p.relative_to(repo).parts}
    return {
        "index": (repo / ".git" / "index").read_bytes(),
        "staged": sh(repo, "ls-files", "-s"),
        "cached": sh(repo, "diff", "--cached"),
        "files": files,
        "head": head(repo),
        "branch": sh(repo, "symbolic-ref", "HEAD"),
        "stash": sh(repo, "stash", "list"),
        "branches": sh(repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads/main"),
    }


# ----------------------------------------------------------------------------- repository facts


def test_the_package_needs_nothing_of_agentboxs_but_errors_and_ids() -> None:
    from tests.core.test_import_contracts import GRAPH

    used = {target for name, targets in GRAPH.items() if name.startswith("agentbox.core.workspace")
            for target in targets if not target.startswith("agentbox.core.workspace")}
    assert used == {"agentbox.core.errors", "agentbox.core.ids"}


def test_repo_info_says_when_worktrees_are_possible(repo: Path, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    assert repo_info(plain) is None
    empty = tmp_path / "empty"
    empty.mkdir()
    sh(empty, "init", "-q")
    assert repo_info(empty) is None, "no commit yet"
    info = repo_info(repo)
    assert info is not None
    assert (info.top, info.branch, info.head) == (repo, "main", head(repo))
    assert info.common_dir == repo / ".git"
    sh(repo, "checkout", "-q", "--detach")
    assert repo_info(repo).branch is None  # type: ignore[union-attr]


def test_the_callers_git_environment_is_ignored(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = head(repo)
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("GIT_INDEX_FILE", str(tmp_path / "other-index"))
    monkeypatch.setenv("GIT_WORK_TREE", str(tmp_path))
    base = start(repo)
    assert base.commit == expected


def test_a_failing_git_is_a_typed_error_naming_the_command(repo: Path) -> None:
    with pytest.raises(GitError) as caught:
        changed_files(repo, "no-such-commit", "HEAD")
    assert "git diff" in caught.value.message and "no-such-commit" in caught.value.message
    with pytest.raises(UsageError):
        merge_task(repo, "r1", "t1")
    with pytest.raises(UsageError):
        ensure_task_worktree(repo, "../evil", "t1")


# ----------------------------------------------------------------------------- base


def test_a_clean_tree_starts_the_run_at_head(repo: Path) -> None:
    base = start(repo)
    assert base == Base(head(repo), "main", False, head(repo))
    assert head(repo, integration_branch("r1")) == base.commit
    assert start(repo) == base, "idempotent"


def test_uncommitted_changes_are_snapshotted_without_touching_tree_index_or_stash(repo: Path) -> None:
    write(repo, "a.txt", "one\nTWO (mine)\nthree\n")
    write(repo, "b.txt", "bee staged\n")
    sh(repo, "add", "b.txt")
    write(repo, "new.txt", "untracked\n")
    sh(repo, "stash", "list")
    before = user_state(repo)
    base = start(repo)
    assert user_state(repo) == before
    assert base.dirty and base.head == head(repo) and base.commit != base.head
    assert sh(repo, "rev-parse", f"{base.commit}^").strip() == base.head
    assert sh(repo, "show", f"{base.commit}:a.txt") == "one\nTWO (mine)\nthree\n"
    assert sh(repo, "show", f"{base.commit}:b.txt") == "bee staged\n"
    assert "new.txt" not in sh(repo, "ls-tree", "--name-only", base.commit), "untracked files are not the run's"
    tree = ensure_task_worktree(repo, "r1", "t1")
    assert (tree.path / "a.txt").read_text() == "one\nTWO (mine)\nthree\n", "agents see what the person sees"
    assert user_state(repo) == before


# ----------------------------------------------------------------------------- worktrees


def test_a_task_gets_a_branch_and_a_worktree_the_person_never_sees(repo: Path) -> None:
    base = start(repo)
    before = user_state(repo)
    tree = ensure_task_worktree(repo, "r1", "t1")
    assert tree.path == repo / ".git" / "agentbox" / "worktrees" / "r1" / "t1"
    assert (tree.branch, tree.base_commit, tree.origin) == (task_branch("r1", "t1"), base.commit, WorktreeOrigin.NEW)
    assert sh(tree.path, "symbolic-ref", "--short", "HEAD").strip() == "agentbox/r1@t1"
    assert (tree.path / "a.txt").read_text() == "one\ntwo\nthree\n"
    assert sh(repo, "status", "--porcelain", "--untracked-files=all") == ""
    assert user_state(repo) == before
    again = ensure_task_worktree(repo, "r1", "t1")
    assert (again.path, again.origin) == (tree.path, WorktreeOrigin.EXISTING)


def test_a_dependent_task_starts_from_the_approved_work(repo: Path) -> None:
    start(repo)
    work(repo, "t1", {"lib.py": "def f(): ...\n"})
    assert merge_task(repo, "r1", "t1").merged_commit is not None
    later = ensure_task_worktree(repo, "r1", "t2")
    assert (later.path / "lib.py").read_text() == "def f(): ...\n"
    assert later.base_commit == head(repo, integration_branch("r1"))


def test_ensure_finds_everything_again_after_a_crash(repo: Path) -> None:
    start(repo)
    committed = work(repo, "t1", {"x.txt": "x\n"})
    tree = task_worktree_path(repo / ".git", "r1", "t1")
    shutil.rmtree(tree)  # the directory is gone, git still lists it
    again = ensure_task_worktree(repo, "r1", "t1")
    assert head(again.path) == committed, "the branch is reused, never reset"
    assert (again.path / "x.txt").read_text() == "x\n"
    assert "prunable" not in sh(repo, "worktree", "list", "--porcelain")
    # killed between `worktree add --no-checkout` and attaching the branch
    sh(repo, "worktree", "add", "-q", "--no-checkout", "--detach",
       str(task_worktree_path(repo / ".git", "r1", "t2")), "HEAD")
    half = ensure_task_worktree(repo, "r1", "t2")
    assert (half.path / "a.txt").is_file() and sh(half.path, "status", "--porcelain") == ""
    # killed inside a git that held the worktree's index lock
    admin = Path(sh(half.path, "rev-parse", "--path-format=absolute", "--git-dir").strip())
    (admin / "index.lock").write_text("")
    write(half.path, "y.txt", "y\n")
    assert commit_turn(half.path, message="after a crash", **ROLE) is not None


@pytest.mark.parametrize("left", ["admin dir", "gitdir", ".git file", "all but the unlock"])
@pytest.mark.parametrize("taken_up_by", ["ensure", "recover_run"])
def test_a_worktree_add_killed_at_any_step_leaves_nothing_behind(repo: Path, left: str, taken_up_by: str) -> None:
    from agentbox.core.workspace.worktrees import MAKING

    start(repo)
    path = task_worktree_path(repo / ".git", "r1", "t1")
    admin = repo / ".git" / "worktrees" / "t1"
    if left == "all but the unlock":
        sh(repo, "worktree", "add", "-q", "--lock", "--reason", f"{MAKING}{path}", "--no-checkout", "--detach",
           str(path), "HEAD")
    else:  # what git has written when killed: the admin dir and its lock first, then gitdir, then the .git file
        admin.mkdir(parents=True)
        (admin / "locked").write_text(f"{MAKING}{path}\n")
        path.mkdir(parents=True)
        if left != "admin dir":
            (admin / "gitdir").write_text(f"{path}/.git\n")
        if left == ".git file":
            (path / ".git").write_text(f"gitdir: {admin}\n")
    if taken_up_by == "recover_run":
        recover_run(repo, "r1")
        assert not admin.exists() and not path.exists()
    tree = ensure_task_worktree(repo, "r1", "t1")
    assert (tree.path / "a.txt").read_text() == "one\ntwo\nthree\n" and sh(tree.path, "status", "--porcelain") == ""
    remove_task_worktree(repo, "r1", "t1", keep_spare=False)
    assert not (repo / ".git" / "worktrees").exists() or list((repo / ".git" / "worktrees").iterdir()) == []
    assert sh(repo, "worktree", "list", "--porcelain").count("worktree ") == 1


TASK_SCRIPT = """
import sys
from pathlib import Path
from agentbox.core.workspace import commit_turn, ensure_task_worktree, merge_task, remove_task_worktree
repo, run_id = Path(sys.argv[1]), sys.argv[2]
for task_id in sys.argv[3:]:
    tree = ensure_task_worktree(repo, run_id, task_id)
    (tree.path / f"{task_id}.txt").write_text(task_id)
    commit_turn(tree.path, author_name="w", author_email="w@x", message=task_id, turn_id=f"{task_id}-1")
    merge_task(repo, run_id, task_id)
    remove_task_worktree(repo, run_id, task_id)
"""


@pytest.mark.slow
def test_killed_at_any_point_a_run_resumes_and_merges_every_task_exactly_once(repo: Path) -> None:
    start(repo)
    pick = random.Random(11)
    every: list[str] = []
    for attempt in range(8):
        tasks = [f"k{attempt}t{i}" for i in range(3)]
        every += tasks
        child = subprocess.Popen([sys.executable, "-c", TASK_SCRIPT, str(repo), "r1", *tasks],
                                 start_new_session=True, stderr=subprocess.DEVNULL)
        time.sleep(pick.uniform(0.1, 0.4))  # the child starts in ~0.15 s, a task takes ~0.05 s
        os.killpg(child.pid, signal.SIGKILL)  # the engine and every git it runs
        child.wait()
        recover_run(repo, "r1")
        for task_id in tasks:  # what `run --resume` does for each task
            tree = ensure_task_worktree(repo, "r1", task_id)
            write(tree.path, f"{task_id}.txt", task_id)
            commit_turn(tree.path, message=task_id, turn_id=f"{task_id}-1", **ROLE)
            assert not merge_task(repo, "r1", task_id).conflicts
            remove_task_worktree(repo, "r1", task_id)
    integration = integration_branch("r1")
    merges = sh(repo, "log", "--first-parent", "--format=%s", integration).splitlines()
    assert sorted(m.split()[3] for m in merges if m.startswith("agentbox: merge task")) == sorted(every)
    names = set(sh(repo, "ls-tree", "--name-only", integration).split())
    assert {f"{t}.txt" for t in every} <= names
    for task_id in every:
        assert sh(repo, "rev-list", "--count", f"{task_branch('r1', task_id)}",
                  f"^{task_heads(repo, 'r1', task_id).base}") == "1\n", "one commit per turn"
    remove_spares(repo, "r1")
    assert "agentbox" not in sh(repo, "worktree", "list", "--porcelain")
    assert sh(repo, "status", "--porcelain") == ""


def test_a_moved_project_finds_its_worktrees_again_with_their_files(repo: Path, tmp_path: Path) -> None:
    start(repo)
    tree = ensure_task_worktree(repo, "r1", "t1")
    write(tree.path, "draft.txt", "mid-turn\n")
    moved = tmp_path / "moved"
    os.rename(repo, moved)
    again = ensure_task_worktree(moved, "r1", "t1")
    assert again.origin == WorktreeOrigin.EXISTING
    assert (again.path / "draft.txt").read_text() == "mid-turn\n"
    assert commit_turn(again.path, message="after the move", **ROLE) is not None


def test_a_merge_in_progress_cannot_be_a_base(repo: Path) -> None:
    sh(repo, "checkout", "-q", "-b", "side")
    write(repo, "a.txt", "side\n")
    sh(repo, "commit", "-qam", "side")
    sh(repo, "checkout", "-q", "main")
    write(repo, "a.txt", "main\n")
    sh(repo, "commit", "-qam", "main")
    sh(repo, "merge", "-q", "side", ok=False)
    with pytest.raises(UsageError, match=r"unmerged files a.txt$") as caught:
        snapshot_base(repo)
    assert "merge in progress" in (caught.value.hint or "")


@pytest.mark.parametrize("dirty", [False, True], ids=["clean", "dirty"])
def test_a_touched_file_a_locked_index_or_a_detached_head_still_make_a_base(repo: Path, dirty: bool) -> None:
    time.sleep(1.1)  # so the touch below really changes the stat data git keeps
    for name in ("a.txt", "b.txt"):
        os.utime(repo / name)  # an editor's save, a build: stat data stale, content the same
    if dirty:
        write(repo, "b.txt", "bee (mine)\n")
    (repo / ".git" / "index.lock").write_text("")  # another git (an editor's) holds the index
    before = user_state(repo)
    base = snapshot_base(repo)
    assert base.dirty is dirty and base.head == head(repo)
    assert sh(repo, "show", f"{base.commit}:b.txt") == ("bee (mine)\n" if dirty else "bee\n")
    assert user_state(repo) == before and (repo / ".git" / "index.lock").exists()
    (repo / ".git" / "index.lock").unlink()
    sh(repo, "checkout", "-q", "--detach")
    os.utime(repo / "a.txt")
    detached = snapshot_base(repo)
    assert detached.branch is None and detached.head == head(repo) and detached.dirty is dirty


def test_a_base_git_refuses_names_gits_own_reason(repo: Path) -> None:
    (repo / ".git" / "index").write_bytes(b"DIRC\0\0\0\2garbage")
    with pytest.raises(UsageError) as caught:
        snapshot_base(repo)
    assert caught.value.message == ("cannot record your uncommitted changes as the run's base: fatal: "
                                    "a copy of your index: index file smaller than expected")
    assert "merge" not in (caught.value.hint or "")


def test_a_task_branch_that_exists_is_not_moved(repo: Path) -> None:
    start(repo)
    first = work(repo, "t1", {"x.txt": "x\n"})
    work(repo, "t2", {"y.txt": "y\n"})
    merge_task(repo, "r1", "t2")
    remove_task_worktree(repo, "r1", "t1", keep_spare=False)
    assert ensure_task_worktree(repo, "r1", "t1").path.is_dir()
    assert head(repo, task_branch("r1", "t1")) == first


_MAKE_WORKTREES = """
import sys
from pathlib import Path
from agentbox.core.workspace import ensure_task_worktree, remove_task_worktree
root, run_id = Path(sys.argv[1]), sys.argv[2]
for task_id in sys.argv[3:]:
    ensure_task_worktree(root, run_id, task_id)
    remove_task_worktree(root, run_id, task_id)
    ensure_task_worktree(root, run_id, task_id + "b")
"""


def test_worktrees_are_made_safely_by_many_tasks_and_runs_at_once(repo: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    for index in range(100):
        write(repo, f"files/f{index}.txt", f"{index}\n" * 50)
    sh(repo, "add", "-A")
    sh(repo, "commit", "-qm", "more files")
    runs = ["r1", "r2", "r3", "r4"]
    for run_id in runs:
        start(repo, run_id)
    jobs = [(run_id, f"t{index}") for run_id in runs[:2] for index in range(10)]

    def make(job: tuple[str, str]) -> None:
        run_id, task_id = job
        ensure_task_worktree(repo, run_id, task_id)
        remove_task_worktree(repo, run_id, task_id)
        ensure_task_worktree(repo, run_id, f"{task_id}b")

    others = [subprocess.Popen([sys.executable, "-c", _MAKE_WORKTREES, str(repo), run_id,
                                *(f"p{n}{index}" for index in range(4))], stderr=subprocess.PIPE, text=True)
              for n, run_id in enumerate(runs[2:] * 2)]  # other engines, in processes of their own
    with ThreadPoolExecutor(12) as pool:  # tasks of one engine, in its worker threads
        list(pool.map(make, jobs))
    failures = [proc.communicate(timeout=120)[1] for proc in others]
    assert [proc.returncode for proc in others] == [0] * len(others), failures
    listed = sh(repo, "worktree", "list", "--porcelain")
    for run_id, task_id in [*((r, t + "b") for r, t in jobs),
                            *((runs[2:][n % 2], f"p{n}{i}b") for n in range(4) for i in range(4))]:
        path = task_worktree_path(repo / ".git", run_id, task_id)
        assert f"worktree {path}\n" in listed and sh(path, "symbolic-ref", "HEAD").strip() == \
            f"refs/heads/{task_branch(run_id, task_id)}"
        assert (path / "files" / "f99.txt").read_text() == "99\n" * 50


def test_a_finished_worktree_is_reused_by_the_next_task(repo: Path) -> None:
    start(repo)
    work(repo, "t1", {"x.txt": "x\n"})
    first = task_worktree_path(repo / ".git", "r1", "t1")
    write(first, "build.log", "ignored junk\n")
    remove_task_worktree(repo, "r1", "t1")
    assert not first.exists()
    assert head(repo, task_branch("r1", "t1")), "the branch stays"
    second = ensure_task_worktree(repo, "r1", "t2")
    assert second.origin == WorktreeOrigin.SPARE
    assert sh(second.path, "symbolic-ref", "--short", "HEAD").strip() == "agentbox/r1@t2"
    assert not (second.path / "x.txt").exists(), "t1 was not merged: its work is not t2's"
    assert (second.path / "build.log").exists(), "ignored files stay in a reused worktree"
    assert sh(second.path, "status", "--porcelain") == ""
    remove_task_worktree(repo, "r1", "t2")
    assert remove_spares(repo, "r1")
    assert "agentbox" not in sh(repo, "worktree", "list")


def test_a_spare_renamed_before_git_was_told_is_repaired(repo: Path) -> None:
    start(repo)
    work(repo, "t1", {"x.txt": "x\n"})
    tree = task_worktree_path(repo / ".git", "r1", "t1")
    sh(tree, "update-ref", "--no-deref", "HEAD", head(tree))
    spare = tree.parent / ".spare" / "t1-crashed"
    spare.parent.mkdir()
    os.rename(tree, spare)  # killed before `worktree repair`
    taken = ensure_task_worktree(repo, "r1", "t2")
    assert taken.origin == WorktreeOrigin.SPARE
    assert sh(taken.path, "status", "--porcelain") == ""
    assert sh(repo, "worktree", "list", "--porcelain").count("agentbox/worktrees") == 1


def test_the_runs_view_follows_its_integration_head_rewriting_only_what_changed(repo: Path) -> None:
    start(repo)
    view = ensure_view_worktree(repo, "r1")
    assert view.path == view_worktree_path(repo / ".git", "r1") and view.origin == WorktreeOrigin.NEW
    assert (view.path / "a.txt").read_text() == "one\ntwo\nthree\n"
    untouched = (view.path / "b.txt").stat().st_ino
    work(repo, "t1", {"a.txt": "ONE\n", "new/x.txt": "x\n"})
    merged = merge_task(repo, "r1", "t1").merged_commit
    again = ensure_view_worktree(repo, "r1")
    assert again.origin == WorktreeOrigin.EXISTING and again.base_commit == merged == head(again.path)
    assert (again.path / "a.txt").read_text() == "ONE\n" and (again.path / "new" / "x.txt").exists()
    assert (again.path / "b.txt").stat().st_ino == untouched, "a file the head did not change is not rewritten"
    assert sh(again.path, "status", "--porcelain") == ""
    assert "(detached HEAD)" in sh(repo, "worktree", "list")  # never a branch: nothing can commit to it

    # killed after moving its files but before saying so: the next call finishes the move
    work(repo, "t2", {"b.txt": "BEE\n"})
    moved = merge_task(repo, "r1", "t2").merged_commit
    admin = admin_dir(again.path)
    assert admin is not None
    (again.path / "b.txt").write_text("half-written\n")
    (admin / VIEW_HEAD).unlink()
    third = ensure_view_worktree(repo, "r1")
    assert head(third.path) == moved and (third.path / "b.txt").read_text() == "BEE\n"
    assert sh(third.path, "status", "--porcelain") == ""

    remove_view_worktree(repo, "r1")
    remove_view_worktree(repo, "r1")  # idempotent
    assert not view.path.exists() and ".view" not in sh(repo, "worktree", "list")


def test_the_view_takes_a_parked_worktree_and_clean_removes_it(repo: Path) -> None:
    start(repo)
    work(repo, "t1", {"x.txt": "x\n"})
    merge_task(repo, "r1", "t1")
    remove_task_worktree(repo, "r1", "t1")
    view = ensure_view_worktree(repo, "r1")
    assert view.origin == WorktreeOrigin.SPARE and (view.path / "x.txt").read_text() == "x\n"
    assert sh(view.path, "status", "--porcelain") == ""
    assert [o.name for o in orphans(repo, live_run_ids=[])] == [str(view.path)]
    clean(repo, "r1", force=True)
    assert not view.path.exists() and "agentbox" not in sh(repo, "worktree", "list")


def test_removing_a_worktree_with_uncommitted_work_is_refused(repo: Path) -> None:
    start(repo)
    tree = ensure_task_worktree(repo, "r1", "t1")
    write(tree.path, "draft.txt", "not committed\n")
    with pytest.raises(StateError, match="uncommitted changes: draft.txt"):
        remove_task_worktree(repo, "r1", "t1")
    remove_task_worktree(repo, "r1", "t1", discard_uncommitted=True)
    assert not tree.path.exists()
    remove_task_worktree(repo, "r1", "t1")  # idempotent


# ----------------------------------------------------------------------------- commits


def test_a_turn_is_one_commit_authored_as_the_role(repo: Path) -> None:
    start(repo)
    tree = ensure_task_worktree(repo, "r1", "t1")
    write(tree.path, "src/new.py", "print('hi')\n")
    write(tree.path, "a.txt", "changed\n")
    (tree.path / "b.txt").unlink()
    write(tree.path, "debug.log", "ignored\n")
    commit = commit_turn(tree.path, message="t1: add new.py", turn_id="t1-1", **ROLE)
    assert commit == head(repo, task_branch("r1", "t1"))
    assert sh(repo, "log", "-1", "--format=%an <%ae>|%s", commit).strip() == \
        "worker (profile coder) <worker@agentbox>|t1: add new.py"
    assert sorted(sh(repo, "ls-tree", "-r", "--name-only", commit).split()) == [".gitignore", "a.txt", "src/new.py"]
    assert commit_turn(tree.path, message="again", **ROLE) is None, "nothing new"
    assert commit_turn(tree.path, message="again", turn_id="t1-1", **ROLE) == commit, "the turn's commit, found again"
    assert commit_turn(tree.path, message="again", turn_id="t1-2", **ROLE) is None


def test_hooks_and_repository_commands_never_run(repo: Path, tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    names = ("pre-commit", "commit-msg", "post-commit", "post-checkout", "post-merge", "reference-transaction",
             "post-index-change", "pre-auto-gc", "post-rewrite")
    for directory in (repo / ".git" / "hooks", repo / ".githooks"):
        for name in names:
            write(directory, name, f"#!/bin/sh\ntouch '{marks}/{directory.name}-{name}'\ncat >/dev/null\n")
            (directory / name).chmod(0o755)
    write(repo, "fsmonitor.sh", f"#!/bin/sh\ntouch '{marks}/fsmonitor'\n")
    (repo / "fsmonitor.sh").chmod(0o755)
    write(repo, "extdiff.sh", f"#!/bin/sh\ntouch '{marks}/extdiff'\n")
    (repo / "extdiff.sh").chmod(0o755)
    write(repo, ".gitattributes", "*.txt diff=conv\n")
    sh(repo, "-c", "core.hooksPath=/dev/null", "add", "-A")
    sh(repo, "-c", "core.hooksPath=/dev/null", "commit", "-qm", "a repository with hooks")
    for key, value in (("core.hooksPath", ".githooks"), ("core.fsmonitor", str(repo / "fsmonitor.sh")),
                       ("diff.external", str(repo / "extdiff.sh")), ("diff.conv.textconv", str(repo / "extdiff.sh")),
                       ("color.ui", "always")):
        sh(repo, "config", key, value)
    base = start(repo)
    tree = ensure_task_worktree(repo, "r1", "t1")
    write(tree.path, ".githooks/pre-commit", f"#!/bin/sh\ntouch '{marks}/planted'\n")
    write(tree.path, "a.txt", "changed by the agent\n")
    head_commit = commit_turn(tree.path, message="t1", **ROLE)
    assert head_commit is not None
    shown = diff_text(repo, base.commit, head_commit)
    assert "changed by the agent" in shown.patch and "\x1b[" not in shown.patch + shown.stat
    changed_files(repo, base.commit, head_commit)
    merge_task(repo, "r1", "t1")
    sync_task(repo, "r1", "t1")
    remove_task_worktree(repo, "r1", "t1")
    deliver(repo, "r1", into=None, squash=False, base=base)
    assert (repo / ".githooks" / "pre-commit").read_text().startswith("#!/bin/sh\ntouch"), "delivered"
    assert sorted(p.name for p in marks.iterdir()) == []


# ----------------------------------------------------------------------------- diffs


def test_changed_files_handle_renames_binaries_and_odd_names(repo: Path) -> None:
    base = start(repo)
    tree = ensure_task_worktree(repo, "r1", "t1")
    os.rename(tree.path / "b.txt", tree.path / "renamed b.txt")
    (tree.path / "a.txt").unlink()
    write(tree.path, "with space.txt", "s\n")
    write(tree.path, "new\nline.txt", "n\nn\n")
    write(tree.path, "ünï/çødé.md", "u\n")
    write(tree.path, "blob.bin", b"\x00\x01\x02binary")
    head_commit = commit_turn(tree.path, message="odd names", **ROLE)
    assert head_commit is not None
    found = {f.path: f for f in changed_files(repo, base.commit, head_commit)}
    assert set(found) == {"a.txt", "renamed b.txt", "with space.txt", "new\nline.txt", "ünï/çødé.md", "blob.bin"}
    assert (found["a.txt"].change, found["a.txt"].removed) == (Change.DELETED, 3)
    assert (found["renamed b.txt"].change, found["renamed b.txt"].old_path) == (Change.RENAMED, "b.txt")
    assert (found["new\nline.txt"].change, found["new\nline.txt"].added) == (Change.ADDED, 2)
    assert found["blob.bin"].binary and found["blob.bin"].added is None
    assert not found["with space.txt"].binary


def test_the_diff_is_bounded_and_points_at_the_whole(repo: Path) -> None:
    base = start(repo)
    big = "".join(f"line {i}\n" for i in range(5000))
    head_commit = work(repo, "t1", {"big.txt": big, "small.txt": "s\n"})
    whole = diff_text(repo, base.commit, head_commit)
    assert not whole.truncated and "+line 4999" in whole.patch and "big.txt" in whole.stat
    cut = diff_text(repo, base.commit, head_commit, max_bytes=2000)
    assert cut.truncated and len(cut.patch.encode()) <= 2000 and cut.patch.endswith("\n")
    assert f"diff {base.commit} {head_commit}" in cut.full_command
    assert diff_text(repo, base.commit, head_commit, full_command="agentbox diff r1 t1").full_command == \
        "agentbox diff r1 t1"


# ----------------------------------------------------------------------------- merging


def test_a_task_is_merged_exactly_once_without_touching_any_tree(repo: Path) -> None:
    start(repo)
    before = user_state(repo)
    task_head = work(repo, "t1", {"x.txt": "x\n"})
    first = merge_task(repo, "r1", "t1")
    assert first.merged_commit == head(repo, integration_branch("r1")) and not first.already
    assert sh(repo, "rev-parse", f"{first.merged_commit}^2").strip() == task_head
    again = merge_task(repo, "r1", "t1")
    assert again.already and again.merged_commit == first.merged_commit
    assert user_state(repo) == before


def test_a_conflict_changes_nothing_names_the_files_and_rework_sees_the_other_work(repo: Path) -> None:
    start(repo)
    work(repo, "t1", {"a.txt": "one\nTWO by t1\nthree\n"})
    work(repo, "t2", {"a.txt": "one\nTWO by t2\nthree\n", "b.txt": "t2\n"})
    merge_task(repo, "r1", "t1")
    integration = head(repo, integration_branch("r1"))
    refused = merge_task(repo, "r1", "t2")
    assert (refused.merged_commit, refused.conflicts, refused.already) == (None, ["a.txt"], False)
    assert head(repo, integration_branch("r1")) == integration
    synced = sync_task(repo, "r1", "t2")
    assert synced.conflicts == ["a.txt"]
    assert sync_task(repo, "r1", "t2").already
    tree = task_worktree_path(repo / ".git", "r1", "t2")
    assert "<<<<<<<" in (tree / "a.txt").read_text() and sh(tree, "status", "--porcelain") == ""
    assert task_heads(repo, "r1", "t2").base == integration
    assert unresolved_conflicts(repo, "r1", "t2") == ["a.txt"]  # until the worker commits a resolution
    assert unresolved_conflicts(repo, "r1", "t1") == []
    write(tree, "a.txt", "one\nTWO by both\nthree\n")
    commit_turn(tree, message="t2: resolve", **ROLE)
    assert unresolved_conflicts(repo, "r1", "t2") == []
    assert [f.path for f in changed_files(repo, integration, head(tree))] == ["a.txt", "b.txt"]
    merged = merge_task(repo, "r1", "t2")
    assert merged.conflicts == [] and merged.merged_commit
    assert sh(repo, "show", f"{merged.merged_commit}:a.txt") == "one\nTWO by both\nthree\n"


# ----------------------------------------------------------------------------- delivery


def test_delivery_merges_into_the_checked_out_branch(repo: Path) -> None:
    base = start(repo)
    work(repo, "t1", {"x.txt": "x\n", "a.txt": "A\n"})
    merge_task(repo, "r1", "t1")
    user_head = head(repo)
    sh(repo, "read-tree", "-m", "-u", "HEAD", integration_branch("r1"))  # a delivery killed before moving the branch
    done = deliver(repo, "r1", into=None, squash=False, base=base)
    assert (done.into, done.worktree, done.already) == ("main", repo, False)
    assert head(repo) == done.commit
    assert sh(repo, "log", "-1", "--format=%P|%an", done.commit).strip() == \
        f"{user_head} {head(repo, integration_branch('r1'))}|Pat Person"
    assert (repo / "x.txt").read_text() == "x\n" and (repo / "a.txt").read_text() == "A\n"
    assert sh(repo, "status", "--porcelain") == ""
    assert deliver(repo, "r1", into=None, squash=False, base=base).already


def test_a_file_only_touched_is_not_a_change_that_blocks_delivery(repo: Path) -> None:
    base = start(repo)
    work(repo, "t1", {"a.txt": "the run's\n"})
    merge_task(repo, "r1", "t1")
    os.utime(repo / "a.txt", (1, 1))  # stat data out of date, content the same
    deliver(repo, "r1", into=None, squash=False, base=base)
    assert (repo / "a.txt").read_text() == "the run's\n"


def test_delivery_refuses_to_overwrite_uncommitted_changes(repo: Path) -> None:
    base = start(repo)
    work(repo, "t1", {"a.txt": "the run's\n"})
    merge_task(repo, "r1", "t1")
    write(repo, "a.txt", "mine, uncommitted\n")
    before = user_state(repo)
    with pytest.raises(UsageError) as caught:
        deliver(repo, "r1", into=None, squash=False, base=base)
    assert "a.txt" in caught.value.message and "git stash" in (caught.value.hint or "")
    assert user_state(repo) == before


def test_delivery_from_a_snapshot_brings_only_the_runs_work(repo: Path) -> None:
    write(repo, "a.txt", "one\ntwo (mine, uncommitted)\nthree\n")
    base = start(repo)
    assert base.dirty
    work(repo, "t1", {"x.txt": "x\n"})
    merge_task(repo, "r1", "t1")
    user_head = head(repo)
    done = deliver(repo, "r1", into=None, squash=False, base=base)
    assert sh(repo, "show", f"{done.commit}:a.txt") == "one\ntwo\nthree\n", "the snapshot is not delivered"
    assert sh(repo, "show", f"{done.commit}:x.txt") == "x\n"
    assert sh(repo, "rev-parse", f"{done.commit}^1").strip() == user_head
    assert (repo / "a.txt").read_text() == "one\ntwo (mine, uncommitted)\nthree\n", "still theirs, uncommitted"
    assert sh(repo, "status", "--porcelain") == " M a.txt\n"


SECRET = "SECRET_TOKEN=abc123 # wip, never commit"


@pytest.mark.parametrize("squash", [False, True], ids=["merge", "squash"])
def test_uncommitted_work_the_run_started_from_never_enters_the_branchs_history(repo: Path, squash: bool) -> None:
    write(repo, "a.txt", f"one\ntwo\nthree\n{SECRET}\n")  # the person's, uncommitted
    base = start(repo)
    assert base.dirty
    work(repo, "t1", {"x.txt": "x\n"})
    merge_task(repo, "r1", "t1")
    work(repo, "t2", {"y.txt": "y\n", "b.txt": "bee by t2\n"})
    merge_task(repo, "r1", "t2")
    done = deliver(repo, "r1", into=None, squash=squash, base=base, goal="add x and y\nin detail")
    history = sh(repo, "log", "-p", "main")
    assert SECRET not in history and SECRET not in sh(repo, "log", "-p", "--all", "--not", "--glob=refs/agentbox/*",
                                                      "--glob=refs/heads/agentbox/*")
    assert (repo / "a.txt").read_text().endswith(f"{SECRET}\n"), "still the person's, in their tree"
    assert sh(repo, "status", "--porcelain") == " M a.txt\n", "and still uncommitted"
    assert (repo / "x.txt").read_text() == "x\n" and (repo / "b.txt").read_text() == "bee by t2\n"
    assert sh(repo, "show", f"{done.commit}:a.txt") == "one\ntwo\nthree\n"
    if squash:
        assert sh(repo, "log", "-1", "--format=%s", done.commit).strip() == "add x and y"
    else:  # the merged work reads as one commit per task, authored by its role, with its commits listed
        log = sh(repo, "log", "--format=%s|%an", f"{done.commit}^1..{done.commit}^2")
        assert log.splitlines() == ["agentbox: merge task t2 into run r1|worker (profile coder)",
                                    "agentbox: merge task t1 into run r1|worker (profile coder)"]
        body = sh(repo, "log", "-1", "--format=%b", f"{done.commit}^2")
        assert "- t2: work (worker (profile coder))" in body
        assert sh(repo, "log", "-1", "--format=%s", done.commit).startswith(f"Merge {integration_branch('r1')} into main")
    assert deliver(repo, "r1", into=None, squash=squash, base=base).already
    plan = clean(repo, "r1")  # delivered: the run's branches go, and with them the last ref to the snapshot
    assert integration_branch("r1") in plan.branches and not plan.refused
    assert SECRET not in sh(repo, "log", "-p", "--all")


def test_a_run_that_changed_the_uncommitted_lines_waits_until_the_person_commits_them(repo: Path) -> None:
    write(repo, "a.txt", "one\ntwo (mine)\nthree\n")
    base = start(repo)
    work(repo, "t1", {"a.txt": "one\ntwo (mine, and the run's)\nthree\n"})
    merge_task(repo, "r1", "t1")
    before = user_state(repo)
    with pytest.raises(MergeConflictError) as caught:
        deliver(repo, "r1", into=None, squash=False, base=base)
    assert caught.value.paths == ["a.txt"] and "commit those changes of yours on main" in (caught.value.hint or "")
    assert user_state(repo) == before
    sh(repo, "commit", "-qam", "mine")  # the person's own commit: now the run merges as it is
    done = deliver(repo, "r1", into=None, squash=False, base=base)
    assert (repo / "a.txt").read_text() == "one\ntwo (mine, and the run's)\nthree\n"
    assert sh(repo, "status", "--porcelain") == "" and not done.empty


@pytest.mark.parametrize("dirty", [False, True], ids=["clean", "dirty"])
def test_a_run_that_changes_nothing_makes_no_commit(repo: Path, dirty: bool) -> None:
    if dirty:
        write(repo, "a.txt", f"{SECRET}\n")
    base = start(repo)
    tree = ensure_task_worktree(repo, "r1", "t1")
    assert commit_turn(tree.path, message="t1: nothing", **ROLE) is None
    write(tree.path, "x.txt", "x\n")
    commit_turn(tree.path, message="t1: x", **ROLE)
    (tree.path / "x.txt").unlink()
    commit_turn(tree.path, message="t1: x again gone", **ROLE)  # commits, and no net change
    merge_task(repo, "r1", "t1")
    user_head = head(repo)
    done = deliver(repo, "r1", into=None, squash=False, base=base)
    assert done.empty and not done.already and done.commit == user_head == head(repo)
    assert SECRET not in sh(repo, "log", "-p", "main")


def test_a_squashed_delivery_is_one_commit_and_happens_once(repo: Path) -> None:
    base = start(repo)
    work(repo, "t1", {"x.txt": "x\n"})
    work(repo, "t2", {"y.txt": "y\n"})
    merge_task(repo, "r1", "t1")
    merge_task(repo, "r1", "t2")
    user_head = head(repo)
    done = deliver(repo, "r1", into=None, squash=True, base=base)
    assert sh(repo, "log", "-1", "--format=%P", done.commit).strip() == user_head
    assert sorted(f.path for f in changed_files(repo, user_head, done.commit)) == ["x.txt", "y.txt"]
    message = sh(repo, "log", "-1", "--format=%B", done.commit)
    assert "merge task t1" in message and "merge task t2" in message
    assert deliver(repo, "r1", into=None, squash=True, base=base).already
    assert head(repo) == done.commit


def test_delivery_into_a_branch_not_checked_out_leaves_the_tree_alone(repo: Path) -> None:
    base = start(repo)
    sh(repo, "branch", "release")
    work(repo, "t1", {"x.txt": "x\n"})
    merge_task(repo, "r1", "t1")
    before = user_state(repo)
    done = deliver(repo, "r1", into="release", squash=False, base=base)
    assert done.worktree is None and head(repo, "release") == done.commit
    assert user_state(repo) == before
    with pytest.raises(UsageError, match="no branch"):
        deliver(repo, "r1", into="nope", squash=False, base=base)


def test_a_conflict_with_the_persons_branch_changes_nothing(repo: Path) -> None:
    base = start(repo)
    work(repo, "t1", {"a.txt": "the run's\n"})
    merge_task(repo, "r1", "t1")
    write(repo, "a.txt", "the person's\n")
    sh(repo, "commit", "-qam", "meanwhile")
    before = user_state(repo)
    with pytest.raises(MergeConflictError) as caught:
        deliver(repo, "r1", into=None, squash=False, base=base)
    assert caught.value.paths == ["a.txt"] and "a.txt" in caught.value.message
    assert user_state(repo) == before


# ----------------------------------------------------------------------------- cleaning


def everything(repo: Path) -> tuple[str, str, list[str]]:
    dirs = sorted(str(p) for p in (repo / ".git" / "agentbox").rglob("*")) if (repo / ".git" / "agentbox").exists() else []
    return sh(repo, "for-each-ref"), sh(repo, "worktree", "list", "--porcelain"), dirs


def test_clean_dry_run_changes_nothing_and_clean_refuses_unmerged_work(repo: Path) -> None:
    base = start(repo)
    work(repo, "t1", {"x.txt": "x\n"})
    work(repo, "t2", {"y.txt": "rejected\n"})
    merge_task(repo, "r1", "t1")
    before = everything(repo)
    plan = clean(repo, "r1", dry_run=True)
    assert everything(repo) == before
    assert {r.name for r in plan.refused} == {"agentbox/r1", "agentbox/r1@t2"}
    assert plan.branches == ["agentbox/r1@t1"], "merged into the integration branch, which stays"
    clean(repo, "r1")
    assert head(repo, integration_branch("r1")) and head(repo, task_branch("r1", "t2"))
    assert sh(repo, "branch", "--list", "agentbox/r1@t1") == ""
    forced = clean(repo, "r1", force=True)
    assert "agentbox/r1@t2" in forced.branches
    assert head(repo, integration_branch("r1")), "--force still keeps undelivered work"
    deliver(repo, "r1", into=None, squash=True, base=base)
    clean(repo, "r1")
    assert sh(repo, "for-each-ref", "refs/agentbox/", "refs/heads/agentbox/") == ""
    assert "agentbox" not in sh(repo, "worktree", "list")


def test_clean_keeps_live_runs_and_orphans_lists_leftovers(repo: Path) -> None:
    start(repo, "r1")
    start(repo, "r2")
    ensure_task_worktree(repo, "r1", "t1")
    ensure_task_worktree(repo, "r2", "t1")
    found = orphans(repo, live_run_ids={"r2"}, known_run_ids={"r2"})
    assert {(o.run_id, o.kind) for o in found} == {("r1", OrphanKind.WORKTREE), ("r1", OrphanKind.BRANCH)}
    shutil.rmtree(task_worktree_path(repo / ".git", "r2", "t1"))
    assert any(o.kind == OrphanKind.MISSING_WORKTREE for o in orphans(repo, live_run_ids={"r2"}))
    with pytest.raises(UsageError, match="still going"):
        clean(repo, "r2", keep_runs={"r2"})
    half = task_worktree_path(repo / ".git", "r1", "t2")  # killed while being checked out
    sh(repo, "worktree", "add", "-q", "--no-checkout", "--detach", str(half), "HEAD")
    plan = clean(repo, keep_runs={"r2"})
    assert plan.worktrees == [task_worktree_path(repo / ".git", "r1", "t1"), half] and not plan.refused
    assert head(repo, integration_branch("r2"))


# ----------------------------------------------------------------------------- setup and sandbox


def test_setup_copies_ignored_files_only_and_never_through_links(repo: Path, tmp_path: Path) -> None:
    write(repo, ".env", "SECRET=1\n")
    write(repo, "node_modules/pkg/index.js", "module.exports = 1\n")
    write(repo, "notes.txt", "untracked, not ignored\n")
    outside = tmp_path / "outside"
    write(outside, "x.log", "outside\n")
    (repo / "linked").symlink_to(outside)
    start(repo)
    tree = ensure_task_worktree(repo, "r1", "t1")
    result = copy_setup_files(repo, tree.path, [".env", "node_modules", "notes.txt", "a.txt", "**/*.log"])
    assert result.copied == [".env", "node_modules"]
    assert (tree.path / "node_modules" / "pkg" / "index.js").read_text() == "module.exports = 1\n"
    not_ignored = "not ignored by git: it would be committed with the task's work"
    assert dict(result.skipped) == {"a.txt": not_ignored, "notes.txt": not_ignored}
    assert not (tree.path / "linked").exists()
    assert copy_setup_files(repo, tree.path, [".env"]).skipped == [(".env", "already in the worktree")]
    assert commit_turn(tree.path, message="nothing", **ROLE) is None, "copied files are ignored, never committed"
    with pytest.raises(UsageError):
        copy_setup_files(repo, tree.path, ["../etc/passwd"])


@pytest.mark.bwrap
def test_git_works_read_only_inside_a_sandbox_with_the_worktree_at_the_projects_path(repo: Path) -> None:
    start(repo)
    work(repo, "t1", {"x.txt": "x\n"})
    tree = ensure_task_worktree(repo, "r1", "t1")
    write(tree.path, "x.txt", "uncommitted edit\n")
    view = sandbox_git_view(repo, tree.path)
    argv = ["bwrap", "--dev-bind", "/", "/", "--tmpfs", "/run", "--bind", str(tree.path), str(repo)]
    for source, destination in view.binds:
        argv += ["--ro-bind", str(source), str(destination)]
    for hidden in view.hide:
        argv += ["--tmpfs", str(hidden)]
    script = ("git status --porcelain -b; git log -1 --format=%s; git diff --stat | tail -1; "
              "ls /run/agentbox/git/agentbox | wc -l; git commit -qam evil 2>/dev/null && echo COMMITTED; "
              "git update-ref refs/heads/evil HEAD 2>/dev/null && echo REF; "
              "echo x > /run/agentbox/git/hooks/pre-commit 2>/dev/null && echo HOOK; true")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    proc = subprocess.run([*argv, "sh", "-c", f"cd {repo} && {script}"], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "## agentbox/r1@t1" and lines[1] == " M x.txt"
    assert lines[2] == "t1: work" and "1 file changed" in lines[3] and lines[4].strip() == "0"
    assert not {"COMMITTED", "REF", "HOOK"} & set(lines)
    assert sh(repo, "status", "--porcelain") == "", "the person's tree saw none of it"


# ----------------------------------------------------------------------------- agentbox init


def test_init_writes_a_gitignore_that_keeps_the_crew_and_ignores_runtime_state(tmp_path: Path) -> None:
    project.init(tmp_path)
    sh(tmp_path, "init", "-q")
    for name in ("runs/r1/run.json", "sessions/s.json", "run.lock", "worktrees/x", "anything-else"):
        write(tmp_path / ".agent-box", name, "x\n")
    write(tmp_path / ".agent-box", "roles/extra.md", "x\n")
    tracked = set(sh(tmp_path, "ls-files", "--others", "--exclude-standard", ".agent-box").split())
    assert tracked == {".agent-box/.gitignore", ".agent-box/crew.yaml", ".agent-box/roles/extra.md"} | {
        str(p.relative_to(tmp_path)) for p in (tmp_path / ".agent-box").rglob("*")
        if p.is_file() and p.relative_to(tmp_path / ".agent-box").parts[0] in ("roles", "knowledge", "graphs")}
