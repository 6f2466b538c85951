"""The one rule for ids that become file names: runs, tasks, jobs, checkpoints, sessions.

Ids come from the command line and from state files an agent or a damaged disk may have
touched; each is one safe path component (no `/`, no `..`, nothing a glob would expand)
before any path is built from it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from agentbox.core.errors import UsageError

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
"""Run, task, job, checkpoint and session ids: one safe path component (no `/`, no `..`, no glob)."""
ID_RULE = "letters, digits, '.', '_' or '-' (at most 128, starting with a letter or digit)"
_ID = re.compile(ID_PATTERN)
_LISTS = {"session": "sessions", "run": "runs"}


def is_valid_id(value: object) -> bool:
    """True when `value` is a string obeying ID_PATTERN."""
    return isinstance(value, str) and _ID.match(value) is not None and "\n" not in value


def by_prefix(kind: str, given: str, known: Iterable[str], *, where: str = "") -> str | None:
    """The id `given` names among `known`, as git takes a commit: the id itself, else the only
    one it begins; None when none does. Several are a UsageError listing them (exit 2)."""
    known = list(dict.fromkeys(known))
    if given in known:
        return given
    matches = sorted(k for k in known if k.startswith(given))
    if len(matches) > 1:
        listing = ", ".join(matches[:10]) + (f" and {len(matches) - 10} more" if len(matches) > 10 else "")
        raise UsageError(f"{given!r} is the start of {len(matches)} {kind} ids{where}: {listing}",
                         f"give more of the {kind} id")
    return matches[0] if matches else None


def check_id(kind: str, value: str) -> str:
    """`value` when it is a valid `kind` id (run, task, session...); else a UsageError (exit 2)."""
    if not is_valid_id(value):
        raise UsageError(f"invalid {kind} id {str(value)[:80]!r}: {kind} ids use {ID_RULE}",
                         f"`agentbox {_LISTS.get(kind, 'status')}` lists the known {kind}s")
    return value
