"""A new task's worktree checks out what its scopes need over a shared base, and is seen whole.

Real git throughout. What a sandbox shows at the project's path is the base with the
worktree's own dirs bound over it; `seen` composes exactly that on the host, and every test
compares it with the task's HEAD as git has it, file by file.
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from agentbox.core.sandbox import bwrap as sandbox
from agentbox.core.workspace import (
    bases,
    commit_turn,
    ensure_integration_branch,
    ensure_task_worktree,
    make_whole,
    merge_task,
    remove_spares,
    remove_task_worktree,
    sandbox_git_view,
    snapshot_base,
    sync_task,
)
from agentbox.core.workspace.layout import admin_dir


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


def head_files(path: Path, commit: str = "HEAD") -> dict[str, bytes]:
    """Every file of `commit` as git has it."""
    archive = subprocess.run(["git", "-C", str(path), "archive", commit], check=True, capture_output=True).stdout
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


def test_a_new_worktree_checks_out_its_scopes_only_and_is_seen_whole(repo: Path) -> None:
    tree = ensure_task_worktree(repo, "r1", "t1", reach=["src"], sparse=True)
    view = bases.read_base(tree.path)
    assert view is not None and view.over == ("src",)
    # lib/, docs/ are the base's (cone mode checks out the top's files too, the base's same bytes, not bound)
    assert sorted(os.listdir(tree.path)) == [".git", "README.md", "src"]
    assert len(git(tree.path, "ls-files").split()) == 16  # the index holds the whole tree (expanded on reading)
    stored = git(tree.path, *bases.CONE, "ls-files", "--sparse").split()
    assert stored == ["README.md", "docs/", "lib/", *(f"src/f{i}.txt" for i in range(5))]  # a sparse index
    assert git(tree.path, "status", "--porcelain") == ""
    assert seen(repo, tree.path) == head_files(tree.path)
    # a second task at the same commit shares the base: no second full checkout
    other = ensure_task_worktree(repo, "r1", "t2", reach=["lib/f1.txt"], sparse=True)
    assert bases.read_base(other.path) == bases.BaseView(view.commit, view.base, view.head, ("lib",))
    assert [p.name for p in bases.bases_dir(tree.common).iterdir()] == [view.commit]


def test_a_turn_commits_adds_changes_and_deletions_and_nothing_outside(repo: Path) -> None:
    tree = ensure_task_worktree(repo, "r1", "t1", reach=["src"], sparse=True)
    (tree.path / "src" / "new.txt").write_text("new\n")
    (tree.path / "src" / "f0.txt").unlink()
    (tree.path / "src" / "f1.txt").write_text("changed\n")
    commit = commit_turn(tree.path, author_name="w", author_email="w@x.invalid", message="work")
    assert commit is not None
    changed = git(repo, "diff", "--name-status", tree.base_commit, commit).split("\n")
    assert sorted(filter(None, changed)) == ["A\tsrc/new.txt", "D\tsrc/f0.txt", "M\tsrc/f1.txt"]
    assert seen(repo, tree.path) == head_files(tree.path)


def test_work_merged_after_the_base_is_seen_through_the_worktrees_own_dirs(repo: Path) -> None:
    first = ensure_task_worktree(repo, "r1", "t1", reach=["docs/guide"], sparse=True)
    (first.path / "docs" / "guide" / "f2.txt").unlink()
    (first.path / "docs" / "guide" / "more.txt").write_text("more\n")
    commit_turn(first.path, author_name="w", author_email="w@x.invalid", message="docs")
    merge_task(repo, "r1", "t1")
    later = ensure_task_worktree(repo, "r1", "t3", reach=["src"], sparse=True)  # starts at the new head
    view = bases.read_base(later.path)
    assert view is not None and view.commit == first.base_commit  # the older base, shared
    assert view.over == ("docs/guide", "src")
    assert seen(repo, later.path) == head_files(later.path)
    assert "docs/guide/f2.txt" not in seen(repo, later.path)


def test_work_brought_in_by_a_sync_grows_the_worktrees_dirs(repo: Path) -> None:
    a = ensure_task_worktree(repo, "r1", "a", reach=["lib"], sparse=True)
    b = ensure_task_worktree(repo, "r1", "b", reach=["src"], sparse=True)
    (a.path / "lib" / "f0.txt").write_text("from a\n")
    commit_turn(a.path, author_name="w", author_email="w@x.invalid", message="a")
    merge_task(repo, "r1", "a")
    sync_task(repo, "r1", "b")
    again = ensure_task_worktree(repo, "r1", "b", reach=["src"], sparse=True)
    assert bases.read_base(again.path).over == ("lib", "src")  # type: ignore[union-attr]
    assert seen(repo, again.path) == head_files(again.path)
    assert seen(repo, again.path)["lib/f0.txt"] == b"from a\n"
    assert b.path == again.path


def test_a_scope_at_the_top_or_the_whole_tree_gets_every_file(repo: Path) -> None:
    top = ensure_task_worktree(repo, "r1", "t1", reach=["README.md"], sparse=True)
    assert bases.read_base(top.path) is None and files_under(top.path) == head_files(top.path)
    whole = ensure_task_worktree(repo, "r1", "t2", reach=None, sparse=True)
    assert bases.read_base(whole.path) is None and files_under(whole.path) == head_files(whole.path)


def test_a_new_directory_scope_is_made_in_the_base_and_stays_exact(repo: Path) -> None:
    tree = ensure_task_worktree(repo, "r1", "t1", reach=["src", "newpkg"], sparse=True, new_dirs=["newpkg"])
    view = bases.read_base(tree.path)
    assert view is not None and view.over == ("newpkg", "src") and (view.base / "newpkg").is_dir()
    assert seen(repo, tree.path) == head_files(tree.path)


def test_widening_to_the_whole_tree_makes_the_worktree_whole(repo: Path) -> None:
    tree = ensure_task_worktree(repo, "r1", "t1", reach=["src"], sparse=True)
    make_whole(tree.path)
    assert bases.read_base(tree.path) is None
    assert files_under(tree.path) == head_files(tree.path)
    assert git(tree.path, "status", "--porcelain") == ""
    (tree.path / "README.md").write_text("changed at the top\n")
    again = ensure_task_worktree(repo, "r1", "t1", reach=None)
    commit = commit_turn(again.path, author_name="w", author_email="w@x.invalid", message="top")
    assert commit is not None and git(repo, "diff", "--name-only", tree.base_commit, commit) == "README.md\n"


def test_a_sparse_worktree_is_not_parked_and_bases_no_one_uses_are_pruned(repo: Path) -> None:
    tree = ensure_task_worktree(repo, "r1", "t1", reach=["src"], sparse=True)
    (tree.path / "src" / "x.txt").write_text("x\n")
    commit_turn(tree.path, author_name="w", author_email="w@x.invalid", message="x")
    merge_task(repo, "r1", "t1")
    remove_task_worktree(repo, "r1", "t1")  # a spare must hold every file: the sparse one is deleted
    assert not tree.path.exists() and remove_spares(repo, "r1") == []
    ensure_integration_branch(repo, "r2", snapshot_base(repo))
    bases.ensure_base(repo, tree.common, git(repo, "rev-parse", "agentbox/r1").strip())
    assert len(list(bases.bases_dir(tree.common).iterdir())) == 2
    removed = bases.prune_bases(tree.common, [], keep=1)
    assert len(removed) == 1 and len(list(bases.bases_dir(tree.common).iterdir())) == 1


def test_a_base_a_killed_call_was_making_is_removed_and_made_again(repo: Path, tmp_path: Path) -> None:
    common = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir").strip())
    top = bases.bases_dir(common)
    top.mkdir(parents=True)
    proc = subprocess.Popen(["true"])
    proc.wait()
    leftover = top / f".making-{proc.pid}-deadbeef"
    (leftover / "src").mkdir(parents=True)
    tree = ensure_task_worktree(repo, "r1", "t1", reach=["src"], sparse=True)
    assert not leftover.exists()
    assert seen(repo, tree.path) == head_files(tree.path)


def test_a_killed_sparse_checkout_is_finished_by_the_next_call(repo: Path) -> None:
    tree = ensure_task_worktree(repo, "r1", "t1", reach=["src"], sparse=True)
    # what a call killed after `worktree add` and before the task's branch was attached left
    git(tree.path, "update-ref", "--no-deref", "HEAD", "HEAD")
    admin = admin_dir(tree.path)
    assert admin is not None
    (admin / bases.BASE_MARKER).unlink()
    for f in (tree.path / "src").iterdir():
        f.unlink()
    again = ensure_task_worktree(repo, "r1", "t1", reach=["src"], sparse=True)
    assert bases.read_base(again.path) is not None
    assert git(again.path, "symbolic-ref", "HEAD").strip().endswith("@t1")
    assert seen(repo, again.path) == head_files(again.path)


def test_the_sandbox_binds_the_base_then_the_worktrees_dirs_then_the_scopes(repo: Path, tmp_path: Path) -> None:
    tree = ensure_task_worktree(repo, "r1", "t1", reach=["src"], sparse=True)
    view = sandbox_git_view(repo, tree.path)
    spec = sandbox.SandboxSpec(
        project_root=tree.path, mount_at=repo, writable=(tree.path / "src",),
        protected=(tree.path / "lib", tree.path / "src" / "f0.txt"), extra_rw=(), homes=(), hidden=(), ro_binds=(),
        views=tuple(view.binds), base=view.base, over=view.over)
    argv = sandbox.bwrap_argv(spec, ["true"])
    pairs = [tuple(argv[i:i + 3]) for i in range(len(argv) - 2) if argv[i] in ("--ro-bind", "--bind")]
    at = pairs.index(("--ro-bind", str(view.base), str(repo)))
    assert pairs[at + 1] == ("--ro-bind", str(tree.path / "src"), str(repo / "src"))
    assert pairs[at + 2] == ("--bind", str(tree.path / "src"), str(repo / "src"))
    assert ("--ro-bind", str(tree.path / "src" / "f0.txt"), str(repo / "src" / "f0.txt")) in pairs
    # a protected path outside the worktree's own dirs is the base's, read-only already: not bound
    # from the worktree, where it is not checked out
    assert not any(p[1] == str(tree.path / "lib") for p in pairs)
    assert str(tree.path) not in [p[1] for p in pairs]


def test_a_sparse_checkout_finished_whole_after_a_crash_holds_every_file(repo: Path) -> None:
    tree = ensure_task_worktree(repo, "r1", "t1", reach=["src"], sparse=True)
    git(tree.path, "update-ref", "--no-deref", "HEAD", "HEAD")  # killed before the branch was attached
    again = ensure_task_worktree(repo, "r1", "t1", reach=None)  # the next call needs the whole tree
    assert bases.read_base(again.path) is None
    assert files_under(again.path) == head_files(again.path)
    assert "S " not in git(again.path, "ls-files", "-t")  # no entry left skip-worktree


def test_a_task_behind_the_newest_base_gets_the_dirs_it_lacks_empty(repo: Path) -> None:
    old = git(repo, "rev-parse", "HEAD").strip()
    first = ensure_task_worktree(repo, "r1", "t1", reach=["src/new"], sparse=True, new_dirs=["src/new"])
    (first.path / "src" / "new").mkdir(exist_ok=True)
    (first.path / "src" / "new" / "x.txt").write_text("x\n")
    commit_turn(first.path, author_name="w", author_email="w@x.invalid", message="x")
    merged = merge_task(repo, "r1", "t1").merged_commit
    assert merged is not None
    bases.ensure_base(repo, first.common, merged)
    assert [p.name for p in bases.prune_bases(first.common, [], keep=1)] == [old]  # the old base was the older
    git(repo, "update-ref", "refs/heads/agentbox/r1@t9", old)  # a task whose branch is at the old commit
    git(repo, "update-ref", "refs/agentbox/r1/tasks/t9/base", old)
    behind = ensure_task_worktree(repo, "r1", "t9", reach=["lib"], sparse=True)
    view = bases.read_base(behind.path)
    assert view is not None and view.commit == merged and view.over == ("lib", "src/new")
    assert (behind.path / "src" / "new").is_dir()  # what the sandbox binds over the base's src/new exists
    assert seen(repo, behind.path) == head_files(behind.path)
