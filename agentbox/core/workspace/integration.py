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
    commit_tree_id,
    git,
    ident_env,
    is_ancestor,
    merge_tree,
    objects,
    person_ident,
    rev,
    tree_of,
    update_refs,
)
from agentbox.core.workspace.layout import (
    BRANCH_PREFIX,
    RepoInfo,
    admin_lock,
    common_dir,
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
    empty: bool = False
    """The run's work changes nothing in the branch: no commit was made."""


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
        private = {"GIT_INDEX_FILE": str(index)}
        # a touched file leaves the copy's stat data stale; `stash create` would have to refresh
        # it and cannot without the optional lock, so it is refreshed here, in the copy only
        refreshed = git(root, "update-index", "-q", "--refresh", env=private, ok=(0, 1, 128))
        made = refreshed if refreshed.returncode == 128 else git(root, "stash", "create", env=private, ok=(0, 1, 128))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if made.returncode != 0:
        said = [line.strip() for line in (made.error_text + "\n" + made.text).splitlines() if line.strip()]
        unmerged = sorted({line.split(": ")[0] for line in
                           [*said, *refreshed.text.splitlines()] if line.endswith(": needs merge")
                           or ": unmerged (" in line})
        if unmerged:
            raise UsageError(f"cannot record your uncommitted changes as the run's base: unmerged files "
                             f"{', '.join(unmerged[:10])}",
                             "finish or abort the merge in progress (or commit), then start the run")
        reason = "; ".join(said[-3:]).replace(str(index), "a copy of your index") or \
            f"git stash create exited {made.returncode} and said nothing"
        raise UsageError(f"cannot record your uncommitted changes as the run's base: {reason}",
                         "commit or stash your changes, then start the run")
    stash = made.text
    if not stash:
        return Base(info.head, info.branch, False, info.head)
    where = info.branch or "a detached HEAD"
    message = f"agentbox: uncommitted changes on {where} when the run started\n"
    commit = commit_tree(root, tree_of(root, stash), [info.head], message, ident_env(*AGENTBOX_IDENT))
    return Base(commit, info.branch, True, info.head)


def named_base(root: Path, name: str, info: RepoInfo | None = None) -> Base:
    """A run's base at a branch or commit the person names (`agentbox run --base`), instead of
    their HEAD: their uncommitted changes belong to HEAD, so none is snapshotted. A local
    branch's name becomes the branch the run is delivered into by default."""
    info = info or repo_info(root)
    if info is None:
        raise UsageError(f"{root} is not in a git repository with at least one commit",
                         "use `workspace: shared`, or commit something first")
    if not name.strip() or name.startswith("-"):
        raise UsageError(f"--base {name!r} is not a branch or commit", "name one: --base main, --base 1a2b3c4")
    commit = rev(root, name)
    if commit is None:
        raise UsageError(f"--base {name}: there is no branch, tag or commit {name} in this repository",
                         "see `git branch -a` and `git log --oneline`")
    branch = name if rev(root, heads(name)) == commit and not name.startswith(BRANCH_PREFIX) else None
    return Base(commit, branch, False, commit)


def ensure_integration_branch(root: Path, run_id: str, base: Base) -> str:
    """Create the run's integration branch (and a ref keeping its base) at `base`; the
    branch's short name. Idempotent: an existing branch is left where it is."""
    branch = integration_branch(run_id)
    commands = [f"create {ref} {base.commit}" for ref in (heads(branch), run_base_ref(run_id))
                if rev(root, ref) is None]
    update_refs(root, commands, message="agentbox: run base")
    return branch


def merge_task(root: Path, run_id: str, task_id: str, *, message: str | None = None,
               known: tuple[str, str | None, str | None] | None = None) -> MergeResult:
    """Merge a task's branch into the run's integration branch without touching any
    working tree; exactly once (a task already merged gives `already`), and a conflict
    changes nothing and names the paths. `known`: the task's head, the integration head and
    its tree as the caller has just read them (the integration branch moving meanwhile is
    caught by the compare-and-swap of its update, and merged again onto)."""
    target = heads(integration_branch(run_id))
    source: str | None
    if known is None:
        task, found = objects(root, [heads(task_branch(run_id, task_id)), target], contents=[target])
        source = task[0] if task else None
        integration, integration_tree = (found[0], commit_tree_id(found[1])) if found else (None, None)
    else:
        source, integration, integration_tree = known
    if source is None:
        raise UsageError(f"task {task_id} of run {run_id} has no branch {task_branch(run_id, task_id)}")
    for _ in range(3):
        if integration is None:
            raise UsageError(f"run {run_id} has no integration branch {integration_branch(run_id)}")
        tree, conflicts = merge_tree(root, integration, source)
        if conflicts:
            return MergeResult(None, conflicts, False)
        # work already merged merges clean into exactly the integration head's tree, so only a merge
        # that changes nothing can be one; only then is git asked whether the task's head is in it
        if tree == (integration_tree or tree_of(root, integration)) and is_ancestor(root, source, integration):
            return MergeResult(integration, [], True)
        text = message or f"agentbox: merge task {task_id} into run {run_id}\n"
        commit = commit_tree(root, tree, [integration, source], text, ident_env(*AGENTBOX_IDENT))
        try:
            update_refs(root, [f"update {target} {commit} {integration}"], message=f"agentbox: merge {task_id}")
        except GitError:
            moved = rev(root, target)
            if moved != integration:
                integration, integration_tree = moved, None
                continue  # another merge moved the branch meanwhile: merge again onto it
            raise
        return MergeResult(commit, [], False)
    raise AgentboxError(f"the integration branch of run {run_id} kept moving while merging task {task_id}")


def deliver(root: Path, run_id: str, *, into: str | None, squash: bool, base: Base,
            message: str | None = None, goal: str | None = None) -> DeliverResult:
    """Bring the run's integration branch into the person's branch (`into`, default the
    branch checked out when the run started) as a merge commit, or one commit with
    `squash`; never rewrites the branch's history. `goal` titles a squashed commit.

    Only the run's own work arrives, and only the run's work enters the branch's history:
    when the base snapshots the person's uncommitted changes, the merge's second parent is
    not the integration branch (whose history holds the snapshot) but the run's merged
    tasks rewritten onto the commit the snapshot was made on (`_without_snapshot`), so the
    uncommitted changes stay theirs, uncommitted, in their tree, and in no commit of the
    branch. When the run changed those very lines, its work cannot be had without them: a
    MergeConflictError, until the person has committed them themselves (then the run is
    merged as it is). A run that changes nothing in the branch makes no commit (`empty`).

    Where the branch is checked out, its working tree and index are updated by a two-tree
    `read-tree -m -u`, which refuses to overwrite uncommitted changes (a UsageError with a
    hint). A conflict with the branch is a MergeConflictError naming the paths; either way
    nothing changed.
    """
    name = into or base.branch
    if name is None:
        raise UsageError("the run started on a detached HEAD, so it has no branch of yours to go into",
                         f"name one: agentbox merge {run_id} --into BRANCH")
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
    work, ours = integration, target
    if base.dirty and not _holds(root, target, base.commit):
        work = _without_snapshot(root, base, integration, name)
    elif base.dirty:  # the person has committed everything the snapshot holds since: it hides nothing
        # merged from a commit of the branch's tree on the snapshot, the snapshot is the merge base
        ours = commit_tree(root, tree_of(root, target), [target, base.commit], "agentbox: merge base\n",
                           ident_env(*AGENTBOX_IDENT))
    tree, conflicts = merge_tree(root, ours, work)
    if conflicts:
        raise MergeConflictError(
            f"run {run_id} conflicts with {name} in: {', '.join(conflicts)}", conflicts,
            f"merge it by hand (git merge {integration_branch(run_id)}), or change {name} and try again")
    if tree == tree_of(root, target):  # nothing to bring (or brought by a call that died before recording it)
        _record_delivery(root, run_id, integration, target)
        return DeliverResult(target, name, squash, False, checked_out, empty=True)
    text = message or _delivery_message(root, run_id, name, work, target, squash, goal)
    parents = [target] if squash else [target, work]
    commit = commit_tree(root, tree, parents, text, _person_ident(root))
    if checked_out is not None:
        _update_checked_out(checked_out, run_id, name, target, commit)
    else:
        update_refs(root, [f"update {heads(name)} {commit} {target}"], message=f"agentbox: merge run {run_id}")
    _record_delivery(root, run_id, integration, commit)
    return DeliverResult(commit, name, squash, False, checked_out)


def _update_checked_out(checked_out: Path, run_id: str, name: str, target: str, commit: str) -> None:
    """Move the checked-out branch `name` from `target` to `commit`, its index and files with it."""
    check = git(checked_out, "read-tree", "-m", "-u", target, commit, ok=(0, 128))
    if check.returncode != 0 and "not uptodate" in check.error_text:
        # stat data only out of date (a file touched, not changed): refresh it, as `git status` would
        git(checked_out, "update-index", "-q", "--refresh", ok=(0, 1))
        check = git(checked_out, "read-tree", "-m", "-u", target, commit, ok=(0, 128))
    if check.returncode != 0:
        files = _files_in_the_way(check.error_text)
        said = "; ".join(_plain(line) for line in check.error_text.splitlines() if _plain(line))
        raise UsageError(
            f"bringing run {run_id} into {name} would overwrite "
            + (f"your uncommitted changes to {', '.join(files[:10])}" if files else f"files ({said})")
            + f" in {checked_out}",
            "commit or stash your changes (git stash), then run `agentbox merge` again")
    git(checked_out, "update-ref", "-m", f"agentbox: merge run {run_id}", "HEAD", commit, target)


def _files_in_the_way(stderr: str) -> list[str]:
    """The paths `read-tree -m -u` refused to overwrite, from its message (`Entry 'a' not
    uptodate`, `Untracked working tree file 'b' would be overwritten`, or a list of paths
    indented under a sentence)."""
    found: list[str] = []
    for line in stderr.splitlines():
        if "'" in line and ("not uptodate" in line or "would be overwritten" in line):
            found.append(line.split("'", 2)[1])
        elif line.startswith("\t"):
            found.append(line.strip())
    return list(dict.fromkeys(found))


def _plain(line: str) -> str:
    """One line of git's refusal, without its `error:` prefix and its advice."""
    line = line.strip()
    for prefix in ("error: ", "fatal: "):
        if line.startswith(prefix):
            line = line[len(prefix):]
    return "" if line.startswith(("hint:", "Please commit", "Please move", "Aborting")) else line


def _holds(root: Path, target: str, commit: str) -> bool:
    """True when `target` already holds every change of `commit` (merging it changes nothing)."""
    tree, conflicts = merge_tree(root, target, commit)
    return not conflicts and tree == tree_of(root, target)


def _without_snapshot(root: Path, base: Base, integration: str, name: str) -> str:
    """The run's work without the snapshot of the person's uncommitted changes in its history:
    each commit the integration branch gained over the snapshot (one per merged task, on its
    first-parent line) replayed onto the commit the snapshot was made on (`base.head`), each
    holding what it held minus the snapshot's own changes, and saying what it brought.

    When one step cannot be replayed cleanly (a later task undid an earlier one's change
    to a line the snapshot holds), the whole run becomes one commit instead."""
    ident = ident_env(*AGENTBOX_IDENT)
    # a commit of the base's tree on the snapshot: merged with it, any commit of the run loses
    # exactly the snapshot's changes (the snapshot is the merge base)
    unsnapshotted = commit_tree(root, tree_of(root, base.head), [base.commit], "agentbox: the run's base\n", ident)
    chain = git(root, "rev-list", "--first-parent", "--reverse", f"{base.commit}..{integration}").text.split()
    parent = base.head
    for step in chain:
        tree, conflicts = merge_tree(root, unsnapshotted, step)
        if conflicts:
            break
        parent = commit_tree(root, tree, [parent], _replayed_message(root, step), _author_of(root, step))
    else:
        return parent
    tree, conflicts = merge_tree(root, unsnapshotted, integration)
    if conflicts:
        raise MergeConflictError(
            "the run changed lines of the uncommitted changes it started from, so its work cannot be "
            "brought in without them, in: " + ", ".join(conflicts), conflicts,
            f"commit those changes of yours on {name} first (then the run is merged as it is), or copy "
            "what you want of the run by hand (agentbox diff)")
    return commit_tree(root, tree, [base.head], _replayed_message(root, integration, whole=base.commit), ident)


def _replayed_message(root: Path, step: str, whole: str | None = None) -> str:
    """The message of a replayed commit: the original's, plus the commits it brought."""
    subject = git(root, "log", "-1", "--format=%s", step).text
    if whole is not None:
        subject, since = "agentbox: the run's work", f"{whole}..{step}"
    else:
        parents = git(root, "rev-list", "--parents", "-n", "1", step).text.split()[1:]
        since = f"{parents[0]}..{step}" if len(parents) > 1 else ""
    brought = git(root, "log", "--no-merges", "--reverse", "--format=%s (%an)", since).text if since else ""
    body = "".join(f"- {line}\n" for line in brought.splitlines() if line)
    note = f"Replayed from {step} without the uncommitted changes the run started from.\n"
    return f"{subject}\n\n{body}\n{note}" if body else f"{subject}\n\n{note}"


def _author_of(root: Path, commit: str) -> dict[str, str]:
    """Who a replayed step is by: the author of the task's last commit for a merge of a task,
    the commit's own author otherwise; committed by agentbox."""
    parents = git(root, "rev-list", "--parents", "-n", "1", commit).text.split()[1:]
    name, _, email = git(root, "log", "-1", "--format=%an%x00%ae", parents[-1] if len(parents) > 1 else commit
                         ).text.partition("\0")
    return ident_env(name, email)


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
    with admin_lock(common_dir(root)):  # git lists every admin dir, and stops at one being made
        out = git(root, "worktree", "list", "--porcelain", "-z")
    path: Path | None = None
    for field in out.stdout.split(b"\0"):
        if field.startswith(b"worktree "):
            path = Path(os.fsdecode(field[len(b"worktree "):]))
        elif field == f"branch {heads(branch)}".encode() and path is not None:
            return path
    return None


def _delivery_message(root: Path, run_id: str, name: str, work: str, target: str, squash: bool,
                      goal: str | None) -> str:
    merged = git(root, "log", "--first-parent", "--format=%s", "-n", "50", f"{target}..{work}").text
    lines = [line for line in merged.splitlines() if line and not line.startswith("agentbox: uncommitted")]
    first = (goal or "").strip().splitlines()[0][:72] if (goal or "").strip() else ""
    if squash:
        title = first or f"agentbox: run {run_id}"
    else:
        title = f"Merge {integration_branch(run_id)} into {name}" + (f": {first}" if first else "")
    body = "".join(f"- {line}\n" for line in reversed(lines))
    return f"{title}\n\n{body}\nagentbox-run: {run_id}\n"


def _person_ident(root: Path) -> dict[str, str]:
    """The person's own identity from their git config, agentbox's when they have none."""
    return person_ident(root) or ident_env(*AGENTBOX_IDENT)
