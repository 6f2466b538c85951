"""A task's worktree and branch: made, found again after a crash, committed to, parked.

Every step is safe to repeat after a `kill -9` at any point; git is the record:

- a task's base ref and branch are created together in one ref transaction;
- a worktree is made detached (`worktree add --no-checkout --detach`), locked while git
  makes it with a reason naming its path (so what a killed `worktree add` left says whose
  it is, and is removed when that path is made again, or when its run resumes), filled with
  `read-tree --reset -u <branch>`, and only then attached to the branch (`symbolic-ref
  HEAD`): a worktree whose HEAD is the task branch is complete, any other is finished again;
- a finished task's worktree is detached and renamed into the run's spares, where the run's
  next task takes it (renaming is atomic, and switching it rewrites only the files that
  differ, where a new worktree writes every file of the tree); a spare keeps ignored files
  (build outputs, a copied `node_modules/`);
- a worktree is removed by renaming it into a trash dir, forgetting its admin dir, then
  deleting the files.

Calls for one task must not overlap (the engine runs one turn per task at a time): a stale
`index.lock` left in a task's worktree by a killed git is removed.
"""

from __future__ import annotations

import enum
import os
import re
import shutil
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from agentbox.core.errors import StateError, UsageError
from agentbox.core.workspace import bases
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
    ref_commits,
    rev,
    update_refs,
)
from agentbox.core.workspace.layout import (
    SPARE_DIR,
    admin_dir,
    admin_lock,
    common_dir,
    heads,
    integration_branch,
    read_small,
    task_base_ref,
    task_branch,
    task_worktree_path,
    view_worktree_path,
    worktrees_dir,
    write_small,
)
from agentbox.core.workspace.reach import (
    known_clean,
    mark_clean,
    pathspecs,
    read_reach,
    set_reach,
    settle_reach,
    widen_reach,
)

CHECKOUT_TIMEOUT_S = 600.0
"""Longest a checkout of a whole tree may take."""
STALE_ADD_S = 60.0
"""A `git worktree add` still initializing after this long was killed."""
MAKING = "agentbox: making "
"""Reason of the lock on a worktree git is making for agentbox (followed by its path); it is
lifted once `worktree add` is done."""
TURN_TRAILER = "Agentbox-Turn"
"""Commit trailer naming the turn a commit holds (so a repeated call finds it)."""
SYNC_SUBJECT = "agentbox: bring "
"""Start of the message of a commit bringing the integration branch into a task's (`sync_task`)."""
VIEW_HEAD = "agentbox-view-head"
"""File in the view worktree's admin dir naming the commit its files hold, written last."""
CONFLICTS_LEFT = "Conflicts left for the worker:"
"""Line of a sync commit's message before the paths it committed with conflict markers."""


class WorktreeOrigin(enum.StrEnum):
    """Where the directory of a task's worktree came from in this call."""

    EXISTING = "existing"
    """It was the task's already (a resumed task)."""
    NEW = "new"
    """Made and checked out now."""
    SPARE = "spare"
    """A finished task's worktree of the same run, switched to this task's branch."""


@dataclass(frozen=True)
class Worktree:
    """A task's worktree, ready for a turn."""

    path: Path
    branch: str
    base_commit: str
    """The integration head the task's work is measured from (diffs and reviews)."""
    origin: WorktreeOrigin
    common: Path
    """The repository's git common dir (asked of git once per call)."""


@dataclass(frozen=True)
class TaskHeads:
    """Where a task's refs point (None: not made yet)."""

    branch: str
    base: str | None
    head: str | None


@dataclass(frozen=True)
class SyncResult:
    """The outcome of bringing the integration branch into a task's branch."""

    commit: str
    """The task's head afterwards."""
    conflicts: list[str]
    """Paths committed with conflict markers, for the worker to resolve."""
    already: bool
    """The task already had every integrated commit; nothing changed."""


def task_heads(root: Path, run_id: str, task_id: str) -> TaskHeads:
    """The task's branch, base and head as git has them."""
    branch = task_branch(run_id, task_id)
    return TaskHeads(branch, *ref_commits(root, [task_base_ref(run_id, task_id), heads(branch)]))


def ensure_task_worktree(root: Path, run_id: str, task_id: str, reach: Sequence[str] | None = None, *,
                         sparse: bool = False, new_dirs: Sequence[str] = ()) -> Worktree:
    """The task's branch (from the integration head) and worktree, made or found again.

    Idempotent and crash-safe (see the module docstring); an existing branch is reused,
    never reset. The integration branch must exist (`ensure_integration_branch`). `reach`:
    the relative paths under which its writers may write until the next call (None: anywhere),
    so that commits look there only (`agentbox.core.workspace.reach`). `sparse`: a new
    worktree (no spare to take) checks out only what its reach needs, over the shared base
    of its commit (`agentbox.core.workspace.bases`), when the reach allows it; `new_dirs`: the
    reach paths that are directories the writers may make (`scopes.directory_reach`).
    """
    base, head = _ensure_task_refs(root, run_id, task_id)
    branch = task_branch(run_id, task_id)
    common = common_dir(root)
    path = task_worktree_path(common, run_id, task_id)
    if _attached(path, branch):
        _drop_stale_index_lock(path)
        widen_reach(path, reach)
        _refit(root, common, path, head, new_dirs)
        return Worktree(path, branch, base, WorktreeOrigin.EXISTING, common)
    origin = _place_worktree(root, common, run_id, task_id, path)
    _drop_stale_index_lock(path)
    if _attached(path, branch):  # it only had to be found again (a moved project): keep its files
        widen_reach(path, reach)
        _refit(root, common, path, head, new_dirs)
        return Worktree(path, branch, base, WorktreeOrigin.EXISTING, common)
    set_reach(path, None)  # until the switch is done, a crash leaves files of either commit
    if not (sparse and origin == WorktreeOrigin.NEW and reach is not None
            and _check_out_sparse(root, common, path, head, reach, new_dirs)):
        bases.forget_sparse(path)
        _switch(path, heads(branch), spare=origin == WorktreeOrigin.SPARE)
    set_reach(path, reach)
    git(path, "symbolic-ref", "-m", "agentbox: task worktree", "HEAD", heads(branch))
    return Worktree(path, branch, base, origin, common)


def _check_out_sparse(root: Path, common: Path, path: Path, head: str, reach: Sequence[str],
                      new_dirs: Sequence[str]) -> bool:
    """Check out only what `reach` needs of `head` in the new worktree at `path`, over a base;
    False when the reach needs the whole tree (nothing done). Under the admin lock, so no run
    prunes the base chosen before the marker names it."""
    with admin_lock(common):
        return _sparse_locked(root, common, path, head, reach, new_dirs)


def _sparse_locked(root: Path, common: Path, path: Path, head: str, reach: Sequence[str],
                   new_dirs: Sequence[str]) -> bool:
    commit, base_path = bases.choose_base(root, common, path, head)
    over = bases.fit(base_path, (), reach, bases.differing(root, commit, head), new_dirs)
    if over is None and commit != head and bases.fit(base_path, (), reach, (), new_dirs) is not None:
        commit, base_path = head, bases.ensure_base(root, common, head)  # the newest base is too far away
        over = bases.fit(base_path, (), reach, (), new_dirs)
    if over is None:
        return False
    return bases.check_out_sparse(path, bases.BaseView(commit, base_path, head, tuple(over)), head, reset=True)


def _refit(root: Path, common: Path, path: Path, head: str, new_dirs: Sequence[str] = ()) -> None:
    """Keep a sparse worktree seen whole: its over dirs grown to its reach and to where its
    HEAD now differs from its base, or the whole tree checked out when that is needed."""
    view = bases.read_base(path)
    if view is None:
        return
    reach = read_reach(path)
    if reach is None:
        bases.make_whole(path)
        return
    if not view.base.is_dir():  # removed by hand: made again
        bases.ensure_base(root, common, view.commit)
    differing = bases.differing(path, view.head, head) if head != view.head else []
    over = bases.fit(view.base, view.over, reach, differing, new_dirs)
    if over is None:
        bases.make_whole(path)
    elif tuple(over) != view.over:
        if not bases.check_out_sparse(path, bases.BaseView(view.commit, view.base, head, tuple(over)), "HEAD",
                                      reset=False):
            bases.make_whole(path, force=True)
    elif not bases.place_over(path, view.over):
        bases.make_whole(path)
    elif head != view.head:  # its own commits, inside its over dirs
        bases.write_marker(path, bases.BaseView(view.commit, view.base, head, view.over))


def _switch(path: Path, target: str, *, spare: bool, held: str | None = None) -> None:
    """Fill the worktree at `path` with the tree of `target`. A parked worktree (a spare, or the
    view holding commit `held`) is clean, so a two-way `read-tree -m` from its HEAD touches only
    the paths that differ between the two trees, where a reset looks at every file; when that is
    refused (what a killed call left half done), the reset is done. Entries a sparse checkout
    left skip-worktree are checked out too (git keeps that mark unless told the patterns)."""
    admin = admin_dir(path)
    patterns = admin / "info" / "sparse-checkout" if admin is not None else None
    flags = bases.SPARSE if patterns is not None and patterns.exists() else ()
    if flags:
        write_small(patterns, "/*\n")  # type: ignore[arg-type]
    if spare or held is not None:
        moved = git(path, *flags, "read-tree", "-m", "-u", held or "HEAD", target, timeout=CHECKOUT_TIMEOUT_S,
                    ok=(0, 128))
    if not (spare or held is not None) or moved.returncode != 0:
        git(path, *flags, "read-tree", "--reset", "-u", target, timeout=CHECKOUT_TIMEOUT_S)
    if flags:
        patterns.unlink(missing_ok=True)  # type: ignore[union-attr]


def ensure_view_worktree(root: Path, run_id: str, *, sparse: bool = False) -> Worktree:
    """The run's read-only view: a detached worktree holding the integration head, what the
    run has approved so far, for turns that read and write nothing (a plan, a synthesis, a
    chat turn), so they see the run's work and never the person's live tree.

    Made once (from a spare when one is parked), then moved to the new head before each turn
    that needs it, which rewrites only the files that differ. The head its files hold is
    written to its admin dir last, so a call killed half-way is finished by the next.

    `sparse`: a new view (no spare to take) is checked out over the shared base of its
    commit, as a task's worktree is (`agentbox.core.workspace.bases`): only the directories
    where the integration head differs from the base are its own, so a run on a big
    repository pays no full checkout for it; when the head moves, those grow. Without it
    (a caller that needs every file in the directory: a person's shell) a sparse view is made whole.
    """
    head = rev(root, heads(integration_branch(run_id)))
    if head is None:
        raise UsageError(f"run {run_id} has no integration branch {integration_branch(run_id)}",
                         "the run's base must be recorded before its view is made")
    common = common_dir(root)
    path = view_worktree_path(common, run_id)
    admin = admin_dir(path)
    origin = WorktreeOrigin.EXISTING
    if admin is not None and admin.is_dir():
        _point_admin_at(path)  # it may have been renamed here by a call that died before telling git
    else:
        origin = _place_view(root, common, run_id, path, head)
        admin = admin_dir(path)
        assert admin is not None
    held = read_small(admin / VIEW_HEAD)
    seen = bases.read_base(path) if origin != WorktreeOrigin.NEW else None
    if held == f"{head}\n" and seen is not None and not sparse:
        bases.make_whole(path)  # clean and at its head: every file of it checked out
    elif held != f"{head}\n":
        _drop_stale_index_lock(path)
        if held is not None:
            (admin / VIEW_HEAD).unlink()  # a call killed past here must not trust the files any more
        if sparse and origin != WorktreeOrigin.SPARE and (origin == WorktreeOrigin.NEW or seen is not None):
            done = _view_over_base(root, common, path, head, seen)
        else:
            done = False
        if not done:
            if origin == WorktreeOrigin.NEW:
                bases.forget_sparse(path)
            held_files = held.strip() if held is not None and origin == WorktreeOrigin.EXISTING else None
            _switch(path, head, spare=origin == WorktreeOrigin.SPARE, held=held_files or
                    (_held_head(path) if origin == WorktreeOrigin.EXISTING else None))
            bases.forget_sparse(path)  # whole now (the marker goes only once every file is there)
        git(path, "update-ref", "--no-deref", "-m", "agentbox: view", "HEAD", head)
        write_small(admin / VIEW_HEAD, f"{head}\n")
    return Worktree(path, integration_branch(run_id), head, origin, common)


def _held_head(path: Path) -> str | None:
    """The commit a parked view's HEAD names (file reads only; None when unknown: the caller resets)."""
    admin = admin_dir(path)
    text = (read_small(admin / "HEAD") or "").strip() if admin is not None else ""
    return text if re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", text) else None


def _view_over_base(root: Path, common: Path, path: Path, head: str, seen: bases.BaseView | None) -> bool:
    """Check out `head` in the view over a base: the view's own base when it has one (its over
    dirs grown to where `head` differs from it), else the base `choose_base` gives a new
    worktree. False when the view must be whole (nothing of the marker written). Under the
    admin lock, so no run prunes the base chosen before the marker names it."""
    with admin_lock(common):
        if seen is None:
            commit, base_path = bases.choose_base(root, common, path, head)
            current: tuple[str, ...] = ()
        else:
            commit, base_path, current = seen.commit, seen.base, seen.over
            if not base_path.is_dir():  # removed by hand: made again
                bases.ensure_base(root, common, commit)
        over = bases.fit(base_path, current, (), bases.differing(root, commit, head))
        if over is None and seen is None and commit != head:  # the newest base is too far away
            commit, base_path = head, bases.ensure_base(root, common, head)
            over = bases.fit(base_path, (), (), ())
        if over is None:
            return False
        view = bases.BaseView(commit, base_path, head, tuple(over))
        if seen is None:
            return bases.check_out_sparse(path, view, head, reset=True)
        return bases.check_out_sparse(path, view, head, reset=False, or_reset=True)


def _place_view(root: Path, common: Path, run_id: str, path: Path, head: str) -> WorktreeOrigin:
    """Leave a registered, detached worktree at `path` for the view: a spare, or a new one."""
    with admin_lock(common):
        drop_unfinished(common, path)
        if os.path.lexists(path):  # not a worktree git knows at this path: only a view's leftovers
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        forget_missing_worktrees(common)
        return _spare_or_new(root, common, run_id, path, head)


def _spare_or_new(root: Path, common: Path, run_id: str, path: Path, at: str) -> WorktreeOrigin:
    """Put one of the run's spare worktrees at `path` (a rename), or make a new one there,
    detached at `at` (a commit, or a ref naming one) and not checked out: the caller fills it."""
    with admin_lock(common):
        path.parent.mkdir(parents=True, exist_ok=True)
        spares = worktrees_dir(common, run_id) / SPARE_DIR
        for spare in sorted(spares.iterdir()) if spares.is_dir() else []:
            try:
                os.rename(spare, path)
            except FileNotFoundError:
                continue  # taken meanwhile
            _point_admin_at(path)
            return WorktreeOrigin.SPARE
        git(root, "worktree", "add", "--lock", "--reason", f"{MAKING}{path}", "--no-checkout", "--detach", str(path),
            at, retry_on_lock=True)
        admin = admin_dir(path)
        if admin is not None:
            (admin / "locked").unlink(missing_ok=True)
        return WorktreeOrigin.NEW


def remove_view_worktree(root: Path, run_id: str) -> None:
    """Take the run's view away (its run is over). Idempotent."""
    common = common_dir(root)
    path = view_worktree_path(common, run_id)
    if os.path.lexists(path):
        trash_worktree(common, path)
    forget_missing_worktrees(common)


def _ensure_task_refs(root: Path, run_id: str, task_id: str) -> tuple[str, str]:
    """Create the task's base ref and branch at the integration head; the base commit and the branch's head."""
    base_ref, branch_ref = task_base_ref(run_id, task_id), heads(task_branch(run_id, task_id))
    found = ref_commits(root, [base_ref, branch_ref, heads(integration_branch(run_id))])
    base, head, integration = found
    if base and head:
        return base, head
    if integration is None:
        raise UsageError(f"run {run_id} has no integration branch {integration_branch(run_id)}",
                         "the run's base must be recorded before its tasks get worktrees")
    if base is None and head is None:
        update_refs(root, [f"create {base_ref} {integration}", f"create {branch_ref} {integration}"],
                    message="agentbox: task branch")
        return integration, integration
    if head is None:
        assert base is not None
        update_refs(root, [f"create {branch_ref} {base}"], message="agentbox: task branch")
        return base, base
    fork = git(root, "merge-base", head, integration).text
    update_refs(root, [f"create {base_ref} {fork}"])
    return fork, head


def _attached(path: Path, branch: str) -> bool:
    """True when `path` is a complete worktree whose HEAD is `branch` (file reads only)."""
    admin = admin_dir(path)
    if admin is None:
        return False
    gitdir = read_small(admin / "gitdir")
    return (gitdir is not None and Path(gitdir.strip()) == path / ".git"
            and read_small(admin / "HEAD") == f"ref: {heads(branch)}\n")


def handed_out(admin: Path) -> bool:
    """True when a worktree's HEAD is on a branch: only then can a turn have run in it (a
    worktree is attached last when made, and detached first when parked)."""
    return (read_small(admin / "HEAD") or "").startswith("ref: ")


def _drop_stale_index_lock(path: Path) -> None:
    admin = admin_dir(path)
    if admin is not None:
        (admin / "index.lock").unlink(missing_ok=True)


def _place_worktree(root: Path, common: Path, run_id: str, task_id: str, path: Path) -> WorktreeOrigin:
    """Leave a registered worktree at `path` (HEAD anywhere): the one there, a spare, or a new one."""
    with admin_lock(common):
        drop_unfinished(common, path)
        if os.path.lexists(path):
            if (path / ".git").is_file():
                git(root, "worktree", "repair", str(path), ok=(0, 1))
                admin = admin_dir(path)
                if admin is None or not admin.is_dir():
                    raise StateError(f"the worktree of task {task_id} ({path}) lost its git admin dir",
                                     "look at its files, move them away, then resume the run")
                if (read_small(admin / "locked") or "").startswith("initializing"):
                    (admin / "locked").unlink(missing_ok=True)
                return WorktreeOrigin.NEW
            shutil.rmtree(path)  # no .git file: git never finished making it, no turn ever ran in it
        forget_missing_worktrees(common)
        return _spare_or_new(root, common, run_id, path, heads(task_branch(run_id, task_id)))


def drop_unfinished(common: Path, under: Path) -> list[Path]:
    """Remove what `git worktree add` calls killed while making worktrees at or under `under`
    left: admin dirs still carrying the lock that names their path (git may have written
    some of its files or none), and the directories started for them, which were never
    attached to a branch, so no turn ran there. Only for a caller that alone makes worktrees
    there (a task's own ensure; a run's engine holding the run's lock). The paths dropped."""
    with admin_lock(common):
        dropped = []
        admins = common / "worktrees"
        for admin in sorted(admins.iterdir()) if admins.is_dir() else []:
            path = _making(admin)
            if path is None or not path.is_relative_to(under):
                continue
            _discard_admin(common, admin)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            dropped.append(path)
        return dropped


def _making(admin: Path) -> Path | None:
    """The path of the worktree git was making for agentbox with this admin dir when it stopped, if so."""
    reason = read_small(admin / "locked") or ""
    return Path(reason[len(MAKING):].strip()) if reason.startswith(MAKING) else None


def _point_admin_at(path: Path) -> None:
    """Tell git a worktree of agentbox's now lives at `path` (after a rename): its admin
    dir's `gitdir` file names the worktree's `.git` file (gitrepository-layout)."""
    admin = admin_dir(path)
    if admin is None or not admin.is_dir():
        return
    write_small(admin / "gitdir", f"{path / '.git'}\n")


def agentbox_worktree_dirs(common: Path) -> list[Path]:
    """Every directory where agentbox keeps a worktree: tasks' and spares, of every run."""
    found: list[Path] = []
    top = common / "agentbox" / "worktrees"
    for run_dir in sorted(top.iterdir()) if top.is_dir() else []:
        for entry in sorted(run_dir.iterdir()) if run_dir.is_dir() else []:
            if entry.name == SPARE_DIR:
                found += sorted(entry.iterdir())
            else:
                found.append(entry)
    return found


def forget_missing_worktrees(common: Path) -> list[Path]:
    """Set git's records of agentbox's worktrees right: one renamed by a call that died
    before telling git is pointed at again, one whose directory is gone is forgotten (what
    `git worktree prune` does, for agentbox's own only: a worktree of the person's on an
    unmounted disk is left alone). Returns the worktree paths forgotten."""
    with admin_lock(common):
        named = {}
        for directory in agentbox_worktree_dirs(common):
            admin = admin_dir(directory)
            if admin is not None:
                named[admin] = directory
                _point_admin_at(directory)
        forgotten = []
        ours = common / "agentbox"
        for admin in sorted((common / "worktrees").iterdir()) if (common / "worktrees").is_dir() else []:
            if admin in named or _locked(admin):
                continue
            gitdir = read_small(admin / "gitdir")
            # no gitdir: a `worktree add` killed early, whose lock still names the worktree
            worktree = Path(gitdir.strip()).parent if gitdir is not None else _making(admin)
            if worktree is not None and worktree.is_relative_to(ours) and not os.path.lexists(worktree):
                _discard_admin(common, admin)
                forgotten.append(worktree)
        return forgotten


def _discard_admin(common: Path, admin: Path) -> None:
    """Delete a worktree's admin dir: renamed into the trash first (atomic), so a kill never
    leaves half of one (without its `gitdir`, nothing would recognise it as agentbox's)."""
    trash = common / "agentbox" / "trash"
    trash.mkdir(parents=True, exist_ok=True)
    aside = trash / f"admin-{uuid.uuid4().hex}"
    try:
        os.rename(admin, aside)
    except FileNotFoundError:
        return
    shutil.rmtree(aside, ignore_errors=True)


def _locked(admin: Path) -> bool:
    """True when a worktree is locked, or being made by a `git worktree add` (which locks it
    as "initializing" until done) that has not been dead for a minute."""
    reason = read_small(admin / "locked")
    if reason is None:
        return False
    if not reason.startswith(("initializing", MAKING)):
        return True
    try:
        return time.time() - (admin / "locked").stat().st_mtime < STALE_ADD_S
    except FileNotFoundError:
        return False


def uncommitted(path: Path) -> list[str]:
    """Paths in a worktree that differ from its HEAD (ignored files excepted); only its reach is
    looked at (`agentbox.core.workspace.reach`)."""
    reach = read_reach(path)
    if reach == [] or known_clean(path):
        return []
    out = git(path, *bases.cone_flags(path, reach), "status", "--porcelain=v1", "-z", "--untracked-files=all",
              "--ignore-submodules=all", "--", *pathspecs(reach))
    entries = out.stdout.split(b"\0")
    found, index = [], 0
    while index < len(entries):
        entry = entries[index]
        index += 1
        if not entry:
            continue
        found.append(os.fsdecode(entry[3:]))
        if entry[:1] in (b"R", b"C"):
            index += 1  # the rename's source follows
    return found


def flatten_nested(worktree: Path, reach: list[str] | None = None, flags: tuple[str, ...] = ()) -> list[str]:
    """Make every repository an agent made below the worktree's top into plain files: remove
    its `.git` (a directory, a file or a link), so git adds its files as ordinary files and
    never walks into it (a gitlink would make every later git enter a repository whose
    config and attributes the agent wrote). The directories that held one, sorted.

    Nested repositories are the ones git itself would treat as such: untracked directories
    holding a `.git` (listed by `ls-files -o` with a trailing slash, never entered) and the
    paths of submodules (gitlinks), where agentbox's checkouts leave an empty directory, so a
    `.git` there is the agent's too. A `.git` inside a tracked directory or an ignored one is
    never entered by git, and stays. Only `reach` is looked at (None: the whole tree). `flags`:
    `bases.cone_flags` of the reach (its paths then lie inside the sparse index's cone, where
    `--sparse` lists every entry as a full index does).
    """
    specs = ["--", *pathspecs(reach)]
    listed = git(worktree, *flags, "ls-files", "-z", "--others", "--exclude-standard", *specs).stdout.split(b"\0")
    candidates = [os.fsdecode(entry[:-1]) for entry in listed if entry.endswith(b"/")]
    staged = git(worktree, *flags, "ls-files", "-z", "--stage", *(("--sparse",) if flags else ()),
                 *specs).stdout.split(b"\0")
    candidates += [os.fsdecode(entry.split(b"\t", 1)[1]) for entry in staged if entry.startswith(b"160000 ")]
    found = []
    for relative in sorted(set(candidates)):
        nested = worktree / relative / ".git"
        if not os.path.lexists(nested) or not (worktree / relative).resolve().is_relative_to(worktree.resolve()):
            continue
        _remove_nested_git(worktree, nested)
        found.append(relative)
    return found


def _remove_nested_git(worktree: Path, nested: Path) -> None:
    """Delete a nested `.git` without following any link: moved out of the tree first
    (atomic), so git never sees half of it."""
    if nested.is_symlink() or not nested.is_dir():
        nested.unlink()
        return
    admin = admin_dir(worktree)
    trash = admin.parent.parent / "agentbox" / "trash" if admin is not None else worktree.parent
    trash.mkdir(parents=True, exist_ok=True)
    aside = trash / f"nested-{uuid.uuid4().hex}"
    os.rename(nested, aside)
    shutil.rmtree(aside, ignore_errors=True)


def _add_all(worktree: Path, reach: list[str] | None = None, flags: tuple[str, ...] = ()) -> list[str]:
    """`git add -A` over `reach` (None: the whole tree), leaving out the directories (or files)
    whose name git refuses in a repository (`.GIT`, `git~1`: a `.git` on another file system),
    which would otherwise make the whole turn uncommittable; the paths left out."""
    refused: list[str] = []
    specs = pathspecs(_known(worktree, reach, flags) if reach is not None else None)
    for _ in range(_MAX_REFUSED):
        excluded = [f":(exclude,literal){path}" for path in refused]
        out = git(worktree, *flags, "add", "-A", "--", *specs, *excluded, timeout=CHECKOUT_TIMEOUT_S, ok=(0, 128))
        if out.returncode == 0:
            return refused
        named = _INVALID_PATH.search(out.error_text)
        if named is None:
            raise GitError(("add", "-A"), out.returncode, out.error_text)
        parts = named.group(1).split("/")
        bad = next((i for i, part in enumerate(parts) if not _git_accepts(part)), len(parts) - 1)
        path = "/".join(parts[: bad + 1])
        if path in refused:
            raise GitError(("add", "-A"), out.returncode, out.error_text)
        refused.append(path)
    raise GitError(("add", "-A"), 128, f"more than {_MAX_REFUSED} paths git refuses")


def _known(worktree: Path, reach: list[str], flags: tuple[str, ...] = ()) -> list[str]:
    """The paths of `reach` git can add: on disk, or in the index (a directory the turn deleted);
    `git add` refuses a pathspec that matches neither."""
    gone = [path for path in reach if not os.path.lexists(worktree / path)]
    if not gone:
        return reach
    listed = git(worktree, *flags, "ls-files", "-z", *(("--sparse",) if flags else ()), "--",
                 *pathspecs(gone)).stdout.split(b"\0")
    indexed = {os.fsdecode(entry) for entry in listed if entry}
    return [path for path in reach if path not in gone
            or any(name == path or name.startswith(path + "/") for name in indexed)]


_MAX_REFUSED = 20
_INVALID_PATH = re.compile(r"invalid path '(.+)'")


def _git_accepts(part: str) -> bool:
    """False for a path component git refuses in a tree (a `.git` by any spelling a Windows or
    macOS file system would read as `.git`)."""
    folded = part.lower().rstrip(". ")
    return folded not in (".git", "git~1") and not folded.startswith(".git:")


def commit_turn(worktree: Path, *, author_name: str, author_email: str, message: str,
                turn_id: str | None = None) -> str | None:
    """Commit everything a turn changed in `worktree` (honouring .gitignore) on the task's
    branch, authored as `author_name <author_email>`; the commit, or None when the turn
    changed nothing. With `turn_id`, a repeated call for a turn already committed returns
    that commit (the id is a trailer of the message). Repositories the turn made inside
    the worktree are committed as plain files (`flatten_nested`), as the message says."""
    return commit_work(worktree, author_name=author_name, author_email=author_email, message=message,
                       turn_id=turn_id).commit


@dataclass(frozen=True)
class TurnCommit:
    """What `commit_work` left: the branch's head and the turn's commit (None: nothing changed)."""

    head: str
    commit: str | None


def commit_work(worktree: Path, *, author_name: str, author_email: str, message: str,
                turn_id: str | None = None) -> TurnCommit:
    """`commit_turn`, also giving the branch's head afterwards (so the caller asks git no more)."""
    _drop_stale_index_lock(worktree)
    reach = read_reach(worktree)
    found = git(worktree, "rev-parse", "HEAD^{commit}", "HEAD^{tree}", ok=(0, 128))
    if found.returncode != 0:
        raise StateError(f"{worktree} has no HEAD commit", "ensure the task's worktree first")
    head, head_tree = found.text.split("\n")[:2]
    if reach == []:  # handed to no writer since it held its HEAD
        return TurnCommit(head, head if turn_id is not None and _turn_of(worktree, head) == turn_id else None)
    flags = bases.cone_flags(worktree, reach)
    flattened = flatten_nested(worktree, reach, flags)
    refused = _add_all(worktree, reach, flags)
    tree = git(worktree, "write-tree").text if not flags else None
    if tree == head_tree:
        return _nothing_new(worktree, head, turn_id, refused)
    text = message.rstrip("\n") + "\n"
    if flattened:
        text += ("\nNested git repositories made in the worktree, committed as plain files (their .git "
                 "removed):\n" + "".join(f"  {path}\n" for path in flattened))
    if refused:
        text += ("\nNot committed: names git refuses in a repository (a `.git` by another spelling):\n"
                 + "".join(f"  {path}\n" for path in refused))
    if turn_id is not None:
        text += f"\n{TURN_TRAILER}: {turn_id}\n"
    if tree is not None:
        commit = commit_tree(worktree, tree, [head], text, ident_env(author_name, author_email))
        git(worktree, "update-ref", "-m", "agentbox: turn", "HEAD", commit, head)
    else:
        made = _commit_index(worktree, flags, text, ident_env(author_name, author_email), head)
        if made is None:
            return _nothing_new(worktree, head, turn_id, refused)
        commit = made
    _follow_own_commit(worktree, reach, head, commit)
    if not refused:  # a refused path stays uncommitted in the tree
        settle_reach(worktree)
        mark_clean(worktree)
    return TurnCommit(commit, commit)


def _nothing_new(worktree: Path, head: str, turn_id: str | None, refused: list[str]) -> TurnCommit:
    """What `commit_work` leaves when the index holds exactly the HEAD's tree."""
    if not refused:
        settle_reach(worktree)
        mark_clean(worktree)
    return TurnCommit(head, head if turn_id is not None and _turn_of(worktree, head) == turn_id else None)


_NOTHING_STAGED = (b"nothing to commit", b"nothing added to commit", b"no changes added to commit")


def _commit_index(worktree: Path, flags: tuple[str, ...], message: str, env: dict[str, str], head: str) -> str | None:
    """Commit the index of a worktree on a sparse index (`flags`) on top of `head`: `git commit`
    does `write-tree`, `commit-tree` and `update-ref` in one process and keeps the index sparse,
    where git 2.39's `write-tree` expands it to every entry of the repository. The message is
    taken verbatim, no hook runs (`core.hooksPath` is forced empty, `--no-verify`), nothing is
    signed; None when the index holds the HEAD's tree (nothing committed)."""
    out = git(worktree, *flags, "-c", "rerere.enabled=false", "commit", "-q", "--no-verify", "--cleanup=verbatim",
              "-F", "-", stdin=message.encode("utf-8"), env={**env, "GIT_REFLOG_ACTION": "agentbox: turn"},
              ok=(0, 1))
    if out.returncode == 1:
        if not any(phrase in out.stdout for phrase in _NOTHING_STAGED):
            raise GitError(("commit",), 1, out.error_text or os.fsdecode(out.stdout))
        return None
    made = _branch_head(worktree) or git(worktree, "rev-parse", "HEAD").text
    if made == head:
        raise GitError(("commit",), 0, "git commit exited 0 and the branch did not move")
    return made


def _branch_head(worktree: Path) -> str | None:
    """The commit the worktree's branch names, from its loose ref file (which `git commit` has
    just written); None when it is not one (the caller asks git)."""
    admin = admin_dir(worktree)
    text = (read_small(admin / "HEAD") or "") if admin is not None else ""
    if admin is None or not re.fullmatch(r"ref: refs/heads/[^\n]+\n", text):
        return None
    ref = Path(text[len("ref: "):].strip())
    if ".." in ref.parts:
        return None
    found = (read_small(admin.parent.parent / ref) or "").strip()
    return found if re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", found) else None


def _follow_own_commit(worktree: Path, reach: list[str] | None, head: str, commit: str) -> None:
    """A sparse worktree's marker moved to its own new commit: the commit changed paths in
    reach only, which lie inside its over dirs, so the next ensure has no difference to
    look for (`_refit`). Left alone unless the marker was fitted to the commit's parent."""
    view = bases.read_base(worktree)
    if view is None or reach is None or view.head != head:
        return
    if all(any(path == d or path.startswith(d + "/") for d in view.over) for path in reach):
        bases.write_marker(worktree, bases.BaseView(view.commit, view.base, commit, view.over))


def _turn_of(worktree: Path, commit: str) -> str | None:
    body = git(worktree, "cat-file", "commit", commit).stdout.decode("utf-8", "replace")
    for line in reversed(body.splitlines()):
        if line.startswith(f"{TURN_TRAILER}: "):
            return line.split(": ", 1)[1].strip()
    return None


def sync_task(root: Path, run_id: str, task_id: str) -> SyncResult:
    """Bring the integration head into a task's branch (and its worktree), so rework after
    a merge conflict sees the work it conflicts with. Conflicting paths are committed with
    conflict markers for the worker to resolve; the task's base moves to the integration
    head, so its diff stays its own work. The worktree must hold no uncommitted change."""
    branch = task_branch(run_id, task_id)
    base_ref = task_base_ref(run_id, task_id)
    integration, head, old_base = ref_commits(root, [heads(integration_branch(run_id)), heads(branch), base_ref])
    if integration is None or head is None:
        raise UsageError(f"task {task_id} of run {run_id} has no branch to bring work into")
    if is_ancestor(root, integration, head):
        return SyncResult(head, [], True)
    tree, conflicts = merge_tree(root, head, integration)
    message = f"{SYNC_SUBJECT}{integration_branch(run_id)} into {branch}\n"
    if conflicts:
        message += f"\n{CONFLICTS_LEFT}\n" + "".join(f"  {p}\n" for p in conflicts)
    commit = commit_tree(root, tree, [head, integration], message, ident_env(*AGENTBOX_IDENT))
    path = task_worktree_path(common_dir(root), run_id, task_id)
    if _attached(path, branch):
        _drop_stale_index_lock(path)
        left = uncommitted(path)
        if left:
            raise StateError(f"task {task_id}'s worktree has uncommitted changes: {', '.join(left[:5])}",
                             "commit the turn before bringing in the integration branch")
        seen = bases.read_base(path)
        sparse = bases.checkout_flags(seen.over) if seen is not None else ()  # the next ensure refits it
        git(path, *sparse, "read-tree", "-m", "-u", head, commit, timeout=CHECKOUT_TIMEOUT_S)
    base_command = f"update {base_ref} {integration} {old_base}" if old_base else f"create {base_ref} {integration}"
    update_refs(root, [f"update {heads(branch)} {commit} {head}", base_command], message="agentbox: sync task")
    return SyncResult(commit, conflicts, False)


def unresolved_conflicts(root: Path, run_id: str, task_id: str) -> list[str]:
    """The paths `sync_task` committed with conflict markers on the task's branch, while
    nothing was committed on it since (the worker has not resolved them); else []."""
    return approval_state(root, run_id, task_id).unresolved


@dataclass(frozen=True)
class ApprovalState:
    """What approving a task needs to know of git, asked in one call (`approval_state`)."""

    head: str | None
    """The task branch's head (None: no branch)."""
    integration: str | None
    """The run's integration head (None: no integration branch)."""
    unresolved: list[str]
    """`unresolved_conflicts`: what a sync left with conflict markers, not resolved since."""
    integration_tree: str | None = None
    """The integration head's tree."""


def approval_state(root: Path, run_id: str, task_id: str) -> ApprovalState:
    """The task's head, the integration head and its tree, and the task's unresolved conflicts, in one git call."""
    names = [heads(task_branch(run_id, task_id)), heads(integration_branch(run_id))]
    task, integration = objects(root, names, contents=names)
    at, tree = (integration[0], commit_tree_id(integration[1])) if integration else (None, None)
    if task is None:
        return ApprovalState(None, at, [], tree)
    return ApprovalState(task[0], at, _conflicts_left(task[1]), tree)


def _conflicts_left(commit: bytes) -> list[str]:
    """The paths a sync commit (its raw text) names as committed with conflict markers ([] for any other commit)."""
    _, _, message = commit.decode("utf-8", "surrogateescape").partition("\n\n")
    if not message.startswith(SYNC_SUBJECT):
        return []
    _, found, listed = message.partition(f"\n{CONFLICTS_LEFT}\n")
    return [line[2:] for line in listed.splitlines() if line.startswith("  ")] if found else []


def remove_task_worktree(root: Path, run_id: str, task_id: str, *, keep_spare: bool = True,
                         discard_uncommitted: bool = False) -> None:
    """Take a finished task's worktree away; its branch stays. `keep_spare` parks it for
    the run's next task. Uncommitted changes are refused (StateError) unless
    `discard_uncommitted` (a cancelled task). Idempotent."""
    common = common_dir(root)
    path = task_worktree_path(common, run_id, task_id)
    if not os.path.lexists(path):
        forget_missing_worktrees(common)
        return
    admin = admin_dir(path)
    if admin is None or not admin.is_dir():
        shutil.rmtree(path)
        forget_missing_worktrees(common)
        return
    _drop_stale_index_lock(path)
    left = uncommitted(path) if handed_out(admin) else []
    if left and not discard_uncommitted:
        raise StateError(f"task {task_id}'s worktree has uncommitted changes: {', '.join(left[:5])}",
                         "commit the turn first, or discard the changes (a cancelled task)")
    if not keep_spare or bases.read_base(path) is not None:  # a spare holds every file: a sparse one is not kept
        trash_worktree(common, path)
        return
    if left:
        flatten_nested(path)  # `clean` would keep a nested repository, and the next task would get it
        git(path, "reset", "-q", "--hard", "HEAD")
        git(path, "clean", "-q", "-f", "-d")
    git(path, "update-ref", "--no-deref", "-m", "agentbox: park", "HEAD", "HEAD")  # detached where it stands
    spare = worktrees_dir(common, run_id) / SPARE_DIR / f"{task_id}-{uuid.uuid4().hex[:8]}"
    spare.parent.mkdir(parents=True, exist_ok=True)
    with admin_lock(common):
        os.rename(path, spare)
        _point_admin_at(spare)


def remove_spares(root: Path, run_id: str) -> list[Path]:
    """Delete the run's spare worktrees (when its last task is done), and the shared bases no
    worktree is seen over any more but the newest; the paths of the spares removed."""
    common = common_dir(root)
    spares = worktrees_dir(common, run_id) / SPARE_DIR
    removed = sorted(spares.iterdir()) if spares.is_dir() else []
    for spare in removed:
        trash_worktree(common, spare)
    with admin_lock(common):
        bases.prune_bases(common, agentbox_worktree_dirs(common), keep=1)
    return removed


def trash_worktree(common: Path, path: Path) -> None:
    """Delete a worktree of agentbox's: rename it into the trash (atomic), forget its admin
    dir (renamed into the trash too: a kill half-way through deleting it in place would leave
    an admin dir without its `gitdir`, which nothing recognises as agentbox's any more),
    delete the files. A crash leaves a trash dir, emptied by the next call."""
    with admin_lock(common):
        admin = admin_dir(path)
        trash = common / "agentbox" / "trash"
        trash.mkdir(parents=True, exist_ok=True)
        os.rename(path, trash / uuid.uuid4().hex)
        if admin is not None and admin.parent == common / "worktrees" and admin.is_dir():
            os.rename(admin, trash / f"admin-{uuid.uuid4().hex}")  # emptied with the trash below
        for leftover in trash.iterdir():
            shutil.rmtree(leftover, ignore_errors=True)
