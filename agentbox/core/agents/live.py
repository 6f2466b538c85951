"""The live output of a running turn: display events written as they happen, followed by offset.

invoke tees the tool's stdout and stderr into a `LiveWriter`. It cuts them into lines
(a line longer than `LINE_BYTES` is cut), masks the profile's secrets, turns each stdout
line into display events with the adapter's `display` and appends them, one JSON line
each, to the turn's live log: the directory `turn-N.live/` next to the turn's raw log,
in numbered segments of at most `SEGMENT_BYTES`, of which the newest `KEEP_SEGMENTS` are
kept. A flood of output therefore keeps its last megabytes and never more, and the log
is only ever appended to; output faster than `RATE_BYTES_S` (after a first burst) is
counted rather than shown, so a flood costs the turn little. Its last line says that
the turn ended, and how.

Readers in other processes (`agentbox tail`, the dashboard) follow it with a
`LiveCursor`: a segment and an offset into it, reading only what was added since, at most
`READ_BYTES` per call, so neither a reader's memory nor its work grows with the turn.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from agentbox.core.config.secrets import mask
from agentbox.core.runtimes.base import DisplayEvent

LINE_BYTES = 256 << 10
"""Longest line taken from the tool's output (a JSON message with a big tool result fits); the rest is dropped."""
JSON_LINES_PER_CHUNK = 32
"""Most JSON lines of one chunk of output turned into events (a chunk holds more only in a flood)."""
EVENT_CHARS = 8000
"""Most characters of one event's text in the live log."""
SEGMENT_BYTES = 512 << 10
"""Size at which the writer starts the next segment."""
KEEP_SEGMENTS = 4
"""Segments kept: the live log of a turn never holds much more than KEEP_SEGMENTS × SEGMENT_BYTES."""
RATE_BYTES_S = 1 << 20
"""Output shown per second once a burst is spent; a flood beyond it is counted, not shown (no one reads that fast)."""
BURST_BYTES = KEEP_SEGMENTS * SEGMENT_BYTES
"""Output shown at once before the rate applies."""
READ_BYTES = 256 << 10
"""Most bytes a reader takes in one call."""
SUFFIX = ".jsonl"


def live_dir_for(log_path: Path) -> Path:
    """The live log of the turn whose raw stdout log is `log_path` (`turn-N.log` → `turn-N.live`)."""
    return log_path.with_name(log_path.name.removesuffix(".log") + ".live")


@dataclass(frozen=True)
class LiveEvent:
    """One line of a live log: a display event, a stderr line, or the turn's end."""

    kind: str
    """text, tool, result, error, note (from the adapter), stderr, cut (output dropped), end."""
    text: str
    name: str | None = None
    at: float = 0.0

    @property
    def ended(self) -> bool:
        """This is the turn's last line."""
        return self.kind == "end"


class _Lines:
    """Cuts a byte stream at line ends, bounded: a line is kept up to LINE_BYTES, the rest of it dropped."""

    def __init__(self) -> None:
        self.partial = b""
        self.dropping = False

    def feed(self, chunk: bytes) -> str | None:
        """The lines `chunk` completes, as one text without its last newline (None when it completes none)."""
        last = chunk.rfind(b"\n")
        if last < 0:
            self._keep(chunk)
            return None
        first_end = chunk.find(b"\n")
        if self.dropping:  # a line too long to keep ends here: what was kept of it, marked
            parts = [self._line(self.partial) + " …"] if self.partial else []
        else:
            parts = [self._line(self.partial + chunk[:first_end])]
        self.partial, self.dropping = b"", False
        if first_end < last:  # the lines after the first, decoded at once (each is shorter than a chunk)
            parts.append(str(chunk[first_end + 1:last], "utf-8", errors="replace"))
        self._keep(chunk[last + 1:])
        return "\n".join(parts)

    def skip(self, chunk: bytes) -> None:
        """Pass over `chunk` unread: the line it is in the middle of is not shown."""
        last = chunk.rfind(b"\n")
        if last < 0:
            self.dropping = True
            return
        self.partial, self.dropping = b"", False
        self._keep(chunk[last + 1:])

    def _keep(self, rest: bytes) -> None:
        if self.dropping:
            return
        room = LINE_BYTES - len(self.partial)
        self.partial += rest[:room]
        if len(rest) > room:  # the line goes on past what is kept of it: the rest is dropped
            self.dropping = True

    def flush(self) -> str | None:
        """What is left of a last line without a newline."""
        if not self.partial:
            return None
        line = self._line(self.partial) + (" …" if self.dropping else "")
        self.partial, self.dropping = b"", False
        return line

    @staticmethod
    def _line(data: bytes) -> str:
        cut = len(data) > LINE_BYTES
        return str(data[:LINE_BYTES], "utf-8", errors="replace").rstrip("\r") + (" …" if cut else "")


class LiveWriter:
    """The writing end of one turn's live log (see the module's docstring)."""

    def __init__(self, directory: Path, display: Callable[[str], list[DisplayEvent]],
                 secrets: tuple[str, ...] = (), *, clock: Callable[[], float] = time.time,
                 rate_bytes_s: float = RATE_BYTES_S, burst_bytes: int = BURST_BYTES) -> None:
        self.directory = directory
        self._display = display
        self._secrets = tuple(s for s in secrets if len(s) >= 4)
        self._clock = clock
        self._out = _Lines()
        self._err = _Lines()
        self._segment = 0
        self._size = 0
        self._fd: int | None = None
        self.ended = False
        self._rate, self._burst = rate_bytes_s, float(burst_bytes)
        self._budget = self._burst
        self._refilled = time.monotonic()
        self._skipped_lines = 0
        with contextlib.suppress(OSError):  # an earlier attempt of this turn (an engine crash) starts over
            if directory.is_symlink():
                directory.unlink()
            else:
                shutil.rmtree(directory)
        try:
            directory.mkdir(mode=0o700, parents=True)
            self._open(1)
        except OSError:
            self._fd = None  # no live view; the turn itself goes on

    def _open(self, segment: int) -> None:
        path = self.directory / f"{segment:06d}{SUFFIX}"
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        self._segment, self._size = segment, 0
        old = self.directory / f"{segment - KEEP_SEGMENTS:06d}{SUFFIX}"
        with contextlib.suppress(OSError):
            old.unlink()

    def feed_stdout(self, chunk: bytes) -> None:
        """Bytes the tool wrote to stdout."""
        self._feed(self._out, chunk, stderr=False)

    def feed_stderr(self, chunk: bytes) -> None:
        """Bytes the tool wrote to stderr."""
        self._feed(self._err, chunk, stderr=True)

    def _feed(self, lines: _Lines, chunk: bytes, *, stderr: bool) -> None:
        if self._fd is None:
            return
        if not self._admit(len(chunk)):  # counted, not shown: not even decoded
            self._skipped_lines += chunk.count(b"\n")
            lines.skip(chunk)
            return
        if self._skipped_lines:
            self._append([("cut", f"… {self._skipped_lines:,} lines went by too fast to show "
                                  "(the turn's raw log has them)", None)])
            self._skipped_lines = 0
        self._write(lines.feed(chunk), stderr=stderr)

    def _write(self, text: str | None, *, stderr: bool) -> None:
        """Complete lines of output as events: JSON lines through the adapter, the rest as text in blocks.

        Only lines that look like JSON objects cost a call each; a flood of text is cut into
        events by position, so the live view adds little to a turn whatever it prints.
        """
        if self._fd is None or not text:
            return
        if self._secrets:
            text = mask(text, self._secrets)
        if stderr:
            self._append(_blocks("stderr", text))
            return
        if "{" not in text:  # no JSON line in it: cut into blocks by position
            self._append(_blocks("text", text))
            return
        events: list[tuple[str, str, str | None]] = []
        matches = list(_JSON_LINE.finditer(text))
        position = 0
        if len(matches) > JSON_LINES_PER_CHUNK:  # a flood of JSON: the newest lines are shown, as the ring would keep
            position = matches[-JSON_LINES_PER_CHUNK].start()
            skipped = text.count("\n", 0, position)
            events.append(("cut", f"… {skipped} lines went by too fast to show (all are in the turn's log)", None))
            matches = matches[-JSON_LINES_PER_CHUNK:]
        for match in matches:
            events += _blocks("text", text[position:match.start()])
            position = match.end()
            line = match.group(0)
            try:
                shown = self._display(line)
            except Exception:  # noqa: BLE001 - a line the adapter cannot read is shown as it is
                shown = [DisplayEvent("text", line)]
            events += [(event.kind, event.text, event.name) for event in shown]
        events += _blocks("text", text[position:])
        self._append(events)

    def _admit(self, size: int) -> bool:
        """Whether output of `size` bytes is shown: at most `rate_bytes_s` a second, after a first `burst_bytes`."""
        now = time.monotonic()
        self._budget = min(self._burst, self._budget + (now - self._refilled) * self._rate)
        self._refilled = now
        if self._budget < size:
            return False
        self._budget -= size
        return True

    def _append(self, events: Iterable[tuple[str, str, str | None]]) -> None:
        if self._fd is None:
            return
        at = round(self._clock(), 2)
        data = b"".join(_encode(kind, text, name, at) for kind, text, name in events)
        if not data:
            return
        try:
            if self._size and self._size + len(data) > SEGMENT_BYTES:
                os.close(self._fd)
                self._fd = None
                self._open(self._segment + 1)
            assert self._fd is not None
            os.write(self._fd, data)
            self._size += len(data)
        except OSError:  # a full disk ends the live view, never the turn
            self.close()

    def end(self, status: str) -> None:
        """Write what is left of a last line and the turn's end; close the log."""
        if self.ended:
            return
        self.ended = True
        self._budget = max(self._budget, float(LINE_BYTES))  # the last words of a turn are always shown
        self._write(self._out.flush(), stderr=False)
        self._write(self._err.flush(), stderr=True)
        if self._skipped_lines:
            self._append([("cut", f"… {self._skipped_lines:,} lines went by too fast to show "
                                  "(the turn's raw log has them)", None)])
        self._append([("end", status, None)])
        self.close()

    def close(self) -> None:
        """Close the log (a writer that was not ended leaves no end line: its turn was cut short)."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


_JSON_LINE = re.compile(r"^[ \t]*\{.*$", re.MULTILINE)


def _blocks(kind: str, text: str) -> list[tuple[str, str, str | None]]:
    """`text` (lines of plain output) as events of at most EVENT_CHARS, cut at line ends where it can be."""
    text = text.strip("\n")
    events: list[tuple[str, str, str | None]] = []
    while text and not text.isspace():
        if len(text) <= EVENT_CHARS:
            events.append((kind, text, None))
            break
        cut = text.rfind("\n", 0, EVENT_CHARS)
        if cut <= 0:  # one line longer than an event: its start is shown
            events.append((kind, text[: EVENT_CHARS - 1] + "…", None))
            end = text.find("\n", EVENT_CHARS)
            text = "" if end < 0 else text[end + 1:]
        else:
            events.append((kind, text[:cut], None))
            text = text[cut + 1:]
    return events


def _encode(kind: str, text: str, name: str | None, at: float) -> bytes:
    if len(text) > EVENT_CHARS:
        text = text[: EVENT_CHARS - 1] + "…"
    record: dict[str, object] = {"k": kind, "t": text, "at": at}
    if name:
        record["n"] = name[:200]
    return json.dumps(record).encode() + b"\n"


@dataclass(frozen=True)
class LiveRead:
    """What one `LiveCursor.read` found: the new events, and whether the turn has ended."""

    events: list[LiveEvent]
    ended: bool


class LiveCursor:
    """The reading end: follows one turn's live log from where it last stopped."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.segment: int | None = None
        self.offset = 0
        self._partial = b""
        self.ended = False

    def _segments(self) -> list[int]:
        try:
            names = os.listdir(self.directory)
        except OSError:
            return []
        return sorted(int(n[: -len(SUFFIX)]) for n in names if n.endswith(SUFFIX) and n[: -len(SUFFIX)].isdigit())

    def read(self, max_bytes: int = READ_BYTES) -> LiveRead:
        """The events added since the last call (at most about `max_bytes` of them)."""
        events: list[LiveEvent] = []
        if self.ended:
            return LiveRead(events, True)
        segments = self._segments()
        if not segments:
            return LiveRead(events, False)
        if self.segment is None:
            if segments[0] > 1:
                events.append(_dropped())
            self.segment = segments[0]
        elif self.segment not in segments:  # the writer moved on past what this reader had seen
            events.append(_dropped())
            self.segment = next((s for s in segments if s > self.segment), segments[0])
            self.offset, self._partial = 0, b""
        budget = max_bytes
        while budget > 0:
            data = self._read_segment(budget)
            if data:
                budget -= len(data)
                events.extend(self._parse(data))
                if self.ended:
                    break
                continue
            newer = [s for s in self._segments() if s > self.segment]
            if not newer:
                break
            final = self._read_segment(budget)  # written before the next segment was begun
            if final:
                budget -= len(final)
                events.extend(self._parse(final))
                continue
            if newer[0] != self.segment + 1 or not (self.directory / f"{self.segment:06d}{SUFFIX}").exists():
                events.append(_dropped())  # segments went by unread, or the rest of this one
            self.segment, self.offset, self._partial = newer[0], 0, b""
        return LiveRead(events, self.ended)

    def _read_segment(self, budget: int) -> bytes:
        path = self.directory / f"{self.segment:06d}{SUFFIX}"
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            return b""
        try:
            data = os.pread(fd, budget, self.offset) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
        except OSError:
            data = b""
        finally:
            os.close(fd)
        self.offset += len(data)
        return data

    def _parse(self, data: bytes) -> list[LiveEvent]:
        data = self._partial + data
        cut = data.rfind(b"\n")
        self._partial = data[cut + 1:] if cut >= 0 else data
        if len(self._partial) > 2 * LINE_BYTES + EVENT_CHARS * 4:  # no line of the writer's is that long
            self._partial = b""
        events = []
        for raw in data[: cut + 1].splitlines() if cut >= 0 else ():
            event = _decode(raw)
            if event is not None:
                events.append(event)
                if event.ended:
                    self.ended = True
                    break
        return events


def _dropped() -> LiveEvent:
    return LiveEvent("cut", f"… output dropped here (the live view keeps the latest {KEEP_SEGMENTS * SEGMENT_BYTES >> 20} MB)")


def _decode(raw: bytes) -> LiveEvent | None:
    try:
        record = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("k"), str) or not isinstance(record.get("t"), str):
        return None
    name = record.get("n")
    at = record.get("at")
    return LiveEvent(record["k"], record["t"], name if isinstance(name, str) else None,
                     float(at) if isinstance(at, int | float) and not isinstance(at, bool) else 0.0)

