"""A sparse worktree on git's sparse index: its git processes read an index that follows its own dirs.

Real git throughout. Each test checks what git stores (`ls-files --sparse` lists a directory
outside the cone as one entry), what a turn commits, and that a path outside the cone ends
as it did on a full index. `seen` and `head_files` are the sandbox's picture and git's.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from agentbox.core.workspace import (
    bases,
    commit_turn,
    ensure_integration_branch,
    ensure_task_worktree,
    gitcmd,
    merge_task,
    sandbox_git_view,
    snapshot_base,
)
from agentbox.core.workspace.provision import sparse_index_env
from agentbox.core.workspace.reach import widen_reach
from tests.core.test_worktree_bases import head_files, seen


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout


def stored(tree: Path) -> list[str]:
    """The index's entries as git keeps them (a directory outside the cone: one entry ending in `/`)."""
    return git(tree, *bases.CONE, "ls-files", "--sparse").split()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for d in ("src", "lib", "docs/guide"):
        (root / d).mkdir(parents=True)
        for i in range(3):
            (root / d / f"f{i}.txt").write_text(f"{d} {i}\n")
    (root / "README.md").write_text("# top\n")
    git(root.parent, "init", "-q", "-b", "main", str(root))
    git(root, "-c", "user.name=P", "-c", "user.email=p@x.invalid", "add", "-A")
    git(root, "-c", "user.name=P", "-c", "user.email=p@x.invalid", "commit", "-q", "-m", "start")
    ensure_integration_branch(root, "r1", snapshot_base(root))
    return root


@pytest.fixture
def subcommands(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The subcommand of every git the runner starts."""
    seen_calls: list[str] = []
    real = gitcmd._run

    def counted(argv: list[str], *args: Any, **kwargs: Any) -> Any:
        words = argv[3:]
        while words[:1] == ["-c"]:
            words = words[2:]
        seen_calls.append(words[0])
        return real(argv, *args, **kwargs)

    monkeypatch.setattr(gitcmd, "_run", counted)
    return seen_calls


def test_a_turn_is_committed_by_one_git_commit_and_the_index_stays_sparse(repo: Path, subcommands: list[str]) -> None:
    tree = ensure_task_worktree(repo, "r1", "t1", reach=["src"], sparse=True)
    assert stored(tree.path) == ["README.md", "docs/", "lib/", "src/f0.txt", "src/f1.txt", "src/f2.txt"]
    (tree.path / "src" / "new.txt").write_text("new\n")
    (tree.path / "src" / "f0.txt").unlink()
    (tree.path / "src" / "f1.txt").write_text("changed\n")
    subcommands.clear()
    commit = commit_turn(tree.path, author_name="W <x>", author_email="w@x.invalid", message="work\n\n  kept as is\n",
                         turn_id="turn-1")
    assert subcommands == ["rev-parse", "ls-files", "ls-files", "add", "commit"]  # no write-tree, no update-ref
    assert commit == git(repo, "rev-parse", "refs/heads/agentbox/r1@t1").strip()
    assert git(repo, "rev-parse", f"{commit}^").strip() == tree.base_commit
    changed = git(repo, "diff", "--name-status", tree.base_commit, commit).split("\n")
    assert sorted(filter(None, changed)) == ["A\tsrc/new.txt", "D\tsrc/f0.txt", "M\tsrc/f1.txt"]
    assert git(repo, "log", "-1", "--format=%an <%ae>%n%B", commit) == (
        "W x <w@x.invalid>\nwork\n\n  kept as is\n\nAgentbox-Turn: turn-1\n\n")
    assert stored(tree.path)[:3] == ["README.md", "docs/", "lib/"]  # still sparse
    assert git(tree.path, "status", "--porcelain") == ""
    assert seen(repo, tree.path) == head_files(tree.path)
    again = commit_turn(tree.path, author_name="W", author_email="w@x.invalid", message="work", turn_id="turn-1")
    assert again == commit  # a repeated call finds the turn's commit
    (tree.path / "src" / "new.txt").write_text("new\n")  # the same bytes again: nothing to commit
    widen_reach(tree.path, ["src"])
    assert commit_turn(tree.path, author_name="W", author_email="w@x.invalid", message="none") is None


def test_a_later_scope_outside_the_cone_widens_it_and_the_index_is_sparse_again(repo: Path) -> None:
    tree = ensure_task_worktree(repo, "r1", "t1", reach=["src"], sparse=True)
    widened = ensure_task_worktree(repo, "r1", "t1", reach=["docs/guide"], sparse=True)  # a later turn's scopes
    assert bases.read_base(widened.path).over == ("docs/guide", "src")  # type: ignore[union-attr]
    assert seen(repo, tree.path) == head_files(tree.path)
    (tree.path / "docs" / "guide" / "f1.txt").write_text("guide changed\n")
    commit = commit_turn(tree.path, author_name="w", author_email="w@x.invalid", message="guide")
    assert commit is not None
    assert git(repo, "diff", "--name-only", tree.base_commit, commit).split() == ["docs/guide/f1.txt"]
    assert "lib/" in stored(tree.path)  # the widening expanded the index; the commit made it sparse again


def test_a_reach_outside_the_cone_is_committed_as_on_a_full_index(repo: Path, subcommands: list[str]) -> None:
    """A reach the over dirs do not cover (widened with no ensure since: what a crash between the
    two leaves) gets ordinary git calls: new files there are committed, skip-worktree files are
    left as git leaves them, exactly what the same calls did on the full index before."""
    tree = ensure_task_worktree(repo, "r1", "t1", reach=["src"], sparse=True)
    widen_reach(tree.path, ["lib"])
    (tree.path / "src" / "f2.txt").write_text("in the cone\n")
    (tree.path / "lib").mkdir()
    (tree.path / "lib" / "new.txt").write_text("outside the cone\n")
    (tree.path / "lib" / "f0.txt").write_text("over a skip-worktree entry\n")
    assert bases.cone_flags(tree.path, ["src", "lib"]) == ()
    subcommands.clear()
    commit = commit_turn(tree.path, author_name="w", author_email="w@x.invalid", message="outside")
    assert "write-tree" in subcommands and "commit" not in subcommands  # the plain path
    assert commit is not None
    changed = git(repo, "diff", "--name-status", tree.base_commit, commit).split("\n")
    assert sorted(filter(None, changed)) == ["A\tlib/new.txt", "M\tsrc/f2.txt"]
    assert git(repo, "show", f"{commit}:lib/f0.txt") == "lib 0\n"


def test_a_path_outside_the_reach_is_not_committed(repo: Path) -> None:
    tree = ensure_task_worktree(repo, "r1", "t1", reach=["src"], sparse=True)
    (tree.path / "README.md").write_text("changed outside the reach\n")  # a cone-mode file of the top
    (tree.path / "src" / "f0.txt").write_text("in reach\n")
    commit = commit_turn(tree.path, author_name="w", author_email="w@x.invalid", message="work")
    assert commit is not None
    assert git(repo, "diff", "--name-only", tree.base_commit, commit).split() == ["src/f0.txt"]


def test_a_nested_repository_made_in_the_cone_is_committed_as_plain_files(repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    tree = ensure_task_worktree(repo, "r1", "t1", reach=["src"], sparse=True)
    nested = tree.path / "src" / "sub"
    nested.mkdir()
    git(nested, "init", "-q")
    (nested / "a.txt").write_text("hello\n")
    (nested / ".gitattributes").write_text("* filter=x\n")
    git(nested, "config", "filter.x.clean", f"touch {marker}; cat")
    git(nested, "config", "core.hooksPath", str(tmp_path))
    commit = commit_turn(tree.path, author_name="w", author_email="w@x.invalid", message="nested")
    assert commit is not None
    entries = git(repo, "ls-tree", "-r", commit, "src/sub").split("\n")
    assert sorted(e.split("\t")[1] for e in entries if e) == ["src/sub/.gitattributes", "src/sub/a.txt"]
    assert not [e for e in entries if e.startswith("160000")]
    assert not marker.exists() and not (nested / ".git").exists()


def test_only_a_sandbox_over_a_sparse_index_gets_the_git_environment(repo: Path) -> None:
    tree = ensure_task_worktree(repo, "r1", "t1", reach=["src"], sparse=True)
    assert sandbox_git_view(repo, tree.path).env == sparse_index_env()
    whole = ensure_task_worktree(repo, "r1", "t2", reach=["src"])
    assert sandbox_git_view(repo, whole.path).env == {}
    merge_task(repo, "r1", "t1")  # nothing committed: a no-op merge
    odd = ensure_task_worktree(repo, "r1", "t3", reach=["docs/guide"], sparse=True)
    assert bases.cone(("docs/guide",)) and not bases.cone(("has space",)) and not bases.cone(("a/[x]",))
    assert sandbox_git_view(repo, odd.path).env == sparse_index_env()
