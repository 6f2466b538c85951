"""A node's turn seen live on the head: its output and logs as they grow, its CPU and memory.

While a turn runs on a node, the node looks at it every `STREAM_EVERY_S` (the pace faces
follow a run at, `runs.FOLLOW_POLL_S`): what the local runner there added to the turn's
logs since the last look (`turn-N.log`, `turn-N.stderr.log`, the live view's segments
`turn-N.live/*.jsonl`, read by offset) goes to the head as a `NodeOutput`, and every
`SAMPLE_EVERY_S` its process tree's CPU and memory as a `NodeSample`. A look that finds
nothing new says nothing, so a turn shorter than one look costs nothing.

The head (`LogMirror`) writes each piece at its offset into the same file of its session
store, so `agentbox tail`, the dashboard's live view and the task screen follow a node's
turn as they follow one here; a piece written twice lands on the same bytes. A sample goes
into the session's record (`running.sample`), where the members table reads it. When the
turn's result comes back, its logs are written whole (`travel.store_back`) and what the
node had removed meanwhile (live segments past the view's ring) is removed here, so the
head holds what the finished turn left, byte for byte. An earlier attempt of the same turn
that never finished (its node lost, the head killed) left its pieces here: they are moved
aside as a local turn's interrupted attempt is (`turn-N.interrupted-K.log`) before the new
attempt writes any.

What streams is what the turn's logs hold, masked as the local runner masks them; nothing
else of the node's.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentbox.core.engine.runners import travel
from agentbox.core.records import NodeSampleRecord

if TYPE_CHECKING:
    from agentbox.core.agents.invoke import Agent
    from agentbox.core.agents.sessions import SessionRecord, SessionStore

STREAM_EVERY_S = 0.25
"""How often a node looks at its running turn (the pace a face follows a run at, `runs.FOLLOW_POLL_S`)."""
SAMPLE_EVERY_S = 1.0
"""How often a node samples its running turn's process tree (the dashboard's sampling pace)."""
LOOK_BYTES = 1 << 20
"""Most bytes of the turn's logs one look sends (the rest goes with the next look, or the result)."""


@dataclass(frozen=True)
class LogPiece:
    """Bytes a node's turn added to one of its log files, at `offset`."""

    name: str
    """The file, relative to the session's logs dir (`turn-N.log`, `turn-N.live/000001.jsonl`)."""
    offset: int
    data: bytes


@dataclass(frozen=True)
class NodeOutput:
    """What the turn's logs on the node gained since the node's last look (never empty)."""

    pieces: tuple[LogPiece, ...]
    gone: tuple[str, ...] = ()
    """Files the turn's live view removed since (segments past its ring)."""


@dataclass(frozen=True)
class NodeSample:
    """The node's turn's process tree at one moment (the dashboard's `ProcessSample`, from the node)."""

    cpu_percent: float
    """Sum over the tree; 100 = one core busy."""
    rss_bytes: int
    processes: int
    at: float


Said = NodeOutput | NodeSample
"""What a node says while its turn runs."""


def turn_log_names(turn: int) -> re.Pattern[str]:
    """The names of turn `turn`'s log files that stream (relative to the logs dir)."""
    return re.compile(rf"turn-{turn}\.(?:log|stderr\.log|live/\d{{6}}\.jsonl)")


# ----------------------------------------------------------------------------- on the node
class TurnLogs:
    """On a node: the turn's log files, read by offset from the last look."""

    def __init__(self, logs: Path, turn: int) -> None:
        self.logs = logs
        self.turn = turn
        self.offsets: dict[str, int] = {}

    def _names(self) -> list[str]:
        names = [f"turn-{self.turn}.log", f"turn-{self.turn}.stderr.log"]
        live = f"turn-{self.turn}.live"
        with contextlib.suppress(OSError):
            names += sorted(f"{live}/{name}" for name in os.listdir(self.logs / live) if name.endswith(".jsonl"))
        return names

    def look(self, budget: int = LOOK_BYTES) -> NodeOutput | None:
        """What the files gained since the last look (None: nothing)."""
        pieces, present = [], set()
        for name in self._names():
            try:
                fd = os.open(self.logs / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                continue
            present.add(name)
            try:
                offset = self.offsets.get(name, 0)
                data = os.pread(fd, budget, offset) if budget > 0 else b""
            except OSError:
                data = b""
            finally:
                os.close(fd)
            if data or name not in self.offsets:  # a file is made on the head as soon as it is made here
                pieces.append(LogPiece(name, offset, data))
                self.offsets[name] = offset + len(data)
                budget -= len(data)
        gone = tuple(name for name in self.offsets if name not in present and "/" in name)
        for name in gone:
            del self.offsets[name]
        return NodeOutput(tuple(pieces), gone) if pieces or gone else None


class TreeSampler:
    """On a node: the CPU and memory of the turn's process tree (psutil, as the dashboard samples one here)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._procs: dict[int, Any] = {}
        self.sample()  # the baseline each process's CPU is measured from

    def sample(self) -> NodeSample | None:
        """The tree now (None: its root is gone)."""
        import psutil

        try:
            root = self._procs.get(self.pid) or psutil.Process(self.pid)
            members = [root, *root.children(recursive=True)]
        except psutil.Error:
            return None
        cpu, rss, count = 0.0, 0, 0
        seen = {}
        for proc in members:
            proc = self._procs.get(proc.pid, proc)
            try:
                with proc.oneshot():
                    cpu += proc.cpu_percent(None)
                    rss += proc.memory_info().rss
            except psutil.Error:
                continue
            seen[proc.pid] = proc
            count += 1
        self._procs = seen
        return NodeSample(round(cpu, 1), rss, count, round(time.time(), 2))


def follow_turn(loop: asyncio.Runner, running: asyncio.Task[Any], sessions: SessionStore, record: dict[str, Any],
                pid: int) -> Iterator[Said]:
    """Run the turn on `loop` until it ends, saying at every look what its logs gained and, now
    and then, what its tree holds. Nothing is said after the turn's end (its result carries it all).

    `record` is the session's record as the turn started on the node (in `sessions`), `pid` its process.
    """
    from agentbox.core.agents.sessions import SessionRecord

    turn = turn_of(record)
    if turn is None:
        loop.run(asyncio.wait([running]))
        return
    output = TurnLogs(sessions.logs_dir(SessionRecord.from_dict(record)), turn)
    sampler: TreeSampler | None = None
    sampled = time.monotonic()
    while True:
        loop.run(asyncio.wait([running], timeout=STREAM_EVERY_S))
        if running.done():
            return
        said = output.look()
        if said is not None:
            yield said
        if sampler is None:
            sampler = TreeSampler(pid)
        elif time.monotonic() - sampled >= SAMPLE_EVERY_S:
            sampled = time.monotonic()
            sample = sampler.sample()
            if sample is not None:
                yield sample


# ----------------------------------------------------------------------------- on the head
class LogMirror:
    """On the head: a node's turn's logs written where a local turn's go, as they come."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.logs: Path | None = None
        self.names: re.Pattern[str] | None = None
        self.written: set[str] = set()
        self.record: SessionRecord | None = None
        """The session's record on the head while the turn runs there (its samples go in it)."""

    def start_of(self, record: dict[str, Any]) -> None:
        """The node's turn began, as the node's record of the session says (see `start`)."""
        turn = turn_of(record)
        if turn is not None:
            self.start(record, turn)

    def start(self, record: dict[str, Any], turn: int) -> None:
        """The node's turn `turn` of the session `record` (the node's record) began: an earlier
        attempt's logs of that turn, left here unfinished, are moved aside first."""
        from agentbox.core.agents.invoke import keep_interrupted_attempt
        from agentbox.core.agents.sessions import SessionRecord
        from agentbox.core.errors import NotFoundError, StateError

        if self.logs is not None:
            return
        logs = self.agent.sessions.logs_dir(SessionRecord.from_dict(record))
        out, err, live = (logs / f"turn-{turn}{suffix}" for suffix in (".log", ".stderr.log", ".live"))
        if os.path.lexists(out) or os.path.lexists(err):
            try:
                here = self.agent.sessions.find(str(record.get("id")))
            except (NotFoundError, StateError):
                here = SessionRecord.from_dict(record)
            keep_interrupted_attempt(self.agent.sessions, here, turn, out, err,
                                     "its node was lost, or the engine stopped")
        if os.path.lexists(live):
            with contextlib.suppress(OSError):
                if live.is_symlink():
                    live.unlink()
                else:
                    shutil.rmtree(live)
        self.logs, self.names = logs, turn_log_names(turn)

    def take(self, output: NodeOutput) -> None:
        """Write what the node's turn added to its logs, each piece at its offset."""
        if self.logs is None or self.names is None:
            return
        for piece in output.pieces:
            if not self.names.fullmatch(piece.name):
                continue
            path = self.logs / piece.name
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                if piece.offset <= os.fstat(fd).st_size:  # a gap (never, in order) is filled by the result
                    os.pwrite(fd, piece.data, piece.offset)
                    self.written.add(piece.name)
            finally:
                os.close(fd)
        for name in output.gone:
            if self.names.fullmatch(name):
                with contextlib.suppress(FileNotFoundError):
                    (self.logs / name).unlink()
                self.written.discard(name)

    def sample(self, sample: NodeSample) -> None:
        """Keep the node's sample in the session's record on the head (`running.sample`)."""
        record = self.record
        if record is None or record.running is None:
            return
        record.running["sample"] = NodeSampleRecord(cpu_percent=sample.cpu_percent, rss_bytes=sample.rss_bytes,
                                                    processes=sample.processes, at=sample.at)
        self.agent.sessions.save(record)

    def store_back(self, back: travel.SessionBack) -> None:
        """The session's files from the node kept here (`travel.store_back`), its logs as the turn left them."""
        turn = last_turn(back)
        if self.logs is None and back.record is not None and turn is not None:  # it ended before it was said to run
            self.start(back.record, turn)
        travel.store_back(self.agent, back)
        self.finish(back)

    def finish(self, back: travel.SessionBack) -> None:
        """The turn's logs came back whole (written by `store_back`): what the node no longer had goes."""
        if self.logs is None:
            return
        for name in sorted(self.written - set(back.logs)):
            with contextlib.suppress(FileNotFoundError):
                (self.logs / name).unlink()
        self.written.clear()


def turn_of(record: dict[str, Any] | None) -> int | None:
    """The number of the turn a session's record says runs (None: none)."""
    running = (record or {}).get("running")
    turn = running.get("turn") if isinstance(running, dict) else None
    return turn if isinstance(turn, int) and not isinstance(turn, bool) and turn > 0 else None


def last_turn(back: travel.SessionBack) -> int | None:
    """The turn a node's turn recorded (its last turn line), for a turn that ended before it was said to run."""
    turn = back.turn_lines[-1].get("turn") if back.turn_lines else None
    return turn if isinstance(turn, int) and not isinstance(turn, bool) else None
