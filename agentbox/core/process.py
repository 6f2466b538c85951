"""Running an agent process: capped capture of its output, exit classification, killing.

Output is drained into a bounded head and tail in memory (a 50 MB flood costs a few MB)
and a capped log file on disk; a timed-out or abandoned process is killed with its whole
process group and any descendant that left it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, BinaryIO, Literal

if TYPE_CHECKING:  # the event loop is imported by the callers that run one, not by a blocking turn
    import asyncio
    import subprocess

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

    def __init__(self, log_path: Path, *, lazy: bool = False, tee: Callable[[bytes], None] | None = None) -> None:
        """`lazy`: create the log file only when the stream writes something (stderr mostly doesn't);
        `tee` gets every chunk as it comes (the turn's live view)."""
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_size = 0
        self.total = 0
        self.log_path = log_path
        self._log: BinaryIO | None = None if lazy else _private_log(log_path)
        self._truncated: bool | None = None
        self._tee = tee

    def feed(self, chunk: bytes) -> None:
        """Take one chunk: log it (up to the cap), keep it in the head or the rolling tail."""
        if self._tee is not None:
            self._tee(chunk)
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


def wait_captured(proc: subprocess.Popen[bytes], stdin: bytes | None, stdout: CappedStream, stderr: CappedStream,
                  timeout_s: float | None, note: tuple[float, Callable[[], None]] | None = None) -> bool:
    """Feed `stdin` to `proc`, drain its pipes into the streams and wait for it, without an
    event loop (a caller with one turn to run); True when it timed out.

    The same rules as the event-loop path: the timeout covers the process and its pipes; on
    it the process group gets SIGTERM, and the whole tree SIGKILL `KILL_GRACE_S` later. Any
    exception while waiting (Ctrl-C) kills the tree before it propagates. `note` is (delay,
    callback): the callback runs once if the process is still running after the delay.
    """
    pump = _Pump(proc, stdin, stdout, stderr, note)
    try:
        try:
            pump.run(None if timeout_s is None else time.monotonic() + timeout_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                pump.run(time.monotonic() + KILL_GRACE_S)
            except TimeoutError:
                kill_tree(proc.pid)
                with contextlib.suppress(TimeoutError):
                    pump.run(time.monotonic() + 10)
            return True
    except BaseException:
        kill_tree(proc.pid)
        raise
    finally:
        pump.close()
    return False


class _Pump:
    """The blocking loop of `wait_captured`: one selector over stdin, stdout and stderr."""

    def __init__(self, proc: subprocess.Popen[bytes], stdin: bytes | None, stdout: CappedStream,
                 stderr: CappedStream, note: tuple[float, Callable[[], None]] | None) -> None:
        import selectors

        self.proc = proc
        self.selector = selectors.DefaultSelector()
        self.files: dict[int, IO[bytes]] = {}
        for pipe, sink in ((proc.stdout, stdout), (proc.stderr, stderr)):
            if pipe is not None:
                self.files[pipe.fileno()] = pipe
                self.selector.register(pipe.fileno(), selectors.EVENT_READ, sink)
        self.pending = memoryview(stdin or b"")
        if proc.stdin is not None:
            self.files[proc.stdin.fileno()] = proc.stdin
            if self.pending:
                os.set_blocking(proc.stdin.fileno(), False)
                self.selector.register(proc.stdin.fileno(), selectors.EVENT_WRITE, None)
            else:
                self._done(proc.stdin.fileno())
        self.note_at = None if note is None else time.monotonic() + note[0]
        self.note = None if note is None else note[1]

    def run(self, deadline: float | None) -> None:
        """Until both pipes are at EOF and the process has exited; TimeoutError at `deadline`."""
        import subprocess

        while True:
            now = time.monotonic()
            if self.note is not None and self.note_at is not None and now >= self.note_at:
                self.note_at = None
                self.note()
            if deadline is not None and now >= deadline:
                raise TimeoutError
            wakes = [t for t in (deadline, self.note_at) if t is not None]
            wait = max(0.0, min(wakes) - now) if wakes else None
            if not self.selector.get_map():
                try:
                    self.proc.wait(wait)
                    return
                except subprocess.TimeoutExpired:
                    continue
            for key, _ in self.selector.select(wait):
                if key.data is None:
                    self._write(key.fd)
                else:
                    chunk = os.read(key.fd, 1 << 16)
                    if chunk:
                        key.data.feed(chunk)
                    else:
                        self._done(key.fd)

    def _write(self, fd: int) -> None:
        try:
            written = os.write(fd, self.pending[: 1 << 16])
        except BlockingIOError:
            return
        except (BrokenPipeError, ConnectionResetError):
            written = len(self.pending)
        self.pending = self.pending[written:]
        if not self.pending:
            self._done(fd)

    def _done(self, fd: int) -> None:
        with contextlib.suppress(KeyError):
            self.selector.unregister(fd)
        with contextlib.suppress(OSError):
            self.files.pop(fd).close()

    def close(self) -> None:
        """Close the selector and whatever pipe is still open."""
        for fd in list(self.files):
            self._done(fd)
        self.selector.close()


def kill_group(pid: int) -> None:
    """SIGKILL what is left in the process group of a process that has ended.

    Its descendants that left the group cannot be found once it is reaped (a sandboxed
    turn's die with the sandbox's pid namespace); `kill_tree` is for a live process.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


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


def pid_alive(pid: int) -> bool:
    """True while a process with this pid exists (one of another user's counts: it may not be signalled)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def start_time(pid: int) -> float | None:
    """When process `pid` started, in seconds since the epoch, as psutil's `create_time()` gives it
    (boot time + start ticks), read from /proc without importing psutil; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
        with open("/proc/stat", "rb") as handle:
            boot = next(line for line in handle if line.startswith(b"btime "))
    except (OSError, StopIteration):
        return None
    fields = stat[stat.rfind(b")") + 2:].split()  # after the command name, which may hold spaces and parens
    try:
        ticks = int(fields[19])  # field 22 of proc(5), the third one being fields[0]
        return float(boot.split()[1]) + ticks / os.sysconf("SC_CLK_TCK")
    except (IndexError, ValueError):
        return None
