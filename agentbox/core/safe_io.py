"""Opening files that someone else may control: regular files only, bounded, no symlinks out.

Agents write inside their sandbox, and repositories bring their own files; both can put a
symlink, a FIFO, a device or a huge file where agentbox expects a small regular file. Every
read of such a path goes through `read_bounded`: it never blocks on a FIFO (the open is
non-blocking and the type is checked on the open descriptor), never follows a final
symlink unless asked to, and never reads more than its cap. Every write agentbox makes in
a directory an agent can also write goes through `write_new` (no following, no
overwriting what the agent planted).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

DEFAULT_MAX_BYTES = 1 << 20
"""Cap for configuration-sized files (1 MiB)."""


class UnsafeFileError(OSError):
    """A path that is not a plain, bounded regular file (or could not be opened safely)."""

    def __init__(self, path: Path | str, reason: str) -> None:
        super().__init__(errno.EINVAL, reason, str(path))
        self.path = Path(path)
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


def _describe(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISLNK(mode):
        return "a symlink"
    return "not a regular file"


def describe_mode(mode: int) -> str:
    """What a file of this `st_mode` is, for messages: "a directory", "a FIFO", "a device"…"""
    return _describe(mode)


def read_bounded(path: Path | str, *, max_bytes: int = DEFAULT_MAX_BYTES, follow_symlinks: bool = False) -> bytes:
    """The bytes of the regular file at `path`, at most `max_bytes` of them.

    Raises `UnsafeFileError` for a symlink (unless `follow_symlinks`), a directory, FIFO,
    device or socket, and for a file larger than `max_bytes`; `FileNotFoundError` when
    nothing is there. Never blocks: a FIFO is opened non-blocking and refused.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeFileError(path, "is a symlink, which agentbox does not follow here") from None
        if exc.errno == errno.EISDIR:
            raise UnsafeFileError(path, "is a directory, not a file") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeFileError(path, f"is {_describe(info.st_mode)}, not a regular file")
        if info.st_size > max_bytes:
            raise UnsafeFileError(path, f"is {info.st_size:,} bytes, more than the {max_bytes:,} allowed")
        chunks: list[bytes] = []
        remaining = max_bytes + 1
        while remaining > 0:
            chunk = os.read(fd, min(remaining, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        data = b"".join(chunks)
        if len(data) > max_bytes:  # grew while we read it
            raise UnsafeFileError(path, f"is more than the {max_bytes:,} bytes allowed")
        return data
    finally:
        os.close(fd)


def write_new(path: Path | str, data: bytes, mode: int = 0o600) -> None:
    """Create `path` with `data`; refuses (FileExistsError) when anything, a symlink included, is there."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        write_all(fd, data)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of `data` to the descriptor (os.write may take less at a time)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_fresh(path: Path | str, data: bytes, mode: int = 0o600) -> None:
    """`write_new` after removing the file or symlink already at `path` (the link itself, never its target).

    For files agentbox writes into a directory an agent could write before (a reused
    scratch dir): what the agent planted is dropped, nothing is written through it. A
    directory there is refused (`UnsafeFileError`).
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if stat.S_ISDIR(info.st_mode):
            raise UnsafeFileError(path, "is a directory, not a file")
        os.unlink(path)
    write_new(path, data, mode)


def inside(path: Path, root: Path) -> bool:
    """True when `path`, with every symlink resolved, is `root` or lies under it (`root` resolved too)."""
    try:
        real = path.resolve(strict=False)
    except (OSError, RuntimeError):
        return False
    base = root.resolve(strict=False)
    return real == base or real.is_relative_to(base)
