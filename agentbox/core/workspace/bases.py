"""A new task's worktree whose cost follows what the task touches: a sparse checkout over a shared base.

A *base* is one full checkout of a commit, plain files, kept under
`<common>/agentbox/bases/<commit>/` and shared, read-only, by every task of every run whose
work starts at that commit (or near it). A new worktree then checks out only some
directories (git's sparse checkout: every other index entry is marked skip-worktree), and
the sandbox shows the two as one tree at the project's path: the base read-only first, then
the worktree's own directories (its *over* dirs) bound over it, then the write scopes
read-write as before (`agentbox.core.sandbox.bwrap`). Git is still the record: the index holds the
whole tree, commits, diffs and merges come from git as for any worktree.

The picture is exact because the over dirs are chosen so that outside them the task's HEAD
holds exactly the base's files:

- every directory the task may write (its reach, `agentbox.core.workspace.reach`), each
  taken as the nearest directory the base has (a file scope's directory, a new directory's
  parent), so every mount point exists;
- the directory of every path where the task's HEAD differs from the base's commit (work an
  older base does not have, work brought in by `sync_task`), found by `git diff-tree`,
  whose cost follows the difference.

When an over dir would be the top of the tree, or there would be more than `MAX_OVER`, the
worktree is made whole (an ordinary full checkout). A worktree only ever grows its over
dirs, while it is clean (between turns); a reach of the whole tree (a setup command, a
person's shell) makes it whole for good.

The index stays small too: when every over dir has a plain name, the sparse checkout is in
git's *cone mode* with a *sparse index* (`CONE`: `core.sparseCheckoutCone`, `index.sparse`,
passed on the command line, never written to a config), so every directory outside the over
dirs is one tree entry of the index and the worktree's git processes read and write an index
whose size follows the over dirs, not the repository (cone mode also checks out the files
directly in the top directory and in each over dir's parents: the same as the base's, and
not bound). Only the calls that name the worktree's reach pass `CONE`, and only while the
reach lies inside the over dirs (`cone_flags`); any other git reading the index (a person's,
an agent's inside the sandbox) expands it in memory and sees the same full index as before.

Crash safety: the marker `agentbox-base` in the worktree's admin dir names the base and the
over dirs; it is written after git has checked them out, and removed only after a whole
checkout finished, so it never names a directory whose files are not there. A base is made
in a temporary directory and renamed into place; a leftover one is removed by the next call.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from agentbox.core.workspace.gitcmd import git
from agentbox.core.workspace.layout import admin_dir, read_small, write_small

BASE_MARKER = "agentbox-base"
"""File in a sparse worktree's admin dir: the base's commit, the HEAD it was fitted to, then one over dir a line."""
MAX_OVER = 64
"""Most directories bound over a base (each is a mount in every sandbox of the task)."""
CHECKOUT_TIMEOUT_S = 600.0
SPARSE = ("-c", "core.sparseCheckout=true")
"""How git is told to honour the worktree's sparse-checkout file (never written to any config),
for patterns that are not cone patterns (over dirs with unusual names, `/*`: everything)."""
CONE = (*SPARSE, "-c", "core.sparseCheckoutCone=true", "-c", "index.sparse=true")
"""The same for cone patterns, with a sparse index (`_patterns`)."""
GROW = SPARSE
"""Cone patterns read as plain patterns (the same paths), the index expanded: how a two-way
`read-tree -m` moves into a wider cone in git 2.39 (on a sparse index it fails with "unknown
file mode"; in cone mode it leaves the newly included entries skip-worktree). The next call
given `CONE` that writes the index makes it sparse again."""
_PLAIN = re.compile(r"[A-Za-z0-9_.+@=,-]+")
"""A directory name git's cone-mode patterns hold verbatim (nothing to escape)."""
_TMP = ".making-"


@dataclass(frozen=True)
class BaseView:
    """How a sparse worktree is seen whole: its base and the dirs of its own bound over it."""

    commit: str
    base: Path
    """The base's files (a full checkout of `commit`)."""
    head: str
    """The worktree's HEAD when the over dirs were last fitted."""
    over: tuple[str, ...]
    """Relative dirs of the worktree bound over the base, outermost only, sorted."""


def bases_dir(common: Path) -> Path:
    """Where the repository's bases live."""
    return common / "agentbox" / "bases"


def read_base(worktree: Path) -> BaseView | None:
    """The base view of a sparse worktree (None: an ordinary, whole worktree)."""
    admin = admin_dir(worktree)
    text = read_small(admin / BASE_MARKER) if admin is not None else None
    if not text:
        return None
    lines = text.splitlines()
    if len(lines) < 2:
        return None
    base = bases_dir(admin.parent.parent) / lines[0]  # type: ignore[union-attr]
    return BaseView(lines[0], base, lines[1], tuple(line for line in lines[2:] if line))


def ensure_base(root: Path, common: Path, commit: str) -> Path:
    """The base of `commit`: made once (a full checkout into a private index and directory,
    renamed into place), then shared. Holds an empty `.agent-box/` and `.git` as mount points
    for the sandbox's binds."""
    top = bases_dir(common)
    path = top / commit
    if path.is_dir():
        return path
    top.mkdir(parents=True, exist_ok=True)
    _drop_leftovers(top)
    making = top / f"{_TMP}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    making.mkdir()
    try:
        index = making.with_suffix(".index")
        git(root, "--work-tree", str(making), "read-tree", "--reset", "-u", commit, env={"GIT_INDEX_FILE": str(index)},
            timeout=CHECKOUT_TIMEOUT_S)
        index.unlink(missing_ok=True)
        if not os.path.lexists(making / ".agent-box"):
            (making / ".agent-box").mkdir()
        if not os.path.lexists(making / ".git"):
            (making / ".git").write_bytes(b"")
        try:
            os.rename(making, path)
        except OSError:
            if not path.is_dir():
                raise
            shutil.rmtree(making, ignore_errors=True)  # another call made it meanwhile
    except BaseException:
        shutil.rmtree(making, ignore_errors=True)
        making.with_suffix(".index").unlink(missing_ok=True)
        raise
    return path


def _drop_leftovers(top: Path) -> None:
    """Remove what calls killed while making or removing a base left (their dirs, index, its lock)."""
    for leftover in top.glob(f"{_TMP}*"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int(leftover.name[len(_TMP):].split("-")[0])
            if pid != os.getpid() and not _alive(pid):
                shutil.rmtree(leftover, ignore_errors=True) if leftover.is_dir() else leftover.unlink()


def _alive(pid: int) -> bool:
    """True while the process exists (this package uses nothing of agentbox's but its errors and ids)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def anchor(base: Path, relative: str) -> str:
    """The nearest directory of the base at or above `relative` ("" is the top)."""
    parts = PurePosixPath(relative).parts
    while parts:
        candidate = base.joinpath(*parts)
        if candidate.is_dir() and not candidate.is_symlink():
            return "/".join(parts)
        parts = parts[:-1]
    return ""


def fit(base: Path, current: Iterable[str], reach: Sequence[str], differing: Iterable[str],
        new_dirs: Sequence[str] = ()) -> list[str] | None:
    """The over dirs a worktree needs (outermost, sorted): what it has, its reach, and the
    directory of every path where its HEAD differs from the base. None: the top of the tree
    would be one, or there would be more than `MAX_OVER` (the worktree must be whole).
    `new_dirs`: reach paths that are directories a turn may write in: made (empty) in the
    base when missing, as a whole worktree makes them, so they are mount points of their own."""
    wanted = set(current)
    for path in reach:
        if path in new_dirs:
            _make_dir(base, path)
        wanted.add(anchor(base, path))
    for path in differing:
        wanted.add(anchor(base, str(PurePosixPath(path).parent) if "/" in path else ""))
    if "" in wanted:
        return None
    kept: list[str] = []
    for path in sorted(wanted, key=lambda p: (p.count("/"), p)):
        if not any(path == k or path.startswith(k + "/") for k in kept):
            kept.append(path)
    return sorted(kept) if len(kept) <= MAX_OVER else None


def _make_dir(base: Path, relative: str) -> None:
    """Make the directory `relative` in the base when every part of it that exists is a real directory."""
    path = base
    for part in PurePosixPath(relative).parts:
        path = path / part
        if path.is_symlink() or (os.path.lexists(path) and not path.is_dir()):
            return
        if not path.exists():
            with contextlib.suppress(FileExistsError):
                path.mkdir()


def differing(worktree: Path, commit: str, head: str) -> list[str]:
    """Paths where `head`'s tree differs from `commit`'s (cost follows the difference: git 2.39's
    `diff-tree` reads the index, and expands a sparse one, so it is given none)."""
    if commit == head:
        return []
    admin = admin_dir(worktree)
    none = (admin if admin is not None else worktree / ".git") / "agentbox-no-index"
    out = git(worktree, "diff-tree", "-r", "-z", "--no-renames", "--name-only", commit, head,
              env={"GIT_INDEX_FILE": str(none)}).stdout
    return [os.fsdecode(entry) for entry in out.split(b"\0") if entry]


def cone(over: Sequence[str]) -> bool:
    """True when the over dirs can be cone-mode patterns (every name plain, `_PLAIN`)."""
    return bool(over) and all(_PLAIN.fullmatch(part) and part not in (".", "..")
                              for path in over for part in path.split("/"))


def cone_flags(worktree: Path, reach: Sequence[str] | None) -> tuple[str, ...]:
    """`CONE` for git calls on the paths `reach` of a sparse worktree in cone mode, when every
    one of them lies inside its over dirs; else nothing (an ordinary call: git reads the index
    whole, as for a whole worktree, and a path outside the over dirs ends as it always did)."""
    view = read_base(worktree)
    if view is None or reach is None or not cone(view.over):
        return ()
    inside = all(any(path == d or path.startswith(d + "/") for d in view.over) for path in reach)
    return CONE if inside else ()


def checkout_flags(over: Sequence[str]) -> tuple[str, ...]:
    """How git is told the patterns `_patterns(over)` writes."""
    return CONE if cone(over) else SPARSE


def _patterns(over: Sequence[str]) -> str:
    """The sparse-checkout file for `over`: cone patterns (each over dir whole, the files of its
    parents and of the top) when `cone`, else one literal pattern per over dir."""
    if not cone(over):
        return "".join(f"/{_escape(path)}/\n" for path in over)
    parents = {"/".join(path.split("/")[:i]) for path in over for i in range(1, path.count("/") + 1)}
    lines = ["/*\n!/*/\n"]
    for path in sorted({*parents, *over}):
        lines.append(f"/{path}/\n" if path in over else f"/{path}/\n!/{path}/*/\n")
    return "".join(lines)


def _escape(path: str) -> str:
    """A path as a literal sparse-checkout (gitignore) pattern."""
    out = []
    for char in path:
        if char in "\\*?[]!# ":
            out.append("\\")
        out.append(char)
    return "".join(out)


def place_over(worktree: Path, over: Sequence[str]) -> bool:
    """Make sure every over dir is a real directory of the worktree (made, empty, where the HEAD
    has no file in it: what the sandbox binds must exist). False when a part of one is a
    symlink or a file there: binding it would follow the link on the host, so the worktree
    must be whole instead."""
    for relative in over:
        path = worktree
        for part in PurePosixPath(relative).parts:
            path = path / part
            if path.is_symlink() or (os.path.lexists(path) and not path.is_dir()):
                return False
            if not os.path.lexists(path):
                path.mkdir()
    return True


def check_out_sparse(worktree: Path, view: BaseView, target: str, *, reset: bool, or_reset: bool = False) -> bool:
    """Fill the worktree with `target`'s files in `view.over` only (the rest skip-worktree),
    then write the marker. `reset`: the worktree holds no checkout yet (else a clean one of
    HEAD, whose over dirs only grow). `or_reset`: when git refuses to move from HEAD (what a
    killed call left half done, in a worktree nobody writes: the run's view), reset instead.
    False (no marker written) when the over dirs cannot be bound as they are (`place_over`):
    the caller makes the worktree whole."""
    admin = admin_dir(worktree)
    assert admin is not None
    (admin / "info").mkdir(exist_ok=True)
    patterns = _patterns(view.over)
    grown = not reset and read_small(admin / "info" / "sparse-checkout") != patterns
    write_small(admin / "info" / "sparse-checkout", patterns)
    flags = checkout_flags(view.over)
    if grown and flags == CONE:  # git 2.39 cannot move a sparse index into a wider cone: expanded first
        flags = GROW
    moved = None if reset else git(worktree, *flags, "read-tree", "-m", "-u", "HEAD", target,
                                   timeout=CHECKOUT_TIMEOUT_S, ok=(0, 128) if or_reset else (0,))
    if moved is None or moved.returncode != 0:
        git(worktree, *flags, "read-tree", "--reset", "-u", target, timeout=CHECKOUT_TIMEOUT_S)
    if not place_over(worktree, view.over):
        return False
    write_marker(worktree, view)
    return True


def write_marker(worktree: Path, view: BaseView) -> None:
    """Record how the worktree is seen whole (only once its over dirs are checked out)."""
    admin = admin_dir(worktree)
    assert admin is not None
    write_small(admin / BASE_MARKER, f"{view.commit}\n{view.head}\n" + "".join(f"{d}\n" for d in view.over))


def make_whole(worktree: Path, *, force: bool = False) -> None:
    """Check out every file of a sparse worktree's HEAD (a full checkout), then drop its marker.
    The worktree must be clean (between turns). `force`: also when no marker names it (a
    sparse checkout whose marker was never written)."""
    admin = admin_dir(worktree)
    if admin is None or not (force or (admin / BASE_MARKER).exists()):
        return
    (admin / "info").mkdir(exist_ok=True)
    write_small(admin / "info" / "sparse-checkout", "/*\n")
    git(worktree, *SPARSE, "read-tree", "-m", "-u", "HEAD", "HEAD", timeout=CHECKOUT_TIMEOUT_S)
    (admin / BASE_MARKER).unlink(missing_ok=True)
    (admin / "info" / "sparse-checkout").unlink(missing_ok=True)


def forget_sparse(worktree: Path) -> None:
    """Drop the marker of a worktree about to get a full checkout; its patterns stay, for that
    checkout to clear the skip-worktree marks (`worktrees._switch`)."""
    admin = admin_dir(worktree)
    if admin is not None:
        (admin / BASE_MARKER).unlink(missing_ok=True)


def choose_base(root: Path, common: Path, worktree: Path, commit: str) -> tuple[str, Path]:
    """The base for a new worktree whose task starts at `commit`: the base of that commit
    when there is one, else the newest base (the over dirs then cover the difference), else a
    base made now."""
    top = bases_dir(common)
    exact = top / commit
    if exact.is_dir():
        return commit, exact
    found = [p for p in top.iterdir() if p.is_dir() and not p.name.startswith(_TMP)] if top.is_dir() else []
    if found:
        newest = max(found, key=lambda p: p.stat().st_mtime)
        return newest.name, newest
    return commit, ensure_base(root, common, commit)


def referenced(common: Path, worktrees: Iterable[Path]) -> set[str]:
    """The commits of the bases some worktree is seen over."""
    used = set()
    for path in worktrees:
        view = read_base(path)
        if view is not None:
            used.add(view.commit)
    return used


def prune_bases(common: Path, worktrees: Iterable[Path], keep: int = 1) -> list[Path]:
    """Delete the bases no worktree uses, but the `keep` newest (the next run's tasks likely
    start there); the paths removed."""
    top = bases_dir(common)
    if not top.is_dir():
        return []
    _drop_leftovers(top)
    used = referenced(common, worktrees)
    idle = sorted((p for p in top.iterdir() if p.is_dir() and not p.name.startswith(_TMP) and p.name not in used),
                  key=lambda p: p.stat().st_mtime, reverse=True)
    removed = idle[keep:]
    for path in removed:
        trash = top / f"{_TMP}{os.getpid()}-{uuid.uuid4().hex[:8]}-gone"
        os.rename(path, trash)
        shutil.rmtree(trash, ignore_errors=True)
    return removed
