"""Removing what finished runs left behind, without losing work; listing orphans for `doctor`.

Work is kept when its commits are reachable from a branch the person keeps (any branch
outside `agentbox/`), or were brought into one by a squashed delivery still in that
branch's history. A run's integration branch is dropped only then, `force` or not; task
branches holding other commits, and worktrees with uncommitted changes, are refused
unless `force`.
"""

from __future__ import annotations

import contextlib
import enum
import os
import shutil
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from agentbox.core.errors import UsageError
from agentbox.core.ids import check_id, is_valid_id
from agentbox.core.workspace.gitcmd import git, is_ancestor, update_refs
from agentbox.core.workspace.layout import (
    BRANCH_PREFIX,
    REF_PREFIX,
    SPARE_DIR,
    admin_dir,
    common_dir,
    delivered_ref,
    delivery_ref,
    gitfiles_dir,
    read_small,
    split_task_branch,
    worktrees_dir,
)
from agentbox.core.workspace.worktrees import (
    forget_missing_worktrees,
    handed_out,
    trash_worktree,
    uncommitted,
)


@dataclass(frozen=True)
class Refusal:
    """Something `clean` kept, and why."""

    name: str
    """A branch (short name) or a worktree path."""
    reason: str


@dataclass(frozen=True)
class CleanPlan:
    """What `clean` removed, or would remove with `dry_run`, and what it kept."""

    dry_run: bool
    worktrees: list[Path] = field(default_factory=list)
    branches: list[str] = field(default_factory=list)
    refs: list[str] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)


class OrphanKind(enum.StrEnum):
    """What an orphan is."""

    WORKTREE = "worktree"
    MISSING_WORKTREE = "missing worktree"
    """git still lists it, its directory is gone."""
    BRANCH = "branch"


@dataclass(frozen=True)
class Orphan:
    """A worktree or branch of a run that is not running (or not known at all)."""

    run_id: str
    kind: OrphanKind
    name: str


@dataclass
class _RunState:
    branches: dict[str, str] = field(default_factory=dict)
    """Short branch name → commit, the integration branch and task branches."""
    refs: dict[str, str] = field(default_factory=dict)
    """Other refs under refs/agentbox/<run>/ → commit."""
    worktrees: list[Path] = field(default_factory=list)


def _scan(root: Path, common: Path) -> dict[str, _RunState]:
    """Every run agentbox left something of in this repository."""
    runs: dict[str, _RunState] = {}
    out = git(root, "for-each-ref", "--format=%(refname)%00%(objectname)", f"refs/heads/{BRANCH_PREFIX}", REF_PREFIX)
    for line in out.text.splitlines():
        ref, _, commit = line.partition("\0")
        if ref.startswith("refs/heads/"):
            parts = split_task_branch(ref[len("refs/heads/"):])
            if parts and is_valid_id(parts[0]):
                runs.setdefault(parts[0], _RunState()).branches[ref[len("refs/heads/"):]] = commit
        else:
            run_id = ref[len(REF_PREFIX):].split("/", 1)[0]
            if is_valid_id(run_id):
                runs.setdefault(run_id, _RunState()).refs[ref] = commit
    top = common / "agentbox" / "worktrees"
    for run_dir in sorted(top.iterdir()) if top.is_dir() else []:
        if not is_valid_id(run_dir.name):
            continue
        state = runs.setdefault(run_dir.name, _RunState())
        for entry in sorted(run_dir.iterdir()):
            if entry.name == SPARE_DIR:
                state.worktrees += sorted(entry.iterdir())
            else:
                state.worktrees.append(entry)
    return runs


def _kept_tips(root: Path) -> list[str]:
    """The commits of the person's branches (every branch outside agentbox/)."""
    out = git(root, "for-each-ref", "--format=%(refname)%00%(objectname)", "refs/heads/")
    return sorted({commit for ref, _, commit in (line.partition("\0") for line in out.text.splitlines())
                   if not ref.startswith(f"refs/heads/{BRANCH_PREFIX}")})


def _unkept(root: Path, commit: str, tips: list[str]) -> int:
    """How many commits of `commit`'s history no tip reaches."""
    args = ["rev-list", "--count", commit]
    if tips:
        args += ["--not", *tips]
    return int(git(root, *args).text or "0")


def _squash_delivered(root: Path, run_id: str, state: _RunState, integration: str | None) -> bool:
    delivered, delivery = state.refs.get(delivered_ref(run_id)), state.refs.get(delivery_ref(run_id))
    if integration is None or delivered is None or delivery is None:
        return False
    if not is_ancestor(root, integration, delivered):
        return False
    out = git(root, "for-each-ref", "--contains", delivery, "--format=%(refname)", "refs/heads/")
    return any(not ref.startswith(f"refs/heads/{BRANCH_PREFIX}") for ref in out.text.splitlines())


def clean(root: Path, run_id: str | None = None, *, dry_run: bool = False, force: bool = False,
          keep_runs: Collection[str] = (), discard: bool = False) -> CleanPlan:
    """Remove the worktrees, branches and refs finished runs left (one run, or every run
    but `keep_runs`, the ones still going). See the module docstring for what is kept.

    `discard` (one run, which the person throws away): its integration branch goes too,
    merged or not, and so does everything `force` drops.
    """
    if discard and run_id is None:
        raise UsageError("discarding is for one run at a time")
    force = force or discard
    if run_id is not None:
        check_id("run", run_id)
        if run_id in keep_runs:
            raise UsageError(f"run {run_id} is still going",
                             f"cancel it first (`agentbox cancel {run_id}`), or let it finish, then clean")
    common = common_dir(root)
    runs = _scan(root, common)
    chosen = [run_id] if run_id is not None else sorted(r for r in runs if r not in keep_runs)
    plan = CleanPlan(dry_run)
    tips = _kept_tips(root)
    for name in chosen:
        if name in runs:
            _plan_run(root, name, runs[name], tips, force, plan, discard=discard)
    if not dry_run:
        for path in plan.worktrees:
            if os.path.lexists(path):
                trash_worktree(common, path)
        forget_missing_worktrees(common)
        commits: dict[str, str] = {}  # branch short names and full ref names never collide
        for state in runs.values():
            commits |= state.branches | state.refs
        commands = [f"delete refs/heads/{branch} {commits[branch]}" for branch in plan.branches]
        commands += [f"delete {ref} {commits[ref]}" for ref in plan.refs]
        update_refs(root, commands, message="agentbox: clean")
        _tidy(common, chosen)
    return plan


def _plan_run(root: Path, run_id: str, state: _RunState, tips: list[str], force: bool, plan: CleanPlan, *,
              discard: bool = False) -> None:
    integration_name = f"{BRANCH_PREFIX}{run_id}"
    integration = state.branches.get(integration_name)
    squashed = _squash_delivered(root, run_id, state, integration)
    keep_integration = False
    if integration is not None and not discard:
        missing = 0 if squashed else _unkept(root, integration, tips)
        if missing:
            keep_integration = True
            plan.refused.append(Refusal(integration_name, f"{missing} commit(s) not in any branch of yours: "
                                        f"deliver the run first (`agentbox merge {run_id}`)"))
    protected = tips + ([integration] if integration and (keep_integration or squashed) else [])
    kept_tasks: set[str] = set()
    for branch, commit in sorted(state.branches.items()):
        task_id = _task_of(branch)
        if task_id is None:
            continue
        missing = _unkept(root, commit, protected)
        if missing and not force:
            kept_tasks.add(task_id)
            plan.refused.append(Refusal(branch, f"{missing} commit(s) merged nowhere (use --force to drop them)"))
    for path in state.worktrees:
        task_id = None if path.parent.name == SPARE_DIR else path.name
        if task_id in kept_tasks:
            continue
        admin = admin_dir(path)
        if admin is not None and not admin.is_dir():
            if not force:
                plan.refused.append(Refusal(str(path), f"lost its git admin dir {admin}: look at its files "
                                            "(use --force to drop them)"))
                continue
            left = []
        else:
            left = uncommitted(path) if admin is not None and handed_out(admin) else []
        if left and not force:
            if task_id is not None:
                kept_tasks.add(task_id)
            plan.refused.append(Refusal(str(path), f"uncommitted changes: {', '.join(left[:5])} "
                                        "(use --force to drop them)"))
            continue
        plan.worktrees.append(path)
    for branch in sorted(state.branches):
        task_id = _task_of(branch)
        if task_id is None:
            if not keep_integration:
                plan.branches.append(branch)
        elif task_id not in kept_tasks:
            plan.branches.append(branch)
    for ref in sorted(state.refs):
        rest = ref[len(f"{REF_PREFIX}{run_id}/"):]
        if rest.startswith("tasks/"):
            if rest.split("/")[1] not in kept_tasks:
                plan.refs.append(ref)
        elif not keep_integration and not kept_tasks:
            plan.refs.append(ref)


def _task_of(branch: str) -> str | None:
    parts = split_task_branch(branch)
    return parts[1] if parts else None


def _tidy(common: Path, run_ids: list[str]) -> None:
    """Remove the empty directories of cleaned runs and `.git` files of worktrees gone."""
    for run_id in run_ids:
        for directory in (worktrees_dir(common, run_id) / SPARE_DIR, worktrees_dir(common, run_id)):
            with contextlib.suppress(OSError):
                directory.rmdir()  # only when empty
    gitfiles = gitfiles_dir(common)
    for gitfile in sorted(gitfiles.iterdir()) if gitfiles.is_dir() else []:
        if not (common / "worktrees" / gitfile.name).is_dir():
            gitfile.unlink(missing_ok=True)
    trash = common / "agentbox" / "trash"
    for leftover in sorted(trash.iterdir()) if trash.is_dir() else []:
        shutil.rmtree(leftover, ignore_errors=True)


def orphans(root: Path, live_run_ids: Collection[str], *, known_run_ids: Collection[str] | None = None) -> list[Orphan]:
    """Worktrees of runs that are not going (`live_run_ids`), worktrees git lists whose
    directory is gone, and, given `known_run_ids`, branches of runs agentbox has no record of."""
    common = common_dir(root)
    found: list[Orphan] = []
    for run_id, state in sorted(_scan(root, common).items()):
        if run_id not in live_run_ids:
            found += [Orphan(run_id, OrphanKind.WORKTREE, str(path)) for path in state.worktrees]
        if known_run_ids is not None and run_id not in known_run_ids:
            found += [Orphan(run_id, OrphanKind.BRANCH, branch) for branch in sorted(state.branches)]
    ours = common / "agentbox" / "worktrees"
    admins = common / "worktrees"
    for admin in sorted(admins.iterdir()) if admins.is_dir() else []:
        gitdir = read_small(admin / "gitdir")
        worktree = Path(gitdir.strip()).parent if gitdir else None
        if worktree is not None and worktree.is_relative_to(ours) and not os.path.lexists(worktree):
            run_id = worktree.relative_to(ours).parts[0]
            found.append(Orphan(run_id, OrphanKind.MISSING_WORKTREE, str(worktree)))
    return found
