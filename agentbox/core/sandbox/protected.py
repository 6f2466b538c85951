"""Protected paths as text: their shapes, and whether a write scope reaches into one.

crew.yaml's `protected:` names paths no role may write in any turn (the contracts and the
acceptance tests a crew is judged by). A protected path has one of the shapes a write scope
has: a directory tree (`contracts/**`, `contracts/`), a literal path (`SPEC.md`, a file or
a directory) or a one-level pattern (`tests/*.snap`). A deeper pattern (`src/**/*.py`)
cannot be made read-only by mounts and is refused. How the sandbox enforces them is in
`agentbox.core.sandbox.scopes`; this module is pure text.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import PurePosixPath

WILDCARDS = "*?["
_TREE_RESTS = ((), ("**",), ("**", "*"))


@dataclass(frozen=True)
class Region:
    """What a path pattern covers: a whole tree at `parts`, or the entries named `name` directly in `parts`."""

    parts: tuple[str, ...]
    name: str | None = None
    """None: everything under `parts`; else a name or a one-level pattern of entries in `parts`."""
    literal: bool = False
    """`name` is a literal path, which may turn out to be a directory on disk."""


def _parts(pattern: str) -> tuple[str, ...]:
    return tuple(p for p in PurePosixPath(pattern.strip("/") or ".").parts if p not in (".", ""))


def region(pattern: str) -> Region | None:
    """The region `pattern` covers, or None when it is finer than a mount can enforce (`a/**/*.py`)."""
    parts = _parts(pattern)
    static: list[str] = []
    for part in parts:
        if any(ch in part for ch in WILDCARDS):
            break
        static.append(part)
    rest = parts[len(static):]
    if rest in _TREE_RESTS and (rest or pattern.endswith("/") or not static):
        return Region(tuple(static))
    if not rest:
        return Region(tuple(static[:-1]), static[-1], literal=True)
    if len(rest) == 1 and "**" not in rest[0]:
        return Region(tuple(static), rest[0])
    return None


def _wild(name: str) -> bool:
    return any(ch in name for ch in WILDCARDS)


def _covers_entry(tree: tuple[str, ...], entries: Region) -> bool:
    """A tree at `tree` and the entries `entries.name` of `entries.parts` share a path."""
    assert entries.name is not None
    depth = len(entries.parts)
    if tree[:depth] != entries.parts[: len(tree)]:
        return False
    if len(tree) <= depth:
        return True  # the tree holds the entries' directory
    return fnmatch.fnmatchcase(tree[depth], entries.name) or _wild(tree[depth]) and _wild(entries.name)


def overlaps(write: str, protected: str) -> bool:
    """True when the write scope `write` may write some path the protected pattern `protected` names.

    Conservative: two one-level patterns of one directory that could both match a name
    overlap; a write pattern finer than a mount (`src/**/*.py`) counts as its whole tree.
    """
    guarded = region(protected)
    if guarded is None:
        return True
    wanted = region(write) or Region(region_prefix(write))
    if wanted.literal:
        wanted = Region((*wanted.parts, str(wanted.name)))
    if guarded.literal:
        guarded = Region((*guarded.parts, str(guarded.name)))
    if wanted.name is None and guarded.name is None:
        shorter = min(len(wanted.parts), len(guarded.parts))
        return wanted.parts[:shorter] == guarded.parts[:shorter]
    if wanted.name is None:
        return _covers_entry(wanted.parts, guarded)
    if guarded.name is None:
        return _covers_entry(guarded.parts, wanted)
    if wanted.parts != guarded.parts:
        return False
    return (fnmatch.fnmatchcase(wanted.name, guarded.name) or fnmatch.fnmatchcase(guarded.name, wanted.name)
            or (_wild(wanted.name) and _wild(guarded.name)))


def region_prefix(pattern: str) -> tuple[str, ...]:
    """The literal leading directories of `pattern`."""
    static: list[str] = []
    for part in _parts(pattern):
        if any(ch in part for ch in WILDCARDS):
            break
        static.append(part)
    return tuple(static)


def matches(pattern: str, relative: str) -> bool:
    """True when the project-relative path `relative` is inside the protected `pattern`."""
    guarded = region(pattern)
    parts = _parts(relative)
    if guarded is None:
        return False
    if guarded.name is None or guarded.literal:
        whole = guarded.parts if guarded.name is None else (*guarded.parts, guarded.name)
        return parts[: len(whole)] == whole
    depth = len(guarded.parts)
    return (len(parts) > depth and parts[:depth] == guarded.parts
            and fnmatch.fnmatchcase(parts[depth], guarded.name))
