"""Fewer git processes per task, with the same answers: one lookup where there were several.

Real git throughout. Each test compares what the merged call gives with what the separate
calls it replaces give (or with git's own answer), and counts git processes where the point
is that one is no longer started.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentbox.core.workspace import (
    approval_state,
    bases,
    commit_turn,
    commit_work,
    diff_text,
    ensure_integration_branch,
    ensure_task_worktree,
    gitcmd,
    merge_task,
    snapshot_base,
    sync_task,
    unresolved_conflicts,
)
from agentbox.core.workspace import diffs as diffs_module
from agentbox.core.workspace.gitcmd import git_bounded, objects


def git(root: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "XDG_CONFIG_HOME"}
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True,
                          env=env).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for d in ("src", "lib"):
        (root / d).mkdir(parents=True)
        for i in range(4):
            (root / d / f"f{i}.txt").write_text(f"{d} {i}\n" * 20)
    (root / "README.md").write_text("# top\n")
    git(root.parent, "init", "-q", "-b", "main", str(root))
    git(root, "-c", "user.name=P", "-c", "user.email=p@x.invalid", "add", "-A")
    git(root, "-c", "user.name=P", "-c", "user.email=p@x.invalid", "commit", "-q", "-m", "start")
    ensure_integration_branch(root, "r1", snapshot_base(root))
    return root


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, ...]]]:
    """Every git the runner starts, by its arguments (after `-c KEY=VALUE` pairs: the subcommand first)."""
    seen: list[tuple[str, ...]] = []
    real = gitcmd._run

    def counted(argv: list[str], *args: Any, **kwargs: Any) -> Any:
        words = argv[3:]
        while words[:1] == ["-c"]:
            words = words[2:]
        seen.append(tuple(words))
        return real(argv, *args, **kwargs)

    monkeypatch.setattr(gitcmd, "_run", counted)
    yield seen


def commit_all(root: Path, message: str) -> str:
    git(root, "add", "-A")
    git(root, "-c", "user.name=P", "-c", "user.email=p@x.invalid", "commit", "-q", "-m", message)
    return git(root, "rev-parse", "HEAD").strip()


# ---------------------------------------------------------------- the stat and the patch in one diff
def separate(root: Path, base: str, head: str, max_bytes: int) -> tuple[bytes, bool, bytes, bool]:
    safe = diffs_module._SAFE_DIFF
    stat, stat_cut = git_bounded(root, "diff", "--stat=120", *safe, base, head, "--", max_bytes=max_bytes)
    patch, patch_cut = git_bounded(root, "diff", "--patch", *safe, base, head, "--", max_bytes=max_bytes)
    return stat, stat_cut, patch, patch_cut


def test_one_diff_gives_the_stat_and_the_patch_two_diffs_gave(repo: Path) -> None:
    start = git(repo, "rev-parse", "HEAD").strip()
    (repo / "src" / "f0.txt").write_text("changed\n")
    (repo / "lib" / "f1.txt").unlink()
    (repo / "src" / "new.bin").write_bytes(bytes(range(256)))
    os.rename(repo / "lib" / "f2.txt", repo / "lib" / "moved.txt")
    (repo / "README.md").chmod(0o755)
    head = commit_all(repo, "many kinds")
    for max_bytes in (16, 200, 400, 1000, 64 * 1024):
        stat, stat_cut, patch, patch_cut = separate(repo, start, head, max_bytes)
        both = diffs_module._stat_and_patch(repo, start, head, [], max_bytes)
        if stat_cut:
            assert both is None  # the stat alone is too long: asked apart, as before
            continue
        assert both == ((stat, stat_cut), (patch, patch_cut)), max_bytes
    whole = diff_text(repo, start, head)
    assert whole.stat == git(repo, "diff", "--stat=120", "-M", start, head)
    assert whole.patch == git(repo, "diff", "--patch", "-M", start, head)
    assert diff_text(repo, head, head).stat == "" and diff_text(repo, head, head).patch == ""


def test_a_review_diff_is_one_git_process(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    start = git(repo, "rev-parse", "HEAD").strip()
    (repo / "src" / "f0.txt").write_text("changed\n")
    head = commit_all(repo, "one")
    started: list[tuple[str, ...]] = []
    real = diffs_module.git_bounded

    def counted(cwd: Path, *args: str, **kwargs: Any) -> Any:
        started.append(args)
        return real(cwd, *args, **kwargs)

    monkeypatch.setattr(diffs_module, "git_bounded", counted)
    diff = diff_text(repo, start, head, max_bytes=48 * 1024)
    assert len(started) == 1 and "src/f0.txt" in diff.stat and "+changed" in diff.patch


# ---------------------------------------------------------------- what approving needs, in one lookup
def test_approval_state_gives_the_heads_and_the_conflicts_left(repo: Path, calls: list[tuple[str, ...]]) -> None:
    assert approval_state(repo, "r1", "t1").head is None  # no branch yet
    first = ensure_task_worktree(repo, "r1", "t1", reach=["src"])
    second = ensure_task_worktree(repo, "r1", "t2", reach=["src"])
    (first.path / "src" / "f0.txt").write_text("one\n")
    (second.path / "src" / "f0.txt").write_text("two\n")
    commit_turn(first.path, author_name="w", author_email="w@x.invalid", message="one")
    head = commit_turn(second.path, author_name="w", author_email="w@x.invalid", message="two")
    merged = merge_task(repo, "r1", "t1").merged_commit
    assert merge_task(repo, "r1", "t2").conflicts == ["src/f0.txt"]
    synced = sync_task(repo, "r1", "t2")
    calls.clear()
    state = approval_state(repo, "r1", "t2")
    assert len(calls) == 1 and calls[0][0] == "cat-file"
    assert state.head == synced.commit != head
    assert state.integration == merged == git(repo, "rev-parse", "agentbox/r1").strip()
    assert state.unresolved == unresolved_conflicts(repo, "r1", "t2") == ["src/f0.txt"]
    assert approval_state(repo, "r1", "t1").unresolved == []
    assert state.integration_tree == git(repo, "rev-parse", "agentbox/r1^{tree}").strip()
    assert approval_state(repo, "r9", "t1") == approval_state(repo, "r9", "t1").__class__(None, None, [], None)


def test_objects_tells_missing_names_and_gives_contents_byte_for_byte(repo: Path) -> None:
    head = git(repo, "rev-parse", "HEAD").strip()
    found = objects(repo, ["refs/heads/main", "refs/heads/nope", "HEAD:README.md"], contents=["HEAD:README.md"])
    assert found[0] == (head, b"")
    assert found[1] is None
    assert found[2] is not None and found[2][1] == b"# top\n"


def test_a_merge_given_the_heads_it_knows_merges_as_one_that_reads_them(repo: Path) -> None:
    tree = ensure_task_worktree(repo, "r1", "t1", reach=["src"])
    (tree.path / "src" / "f0.txt").write_text("one\n")
    head = commit_turn(tree.path, author_name="w", author_email="w@x.invalid", message="one")
    assert head is not None
    stale = git(repo, "rev-parse", "agentbox/r1").strip()
    other = ensure_task_worktree(repo, "r1", "t2", reach=["lib"])
    (other.path / "lib" / "f0.txt").write_text("lib\n")
    commit_turn(other.path, author_name="w", author_email="w@x.invalid", message="lib")
    moved = merge_task(repo, "r1", "t2").merged_commit
    result = merge_task(repo, "r1", "t1", known=(head, stale, None))  # the integration head moved since it was read
    assert result.merged_commit is not None and not result.conflicts
    parents = git(repo, "rev-list", "--parents", "-1", result.merged_commit).split()
    assert parents[1:] == [moved, head]  # merged onto where the branch really is
    assert merge_task(repo, "r1", "t1", known=(head, result.merged_commit, None)).already
    assert merge_task(repo, "r1", "t1").already


# ---------------------------------------------------------------- a sparse worktree follows its own commit
def test_a_sparse_worktree_follows_its_own_commit_without_a_diff(repo: Path, calls: list[tuple[str, ...]]) -> None:
    tree = ensure_task_worktree(repo, "r1", "t1", reach=["src"], sparse=True)
    (tree.path / "src" / "f0.txt").write_text("changed\n")
    made = commit_work(tree.path, author_name="w", author_email="w@x.invalid", message="work")
    assert made.commit is not None and made.head == made.commit
    assert made.head == git(repo, "rev-parse", "agentbox/r1@t1").strip()
    view = bases.read_base(tree.path)
    assert view is not None and view.head == made.commit and view.over == ("src",)
    calls.clear()
    again = ensure_task_worktree(repo, "r1", "t1", reach=["src"], sparse=True)  # the review's mount
    assert not any(c[0] == "diff-tree" for c in calls)
    assert bases.read_base(again.path) == view
    nothing = commit_work(tree.path, author_name="w", author_email="w@x.invalid", message="again")
    assert nothing == type(nothing)(made.commit, None)


def test_a_commit_outside_the_dirs_its_marker_was_fitted_to_is_looked_for_again(repo: Path) -> None:
    tree = ensure_task_worktree(repo, "r1", "t1", reach=["src"], sparse=True)
    sync_head = git(repo, "rev-parse", "agentbox/r1@t1").strip()
    view = bases.read_base(tree.path)
    assert view is not None
    # a marker fitted to another commit (a sync moved the branch): the commit leaves it as it is
    bases.write_marker(tree.path, bases.BaseView(view.commit, view.base, "0" * 40, view.over))
    (tree.path / "src" / "f1.txt").write_text("changed\n")
    made = commit_work(tree.path, author_name="w", author_email="w@x.invalid", message="work")
    assert made.commit is not None and made.commit != sync_head
    assert bases.read_base(tree.path).head == "0" * 40  # type: ignore[union-attr]


# ---------------------------------------------------------------- the config query shared by linked worktrees
def test_linked_worktrees_share_one_config_query_and_each_still_gets_every_override(
        repo: Path, calls: list[tuple[str, ...]], tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    git(repo, "config", "filter.l.clean", f"touch {marker}; cat")
    first = ensure_task_worktree(repo, "r1", "t1", reach=["src"])
    gitcmd.driver_pairs(first.path)
    calls.clear()
    second = ensure_task_worktree(repo, "r1", "t2", reach=["src"])
    assert ("filter.l.clean", "") in gitcmd.driver_pairs(second.path)
    assert not any(c[0] == "config" for c in calls)
    (second.path / ".gitattributes").write_text("* filter=l\n")
    (second.path / "src" / "f0.txt").write_text("two\n")
    commit_turn(second.path, author_name="w", author_email="w@x.invalid", message="two")
    assert not marker.exists()
    # a driver added to the repository's config later reaches every worktree
    git(repo, "config", "filter.late.clean", f"touch {marker}; cat")
    third = ensure_task_worktree(repo, "r1", "t3", reach=["src"])
    assert ("filter.late.clean", "") in gitcmd.driver_pairs(third.path)


def test_a_worktree_with_config_of_its_own_or_a_conditional_include_asks_git_itself(
        repo: Path, calls: list[tuple[str, ...]], tmp_path: Path) -> None:
    first = ensure_task_worktree(repo, "r1", "t1", reach=["src"])
    gitcmd.driver_pairs(first.path)
    second = ensure_task_worktree(repo, "r1", "t2", reach=["src"])
    admin = Path(git(second.path, "rev-parse", "--absolute-git-dir").strip())
    git(repo, "config", "extensions.worktreeConfig", "true")
    (admin / "config.worktree").write_text("[filter \"own\"]\n\tclean = touch /nonexistent; cat\n")
    calls.clear()
    assert ("filter.own.clean", "") in gitcmd.driver_pairs(second.path)
    assert [c[0] for c in calls] == ["config"]
    (admin / "config.worktree").unlink()
    git(repo, "config", "--unset", "extensions.worktreeConfig")
    extra = tmp_path / "only-t4.cfg"
    extra.write_text("[filter \"cond\"]\n\tclean = touch /nonexistent; cat\n")
    git(repo, "config", f"includeIf.gitdir:{repo}/.git/worktrees/t4.path", str(extra))
    third = ensure_task_worktree(repo, "r1", "t3", reach=["src"])
    gitcmd.driver_pairs(third.path)  # the include does not hold here: this answer is not shared
    calls.clear()
    fourth = ensure_task_worktree(repo, "r1", "t4", reach=["src"])
    pairs = gitcmd.driver_pairs(fourth.path)
    assert Path(git(fourth.path, "rev-parse", "--absolute-git-dir").strip()).name == "t4"
    assert [c[0] for c in calls].count("config") == 1  # its own query, not the third's answer
    assert ("filter.cond.clean", "") in pairs


def test_a_merge_asks_whether_the_work_is_there_already_only_when_it_would_change_nothing(
        repo: Path, calls: list[tuple[str, ...]]) -> None:
    tree = ensure_task_worktree(repo, "r1", "t1", reach=["src"])
    (tree.path / "src" / "f0.txt").write_text("one\n")
    commit_turn(tree.path, author_name="w", author_email="w@x.invalid", message="one")
    calls.clear()
    merged = merge_task(repo, "r1", "t1")
    assert merged.merged_commit is not None and not merged.already
    assert "merge-base" not in [c[0] for c in calls]
    # the same change made again on another task: it changes nothing, yet it was never merged
    twin = ensure_task_worktree(repo, "r1", "t2", reach=["src"])
    git(repo, "update-ref", "refs/heads/agentbox/r1@t2", git(repo, "rev-parse", "agentbox/r1@t1^").strip())
    git(repo, "update-ref", "refs/agentbox/r1/tasks/t2/base", git(repo, "rev-parse", "agentbox/r1@t1^").strip())
    git(twin.path, "reset", "-q", "--hard", "agentbox/r1@t2")
    (twin.path / "src" / "f0.txt").write_text("one\n")
    twin_head = commit_turn(twin.path, author_name="w", author_email="w@x.invalid", message="one again")
    calls.clear()
    again = merge_task(repo, "r1", "t2")
    assert "merge-base" in [c[0] for c in calls] and not again.already
    assert again.merged_commit is not None and twin_head in git(repo, "rev-list", "--parents", "-1",
                                                                again.merged_commit)
    # a task with no commit of its own: already in the run
    ensure_task_worktree(repo, "r1", "t3", reach=["src"])
    assert merge_task(repo, "r1", "t3").already


# ---------------------------------------------------------------- a worktree known clean since its commit
def test_a_worktree_committed_whole_needs_no_status_until_a_writer_has_it_again(
        repo: Path, calls: list[tuple[str, ...]]) -> None:
    from agentbox.core.workspace.reach import widen_reach
    from agentbox.core.workspace.worktrees import uncommitted

    tree = ensure_task_worktree(repo, "r1", "t1", reach=["src"], sparse=True)
    (tree.path / "src" / "f0.txt").write_text("changed\n")
    calls.clear()
    assert uncommitted(tree.path) == ["src/f0.txt"]  # asked of git: not committed yet
    assert [c[0] for c in calls] == ["status"]
    commit_turn(tree.path, author_name="w", author_email="w@x.invalid", message="work")
    calls.clear()
    assert uncommitted(tree.path) == []
    ensure_task_worktree(repo, "r1", "t1", reach=[], sparse=True)  # a reviewer, who writes nothing
    assert uncommitted(tree.path) == [] and not any(c[0] == "status" for c in calls)
    ensure_task_worktree(repo, "r1", "t1", reach=["src"], sparse=True)  # a writer again
    (tree.path / "src" / "f1.txt").write_text("more\n")
    assert uncommitted(tree.path) == ["src/f1.txt"]
    commit_turn(tree.path, author_name="w", author_email="w@x.invalid", message="more")
    widen_reach(tree.path, None)  # a person's shell
    (tree.path / "src" / "f2.txt").write_text("by hand\n")
    assert uncommitted(tree.path) == ["src/f2.txt"]


def test_a_commit_leaving_a_refused_name_behind_is_not_known_clean(repo: Path) -> None:
    from agentbox.core.workspace.worktrees import uncommitted

    tree = ensure_task_worktree(repo, "r1", "t1", reach=["src"])
    (tree.path / "src" / ".GIT").mkdir()
    (tree.path / "src" / ".GIT" / "config").write_text("x\n")
    (tree.path / "src" / "f0.txt").write_text("changed\n")
    commit_turn(tree.path, author_name="w", author_email="w@x.invalid", message="work")
    assert uncommitted(tree.path) != []  # the refused path is still there, and said so
