"""The run's read-only view is seen over the shared base, as a new task's worktree is.

Real git throughout. `seen` composes on the host what a sandbox shows at the project's path
(the base, then the view's own dirs bound over it), and every test compares it file by file
with the integration head as `git archive` has it.
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from agentbox.core.workspace import (
    bases,
    commit_turn,
    ensure_integration_branch,
    ensure_task_worktree,
    ensure_view_worktree,
    merge_task,
    remove_spares,
    remove_view_worktree,
    sandbox_git_view,
    snapshot_base,
)
from agentbox.core.workspace.layout import admin_dir
from agentbox.core.workspace.worktrees import VIEW_HEAD

INTEGRATION = "refs/heads/agentbox/r1"


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for d in ("src", "lib", "docs/guide"):
        (root / d).mkdir(parents=True)
        for i in range(5):
            (root / d / f"f{i}.txt").write_text(f"{d} {i}\n")
    (root / "README.md").write_text("# top\n")
    git(root.parent, "init", "-q", "-b", "main", str(root))
    git(root, "-c", "user.name=P", "-c", "user.email=p@x.invalid", "add", "-A")
    git(root, "-c", "user.name=P", "-c", "user.email=p@x.invalid", "commit", "-q", "-m", "start")
    ensure_integration_branch(root, "r1", snapshot_base(root))
    return root


def archived(root: Path, commit: str) -> dict[str, bytes]:
    """Every file of `commit` as `git archive` has it."""
    archive = subprocess.run(["git", "-C", str(root), "archive", commit], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def files_under(top: Path) -> dict[str, bytes]:
    return {str(p.relative_to(top)): p.read_bytes() for p in top.rglob("*")
            if p.is_file() and not p.is_symlink() and ".git" not in p.relative_to(top).parts[:1]
            and p.relative_to(top).parts[0] != ".agent-box"}


def seen(root: Path, worktree: Path) -> dict[str, bytes]:
    """The tree a sandbox shows at the project's path: the base, the worktree's own dirs over it."""
    view = sandbox_git_view(root, worktree)
    if view.base is None:
        return files_under(worktree)
    shown = files_under(view.base)
    for over in view.over:
        relative = str(over.relative_to(worktree))
        shown = {p: b for p, b in shown.items() if not p.startswith(relative + "/")}
        shown.update({f"{relative}/{p}": b for p, b in files_under(over).items()})
    return shown


def land(root: Path, task: str, reach: list[str], change: dict[str, str | None]) -> str:
    """A task's work (`None`: the file deleted) committed and merged; the new integration head."""
    tree = ensure_task_worktree(root, "r1", task, reach=reach, sparse=True)
    for relative, text in change.items():
        target = tree.path / relative
        if text is None:
            target.unlink()
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
    assert commit_turn(tree.path, author_name="w", author_email="w@x.invalid", message=task) is not None
    merged = merge_task(root, "r1", task).merged_commit
    assert merged is not None
    return merged


def test_a_new_view_is_seen_over_the_base_without_a_checkout_of_its_own(repo: Path) -> None:
    view = ensure_view_worktree(repo, "r1", sparse=True)
    marker = bases.read_base(view.path)
    assert marker is not None and marker.commit == view.base_commit and marker.over == ()
    assert sorted(os.listdir(view.path)) == [".git"]  # every file is the base's
    assert len(git(view.path, "ls-files").split()) == 16  # the index holds the whole tree
    assert seen(repo, view.path) == archived(repo, INTEGRATION)
    # a task of the run shares the base the view made: one full checkout for the run
    tree = ensure_task_worktree(repo, "r1", "t1", reach=["src"], sparse=True)
    assert bases.read_base(tree.path).commit == marker.commit  # type: ignore[union-attr]
    assert [p.name for p in bases.bases_dir(view.common).iterdir()] == [marker.commit]


def test_the_view_follows_the_head_in_its_own_dirs_and_stays_exact(repo: Path) -> None:
    view = ensure_view_worktree(repo, "r1", sparse=True)
    land(repo, "t1", ["docs/guide"], {"docs/guide/f2.txt": None, "docs/guide/more.txt": "more\n"})
    moved = ensure_view_worktree(repo, "r1", sparse=True)
    marker = bases.read_base(moved.path)
    assert marker is not None and marker.commit == view.base_commit and marker.over == ("docs/guide",)
    assert seen(repo, moved.path) == archived(repo, INTEGRATION)
    assert "docs/guide/f2.txt" not in seen(repo, moved.path)
    land(repo, "t2", ["src/deep"], {"src/deep/new.txt": "deep\n", "src/f1.txt": "changed\n"})
    again = ensure_view_worktree(repo, "r1", sparse=True)
    assert bases.read_base(again.path).over == ("docs/guide", "src")  # type: ignore[union-attr]
    assert seen(repo, again.path) == archived(repo, INTEGRATION)
    assert git(again.path, "rev-parse", "HEAD").strip() == git(repo, "rev-parse", INTEGRATION).strip()
    assert not os.path.lexists(again.path / "lib")  # still the base's


def test_a_change_at_the_top_of_the_tree_makes_the_view_whole(repo: Path) -> None:
    ensure_view_worktree(repo, "r1", sparse=True)
    land(repo, "t1", ["README.md"], {"README.md": "# changed\n"})
    view = ensure_view_worktree(repo, "r1", sparse=True)
    assert bases.read_base(view.path) is None
    assert files_under(view.path) == archived(repo, INTEGRATION)
    assert "S " not in git(view.path, "ls-files", "-t")  # no entry left skip-worktree


def test_a_caller_needing_every_file_gets_the_view_whole(repo: Path) -> None:
    view = ensure_view_worktree(repo, "r1", sparse=True)
    assert bases.read_base(view.path) is not None
    whole = ensure_view_worktree(repo, "r1")  # a person's shell: every file in the directory
    assert bases.read_base(whole.path) is None
    assert files_under(whole.path) == archived(repo, INTEGRATION)
    land(repo, "t1", ["src"], {"src/f0.txt": "new\n"})
    moved = ensure_view_worktree(repo, "r1", sparse=True)  # once whole, it stays whole
    assert bases.read_base(moved.path) is None
    assert files_under(moved.path) == archived(repo, INTEGRATION)


def test_a_sparse_view_asked_whole_while_behind_is_moved_and_made_whole(repo: Path) -> None:
    ensure_view_worktree(repo, "r1", sparse=True)
    land(repo, "t1", ["lib"], {"lib/f3.txt": "three\n"})
    whole = ensure_view_worktree(repo, "r1")
    assert bases.read_base(whole.path) is None
    assert files_under(whole.path) == archived(repo, INTEGRATION)
    assert "S " not in git(whole.path, "ls-files", "-t")


def test_a_view_move_killed_half_way_is_finished_by_the_next_call(repo: Path) -> None:
    view = ensure_view_worktree(repo, "r1", sparse=True)
    land(repo, "t1", ["src"], {"src/f0.txt": "new\n", "src/f9.txt": "nine\n"})
    admin = admin_dir(view.path)
    assert admin is not None
    # what a call killed after it stopped trusting the files and git wrote some of them left
    (admin / VIEW_HEAD).unlink()
    (admin / "info").mkdir(exist_ok=True)
    (admin / "info" / "sparse-checkout").write_text("/src/\n")
    (view.path / "src").mkdir()
    (view.path / "src" / "f0.txt").write_text("new\n")
    again = ensure_view_worktree(repo, "r1", sparse=True)
    assert bases.read_base(again.path).over == ("src",)  # type: ignore[union-attr]
    assert seen(repo, again.path) == archived(repo, INTEGRATION)
    assert git(again.path, "status", "--porcelain") == ""


def test_the_base_a_view_is_seen_over_is_never_pruned_while_the_view_lives(repo: Path) -> None:
    view = ensure_view_worktree(repo, "r1", sparse=True)
    marker = bases.read_base(view.path)
    assert marker is not None
    merged = land(repo, "t1", ["lib"], {"lib/f1.txt": "one\n"})
    bases.ensure_base(repo, view.common, merged)  # a newer base, as a later run's tasks make
    remove_spares(repo, "r1")  # prunes the bases no worktree is seen over, but the newest
    assert marker.base.is_dir()
    remove_view_worktree(repo, "r1")
    assert not view.path.exists()
