"""Taking up a run again after its engine was killed: the lock files its git calls left.

git creates `<ref>.lock` and `index.lock` beside what it changes and renames them into place;
a git killed in between (a `kill -9` of the engine's whole process group) leaves them, and
every later change of that ref or index fails. Only the run's own engine changes the run's
refs and worktrees, so when it resumes, holding the run's lock, whatever lock file is left
on them is stale.
"""

from __future__ import annotations

from pathlib import Path

from agentbox.core.ids import check_id
from agentbox.core.workspace.layout import REF_PREFIX, admin_dir, common_dir, worktrees_dir
from agentbox.core.workspace.worktrees import (
    agentbox_worktree_dirs,
    drop_unfinished,
    forget_missing_worktrees,
)


def recover_run(root: Path, run_id: str) -> list[Path]:
    """Remove the lock files killed git calls left on the run's refs and worktrees, what
    killed `worktree add` calls left of the run's worktrees (`drop_unfinished`), and set
    git's records of the run's worktrees right; the lock files removed. Call it when the
    run resumes, holding the run's lock (no other git may be changing the run then)."""
    check_id("run", run_id)
    common = common_dir(root)
    found: list[Path] = []
    branches = common / "refs" / "heads" / "agentbox"
    if branches.is_dir():
        found += [p for p in branches.glob(f"{run_id}*.lock")
                  if p.name == f"{run_id}.lock" or p.name.startswith(f"{run_id}@")]
    refs = common / REF_PREFIX / run_id
    if refs.is_dir():
        found += list(refs.rglob("*.lock"))
    run_dir = worktrees_dir(common, run_id)
    for directory in agentbox_worktree_dirs(common):
        admin = admin_dir(directory)
        if directory.is_relative_to(run_dir) and admin is not None and admin.is_dir():
            found += [admin / name for name in ("index.lock", "HEAD.lock") if (admin / name).exists()]
    for lock in found:
        lock.unlink(missing_ok=True)
    drop_unfinished(common, run_dir)
    forget_missing_worktrees(common)
    return sorted(found)
