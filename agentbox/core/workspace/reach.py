"""Where a worktree's files may differ from its HEAD: so committing a turn scans what the turn could write.

A turn can change a task's worktree only where its sandbox let it write: the paths of its
write scopes (the kernel enforces them, see `agentbox.core.sandbox.scopes`). Whoever hands a
worktree out says where its writers may write (`ensure_task_worktree(reach=...)`); that
*reach* is kept in a file in the worktree's git admin dir, and `commit_turn`, the check for
uncommitted work and `flatten_nested` ask git about those paths only, never the whole tree.

The reach only ever grows while a worktree is handed out: each later turn's scopes are
added, a setup command (which may write anywhere) adds the whole tree until the next commit
has taken what it wrote, a person's shell adds the whole tree for good. It is set anew only
when the worktree holds exactly a commit (just checked out for a task). The safe default is
the whole tree: no reach file (a worktree made before it existed), a line `.`, or a caller
that names no reach. A crash anywhere leaves a reach at least as wide as what changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from agentbox.core.workspace.layout import admin_dir, read_small, write_small

REACH_FILE = "agentbox-reach"
"""File in a worktree's admin dir: one relative path per line; `.` is the whole tree; a line
starting with `+` holds until the next commit that took everything in reach."""
WHOLE = "."
ONCE = "+"
CLEAN_FILE = "agentbox-clean"
"""File in a worktree's admin dir while its HEAD holds everything in its reach: written by a
commit that took all of it, removed before the worktree is handed to any writer again."""


def read_reach(worktree: Path) -> list[str] | None:
    """The paths (relative, sorted) where the worktree may differ from its HEAD; None: anywhere."""
    lines = _lines(worktree)
    if lines is None:
        return None
    paths = [line.removeprefix(ONCE) for line in lines]
    return None if WHOLE in paths else _outermost(paths)


def set_reach(worktree: Path, paths: Sequence[str] | None) -> None:
    """The worktree holds exactly its HEAD and is handed to writers of `paths` (None: anywhere)."""
    admin = admin_dir(worktree)
    if admin is not None and admin.is_dir():
        (admin / CLEAN_FILE).unlink(missing_ok=True)
        _write(admin, [WHOLE] if paths is None or any(_whole(p) for p in paths) else _outermost(paths))


def widen_reach(worktree: Path, paths: Sequence[str] | None, *, once: bool = False) -> None:
    """Add `paths` (None: the whole tree) to the worktree's reach before anything may write there;
    `once`: only until the next commit that takes everything in reach (`settle_reach`)."""
    admin = admin_dir(worktree)
    if admin is not None and (paths is None or paths):
        (admin / CLEAN_FILE).unlink(missing_ok=True)  # a writer may come: nothing is known clean any more
    lines = _lines(worktree)
    if admin is None or not admin.is_dir() or lines is None:
        return  # no reach file: the whole tree already
    added = [WHOLE] if paths is None or any(_whole(p) for p in paths) else [p.strip("/") for p in paths]
    _write(admin, sorted({*lines, *(ONCE + p if once else p for p in added)}))


def settle_reach(worktree: Path) -> None:
    """Everything in reach is committed: what was added `once` is dropped."""
    admin = admin_dir(worktree)
    lines = _lines(worktree)
    if admin is not None and lines is not None and any(line.startswith(ONCE) for line in lines):
        _write(admin, [line for line in lines if not line.startswith(ONCE)])


def mark_clean(worktree: Path) -> None:
    """Everything in reach is committed, and no writer has had the worktree since (`known_clean`)."""
    admin = admin_dir(worktree)
    if admin is not None and admin.is_dir():
        write_small(admin / CLEAN_FILE, "")


def known_clean(worktree: Path) -> bool:
    """True while nothing can differ from the worktree's HEAD: a commit took everything in its
    reach, and it was handed to no writer since (every hand-out widens or sets the reach first)."""
    admin = admin_dir(worktree)
    return admin is not None and (admin / CLEAN_FILE).exists()


def pathspecs(reach: list[str] | None) -> list[str]:
    """Literal pathspecs for git of what `reach` covers (`.` for the whole tree)."""
    if reach is None:
        return ["."]
    return [f":(literal){path}" for path in reach]


def _lines(worktree: Path) -> list[str] | None:
    admin = admin_dir(worktree)
    text = read_small(admin / REACH_FILE) if admin is not None else None
    return None if text is None else [line for line in text.split("\n") if line]


def _write(admin: Path, lines: Iterable[str]) -> None:
    write_small(admin / REACH_FILE, "".join(f"{line}\n" for line in lines))


def _whole(path: str) -> bool:
    parts = path.strip("/").split("/")
    return path.strip("/") in ("", WHOLE) or any(part in ("..", ".", "") for part in parts)


def _outermost(paths: Iterable[str]) -> list[str]:
    """`paths` without those inside another of them, sorted."""
    kept: list[str] = []
    for path in sorted({p.strip("/") for p in paths}, key=lambda p: (p.count("/"), p)):
        if not any(path == k or path.startswith(k + "/") for k in kept):
            kept.append(path)
    return sorted(kept)
