"""Write scopes made exact: what a role may write, as mounts, and the changes taken back after a turn.

A write scope is one of three shapes, and each is enforced by the kernel:

- a **directory** (`src/**`, `src/`, or an existing directory): bound read-write;
- a **file** (`README.md`) or a **one-level pattern** (`docs/*.md`, `*.md`): the role works
  in a *staged view* of that directory — a private copy of the matching files, bound at the
  directory's own path, with every other entry bound back read-only and symlinks recreated
  as they are. Tools that write atomically (a temp file, then a rename) work there. After
  the turn the matching regular files the role changed, created or deleted are carried back
  into the real directory; anything else it created there is not, and is kept aside in the
  turn's `discarded/` dir (never silently lost);
- a deeper pattern (`src/**/*.py`) cannot be enforced by mounts and is refused with a hint.

A scope never widens through a symlink: one whose path crosses a symlink is refused, so a
link an agent planted (`src/g2 -> ../.git`) gives no later scope a way out. Scopes are
relative, stay inside the project and never name `.git`, `.agent-box` or other VCS
metadata (those are bound read-only over every scope anyway).
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import os
import shutil
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from agentbox.core.errors import SandboxError, UsageError
from agentbox.core.sandbox import protected

MAX_SEALED_ENTRIES = 500
"""Most entries bound back read-only in one staged directory (one bind mount each)."""

METADATA_NAMES = (".git", ".agent-box", ".hg", ".svn", ".bzr", "_darcs", ".jj", ".pijul", ".fossil")
"""Entries that hold version-control or agentbox metadata: never writable by an agent."""

WILDCARDS = "*?["


@dataclass
class Staged:
    """One directory the role sees as a private copy (file and one-level pattern scopes)."""

    real: Path
    stage: Path
    patterns: tuple[str, ...]
    copied: dict[str, str] = field(default_factory=dict)
    """Name → sha256 of each real file copied in (to carry back only the role's changes)."""
    sealed: tuple[Path, ...] = ()
    links: tuple[tuple[str, Path], ...] = ()
    mountpoints: frozenset[str] = frozenset()
    """Names in the view that are other mounts (sealed entries, deeper write scopes, links)."""
    guarded: tuple[str, ...] = ()
    """Names or one-level patterns of protected entries of this directory: never copied in nor carried back."""

    def matches(self, name: str) -> bool:
        """True when `name` in this directory is one the role may write (never a protected one)."""
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in self.guarded):
            return False
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.patterns)


@dataclass
class Guard:
    """One directory holding protected files or one-level matches, checked again after the turn.

    The existing matches are bound read-only; a match that appears during the turn (the
    kernel cannot refuse a new name in a writable directory) is moved aside after it.
    """

    directory: Path
    pattern: str
    before: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Name → (device, inode) of each match present when the turn started."""


@dataclass
class ScopePlan:
    """The mounts for a role's write scopes, and what must be undone or carried back after the turn."""

    writable: tuple[Path, ...] = ()
    """Directories bound read-write at their own path."""
    staged: tuple[Staged, ...] = ()
    made: list[Path] = field(default_factory=list)
    """Directories created for directory scopes (removed after the turn when left empty)."""
    protected: tuple[Path, ...] = ()
    """Protected directories and files, bound read-only over every scope."""
    pinned: tuple[Path, ...] = ()
    """Directories on the way to a protected path, bound onto themselves so no turn can rename them away."""
    guards: tuple[Guard, ...] = ()

    @property
    def sealed(self) -> tuple[Path, ...]:
        """Entries bound read-only inside staged views."""
        return tuple(p for s in self.staged for p in s.sealed)

    @property
    def links(self) -> tuple[tuple[str, Path], ...]:
        """Symlinks recreated inside staged views, as (target, path)."""
        return tuple(link for s in self.staged for link in s.links)


def has_control_character(text: str) -> bool:
    """True when `text` holds a control character (never part of a path a person meant)."""
    return any(ord(ch) < 32 or ord(ch) == 127 for ch in text)


def scope_problem(scope: str, what: str = "write scope") -> str | None:
    """Why a write scope (or a protected path: `what`) is refused, or None when it is a path inside the project.

    A scope is relative to the project root, never leaves it (no `..`), never names
    version-control or agentbox metadata in its literal part, and is never empty (which
    would silently mean the whole project). crew.yaml is checked with this at load, and
    every scope again when a turn's mounts are planned. Text only.
    """
    if not isinstance(scope, str) or not scope.strip():
        if what != "write scope":
            return f"an empty {what} is not allowed (`**` is the whole project)"
        return "an empty write scope is not allowed (`**` is the whole project; `writes: []` is read-only)"
    if has_control_character(scope):
        return f"{what} {scope!r} contains a control character"
    if scope.startswith(("/", "~")):
        return f"{what} {scope!r} is absolute, not relative to the project root"
    parts = PurePosixPath(scope).parts
    if ".." in parts:
        return f"{what} {scope!r} uses '..': it must stay inside the project"
    named = next((part for part in parts if part.casefold() in METADATA_NAMES), None)
    if named is not None:
        return f"{what} {scope!r} names {named}/: metadata is never writable by a role"
    return None


def protected_problem(pattern: str) -> str | None:
    """Why a protected path of crew.yaml is refused, or None (text only; see `agentbox.core.sandbox.protected`)."""
    problem = scope_problem(pattern, "protected path")
    if problem is None and protected.region(pattern) is None:
        shape = "/".join(protected.region_prefix(pattern)) or "."
        return (f"protected path {pattern!r} is finer than the sandbox can enforce; name a directory "
                f"(`{shape}/**`), a file, or a one-level pattern (`{shape}/*.py`)")
    return problem


def enforceable_problem(scope: str) -> tuple[str, str] | None:
    """Why the sandbox cannot enforce a (well-formed) write scope, with the shapes it can; None when it can.

    The sandbox binds directories and seals one directory level around files: a directory
    (`src/**`), a file, or a one-level pattern (`src/*.py`). A deeper pattern
    (`src/**/*.py`) would have to be refused by every turn, so it is refused where it is
    written.
    """
    parts = tuple(p for p in PurePosixPath(scope).parts if p not in (".", ""))
    static = glob_static_prefix("/".join(parts))[0] if parts else ()
    rest = parts[len(static):]
    if not rest or rest in (("**",), ("**", "*")) or (len(rest) == 1 and "**" not in rest[0]):
        return None
    shape = "/".join(static) + "/**" if static else "**"
    return (f"write scope {scope!r} is finer than the sandbox can enforce",
            f"use a directory (`{shape}`), a file, or a one-level pattern such as "
            f"`{'/'.join(static) + '/' if static else ''}*.py`")


def normalise(scope: str) -> tuple[str, ...]:
    """The parts of a write scope, checked by `scope_problem` (UsageError)."""
    problem = scope_problem(scope)
    if problem is not None:
        raise UsageError(problem, "name a directory (`src/**`), a file, or a one-level pattern inside the project")
    return tuple(p for p in PurePosixPath(scope).parts if p not in (".", ""))


def reach(scopes: Sequence[str] | None) -> list[str] | None:
    """The relative paths under which a turn with these write scopes can change anything (None:
    anywhere): a directory scope's directory, a file scope's file, a one-level pattern's
    directory (whose matches alone are carried back). A pattern at the top reaches the whole tree."""
    if scopes is None:
        return None
    found: list[str] = []
    for scope in scopes:
        parts = normalise(scope)
        static = glob_static_prefix("/".join(parts))[0] if parts else ()
        if not static:
            return None
        found.append("/".join(static))
    return found


@functools.lru_cache(maxsize=4096)
def glob_static_prefix(pattern: str) -> tuple[tuple[str, ...], bool]:
    """The literal leading path components of a write glob, and whether the whole pattern is literal."""
    parts = PurePosixPath(pattern.strip("/") or ".").parts
    static: list[str] = []
    for part in parts:
        if any(ch in part for ch in WILDCARDS):
            return tuple(static), False
        static.append(part)
    return tuple(static), True


def _check_no_symlink(root: Path, parts: tuple[str, ...], scope: str, what: str = "write scope") -> None:
    """Refuse a scope whose existing path crosses a symlink (a link could point anywhere)."""
    current = root
    for part in parts:
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            return
        except OSError as exc:
            raise SandboxError(f"{what} {scope!r}: cannot inspect {current}: {exc.strerror}") from None
        if stat.S_ISLNK(mode):
            raise SandboxError(f"{what} {scope!r} crosses the symlink {current}; a scope never widens "
                               "through a link", "remove the link, or name the real path in the scope")


def _make_dirs(directory: Path, made: list[Path]) -> None:
    """mkdir -p, noting each directory created (outermost first)."""
    missing = [d for d in (directory, *directory.parents) if not d.exists()]
    try:
        for d in reversed(missing):
            with contextlib.suppress(FileExistsError):
                d.mkdir()
                made.append(d)
    except FileNotFoundError:  # a parent vanished meanwhile (another turn tidied it)
        directory.mkdir(parents=True, exist_ok=True)


def _guard_protected(root: Path, patterns: tuple[str, ...]) -> ScopePlan:
    """The read-only binds, pinned parents and guards of the protected `patterns`.

    A missing protected directory (and its parents) is made and kept: a turn running at
    the same time may have it as its read-only mount point, and taking it away would undo
    that mount there.
    """
    kept: list[Path] = []
    binds: list[Path] = []
    pins: set[Path] = set()
    guards: list[Guard] = []
    for pattern in patterns:
        problem = protected_problem(pattern)
        if problem is not None:
            raise UsageError(problem, "fix `protected:` in crew.yaml")
        guarded = protected.region(pattern)
        assert guarded is not None
        full = (*guarded.parts, guarded.name) if guarded.name is not None and not _wild(guarded.name) else guarded.parts
        _check_no_symlink(root, tuple(full), pattern, "protected path")
        target = root.joinpath(*full)
        tree = guarded.name is None or (guarded.literal and target.is_dir() and not target.is_symlink())
        directory = target if tree else root.joinpath(*guarded.parts)
        _make_dirs(directory, kept)
        pins.update(d for d in (directory if not tree else directory.parent, *directory.parents)
                    if d != root and d.is_relative_to(root))
        if tree:
            binds.append(directory)
            continue
        guard = Guard(directory, str(guarded.name))
        for entry in os.scandir(directory):
            if fnmatch.fnmatchcase(entry.name, guard.pattern):
                info = entry.stat(follow_symlinks=False)
                guard.before[entry.name] = (info.st_dev, info.st_ino)
                if not entry.is_symlink():
                    binds.append(directory / entry.name)
        if len(guard.before) > MAX_SEALED_ENTRIES:
            raise SandboxError(f"protected path {pattern!r} matches {len(guard.before)} entries: too many to bind "
                               "read-only one by one", f"protect the directory instead (`{'/'.join(guarded.parts)}/**`)")
        guards.append(guard)
    return ScopePlan(protected=tuple(binds), pinned=tuple(sorted(pins)), guards=tuple(guards))


def _wild(name: str) -> bool:
    return any(ch in name for ch in WILDCARDS)


def plan(project_root: Path, scopes: list[str] | None, stage_root: Path | None = None,
         protected_paths: tuple[str, ...] = ()) -> ScopePlan:
    """The mounts for `scopes` (None = the whole project, [] = read-only); stages files under `stage_root`.

    `protected_paths` (crew.yaml's `protected:`) stay read-only over every scope: their
    directories are made when missing (and kept) and bound read-only, every parent on the way is bound
    onto itself (so it cannot be renamed away), existing matching files are bound read-only,
    staged views never copy or carry one back, and a match created in a writable directory
    is moved aside after the turn. Raises UsageError for a scope that is malformed or
    reaches outside the project or into metadata, SandboxError for one that crosses a
    symlink or cannot be enforced.
    """
    made: list[Path] = []
    guard_plan = _guard_protected(project_root, protected_paths)
    if scopes is None:
        guard_plan.writable = (project_root,)
        return guard_plan
    dirs: list[Path] = []
    patterns: dict[Path, list[str]] = {}
    for scope in scopes:
        parts = normalise(scope)
        static = glob_static_prefix("/".join(parts))[0] if parts else ()
        rest = parts[len(static):]
        _check_no_symlink(project_root, tuple(static), scope)
        base = project_root.joinpath(*static)
        if not parts or rest in (("**",), ("**", "*")):
            dirs.append(base)
        elif not rest:  # a literal path
            if scope.endswith("/") or base.is_dir():
                dirs.append(base)
            elif static:
                patterns.setdefault(base.parent, []).append(base.name)
            else:
                dirs.append(base)
        elif len(rest) == 1 and "**" not in rest[0]:
            patterns.setdefault(base, []).append(rest[0])
        else:
            problem, hint = enforceable_problem(scope) or (f"write scope {scope!r} cannot be enforced", "")
            raise SandboxError(problem, hint)
    for directory in dirs:
        _make_dirs(directory, made)
    dirs = _outermost(dirs)
    staged = [(d, tuple(p)) for d, p in patterns.items() if not any(d == w or d.is_relative_to(w) for w in dirs)]
    result = ScopePlan(writable=tuple(dirs), made=made, protected=guard_plan.protected, pinned=guard_plan.pinned,
                       guards=guard_plan.guards)
    if staged:
        if stage_root is None:
            raise SandboxError("a file or pattern write scope needs a staging dir for the turn")
        mounted = [*dirs, *(d for d, _ in staged)]  # a deeper staged view is bound there too
        result.staged = tuple(_stage(project_root, directory, pats, stage_root / f"stage-{i}", mounted, made,
                                     _guarded_names(project_root, directory, protected_paths))
                              for i, (directory, pats) in enumerate(sorted(staged)))
    return result


def _guarded_names(root: Path, directory: Path, patterns: tuple[str, ...]) -> tuple[str, ...]:
    """Names or one-level patterns of the protected entries directly in `directory`."""
    names: list[str] = []
    relative = directory.relative_to(root).parts
    for pattern in patterns:
        guarded = protected.region(pattern)
        if guarded is None:
            continue
        full = guarded.parts if guarded.name is None else (*guarded.parts, guarded.name)
        if guarded.name is not None and guarded.parts == relative:
            names.append(guarded.name)
        elif guarded.name is None and full[: len(relative)] == relative and len(full) > len(relative):
            names.append(full[len(relative)])
        elif full[: len(relative)] == relative[: len(full)] and len(full) <= len(relative):
            names.append("*")  # the whole directory is protected
    return tuple(names)


def _outermost(paths: list[Path]) -> list[Path]:
    kept: list[Path] = []
    for path in sorted(set(paths), key=lambda p: len(p.parts)):
        if not any(path == k or path.is_relative_to(k) for k in kept):
            kept.append(path)
    return kept


def _sha(path: Path) -> str:
    import hashlib  # only staged scopes hash files (its OpenSSL start-up is a few ms of every turn otherwise)

    digest = hashlib.sha256()
    with open(path, "rb", opener=lambda p, f: os.open(p, f | os.O_NOFOLLOW)) as handle:
        for chunk in iter(lambda: handle.read(1 << 16), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _stage(root: Path, real: Path, patterns: tuple[str, ...], stage: Path, writable: list[Path],
           made: list[Path], guarded: tuple[str, ...] = ()) -> Staged:
    """Build the private view of `real`: matching files copied, everything else bound back read-only."""
    _make_dirs(real, made)
    stage.mkdir(parents=True)
    try:
        entries = list(os.scandir(real))
    except OSError as exc:
        raise SandboxError(f"cannot read {real} for a write scope: {exc.strerror}") from None
    if len(entries) > MAX_SEALED_ENTRIES:
        names = ", ".join(patterns)
        raise SandboxError(f"{real} holds {len(entries)} entries: too many to seal around the write scope {names}",
                           f"give the role the directory instead (`{real.relative_to(root)}/**`), or move the file")
    view = Staged(real=real, stage=stage, patterns=patterns, guarded=guarded)
    sealed: list[Path] = []
    links: list[tuple[str, Path]] = []
    inner = {w.relative_to(real).parts[0] for w in writable if w != real and w.is_relative_to(real)}
    for entry in entries:
        path = real / entry.name
        if entry.name in inner:
            continue  # a deeper directory scope is bound there
        if entry.is_symlink():
            links.append((os.readlink(path), path))
        elif entry.is_file(follow_symlinks=False) and view.matches(entry.name) and entry.name not in METADATA_NAMES:
            shutil.copy2(path, stage / entry.name, follow_symlinks=False)
            view.copied[entry.name] = _sha(stage / entry.name)
        else:
            sealed.append(path)
    view.sealed = tuple(sealed)
    view.links = tuple(links)
    view.mountpoints = frozenset({p.name for p in sealed} | {p.name for _, p in links} | inner)
    return view


def finish(scope_plan: ScopePlan, discard_dir: Path) -> list[str]:
    """After the turn: carry the role's changes of staged files back, keep the rest aside; tidy up.

    Returns one line per thing not carried back (for the turn's log).
    """
    notes: list[str] = []
    for view in scope_plan.staged:
        notes += _carry_back(view, discard_dir)
        shutil.rmtree(view.stage, ignore_errors=True)
    for guard in scope_plan.guards:
        notes += _sweep(guard, discard_dir)
    for path in reversed(scope_plan.made):
        with contextlib.suppress(OSError):
            path.rmdir()  # only when empty
    return notes


def _keep_aside(source: Path, discard_dir: Path, relative: str) -> None:
    target = discard_dir / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        os.rename(source, target)


def _carry_back(view: Staged, discard_dir: Path) -> list[str]:
    notes: list[str] = []
    try:
        real_fd = os.open(view.real, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return [f"{view.real} is gone or is no longer a directory: the turn's changes there are in {discard_dir}"]
    try:
        present = {e.name: e for e in os.scandir(view.stage)}
        for name, entry in present.items():
            if name in view.mountpoints:
                continue
            staged_path = view.stage / name
            rel = f"{view.real.name}/{name}"
            if not (view.matches(name) and entry.is_file(follow_symlinks=False)) or name in METADATA_NAMES:
                _keep_aside(staged_path, discard_dir, rel)
                notes.append(f"{view.real / name}: outside the role's write scope; kept aside in {discard_dir}")
                continue
            new_sha = _sha(staged_path)
            before = view.copied.get(name)
            if before == new_sha:
                continue
            current = _current_sha(real_fd, name)
            if current != before:  # changed (or created) by someone else during the turn
                _keep_aside(staged_path, discard_dir, rel)
                notes.append(f"{view.real / name}: changed outside the turn meanwhile; the role's version "
                             f"is kept in {discard_dir}")
                continue
            _install(real_fd, staged_path, name)
        for name, sha in view.copied.items():
            if name not in present and _current_sha(real_fd, name) == sha:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=real_fd)
    finally:
        os.close(real_fd)
    return notes


def _sweep(guard: Guard, discard_dir: Path) -> list[str]:
    """Move aside every protected match that appeared (or was replaced) in `guard.directory` during the turn."""
    notes: list[str] = []
    try:
        entries = list(os.scandir(guard.directory))
    except OSError:
        return notes
    for entry in entries:
        if not fnmatch.fnmatchcase(entry.name, guard.pattern):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if guard.before.get(entry.name) == (info.st_dev, info.st_ino):
            continue
        _keep_aside(guard.directory / entry.name, discard_dir, f"protected/{entry.name}")
        notes.append(f"{guard.directory / entry.name}: a protected path, which no role may write; "
                     f"kept aside in {discard_dir}")
    return notes


def _current_sha(dir_fd: int, name: str) -> str | None:
    """sha256 of the regular file `name` in the directory, None when absent; 'other' for anything else."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError:
        return "other"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "other"
        import hashlib

        digest = hashlib.sha256()
        while chunk := os.read(fd, 1 << 16):
            digest.update(chunk)
        return digest.hexdigest()
    finally:
        os.close(fd)


def _install(dir_fd: int, source: Path, name: str) -> None:
    """Put `source` in the directory as `name`, atomically (a temp file there, then a rename)."""
    temp = f".{name}.agentbox-{os.getpid()}.tmp"
    mode = os.lstat(source).st_mode & 0o777
    out = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode, dir_fd=dir_fd)
    try:
        with open(source, "rb", opener=lambda p, f: os.open(p, f | os.O_NOFOLLOW)) as handle:
            while chunk := handle.read(1 << 16):
                os.write(out, chunk)
        os.fsync(out)
    except BaseException:
        os.close(out)
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        raise
    os.close(out)
    os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def metadata_paths(project_root: Path) -> tuple[Path, ...]:
    """VCS and agentbox metadata present at the project root (and a worktree's admin dir), to bind read-only."""
    found: list[Path] = []
    for name in METADATA_NAMES:
        path = project_root / name
        if os.path.lexists(path):
            found.append(path)
    git = project_root / ".git"
    if git.is_file() and not git.is_symlink():  # a worktree or submodule: `gitdir: <admin dir>`
        with contextlib.suppress(OSError, UnicodeDecodeError):
            first = git.read_text()[:4096].splitlines()[0]
            if first.startswith("gitdir:"):
                admin = (project_root / first.split(":", 1)[1].strip()).resolve()
                if admin.is_dir():
                    found.append(admin)
    modules = project_root / ".gitmodules"
    if modules.is_file() and not modules.is_symlink():
        with contextlib.suppress(OSError, UnicodeDecodeError):
            for line in modules.read_text()[:65536].splitlines():
                key, _, value = line.partition("=")
                if key.strip() == "path" and value.strip():
                    sub = project_root / value.strip() / ".git"
                    if os.path.lexists(sub) and sub.resolve().is_relative_to(project_root.resolve()):
                        found.append(sub)
    return tuple(found)


def worktree_metadata_paths(worktree: Path) -> tuple[Path, ...]:
    """`metadata_paths` of a task's worktree, less its admin dir and `.git` entries (the
    sandbox's git view stands in for them) and `.agent-box` (the project's own is protected)."""
    return tuple(p for p in metadata_paths(worktree)
                 if p.is_relative_to(worktree) and p.name not in (".git", ".agent-box"))
