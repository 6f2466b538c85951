"""What a task changed, from git: the changed files with their line counts, and a bounded diff.

Read with `-z` (any file name: spaces, newlines, non-UTF-8 bytes, which come back as
surrogate escapes, like `os.fsdecode`), renames detected, no external diff driver, no
textconv, no colour, no pager.
"""

from __future__ import annotations

import enum
import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from agentbox.core.workspace.gitcmd import git, git_bounded, git_fields

DIFF_MAX_BYTES = 64 * 1024
"""Default bound of a patch shown in a review prompt."""
_SAFE_DIFF = ("--no-ext-diff", "--no-textconv", "--no-color", "-M")


class Change(enum.StrEnum):
    """How a file changed."""

    ADDED = "A"
    MODIFIED = "M"
    DELETED = "D"
    RENAMED = "R"


@dataclass(frozen=True)
class ChangedFile:
    """One file a diff touches."""

    path: str
    """Its path afterwards (before, for a deletion), relative to the repository."""
    change: Change
    added: int | None
    """Lines added; None for a binary file."""
    removed: int | None
    """Lines removed; None for a binary file."""
    old_path: str | None = None
    """The path before a rename."""

    @property
    def binary(self) -> bool:
        """True when git counts no lines (a binary file)."""
        return self.added is None


@dataclass(frozen=True)
class Diff:
    """A diff for people and prompts: the stat and the patch, bounded."""

    stat: str
    patch: str
    truncated: bool
    """The patch (or stat) was cut at the bound."""
    full_command: str
    """A command that shows the whole diff."""


def changed_files(root: Path, base: str, head: str) -> list[ChangedFile]:
    """The files that differ between commits `base` and `head`, in git's order."""
    out = git(root, "diff", "-z", "--raw", "--numstat", *_SAFE_DIFF, base, head, "--")
    fields = out.stdout.split(b"\0")
    raw: list[tuple[Change, str, str | None]] = []
    counts: list[tuple[int | None, int | None]] = []
    index = 0
    while index < len(fields):
        field = fields[index]
        index += 1
        if not field:
            continue
        if field.startswith(b":"):
            letter = field.split()[-1][:1].decode()
            if letter in ("R", "C"):
                old, new = os.fsdecode(fields[index]), os.fsdecode(fields[index + 1])
                index += 2
                raw.append((Change.RENAMED if letter == "R" else Change.ADDED, new, old if letter == "R" else None))
            else:
                path = os.fsdecode(fields[index])
                index += 1
                raw.append((_CHANGES.get(letter, Change.MODIFIED), path, None))
        else:
            added, removed, named = field.split(b"\t", 2)
            if not named:  # a rename: the two paths follow
                index += 2
            counts.append((_count(added), _count(removed)))
    return [ChangedFile(path, change, added, removed, old)
            for (change, path, old), (added, removed) in zip(raw, counts, strict=True)]


@dataclass(frozen=True)
class ChangedSummary:
    """The first files a diff touches (at most the `keep` asked for) and how many it touches in all."""

    files: list[ChangedFile]
    total: int

    @property
    def more(self) -> int:
        """Files changed beyond `files`."""
        return self.total - len(self.files)


def changed_summary(root: Path, base: str, head: str, keep: int) -> ChangedSummary:
    """`changed_files` for at most `keep` files, and the count of all of them, read as git prints
    them: a flood of 200,000 changed files costs the memory of `keep`."""
    fields = git_fields(root, "diff", "-z", "--raw", "--numstat", *_SAFE_DIFF, base, head, "--")
    raw: list[tuple[Change, str, str | None]] = []
    counts: list[tuple[int | None, int | None]] = []
    total = 0
    for field in fields:
        if not field:
            continue
        if field.startswith(b":"):  # git prints every raw entry, then every count
            total += 1
            letter = field.split()[-1][:1].decode()
            paths = [os.fsdecode(next(fields))]
            if letter in ("R", "C"):
                paths.append(os.fsdecode(next(fields)))
            if len(raw) < keep:
                if letter in ("R", "C"):
                    raw.append((Change.RENAMED if letter == "R" else Change.ADDED, paths[1],
                                paths[0] if letter == "R" else None))
                else:
                    raw.append((_CHANGES.get(letter, Change.MODIFIED), paths[0], None))
        else:
            added, removed, path = field.split(b"\t", 2)
            if not path:  # a rename: the two paths follow
                next(fields)
                next(fields)
            if len(counts) < len(raw):
                counts.append((_count(added), _count(removed)))
            elif len(counts) >= keep:
                fields.close()  # every kept file has its counts: git is stopped
                break
    files = [ChangedFile(path, change, added, removed, old)
             for (change, path, old), (added, removed) in zip(raw, counts, strict=True)]
    return ChangedSummary(files, total)


def changed_names(root: Path, base: str, head: str, skip: int, take: int) -> tuple[list[str], bool]:
    """The paths of the changed files `skip` to `skip + take` in git's order (renames by their
    new path), and whether more follow: one page of a diff of any size, read as git prints it."""
    fields = git_fields(root, "diff", "-z", "--name-only", *_SAFE_DIFF, base, head, "--")
    names: list[str] = []
    index = 0
    for field in fields:
        if not field:
            continue
        if index >= skip + take:
            fields.close()
            return names, True
        if index >= skip:
            names.append(os.fsdecode(field))
        index += 1
    return names, False


_CHANGES = {"A": Change.ADDED, "D": Change.DELETED, "M": Change.MODIFIED, "T": Change.MODIFIED}


def _count(value: bytes) -> int | None:
    return None if value == b"-" else int(value)


def diff_text(root: Path, base: str, head: str, *, max_bytes: int = DIFF_MAX_BYTES,
              full_command: str | None = None, stat_only: bool = False, paths: Sequence[str] | None = None) -> Diff:
    """The stat and patch between `base` and `head`, each cut at `max_bytes` (at a line
    end), with a command showing the whole diff (`full_command`, else the git one).
    With `stat_only` the patch is not computed (it is empty); with `paths`, only those files' diff."""
    specs = [f":(literal){path}" for path in paths] if paths is not None else []
    both = None if stat_only else _stat_and_patch(root, base, head, specs, max_bytes)
    if both is not None:
        (stat, stat_cut), (patch, patch_cut) = both
    else:
        stat, stat_cut = git_bounded(root, "diff", "--stat=120", *_SAFE_DIFF, base, head, "--", *specs,
                                     max_bytes=max_bytes)
        patch, patch_cut = (b"", False) if stat_only else git_bounded(
            root, "diff", "--patch", *_SAFE_DIFF, base, head, "--", *specs, max_bytes=max_bytes)
    command = full_command or shlex.join(["git", "-C", str(root), "diff", base, head])
    return Diff(_text(stat, stat_cut), _text(patch, patch_cut), stat_cut or patch_cut, command)


def _stat_and_patch(root: Path, base: str, head: str, specs: list[str],
                    max_bytes: int) -> tuple[tuple[bytes, bool], tuple[bytes, bool]] | None:
    """The stat and the patch from one `git diff --stat --patch` (the stat, a blank line, then
    the patch), each as `git_bounded` gives it; None when the stat alone is longer than
    `max_bytes` (the caller asks for each apart)."""
    out, more = git_bounded(root, "diff", "--stat=120", "--patch", *_SAFE_DIFF, base, head, "--", *specs,
                            max_bytes=2 * max_bytes + 2)
    if not out:
        return (b"", False), (b"", False)
    at = out.find(b"\n\ndiff --git ")
    if at < 0 or at + 1 > max_bytes:
        return None
    patch = out[at + 2:]
    return (out[:at + 1], False), (patch[:max_bytes], more or len(patch) > max_bytes)


def _text(data: bytes, cut: bool) -> str:
    if cut and b"\n" in data:
        data = data[: data.rindex(b"\n") + 1]
    return data.decode("utf-8", "replace")
