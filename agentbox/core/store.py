"""The only writer of state files: atomic replace under a lock, and append-only logs.

Every write goes to a temporary file in the same directory, is flushed and fsynced, then
renamed over the target, so a reader (or a crash) only ever sees the old or the new
content. Writers that read-modify-write take an exclusive `fcntl` lock on a sidecar
`<name>.lock` file so the CLI, the TUI and the engine never race.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def atomic_write_bytes(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace `path` with `data` atomically (temp file + fsync + rename).

    Atomicity alone survives a killed process; `durable` (fsync) also survives a power
    loss, at about a millisecond per write. History files that can be rebuilt or lost
    without harm (session records) pass `durable=False`.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        if path.exists():
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
def locked(path: Path, *, shared: bool = False) -> Iterator[None]:
    """Hold an fcntl lock on `<path>.lock` for the duration of the block."""
    lock_path = path.with_name(path.name + ".lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def append_jsonl(path: Path, record: dict[str, Any], *, durable: bool = True, single_writer: bool = False) -> None:
    """Append one JSON line under the file's lock; a line is never interleaved or torn.

    `single_writer`: the caller already guarantees nobody else appends to `path` (a
    session's turns, under the session's turn lock), so no lock file is taken.
    """
    line = (json.dumps(record, ensure_ascii=False, default=str) + "\n").encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.nullcontext() if single_writer else locked(path):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)


def read_json(path: Path, default: Any = None) -> Any:
    """Read a JSON file written by this module; `default` when it does not exist."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return default


def read_jsonl(path: Path, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """Read complete JSON lines from byte `offset`; returns them and the next offset.

    A trailing partial line (a writer mid-append) is left for the next call.
    """
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            data = handle.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n")
    if end < 0:
        return [], offset
    records: list[dict[str, Any]] = []
    for raw in data[: end + 1].splitlines():
        if raw.strip():
            with contextlib.suppress(json.JSONDecodeError):
                records.append(json.loads(raw))
    return records, offset + end + 1
