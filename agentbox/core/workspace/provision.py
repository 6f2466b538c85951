"""Making a task's worktree usable: ignored files copied in, and git readable inside the sandbox.

**Setup copies.** `workspace_setup.copy` names ignored files (`.env`, `node_modules/`) a
worktree lacks. Patterns are walked without following any symlink (a link itself is copied
as a link), never into `.git` or `.agent-box`; only paths git ignores are copied (anything
else would be committed with the task's work); each is copied under a temporary name with
`cp -a --reflink=auto` (a reflink where the file system has them) and renamed into place,
so a crash never leaves half a `node_modules/`.

**git inside the sandbox.** The worktree is bound at the project's own path, so the path
`<root>/.git` is the worktree's `.git` *file*, naming its admin dir under the real
`<root>/.git/worktrees/`, which the bind hides. A directory cannot be bound over a file,
so instead: the common git dir is bound read-only at a path of its own (`SANDBOX_GIT_DIR`,
under the sandbox's private `/run`), and a one-line `.git` file naming the worktree's admin
dir there is bound over `<root>/.git`. git then works inside the sandbox as in the
worktree: `git status`, `git diff`, `git log` show the task's branch and the turn's
uncommitted changes; nothing can be written (the index refresh of `git status` is skipped
on a read-only dir). Every worktree's files stay out of sight (`hide` covers
`<common>/agentbox` there); their admin dirs hold an index and a HEAD, nothing more.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path

from agentbox.core.errors import StateError, UsageError
from agentbox.core.workspace.bases import cone, read_base
from agentbox.core.workspace.gitcmd import git
from agentbox.core.workspace.layout import admin_dir, common_dir, gitfiles_dir, write_small

SANDBOX_GIT_DIR = Path("/run/agentbox/git")
"""Where the common git dir is bound inside a sandbox (its `/run` is a private tmpfs)."""
_NEVER = frozenset({".git", ".agent-box"})


@dataclass(frozen=True)
class SetupCopy:
    """What `copy_setup_files` copied into a worktree, and what it left out and why."""

    copied: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class SandboxGitView:
    """Mounts that make git work, read-only, in a sandbox with the worktree at `<root>`."""

    binds: list[tuple[Path, Path]]
    """(host source, sandbox destination) pairs to bind read-only, in this order, after
    the worktree is bound at `<root>`."""
    hide: list[Path]
    """Sandbox paths to cover with an empty tmpfs after the binds (every task's files)."""
    base: Path | None = None
    """A sparse worktree's base (`agentbox.core.workspace.bases`): bound read-only at `<root>`
    in the worktree's place, with `over` bound over it (None: the worktree is whole)."""
    over: tuple[Path, ...] = ()
    """The sparse worktree's own dirs (host paths), bound over the base."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment for git inside the sandbox (`sparse_index_env`; empty for a full index)."""


def sparse_index_env(mount_at: Path = SANDBOX_GIT_DIR) -> dict[str, str]:
    """What git inside a sandbox needs to read a sparse index (`agentbox.core.workspace.bases`):
    a git there that is not told the cone expands the index in memory, and git 2.39 then writes
    the expanded directories' tree objects (they exist; it fails to freshen them on a read-only
    mount, and prints "unable to create temporary file"). New objects go to the sandbox's own
    empty tmpfs over agentbox's dir, the repository's objects stay read-only, as alternates."""
    return {"GIT_OBJECT_DIRECTORY": str(mount_at / "agentbox"),
            "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(mount_at / "objects")}


def copy_setup_files(root: Path, worktree: Path, patterns: Sequence[str]) -> SetupCopy:
    """Copy the ignored files matching `patterns` (relative globs, `**` allowed) from the
    project `root` into `worktree` where they are missing. See the module docstring."""
    found: set[tuple[str, ...]] = set()
    for pattern in patterns:
        segments = _segments(pattern)
        found.update(_expand(root, segments, ()))
    chosen: list[tuple[str, ...]] = []
    for parts in sorted(found):
        if not any(parts[: len(c)] == c for c in chosen):
            chosen.append(parts)
    names = ["/".join(parts) for parts in chosen]
    ignored = _ignored(root, names)
    result = SetupCopy()
    for parts, name in zip(chosen, names, strict=True):
        if name not in ignored:
            result.skipped.append((name, "not ignored by git: it would be committed with the task's work"))
            continue
        destination = worktree.joinpath(*parts)
        if os.path.lexists(destination):
            result.skipped.append((name, "already in the worktree"))
            continue
        if not _real_parents(worktree, parts[:-1]):
            result.skipped.append((name, "a directory on its way in the worktree is not a plain directory"))
            continue
        _copy(root.joinpath(*parts), destination)
        result.copied.append(name)
    return result


def _segments(pattern: str) -> list[str]:
    segments = [s for s in pattern.strip().split("/") if s and s != "."]
    if not segments or pattern.startswith("/") or ".." in segments:
        raise UsageError(f"workspace_setup.copy: {pattern!r} must be a glob relative to the project",
                         "such as .env or node_modules or config/*.local")
    return segments


def _expand(directory_root: Path, segments: list[str], parts: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    """Relative paths under `directory_root` matching `segments`; symlinks never entered."""
    if not segments:
        if parts:
            yield parts
        return
    head, rest = segments[0], segments[1:]
    if head == "**":
        yield from _expand(directory_root, rest, parts)
    for entry in _entries(directory_root.joinpath(*parts)):
        if not parts and entry.name in _NEVER:
            continue
        is_dir = entry.is_dir(follow_symlinks=False)
        if head == "**":
            if is_dir:
                yield from _expand(directory_root, segments, (*parts, entry.name))
        elif fnmatchcase(entry.name, head):
            if not rest:
                yield (*parts, entry.name)
            elif is_dir:
                yield from _expand(directory_root, rest, (*parts, entry.name))


def _entries(directory: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as listing:
            return sorted(listing, key=lambda e: e.name)
    except OSError:
        return []


def _ignored(root: Path, names: list[str]) -> set[str]:
    if not names:
        return set()
    out = git(root, "check-ignore", "-z", "--stdin", stdin=b"".join(os.fsencode(n) + b"\0" for n in names),
              ok=(0, 1))
    return {os.fsdecode(f) for f in out.stdout.split(b"\0") if f}


def _real_parents(worktree: Path, parts: tuple[str, ...]) -> bool:
    """Create the missing directories of `parts` under `worktree`; False when one there is
    a symlink or not a directory (an agent may have put a link to elsewhere)."""
    current = worktree
    for part in parts:
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            current.mkdir()
            continue
        if not stat.S_ISDIR(mode):
            return False
    return True


def _copy(source: Path, destination: Path) -> None:
    partial = destination.with_name(f".{destination.name}.agentbox-copy")
    if os.path.isdir(partial) and not os.path.islink(partial):
        shutil.rmtree(partial)
    elif os.path.lexists(partial):
        os.unlink(partial)
    proc = subprocess.run(["cp", "-a", "--reflink=auto", "-T", "--", str(source), str(partial)],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        raise StateError(f"cannot copy {source} into the worktree: {proc.stderr.strip()[-300:]}")
    os.rename(partial, destination)


def sandbox_git_view(root: Path, worktree: Path, *, mount_at: Path = SANDBOX_GIT_DIR,
                     common: Path | None = None) -> SandboxGitView:
    """The read-only binds that make git work inside a sandbox where `worktree` is bound
    at `root` (the repository's top). Writes the `.git` file it binds, under
    `<common>/agentbox/gitfiles/`. `common`: the git common dir, when the caller has it."""
    admin = admin_dir(worktree)
    common = common or common_dir(root)
    if admin is None or admin.parent != common / "worktrees" or not admin.is_dir():
        raise StateError(f"{worktree} is not a worktree of {root}", "ensure the task's worktree first")
    gitfile = gitfiles_dir(common) / admin.name
    gitfile.parent.mkdir(parents=True, exist_ok=True)
    write_small(gitfile, f"gitdir: {mount_at / 'worktrees' / admin.name}\n")
    seen = read_base(worktree)
    return SandboxGitView(binds=[(common, mount_at), (gitfile, root / ".git")], hide=[mount_at / "agentbox"],
                          base=seen.base if seen is not None else None,
                          over=tuple(worktree / d for d in seen.over) if seen is not None else (),
                          env=sparse_index_env(mount_at) if seen is not None and cone(seen.over) else {})
