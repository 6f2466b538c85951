"""The only writer of state files: atomic replace under a lock, and append-only logs.

State files are what agentbox keeps and reads back: a run's run.json, journal, decision log,
inbox, manifest and disk reserve, sessions, crew.yaml edits, zones, the user's tokens. (A turn's
captured output and live log are streams, written where the process runs; locks are held,
not written.)

Every write goes to a temporary file in the same directory, is flushed and fsynced, then
renamed over the target, so a reader (or a crash) only ever sees the old or the new
content. Writers that read-modify-write take an exclusive `fcntl` lock on a sidecar
`<name>.lock` file so the CLI, the TUI and the engine never race; the wait for a lock is
bounded (anyone who can open a lock file can hold it), and a disk that is full is a typed
`DiskFullError`, not an `OSError` from the middle of a write. Reads are bounded too: a
FIFO, a device or a symlink where a state file should be is refused, never opened.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from agentbox.core.errors import StateError
from agentbox.core.safe_io import UnsafeFileError, read_bounded, write_all

LOCK_TIMEOUT_S = 10.0
"""Longest wait for a state file's lock before giving up with a StateError."""
LOCK_POLL_S = 0.02
"""Time between two tries of a held lock."""
MAX_JSON_BYTES = 64 << 20
"""Cap for a JSON state file (run.json, a session record)."""
MAX_JSONL_READ_BYTES = 256 << 20
"""Most bytes of a JSON-lines file read in one call."""
_FULL = (errno.ENOSPC, errno.EDQUOT)


class DiskFullError(StateError):
    """A state file could not be written because the disk (or the quota) is full."""

    def __init__(self, path: Path, exc: OSError) -> None:
        super().__init__(f"cannot write {path}: {exc.strerror or exc} (the disk or quota is full)",
                         "free some space, then continue with `agentbox run --resume RUN`")
        self.path = path


@contextlib.contextmanager
def disk_full_is_typed(path: Path) -> Iterator[None]:
    """Turn ENOSPC / EDQUOT raised in the block into a `DiskFullError` naming `path`."""
    try:
        yield
    except OSError as exc:
        if exc.errno in _FULL and not isinstance(exc, StateError):
            raise DiskFullError(path, exc) from None
        raise


def atomic_write_bytes(path: Path, data: bytes, *, durable: bool = True, mode: int | None = None) -> None:
    """Replace `path` with `data` atomically (temp file + fsync + rename).

    Atomicity alone survives a killed process; `durable` (fsync) also survives a power
    loss, at about a millisecond per write. History files that can be rebuilt or lost
    without harm (session records) pass `durable=False`. The file keeps its mode (a new
    one: 0600); with `mode`, it has that mode from the moment it appears.
    """
    with disk_full_is_typed(path):
        _atomic_write(path, data, durable, mode)


def _atomic_write(path: Path, data: bytes, durable: bool, mode: int | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)  # mode 0600
    try:
        with os.fdopen(fd, "wb") as handle:
            if mode is not None and mode != 0o600:
                os.fchmod(handle.fileno(), mode)
            handle.write(data)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        if mode is None and path.exists():
            with contextlib.suppress(OSError):
                os.chmod(tmp, path.stat().st_mode & 0o777)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: Path, text: str, *, durable: bool = True) -> None:
    """Replace `path` with `text` (UTF-8) atomically."""
    atomic_write_bytes(path, text.encode("utf-8"), durable=durable)


def atomic_write_json(path: Path, data: Any, *, durable: bool = True) -> None:
    """Replace `path` with pretty JSON atomically."""
    atomic_write_text(path, json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n", durable=durable)


@contextlib.contextmanager
def locked(path: Path, *, shared: bool = False, timeout: float | None = None) -> Iterator[None]:
    """Hold an fcntl lock on `<path>.lock` for the duration of the block.

    The lock is retried without blocking for at most `timeout` seconds (LOCK_TIMEOUT_S by
    default), then a StateError names the lock file: a process that holds it forever
    cannot hang the caller.
    """
    lock_path = path.with_name(path.name + ".lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        deadline = time.monotonic() + (LOCK_TIMEOUT_S if timeout is None else timeout)
        while True:
            try:
                fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise StateError(f"{lock_path} stays locked by another process",
                                     "find it with `fuser` (or `lsof`) on that file; "
                                     "stop it and try again") from None
                time.sleep(LOCK_POLL_S)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def append_jsonl(path: Path, record: Mapping[str, Any], *, durable: bool = True, single_writer: bool = False) -> None:
    """Append one JSON line under the file's lock; a line is never interleaved or torn.

    `single_writer`: the caller already guarantees nobody else appends to `path` (a
    session's turns, under the session's turn lock), so no lock file is taken.
    """
    line = (json.dumps(record, ensure_ascii=False, default=str) + "\n").encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.nullcontext() if single_writer else locked(path), disk_full_is_typed(path):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, line)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)


def append_lines(path: Path, data: bytes, *, expect_size: int | None = None) -> bool:
    """Append whole JSON lines with one write and one fsync, for the file's only writer (no lock file).

    The caller guarantees nobody else appends (it holds the run's engine lock). A last line
    cut short by a crash mid-append is ended first, so the new lines start on their own line
    (readers skip the torn one). `expect_size`: append only to a file of exactly that many
    bytes that ends a line (the journal this writer wrote, untouched since); False when it is not.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with disk_full_is_typed(path):
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            size = os.fstat(fd).st_size
            torn = bool(size) and os.pread(fd, 1, size - 1) != b"\n"
            if expect_size is not None and (size != expect_size or torn):
                return False
            write_all(fd, b"\n" + data if torn else data)
            os.fsync(fd)
        finally:
            os.close(fd)
    return True


@contextlib.contextmanager
def exclusive_lock(path: Path, *, wait: bool = False) -> Iterator[bool]:
    """Try to hold an exclusive fcntl lock on `path` itself; yields False when another process holds it.

    `wait`: block until it is free. For a lock held as long as a process works (a run's
    engine lock), where `locked`'s bounded wait on a sidecar is for one short write.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def reserve_space(path: Path, size: int) -> None:
    """Make `path` at least `size` bytes of really allocated space (a DiskFullError when there is none).

    Zeros are written where fallocate is not supported; a reserve that cannot be made whole is removed.
    """
    with disk_full_is_typed(path):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            if os.fstat(fd).st_size < size:
                _allocate(fd, size)
        except OSError:
            os.unlink(path)
            raise
        finally:
            os.close(fd)


def _allocate(fd: int, size: int) -> None:
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
        block = bytes(1 << 16)
        for _ in range(0, size, len(block)):
            os.write(fd, block)
        os.fsync(fd)


def read_json(path: Path, default: Any = None, *, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """Read a JSON file written by this module; `default` when it does not exist.

    A file that is not a plain regular file, too big, not UTF-8 or not JSON is a
    StateError naming the file (and the line, for a syntax error).
    """
    try:
        raw = read_bounded(path, max_bytes=max_bytes)
    except FileNotFoundError:
        return default
    except UnsafeFileError as exc:
        raise StateError(f"{exc}", "move it away (it is not something agentbox wrote)") from None
    except OSError as exc:
        raise StateError(f"cannot read {path}: {exc.strerror or exc}") from None
    return parse_json(path, raw)


def parse_json(path: Path, raw: bytes) -> Any:
    """The JSON document in `raw` (read from `path`); a StateError with the line when it is not one."""
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise StateError(f"{path}:{line}: not UTF-8 text (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise StateError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    except RecursionError:
        raise StateError(f"{path}: nested too deeply to be a state file") from None


def open_regular(path: Path) -> int:
    """A read-only descriptor of the regular file at `path` (no FIFO, device or symlink; never blocks).

    FileNotFoundError when nothing is there; StateError for anything that is not a plain file.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StateError(f"{path} is a symlink; state files are never links",
                             "move it away and let agentbox write it again") from None
        if exc.errno == errno.EISDIR:
            raise StateError(f"{path} is a directory, not a state file", "move it away") from None
        if exc.errno == errno.ENOENT:
            raise
        raise StateError(f"cannot read {path}: {exc.strerror or exc}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
        raise StateError(f"{path} is {kind}, not a state file", "move it away")
    return fd


def parse_line(raw: bytes) -> dict[str, Any] | None:
    """One JSON-lines record, or None when the line is not a JSON object (garbage, bad UTF-8, a list)."""
    try:
        record = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return record if isinstance(record, dict) else None


def read_jsonl(path: Path, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """Read complete JSON lines from byte `offset`; returns them and the next offset.

    A trailing partial line (a writer mid-append) is left for the next call; lines that
    are not JSON objects are skipped (a validator reports them: `run_store.check_log`).
    At most MAX_JSONL_READ_BYTES are read per call: the next call goes on from there.
    """
    try:
        fd = open_regular(path)
    except FileNotFoundError:
        return [], offset
    try:
        data = os.pread(fd, MAX_JSONL_READ_BYTES, offset)
    finally:
        os.close(fd)
    end = data.rfind(b"\n")
    if end < 0:
        return [], offset
    records: list[dict[str, Any]] = []
    for raw in data[: end + 1].splitlines():
        if raw.strip():
            record = parse_line(raw)
            if record is not None:
                records.append(record)
    return records, offset + end + 1
