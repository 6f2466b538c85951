"""What git says a worktree run changed, as the run state records it, and how the person brings
the run into a branch of theirs: the engine records both, and every face shows them the same."""

from __future__ import annotations

from pathlib import Path

from agentbox.core import workspace as git
from agentbox.core.engine.models import ChangedPath, Run

CHANGED_KEPT = 1000
"""Most changed files a task records in the run state (the rest are counted; git has them all)."""


def merge_hint(run: Run) -> str:
    """How the person brings a worktree run into a branch of theirs, said the same in every face."""
    assert run.git is not None
    if run.git.branch:
        return f"`agentbox merge {run.id}` brings it into {run.git.branch}"
    started = f"--base {run.git.named_base}" if run.git.named_base else "a detached HEAD"
    return (f"`agentbox merge {run.id} --into BRANCH` brings it into a branch of yours (it started from "
            f"{started}, so there is no branch to bring it into by default)")


def changed_paths(root: Path, base: str, head: str) -> list[ChangedPath]:
    """What git says changed between two commits, as the run state records it."""
    return [_recorded(c) for c in git.changed_files(root, base, head)]


def kept_changed_paths(root: Path, base: str, head: str, keep: int = CHANGED_KEPT) -> tuple[list[ChangedPath], int]:
    """The first `keep` files git says changed between two commits, as the run state records
    them, and how many more changed: a flood of changes costs the run state and every reader
    of it `keep` files, never all of them."""
    summary = git.changed_summary(root, base, head, keep)
    return [_recorded(c) for c in summary.files], summary.more


def _recorded(c: git.ChangedFile) -> ChangedPath:
    return ChangedPath(path=c.path, change=c.change.value, added=c.added, removed=c.removed, old_path=c.old_path)
