"""Running an agent process: capped capture of its output, exit classification, killing.

Output is drained into a bounded head and tail in memory (a 50 MB flood costs a few MB)
and a capped log file on disk; a timed-out or abandoned process is killed with its whole
process group and any descendant that left it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections import deque
from pathlib import Path
from typing import BinaryIO, Literal

ErrorKind = Literal["spawn_failed", "timeout", "killed", "nonzero_exit", "tool_error", "parse_error"]

HEAD_BYTES = 1 << 20
"""Bytes kept from the start of each stream (native ids come first)."""
TAIL_BYTES = 4 << 20
"""Bytes kept from the end of each stream (results come last)."""
LOG_CAP_BYTES = 64 << 20
"""Most bytes of a stream written to its log file."""
KILL_GRACE_S = 2.0
"""Time between SIGTERM and SIGKILL of a timed-out process group."""


def _private_log(path: Path) -> BinaryIO:
    """A turn log, readable by its owner only (a tool may print what its environment holds)."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600), "wb")


class CappedStream:
    """Drains one pipe: head and tail kept in memory, everything (capped) in a log file."""

    def __init__(self, log_path: Path, *, lazy: bool = False) -> None:
        """`lazy`: create the log file only when the stream writes something (stderr mostly doesn't)."""
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_size = 0
        self.total = 0
        self.log_path = log_path
        self._log: BinaryIO | None = None if lazy else _private_log(log_path)
        self._truncated: bool | None = None

    def feed(self, chunk: bytes) -> None:
        """Take one chunk: log it (up to the cap), keep it in the head or the rolling tail."""
        if self.total < LOG_CAP_BYTES:
            if self._log is None:
                self._log = _private_log(self.log_path)
            self._log.write(chunk[: LOG_CAP_BYTES - self.total])
        self.total += len(chunk)
        room = HEAD_BYTES - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail.append(chunk)
            self.tail_size += len(chunk)
            while self.tail_size - len(self.tail[0]) >= TAIL_BYTES:
                self.tail_size -= len(self.tail.popleft())

    @property
    def truncated(self) -> bool:
        """True when bytes between the head and the tail were dropped."""
        if self._truncated is not None:
            return self._truncated
        return self.total > len(self.head) + self.tail_size

    def text(self) -> str:
        """Head and tail as text, once (a cut tail starts at its first whole line).

        Built in place in the head buffer, whose bytes are then dropped: a flood costs the
        kept bytes and one str, not several copies of them.
        """
        self._truncated = truncated = self.truncated
        data, self.head = self.head, bytearray()
        if truncated:
            data += b"\n"
        start = len(data)
        while self.tail:
            data += self.tail.popleft()
        self.tail_size = 0
        if truncated:
            cut = data.find(b"\n", start)
            del data[start : cut + 1 if cut >= 0 else len(data)]
        return str(data, "utf-8", errors="replace")

    def close(self) -> None:
        """Close the log file (if one was made)."""
        if self._log is not None:
            self._log.close()


async def drain(reader: asyncio.StreamReader, stream: CappedStream) -> None:
    """Feed everything a pipe yields into `stream` until EOF."""
    while chunk := await reader.read(1 << 16):
        stream.feed(chunk)


def kill_tree(pid: int) -> None:
    """SIGKILL a process group and every descendant that left it."""
    descendants = []
    with contextlib.suppress(Exception):
        import psutil

        descendants = psutil.Process(pid).children(recursive=True)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    for child in descendants:
        with contextlib.suppress(Exception):
            child.kill()


def classify_exit(code: int | None, sandboxed: bool) -> ErrorKind | None:
    """killed (by a signal from outside), nonzero_exit, or None for success."""
    if code is None:
        return "killed"
    if code < 0:
        return "killed" if -code in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP) else "nonzero_exit"
    if code == 0:
        return None
    if sandboxed and code - 128 in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        return "killed"
    return "nonzero_exit"
