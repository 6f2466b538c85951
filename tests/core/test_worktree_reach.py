# ruff: noqa: F811  (the fixtures imported from test_workspace are parameters here)
"""Commits that scan what a turn could write: a worktree's reach, on real repositories.

The reach is what makes a turn's commit cost follow its write scopes instead of the tree's
size; what matters is that it never misses a change a writer could make: it only grows while
a worktree is handed out, and the whole tree is the default.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agentbox.core.sandbox import scopes
from agentbox.core.workspace import (
    WorktreeOrigin,
    commit_turn,
    ensure_task_worktree,
    ensure_view_worktree,
    merge_task,
    remove_task_worktree,
)
from agentbox.core.workspace.reach import read_reach, widen_reach
from tests.core.test_workspace import ROLE, git_home, repo, sh, start, write  # noqa: F401  (fixtures)


def committed_paths(tree: Path) -> set[str]:
    return set(sh(tree, "diff-tree", "-r", "--name-only", "--no-commit-id", "HEAD").split())


def test_a_commit_takes_every_change_in_reach_and_scans_nothing_else(repo: Path) -> None:
    write(repo, "src/keep.py", "k\n")
    write(repo, "src/gone/old.py", "o\n")
    sh(repo, "add", "-A")
    sh(repo, "commit", "-qm", "src")
    start(repo)
    tree = ensure_task_worktree(repo, "r1", "t1", reach=["src"])
    write(tree.path, "src/new.py", "n\n")
    write(tree.path, "src/keep.py", "changed\n")
    (tree.path / "src" / "gone" / "old.py").unlink()
    (tree.path / "src" / "gone").rmdir()
    subprocess.run(["git", "init", "-q", str(tree.path / "src" / "nested")], check=True)
    write(tree.path, "src/nested/inner.py", "i\n")
    # what only the host could do (the sandbox binds nothing outside the scopes writable)
    write(tree.path, "b.txt", "outside\n")
    commit = commit_turn(tree.path, message="t1", **ROLE)
    assert commit is not None
    assert committed_paths(tree.path) == {"src/new.py", "src/keep.py", "src/gone/old.py", "src/nested/inner.py"}
    assert not (tree.path / "src" / "nested" / ".git").exists()


def test_no_reach_named_means_the_whole_tree(repo: Path) -> None:
    start(repo)
    tree = ensure_task_worktree(repo, "r1", "t1")
    write(tree.path, "b.txt", "anywhere\n")
    assert commit_turn(tree.path, message="t1", **ROLE) is not None
    write(tree.path, "a.txt", "again\n")  # a second turn with no new call: still the whole tree
    assert commit_turn(tree.path, message="t1 again", **ROLE) is not None
    assert committed_paths(tree.path) == {"a.txt"}


def test_the_reach_only_grows_while_a_task_holds_its_worktree(repo: Path) -> None:
    start(repo)
    tree = ensure_task_worktree(repo, "r1", "t1", reach=["docs"])
    write(tree.path, "docs/left.md", "left uncommitted by a killed engine\n")
    again = ensure_task_worktree(repo, "r1", "t1", reach=["src"])  # the resumed turn has other scopes
    assert again.origin == WorktreeOrigin.EXISTING
    assert read_reach(tree.path) == ["docs", "src"]
    write(tree.path, "src/a.py", "a\n")
    commit_turn(tree.path, message="t1", **ROLE)
    assert committed_paths(tree.path) == {"docs/left.md", "src/a.py"}


def test_a_setup_command_widens_the_reach_until_the_next_commit(repo: Path) -> None:
    start(repo)
    tree = ensure_task_worktree(repo, "r1", "t1", reach=["src"])
    widen_reach(tree.path, None, once=True)
    write(tree.path, "b.txt", "written by the setup command\n")
    commit_turn(tree.path, message="t1", **ROLE)
    assert committed_paths(tree.path) == {"b.txt"}
    assert read_reach(tree.path) == ["src"]


def test_a_persons_shell_widens_the_reach_for_good(repo: Path) -> None:
    start(repo)
    tree = ensure_task_worktree(repo, "r1", "t1", reach=["src"])
    widen_reach(tree.path, None)
    commit_turn(tree.path, message="nothing yet", **ROLE)
    write(tree.path, "b.txt", "the person's edit\n")
    assert commit_turn(tree.path, message="t1", **ROLE) is not None
    assert committed_paths(tree.path) == {"b.txt"}


def test_uncommitted_work_in_reach_keeps_a_worktree_from_being_parked(repo: Path) -> None:
    start(repo)
    tree = ensure_task_worktree(repo, "r1", "t1", reach=["src"])
    write(tree.path, "src/a.py", "not committed\n")
    with pytest.raises(Exception, match="uncommitted changes: src/"):
        remove_task_worktree(repo, "r1", "t1")


def test_a_spare_switched_to_the_next_task_holds_exactly_its_branch(repo: Path) -> None:
    start(repo)
    first = ensure_task_worktree(repo, "r1", "t1", reach=["src"])
    write(first.path, "src/t1.py", "one\n")
    write(first.path, "a.txt", "t1 changed a\n")
    widen_reach(first.path, ["a.txt"])
    commit_turn(first.path, message="t1", **ROLE)
    remove_task_worktree(repo, "r1", "t1")  # parked, not merged: t2 starts from the run's base
    second = ensure_task_worktree(repo, "r1", "t2", reach=["lib"])
    assert second.origin == WorktreeOrigin.SPARE
    assert not (second.path / "src" / "t1.py").exists()
    assert (second.path / "a.txt").read_text() == "one\ntwo\nthree\n"
    assert sh(second.path, "status", "--porcelain", "--untracked-files=all") == ""
    assert read_reach(second.path) == ["lib"]


def test_the_view_moves_to_the_new_head_with_only_what_differs(repo: Path) -> None:
    start(repo)
    view = ensure_view_worktree(repo, "r1")
    tree = ensure_task_worktree(repo, "r1", "t1", reach=["src"])
    write(tree.path, "src/merged.py", "m\n")
    commit_turn(tree.path, message="t1", **ROLE)
    merged = merge_task(repo, "r1", "t1").merged_commit
    moved = ensure_view_worktree(repo, "r1")
    assert moved.path == view.path and moved.base_commit == merged
    assert (moved.path / "src" / "merged.py").read_text() == "m\n"
    assert sh(moved.path, "status", "--porcelain", "--untracked-files=all") == ""


@pytest.mark.parametrize(("writes", "reach"), [
    (["src/**"], ["src"]), (["src/"], ["src"]), (["docs/*.md"], ["docs"]), (["README.md"], ["README.md"]),
    (["*.md"], None), (None, None), ([], []), (["src/**", "tests/**"], ["src", "tests"]),
])
def test_a_scope_reaches_its_directory_file_or_the_pattern_s_directory(writes: list[str] | None,
                                                                         reach: list[str] | None) -> None:
    assert scopes.reach(writes) == reach
