"""Where a run's git state lives: branch and ref names, worktree directories, repository facts.

    refs/heads/agentbox/<run>                 the run's integration branch (approved work)
    refs/heads/agentbox/<run>@<task>          a task's branch
    refs/agentbox/<run>/base                  the run's base (HEAD or a snapshot of the
                                              person's uncommitted changes)
    refs/agentbox/<run>/delivered             the integration head last brought into the
                                              person's branch, and the commit that did it:
    refs/agentbox/<run>/delivery
    refs/agentbox/<run>/tasks/<task>/base     the integration head a task's work starts from
    <common>/agentbox/worktrees/<run>/<task>  a task's worktree
    <common>/agentbox/worktrees/<run>/.spare/ finished worktrees kept for the run's next task
    <common>/agentbox/worktrees/<run>/.view   the integration head, for read-only turns
    <common>/agentbox/gitfiles/<name>         the `.git` file a sandbox sees (see sandbox_view)
    <common>/agentbox/worktrees.flock         held while worktree admin dirs change (admin_lock)

Task branches use `@`, which ids never contain: git cannot hold a branch `agentbox/<run>`
and a branch below it (`agentbox/<run>/<task>`) at once. Everything lives inside the git
common dir, so the person's `git status` never shows it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from agentbox.core.ids import check_id
from agentbox.core.workspace.gitcmd import GitError, git

BRANCH_PREFIX = "agentbox/"
REF_PREFIX = "refs/agentbox/"
SPARE_DIR = ".spare"
"""Name of the directory of spare worktrees; not a valid id, so never a task's."""
VIEW_DIR = ".view"
"""Name of a run's read-only view of its integration branch; not a valid id, so never a task's."""


def integration_branch(run_id: str) -> str:
    """The run's integration branch (short name)."""
    return f"{BRANCH_PREFIX}{check_id('run', run_id)}"


def task_branch(run_id: str, task_id: str) -> str:
    """A task's branch (short name)."""
    return f"{integration_branch(run_id)}@{check_id('task', task_id)}"


def run_base_ref(run_id: str) -> str:
    """The ref that keeps the run's base commit."""
    return f"{REF_PREFIX}{check_id('run', run_id)}/base"


def delivered_ref(run_id: str) -> str:
    """The ref recording the integration head last delivered into the person's branch."""
    return f"{REF_PREFIX}{check_id('run', run_id)}/delivered"


def delivery_ref(run_id: str) -> str:
    """The ref recording the commit the run's last delivery made on the person's branch."""
    return f"{REF_PREFIX}{check_id('run', run_id)}/delivery"


def task_base_ref(run_id: str, task_id: str) -> str:
    """The ref keeping the integration head a task's work is measured from."""
    return f"{REF_PREFIX}{check_id('run', run_id)}/tasks/{check_id('task', task_id)}/base"


def heads(name: str) -> str:
    """The full ref of branch `name`."""
    return f"refs/heads/{name}"


def split_task_branch(short: str) -> tuple[str, str | None] | None:
    """`(run, task)` for an agentbox task branch, `(run, None)` for an integration branch,
    None for any other branch name."""
    if not short.startswith(BRANCH_PREFIX):
        return None
    run_id, _, task_id = short[len(BRANCH_PREFIX):].partition("@")
    return run_id, task_id or None


@dataclass(frozen=True)
class RepoInfo:
    """Facts about the git repository a project lives in."""

    top: Path
    """The top of the work tree."""
    common_dir: Path
    """The git dir shared by every worktree (`.git` of the main one)."""
    git_dir: Path
    """This work tree's own git dir."""
    head: str
    """The commit checked out."""
    branch: str | None
    """The branch checked out (short name), None when HEAD is detached."""


def repo_info(root: Path) -> RepoInfo | None:
    """The repository `root` is in, or None when it is in none or has no commit yet
    (where a worktree per task is impossible). A repository git refuses to open (owned by
    someone else) is a GitError, not None."""
    out = git(root, "rev-parse", "--path-format=absolute", "--show-toplevel", "--git-common-dir", "--git-dir",
              ok=(0, 128))
    if out.returncode == 128:
        if "not a git repository" in out.error_text or "must be run in a work tree" in out.error_text:
            return None
        raise GitError(("rev-parse", "--show-toplevel"), 128, out.error_text,
                       "git refuses this repository; see `git status` in it")
    top, common, git_dir = out.text.split("\n")[:3]
    head = git(root, "rev-parse", "-q", "--verify", "HEAD^{commit}", ok=(0, 1))
    if head.returncode != 0:
        return None
    branch = git(root, "symbolic-ref", "-q", "--short", "HEAD", ok=(0, 1))
    return RepoInfo(Path(top), Path(common), Path(git_dir), head.text,
                    branch.text if branch.returncode == 0 else None)


_common_dirs: dict[str, Path] = {}


def common_dir(root: Path) -> Path:
    """The repository's git common dir (absolute); asked of git once per directory while it exists."""
    known = _common_dirs.get(str(root))
    if known is not None and known.is_dir():
        return known
    found = Path(git(root, "rev-parse", "--path-format=absolute", "--git-common-dir").text)
    _common_dirs[str(root)] = found
    return found


def worktrees_dir(common: Path, run_id: str) -> Path:
    """The directory holding a run's worktrees."""
    return common / "agentbox" / "worktrees" / check_id("run", run_id)


def task_worktree_path(common: Path, run_id: str, task_id: str) -> Path:
    """Where a task's worktree lives."""
    return worktrees_dir(common, run_id) / check_id("task", task_id)


def view_worktree_path(common: Path, run_id: str) -> Path:
    """Where a run's read-only view of its integration branch lives."""
    return worktrees_dir(common, run_id) / VIEW_DIR


def gitfiles_dir(common: Path) -> Path:
    """The directory of `.git` files written for sandboxes."""
    return common / "agentbox" / "gitfiles"


def admin_dir(worktree: Path) -> Path | None:
    """The git admin dir a worktree's `.git` file names, or None when it has no such file."""
    try:
        with open(worktree / ".git", "rb") as handle:
            line = handle.read(4096).split(b"\n", 1)[0]
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    if not line.startswith(b"gitdir: "):
        return None
    target = Path(os.fsdecode(line[len(b"gitdir: "):]))
    return target if target.is_absolute() else (worktree / target).resolve()


def read_small(path: Path) -> str | None:
    """The text of a small git bookkeeping file, None when it is missing."""
    try:
        return path.read_text(encoding="utf-8", errors="surrogateescape")
    except (FileNotFoundError, NotADirectoryError):
        return None


def write_small(path: Path, text: str) -> None:
    """Replace a small bookkeeping file with `text` atomically, unless it holds that already."""
    if read_small(path) == text:
        return
    # a name of its own: two engines in one repository may point git at the same worktree
    partial = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.partial")
    partial.write_text(text, encoding="utf-8", errors="surrogateescape")
    os.replace(partial, path)


_held = threading.local()


@contextlib.contextmanager
def admin_lock(common: Path) -> Iterator[None]:
    """Hold the repository's lock on the worktree admin dirs (`<common>/worktrees/`) while
    making, repairing, moving, forgetting or listing worktrees.

    `git worktree add` reads every other worktree's admin dir and stops at one another
    `worktree add` is still writing (`could not open .../gitdir`, `failed to read
    .../commondir`), so two tasks, or two runs, making worktrees at once would fail. An
    `flock` on a file of agentbox's serializes them across threads and processes (a killed
    holder lets go); a thread already holding it goes on (the lock is re-entrant)."""
    held: set[str] = getattr(_held, "dirs", None) or set()
    _held.dirs = held
    key = str(common)
    if key in held:
        yield
        return
    path = common / "agentbox" / "worktrees.flock"  # not `*.lock`: git names its own lock files so
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        held.add(key)
        try:
            yield
        finally:
            held.discard(key)
    finally:
        os.close(fd)
