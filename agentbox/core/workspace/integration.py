"""A run's base, its integration branch, merging approved tasks, delivering into the person's branch.

Nothing here touches the person's working tree, index, stash or branch, except `deliver`,
which is the person's own command. Merges are computed with `git merge-tree --write-tree`
and committed with `commit-tree`; refs move by compare-and-swap (`update-ref NEW OLD`), so
a merge happens once, and a crash at any point leaves either the old state or the new.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from agentbox.core.errors import AgentboxError, UsageError
from agentbox.core.workspace.gitcmd import (
    AGENTBOX_IDENT,
    GitError,
    commit_tree,
    git,
    ident_env,
    is_ancestor,
    merge_tree,
    rev,
    tree_of,
    update_refs,
)
from agentbox.core.workspace.layout import (
    BRANCH_PREFIX,
    RepoInfo,
    delivered_ref,
    delivery_ref,
    heads,
    integration_branch,
    repo_info,
    run_base_ref,
    task_branch,
)


class MergeConflictError(AgentboxError):
    """Bringing a run into a branch conflicts with what that branch holds; nothing changed."""

    def __init__(self, message: str, paths: list[str], hint: str | None = None) -> None:
        super().__init__(message, hint)
        self.paths = paths


@dataclass(frozen=True)
class Base:
    """Where a run starts: the person's HEAD, or a commit of their uncommitted changes on it."""

    commit: str
    """The run's integration branch starts here."""
    branch: str | None
    """The branch checked out when the run started (short name; None when detached)."""
    dirty: bool
    """`commit` snapshots uncommitted changes to tracked files (its parent is `head`)."""
    head: str
    """The person's HEAD when the run started."""


@dataclass(frozen=True)
class MergeResult:
    """The outcome of merging a task into its run's integration branch."""

    merged_commit: str | None
    """The integration head holding the task's work; None on a conflict."""
    conflicts: list[str]
    """Paths that conflict (nothing was changed)."""
    already: bool
    """The task's work was merged before; nothing changed."""


@dataclass(frozen=True)
class DeliverResult:
    """The outcome of bringing a run into the person's branch."""

    commit: str
    """The branch's head afterwards."""
    into: str
    """The branch (short name)."""
    squashed: bool
    already: bool
    """The run's work was there already; nothing changed."""
    worktree: Path | None
    """The working tree updated with it (where `into` is checked out), if any."""


def snapshot_base(root: Path, info: RepoInfo | None = None) -> Base:
    """The run's base: HEAD, or when tracked files have uncommitted changes a commit of them
    on top of HEAD (made like `git stash create`, through a private copy of the index, so
    the person's tree, index and stash list stay byte-for-byte as they were). `info`: the
    repository's facts when the caller has just read them."""
    info = info or repo_info(root)
    if info is None:
        raise UsageError(f"{root} is not in a git repository with at least one commit",
                         "use `workspace: shared`, or commit something first")
    scratch = Path(tempfile.mkdtemp(prefix="agentbox-index-"))
    try:
        index = scratch / "index"
        user_index = info.git_dir / "index"
        if user_index.exists():
            shutil.copyfile(user_index, index)
        made = git(root, "stash", "create", env={"GIT_INDEX_FILE": str(index)}, ok=(0, 1))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if made.returncode != 0:
        lines = (made.text + "\n" + made.error_text).splitlines()
        unmerged = sorted({line.split(": ")[0] for line in lines if line.endswith(": needs merge")
                           or ": unmerged (" in line})
        reason = f"unmerged: {', '.join(unmerged[:10])}" if unmerged else (lines[-1] if lines else "")
        raise UsageError(f"cannot record your uncommitted changes as the run's base ({reason})",
                         "finish or abort the merge in progress (or commit), then start the run")
    stash = made.text
    if not stash:
        return Base(info.head, info.branch, False, info.head)
    where = info.branch or "a detached HEAD"
    message = f"agentbox: uncommitted changes on {where} when the run started\n"
    commit = commit_tree(root, tree_of(root, stash), [info.head], message, ident_env(*AGENTBOX_IDENT))
    return Base(commit, info.branch, True, info.head)


def ensure_integration_branch(root: Path, run_id: str, base: Base) -> str:
    """Create the run's integration branch (and a ref keeping its base) at `base`; the
    branch's short name. Idempotent: an existing branch is left where it is."""
    branch = integration_branch(run_id)
    commands = [f"create {ref} {base.commit}" for ref in (heads(branch), run_base_ref(run_id))
                if rev(root, ref) is None]
    update_refs(root, commands, message="agentbox: run base")
    return branch


def merge_task(root: Path, run_id: str, task_id: str, *, message: str | None = None) -> MergeResult:
    """Merge a task's branch into the run's integration branch without touching any
    working tree; exactly once (a task already merged gives `already`), and a conflict
    changes nothing and names the paths."""
    target = heads(integration_branch(run_id))
    source = rev(root, heads(task_branch(run_id, task_id)))
    if source is None:
        raise UsageError(f"task {task_id} of run {run_id} has no branch {task_branch(run_id, task_id)}")
    for _ in range(3):
        integration = rev(root, target)
        if integration is None:
            raise UsageError(f"run {run_id} has no integration branch {integration_branch(run_id)}")
        if is_ancestor(root, source, integration):
            return MergeResult(integration, [], True)
        tree, conflicts = merge_tree(root, integration, source)
        if conflicts:
            return MergeResult(None, conflicts, False)
        text = message or f"agentbox: merge task {task_id} into run {run_id}\n"
        commit = commit_tree(root, tree, [integration, source], text, ident_env(*AGENTBOX_IDENT))
        try:
            update_refs(root, [f"update {target} {commit} {integration}"], message=f"agentbox: merge {task_id}")
        except GitError:
            if rev(root, target) != integration:
                continue  # another merge moved the branch meanwhile: merge again onto it
            raise
        return MergeResult(commit, [], False)
    raise AgentboxError(f"the integration branch of run {run_id} kept moving while merging task {task_id}")


def deliver(root: Path, run_id: str, *, into: str | None, squash: bool, base: Base,
            message: str | None = None) -> DeliverResult:
    """Bring the run's integration branch into the person's branch (`into`, default the
    branch checked out when the run started) as a merge commit, or one commit with
    `squash`; never rewrites the branch's history.

    Only the run's own work arrives: when the base snapshots uncommitted changes, those
    stay the person's (the merge is computed against the snapshot; a merge commit still has
    the snapshot commit in the history it brings, a squashed one does not). Where the branch is
    checked out, its working tree and index are updated by a two-tree `read-tree -m -u`,
    which refuses to overwrite uncommitted changes (a UsageError with a hint). A conflict
    with the branch is a MergeConflictError naming the paths; either way nothing changed.
    """
    name = into or base.branch
    if name is None:
        raise UsageError("the run started on a detached HEAD, so there is no branch to bring it into",
                         "name one: --into BRANCH")
    if name.startswith(BRANCH_PREFIX):
        raise UsageError(f"{name} is one of agentbox's branches", "bring the run into a branch of yours")
    integration = rev(root, heads(integration_branch(run_id)))
    if integration is None:
        raise UsageError(f"run {run_id} has no integration branch {integration_branch(run_id)}")
    target = rev(root, heads(name))
    if target is None:
        raise UsageError(f"there is no branch {name}", f"create it first: git branch {name}")
    checked_out = _checked_out_at(root, name)
    if is_ancestor(root, integration, target) or _delivered_into(root, run_id, integration, target):
        return DeliverResult(target, name, squash, True, checked_out)
    if base.dirty:
        # A commit of the branch's tree on the snapshot makes the snapshot the merge base,
        # so the person's uncommitted changes are not brought in as if they were the run's.
        ours = commit_tree(root, tree_of(root, target), [base.commit], "agentbox: merge base\n",
                           ident_env(*AGENTBOX_IDENT))
    else:
        ours = target
    tree, conflicts = merge_tree(root, ours, integration)
    if conflicts:
        raise MergeConflictError(
            f"run {run_id} conflicts with {name} in: {', '.join(conflicts)}", conflicts,
            f"merge it by hand (git merge {integration_branch(run_id)}), or change {name} and try again")
    if squash and tree == tree_of(root, target):
        _record_delivery(root, run_id, integration, target)  # delivered before, by a call that died
        return DeliverResult(target, name, squash, True, checked_out)
    text = message or _delivery_message(root, run_id, name, integration, target, squash)
    parents = [target] if squash else [target, integration]
    commit = commit_tree(root, tree, parents, text, _person_ident(root))
    if checked_out is not None:
        check = git(checked_out, "read-tree", "-m", "-u", target, commit, ok=(0, 128))
        if check.returncode != 0 and "not uptodate" in check.error_text:
            # stat data only out of date (a file touched, not changed): refresh it, as `git status` would
            git(checked_out, "update-index", "-q", "--refresh", ok=(0, 1))
            check = git(checked_out, "read-tree", "-m", "-u", target, commit, ok=(0, 128))
        if check.returncode != 0:
            problems = [line.strip() for line in check.error_text.splitlines() if line.strip()]
            raise UsageError(
                f"bringing run {run_id} into {name} would overwrite files in {checked_out}: "
                + "; ".join(problems[:6]),
                "commit or stash your changes (git stash), then run `agentbox merge` again")
        git(checked_out, "update-ref", "-m", f"agentbox: merge run {run_id}", "HEAD", commit, target)
    else:
        update_refs(root, [f"update {heads(name)} {commit} {target}"], message=f"agentbox: merge run {run_id}")
    _record_delivery(root, run_id, integration, commit)
    return DeliverResult(commit, name, squash, False, checked_out)


def _record_delivery(root: Path, run_id: str, integration: str, commit: str) -> None:
    update_refs(root, [f"update {delivered_ref(run_id)} {integration}", f"update {delivery_ref(run_id)} {commit}"],
                message="agentbox: delivered")


def _delivered_into(root: Path, run_id: str, integration: str, target: str) -> bool:
    """True when a delivery of the run up to `integration` is in `target`'s history
    (a squashed one is not an ancestor of `target` itself)."""
    delivered, delivery = rev(root, delivered_ref(run_id)), rev(root, delivery_ref(run_id))
    return (delivered is not None and delivery is not None and is_ancestor(root, integration, delivered)
            and is_ancestor(root, delivery, target))


def _checked_out_at(root: Path, branch: str) -> Path | None:
    """The working tree where `branch` is checked out, if any."""
    out = git(root, "worktree", "list", "--porcelain", "-z")
    path: Path | None = None
    for field in out.stdout.split(b"\0"):
        if field.startswith(b"worktree "):
            path = Path(os.fsdecode(field[len(b"worktree "):]))
        elif field == f"branch {heads(branch)}".encode() and path is not None:
            return path
    return None


def _delivery_message(root: Path, run_id: str, name: str, integration: str, target: str, squash: bool) -> str:
    merged = git(root, "log", "--first-parent", "--format=%s", "-n", "50", f"{target}..{integration}").text
    lines = [line for line in merged.splitlines() if line and not line.startswith("agentbox: uncommitted")]
    title = (f"agentbox: run {run_id} (squashed)" if squash
             else f"Merge {integration_branch(run_id)} into {name}")
    body = "".join(f"- {line}\n" for line in reversed(lines))
    return f"{title}\n\n{body}\nagentbox-run: {run_id}\n"


def _person_ident(root: Path) -> dict[str, str]:
    """The person's own identity from their git config, agentbox's when they have none."""
    found = git(root, "var", "GIT_COMMITTER_IDENT", ok=(0, 128))
    if found.returncode != 0 or "<" not in found.text:
        return ident_env(*AGENTBOX_IDENT)
    name, _, rest = found.text.partition(" <")
    email = rest.split(">", 1)[0]
    return ident_env(name, email, committer=(name, email))
