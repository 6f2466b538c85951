"""Runs on disk: `.agent-box/runs/<run-id>/` with run.json, events.jsonl, the inbox and artifacts.

Single-writer rule: the engine holds an exclusive lock on `engine.lock` for as long as it
runs a run, and is then the only writer of run.json. Another process (the CLI, the TUI)
that wants to change the run appends a command to `inbox.jsonl`; the engine applies it
and acknowledges it in the decision log. When no engine holds the lock, the caller takes
the lock itself and applies the command directly, so there is never a second writer.

A save costs what changed, not what the run weighs: run.json is a snapshot, and each save
after it appends one line to the snapshot's journal (`journal-<saves>.jsonl`) holding the
run's small fields, the tasks, checkpoints and turns the ledger touched, and the new
events. A load replays the journal onto the snapshot; a journal grown past twice the
snapshot (and `JOURNAL_MIN_BYTES`) is folded into a new snapshot, as is every first save
of an engine and the save of a finished run. A journal line cut short by a crash is a save
that never happened: ignored, and the engine's next save is a snapshot. Readers in other
processes read run.json and then its journal; a journal that vanished under them means a
newer snapshot exists, which they read again.

Events reach events.jsonl through the run's `outbox`: state and its new events are saved
together (in the snapshot or the journal line), then appended to the log, so a crash at
any point neither loses nor duplicates an event (the outbox is flushed again on resume). The
engine lock makes its holder the only writer of events.jsonl and the manifest too, so
those appends take no other lock (a lock file can be held by anyone who can open it).

Every file of a run is read bounded and validated: a run whose files are damaged raises
`DamagedRunError` naming the file, the line and what to do, and is listed as damaged
while the project's other runs list fine.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agentbox.core import store
from agentbox.core.engine.changeset import Changes
from agentbox.core.engine.models import MAX_SEQ, TERMINAL_RUN_STATES, Run
from agentbox.core.errors import NotFoundError, StateError, UsageError
from agentbox.core.ids import by_prefix, check_id, is_valid_id
from agentbox.core.paths import ProjectPaths
from agentbox.core.safe_io import UnsafeFileError, read_bounded, write_all

RUN_FILE = "run.json"
EVENTS_FILE = "events.jsonl"
INBOX_FILE = "inbox.jsonl"
ENGINE_LOCK = "engine.lock"
MANIFEST_FILE = "manifest.jsonl"
MAX_RUN_BYTES = 64 << 20
"""Cap for run.json."""
MAX_LOG_BYTES = 1 << 30
"""Cap for events.jsonl, the inbox and the manifest when they are validated."""
JOURNAL_MIN_BYTES = 1 << 20
"""A journal smaller than this is never folded into a snapshot."""
VERIFY_JOURNAL = os.environ.get("AGENTBOX_VERIFY_JOURNAL") == "1"
"""Read every journalled save back and compare it with the state in memory (the test-suite sets it):
a change the ledger did not record would be lost at the next load, and this finds it at once."""
_NOT_JOURNALLED = frozenset({"contract", "tasks", "checkpoints", "jobs", "outbox"})
"""Run fields a journal line does not repeat whole: the contract never changes, the rest by id."""
_SAVES = re.compile(rb'^\{"id":"[^"\\]*","saves":(\d+),')
RESERVE_FILE = "disk-reserve"
RESERVE_MIN_BYTES = 1 << 20
"""Space an engine keeps aside while it runs, to save the run paused when the disk fills up."""
TAIL_BYTES = 1 << 16
"""Bytes at the end of a log a quick check (`runs`, `status`) validates."""


class DamagedRunError(StateError):
    """A run's files are corrupt or not what agentbox wrote; names the file and line (exit 2)."""

    exit_code = 2

    def __init__(self, file: Path, problem: str, *, line: int | None = None, run_id: str | None = None) -> None:
        where = f"{file}:{line}" if line is not None else str(file)
        super().__init__(f"run {run_id or file.parent.name} is damaged: {where}: {problem}",
                         f"fix or move away {file.name} (a backup of the run directory first); "
                         "the project's other runs are not affected")
        self.file = file
        self.line = line
        self.problem = problem


def journal_name(saves: int) -> str:
    """The journal of the snapshot saved as save number `saves`."""
    return f"journal-{saves}.jsonl"


def is_journal(name: str) -> bool:
    """True for the file name of a run's journal."""
    return name.startswith("journal-") and name.endswith(".jsonl")


@dataclass(frozen=True)
class StateBytes:
    """A run's state as read: run.json's bytes and the complete lines of its journal."""

    snapshot: bytes
    journal: bytes
    journal_path: Path


@dataclass(frozen=True)
class DamagedRun:
    """A run that cannot be read, as `agentbox runs` lists it."""

    id: str
    error: DamagedRunError


def new_run_id(now: float | None = None) -> str:
    """A sortable, readable run id: `run-YYYYMMDD-HHMMSS-xxxx`."""
    stamp = datetime.fromtimestamp(now or time.time()).strftime("%Y%m%d-%H%M%S")
    return f"run-{stamp}-{secrets.token_hex(2)}"


class RunStore:
    """Every read and write of one project's runs."""

    def __init__(self, project: ProjectPaths) -> None:
        self.project = project
        self._journals: dict[str, list[int]] = {}
        """Run id → [saves of its snapshot, snapshot bytes, journal bytes] for the runs this store saved."""

    # ---------------------------------------------------------------- paths
    def dir(self, run_id: str) -> Path:
        """The run's directory (`run_id` must be a valid id: it becomes a path)."""
        return self.project.run_dir(check_id("run", run_id))

    def artifacts_dir(self, run_id: str) -> Path:
        """Where roles put the files they hand on."""
        return self.dir(run_id) / "artifacts"

    def events_path(self, run_id: str) -> Path:
        """The decision log."""
        return self.dir(run_id) / EVENTS_FILE

    # ---------------------------------------------------------------- run.json
    def create(self, run: Run) -> Run:
        """Write a new run's directory and first state."""
        directory = self.dir(run.id)
        directory.mkdir(parents=True, exist_ok=False)
        self.artifacts_dir(run.id).mkdir()
        self.save(run)
        return run

    def exists(self, run_id: str) -> bool:
        """True when the run has a run.json (of any kind: a damaged one counts)."""
        return os.path.lexists(self.dir(run_id) / RUN_FILE)

    def read_raw(self, run_id: str) -> bytes:
        """The bytes of run.json: a regular file, at most MAX_RUN_BYTES."""
        path = self.dir(run_id) / RUN_FILE
        try:
            return read_bounded(path, max_bytes=MAX_RUN_BYTES)
        except FileNotFoundError:
            raise NotFoundError(f"no run {run_id!r} in {self.project.runs_dir}",
                                "`agentbox runs` lists the runs") from None
        except UnsafeFileError as exc:
            raise DamagedRunError(path, exc.reason, run_id=run_id) from None
        except OSError as exc:
            raise DamagedRunError(path, f"cannot be read: {exc.strerror or exc}", run_id=run_id) from None

    def read_state(self, run_id: str) -> StateBytes:
        """run.json and the complete lines of its journal, read consistently.

        A journal that vanishes, or a run.json replaced while it is read, means a newer
        snapshot was saved meanwhile: read again.
        """
        path = self.dir(run_id) / RUN_FILE
        for _ in range(20):
            before = _identity(path)
            raw = self.read_raw(run_id)
            found = _SAVES.match(raw)
            journal = self.dir(run_id) / journal_name(int(found.group(1)) if found else 0)
            try:
                data = read_bounded(journal, max_bytes=MAX_RUN_BYTES)
            except FileNotFoundError:
                data = b""
            except UnsafeFileError as exc:
                raise DamagedRunError(journal, exc.reason, run_id=run_id) from None
            if before == _identity(path):
                return StateBytes(raw, data[: data.rfind(b"\n") + 1], journal)
        raise DamagedRunError(path, "kept changing while it was read (20 tries)", run_id=run_id)

    def load(self, run_id: str) -> Run:
        """Read and validate the run's state (run.json with its journal replayed)."""
        return self.parse_state(run_id, self.read_state(run_id))

    def parse(self, run_id: str, raw: bytes) -> Run:
        """Validate the bytes of a run.json already read (by a reader that hashed them first)."""
        path = self.dir(run_id) / RUN_FILE
        try:
            run = Run.model_validate_json(raw)
        except ValidationError as exc:
            raise self._damage(path, raw, exc, run_id) from None
        if run.id != run_id:
            raise DamagedRunError(path, f"holds run {run.id!r}, not {run_id!r}", run_id=run_id)
        return run

    def parse_state(self, run_id: str, state: StateBytes) -> Run:
        """The run from a snapshot and its journal (as `read_state` returns them)."""
        if not state.journal:
            return self.parse(run_id, state.snapshot)
        path = self.dir(run_id) / RUN_FILE
        try:
            data = store.parse_json(path, state.snapshot)
        except StateError as bad_json:
            raise DamagedRunError(path, bad_json.message.split(": ", 1)[-1], line=_line_of(bad_json.message),
                                  run_id=run_id) from None
        if not isinstance(data, dict) or not all(isinstance(data.get(k), dict) for k in ("tasks", "checkpoints", "jobs")):
            return self.parse(run_id, state.snapshot)  # not a run: say what is wrong with it
        data.setdefault("outbox", [])
        expected = data.get("saves", 0)
        for number, raw in enumerate(state.journal.split(b"\n")[:-1], start=1):
            record = store.parse_line(raw)
            expected = (expected if isinstance(expected, int) else 0) + 1
            if record is None:
                problem: str | None = "not a JSON object (garbage, invalid UTF-8 or the wrong shape)"
            elif record.get("n") != expected:
                problem = f"save {str(record.get('n'))[:20]} does not follow save {expected - 1}"
            else:
                problem = _replay(data, record)
            if problem:
                raise DamagedRunError(state.journal_path, problem, line=number, run_id=run_id)
        try:
            run = Run.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(part) for part in first["loc"]) or "(top level)"
            raise DamagedRunError(state.journal_path, f"replayed onto {RUN_FILE}: {field}: {first['msg']}",
                                  run_id=run_id) from None
        if run.id != run_id:
            raise DamagedRunError(path, f"holds run {run.id!r}, not {run_id!r}", run_id=run_id)
        if run.outbox:  # the events of every journalled save: keep those the log does not have yet
            last = self.last_event_seq(run_id)
            run.outbox = [e for e in run.outbox if e.get("seq", 0) > last]
        return run

    def state_stamp(self, run_id: str) -> tuple[int, ...]:
        """Changes whenever the run's state does (run.json replaced, its journal appended): cheap to poll."""
        directory = self.dir(run_id)
        stamp: list[int] = []
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.name == RUN_FILE or is_journal(entry.name):
                    info = entry.stat(follow_symlinks=False)
                    stamp += [info.st_ino, info.st_mtime_ns, info.st_size]
        return tuple(stamp)

    @staticmethod
    def _damage(path: Path, raw: bytes, exc: ValidationError, run_id: str) -> DamagedRunError:
        """The error for a run.json that does not validate: JSON syntax with its line, else the field."""
        try:
            store.parse_json(path, raw)
        except StateError as bad_json:
            return DamagedRunError(path, bad_json.message.split(": ", 1)[-1],
                                   line=_line_of(bad_json.message), run_id=run_id)
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "(top level)"
        return DamagedRunError(path, f"{field}: {first['msg']}", run_id=run_id)

    def save(self, run: Run, changes: Changes | None = None) -> None:
        """Save the state (a journal line with `changes`, or a whole snapshot), then move its outbox into events.jsonl.

        No `changes` (or `changes.full`), a first save by this store, a journal grown big, and
        a finished run save a snapshot.
        """
        run.updated = time.time()
        run.saves += 1
        journal = self._journals.get(run.id)
        if (changes is None or changes.full or journal is None or run.status in TERMINAL_RUN_STATES
                or journal[2] > max(JOURNAL_MIN_BYTES, 2 * journal[1]) or not self._journal_save(run, changes)):
            self._snapshot(run)
        if run.outbox:
            self.flush_outbox(run)
        if changes is not None:
            changes.clear()

    def _snapshot(self, run: Run) -> None:
        """Write run.json whole (atomically) and drop the journals it replaces."""
        directory = self.dir(run.id)
        data = run.model_dump_json().encode()  # compact: ~40% faster, 20% smaller
        store.atomic_write_bytes(directory / RUN_FILE, data)
        self._journals[run.id] = [run.saves, len(data), 0]
        keep = journal_name(run.saves)
        with os.scandir(directory) as entries:
            stale = [e.path for e in entries if is_journal(e.name) and e.name != keep]
        for name in stale:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)

    def _journal_save(self, run: Run, changes: Changes) -> bool:
        """Append what `changes` names to the journal; False when the journal cannot take it (a torn end)."""
        journal = self._journals[run.id]
        parts = [f'{{"n":{run.saves},"run":', run.model_dump_json(exclude=set(_NOT_JOURNALLED))]
        for field, ids in (("tasks", changes.tasks), ("checkpoints", changes.checkpoints)):
            items = getattr(run, field)
            parts.append(f',"{field}":{{' + ",".join(f"{json.dumps(i)}:{items[i].model_dump_json()}"
                                                     for i in sorted(ids) if i in items) + "}")
        if changes.all_jobs:
            parts.append(',"all_jobs":{' + ",".join(f"{json.dumps(i)}:{j.model_dump_json()}"
                                                    for i, j in run.jobs.items()) + "}")
        else:
            parts.append(',"jobs":{' + ",".join(
                f"{json.dumps(i)}:{run.jobs[i].model_dump_json() if i in run.jobs else 'null'}"
                for i in sorted(changes.jobs)) + "}")
        parts.append(',"events":' + json.dumps(run.outbox, ensure_ascii=False, default=str) + "}\n")
        data = "".join(parts).encode()
        path = self.dir(run.id) / journal_name(journal[0])
        with store.disk_full_is_typed(path):
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            try:
                size = os.fstat(fd).st_size
                if size != journal[2] or (size and os.pread(fd, 1, size - 1) != b"\n"):
                    return False  # not the journal this store wrote: start again from a snapshot
                write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
        journal[2] += len(data)
        if VERIFY_JOURNAL:
            self._verify(run)
        return True

    def _verify(self, run: Run) -> None:
        """The state read back from disk is the state in memory (see VERIFY_JOURNAL)."""
        skip = {"outbox", "updated"}
        on_disk = self.load(run.id).model_dump(exclude=skip)
        in_memory = run.model_dump(exclude=skip)
        if on_disk != in_memory:
            differ = sorted(k for k in in_memory if on_disk.get(k) != in_memory[k])
            raise StateError(f"run {run.id}: the journal lost a change to {', '.join(differ)} "
                             "(a change made outside the ledger's record-and-change operations)")

    def flush_outbox(self, run: Run) -> None:
        """Append the outbox events not yet in events.jsonl (idempotent by `seq`).

        A log whose last seq is beyond the run's own is damaged (appending after it would
        drop every new event): a DamagedRunError, not a silent loss.
        """
        last = self.last_event_seq(run.id)
        if last > run.seq:
            raise DamagedRunError(self.events_path(run.id), f"the last event has seq {last}, "
                                  f"beyond the run's seq {run.seq}", run_id=run.id)
        fresh = []
        for event in run.outbox:
            if event["seq"] > last:
                fresh.append(event)
                last = event["seq"]
        if fresh:
            _append_lines(self.events_path(run.id), fresh)
        run.outbox = []

    def last_event_seq(self, run_id: str) -> int:
        """The seq of the last complete line of events.jsonl (0 when empty)."""
        path = self.events_path(run_id)
        try:
            fd = store.open_regular(path)
        except FileNotFoundError:
            return 0
        except StateError as exc:
            raise DamagedRunError(path, exc.message.removeprefix(f"{path} "), run_id=run_id) from None
        try:
            size = os.fstat(fd).st_size
            tail = os.pread(fd, TAIL_BYTES, max(0, size - TAIL_BYTES))
        finally:
            os.close(fd)
        for raw in reversed(tail.splitlines()):
            record = store.parse_line(raw)
            if record is not None and type(record.get("seq")) is int:
                return int(record["seq"])
        return 0

    def list_ids(self) -> list[str]:
        """Run ids, oldest first (ids sort by time); directories whose name is no valid id are left out."""
        runs = self.project.runs_dir
        if not runs.is_dir():
            return []
        return sorted(p.name for p in runs.iterdir()
                      if is_valid_id(p.name) and os.path.lexists(p / RUN_FILE))

    def scan(self) -> list[Run | DamagedRun]:
        """Every run, oldest first, each loaded and quickly checked; a damaged one as `DamagedRun`."""
        found: list[Run | DamagedRun] = []
        for run_id in self.list_ids():
            try:
                found.append(self.load_checked(run_id, full=False))
            except DamagedRunError as exc:
                found.append(DamagedRun(run_id, exc))
        return found

    def load_checked(self, run_id: str, *, full: bool = True) -> Run:
        """run.json and the run's logs, validated (`full`: every line; else the end of each log)."""
        run = self.load(run_id)
        try:
            self.check_logs(run, full=full)
        except DamagedRunError:
            # an engine may have saved a newer state and flushed its events since run.json was read
            run = self.load(run_id)
            self.check_logs(run, full=full)
        return run

    # ---------------------------------------------------------------- validation
    def check_logs(self, run: Run, *, full: bool = True) -> None:
        """Raise DamagedRunError when events.jsonl, the inbox or the manifest is not what agentbox wrote.

        Events must be JSON objects with a string `type` and seqs increasing up to the run's
        seq; inbox lines and manifest entries JSON objects of their shape. A last line
        without its newline is a writer caught mid-append (or a crash): not damage.
        """
        self._check_lines(run, self.events_path(run.id), full, _event_problem)
        self._check_lines(run, self.dir(run.id) / INBOX_FILE, full, _command_problem)
        self._check_lines(run, self.artifacts_dir(run.id) / MANIFEST_FILE, full, _manifest_problem)

    def _check_lines(self, run: Run, path: Path, full: bool, problem_of: Any) -> None:
        try:
            fd = store.open_regular(path)
        except FileNotFoundError:
            return
        except StateError as exc:
            raise DamagedRunError(path, exc.message.removeprefix(f"{path} "), run_id=run.id) from None
        try:
            size = os.fstat(fd).st_size
            if size > MAX_LOG_BYTES:
                raise DamagedRunError(path, f"is {size:,} bytes, more than the {MAX_LOG_BYTES:,} allowed",
                                      run_id=run.id)
            start = 0 if full else max(0, size - TAIL_BYTES)
            data = os.pread(fd, size - start, start)
        finally:
            os.close(fd)
        lines = data.split(b"\n")[:-1]  # the part after the last newline is still being written
        first_line = 1
        if start > 0:
            first_line = None  # line numbers unknown in a tail; skip the first (cut) line
            lines = lines[1:]
        state = {"seq": 0, "run": run}
        for index, raw in enumerate(lines):
            if not raw.strip():
                continue
            line = first_line + index if first_line is not None else None
            record = store.parse_line(raw)
            problem = "not a JSON object (garbage, invalid UTF-8 or the wrong shape)" if record is None \
                else problem_of(record, state)
            if problem:
                raise DamagedRunError(path, problem, line=line, run_id=run.id)

    def latest_id(self) -> str:
        """The newest run's id."""
        ids = self.list_ids()
        if not ids:
            raise NotFoundError("this project has no runs yet", "start one with `agentbox run GOAL`")
        return ids[-1]

    def resolve_id(self, run_id: str | None) -> str:
        """`None`/`latest` → the latest run; a unique prefix → the full id."""
        if run_id in (None, "", "latest"):
            return self.latest_id()
        assert run_id is not None
        check_id("run", run_id)
        if self.exists(run_id):
            return run_id
        known = self.list_ids()
        chosen = by_prefix("run", run_id, known)
        if chosen is not None:
            return chosen
        matches = [r for r in known if r.endswith(run_id)]  # the end of an id, which differs between runs
        if len(matches) == 1:
            return matches[0]
        if matches:
            raise UsageError(f"{run_id!r} ends {len(matches)} run ids: {', '.join(matches[:10])}",
                             "give more of the run id")
        raise NotFoundError(f"no run {run_id!r}", "`agentbox runs` lists the runs")

    # ---------------------------------------------------------------- events
    def events(self, run_id: str, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
        """Decision-log records from byte `offset`, and the next offset."""
        return store.read_jsonl(self.events_path(run_id), offset)

    # ---------------------------------------------------------------- inbox
    def post_command(self, run_id: str, command: dict[str, Any]) -> str:
        """Append a command for the engine; returns its id."""
        command = {"id": f"cmd-{time.time_ns():x}-{secrets.token_hex(2)}", "at": time.time(), **command}
        store.append_jsonl(self.dir(run_id) / INBOX_FILE, command)
        return str(command["id"])

    def commands(self, run_id: str, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
        """Inbox commands from byte `offset`, and the next offset."""
        return store.read_jsonl(self.dir(run_id) / INBOX_FILE, offset)

    # ---------------------------------------------------------------- engine lock
    @contextlib.contextmanager
    def engine_lock(self, run_id: str, *, wait: bool = False) -> Iterator[bool]:
        """Try to become the run's only writer; yields False when another process is.

        `wait`: block on it (a caller that must be sure to get it); never used on a run an
        agent can reach.
        """
        path = self.dir(run_id) / ENGINE_LOCK
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

    # ---------------------------------------------------------------- disk reserve
    def reserve(self, run_id: str) -> None:
        """Set space aside (twice run.json, at least RESERVE_MIN_BYTES) for saving the run on a full disk.

        A DiskFullError when even that space is not there: the run cannot go on safely.
        """
        path = self.dir(run_id) / RESERVE_FILE
        try:
            state_bytes = os.lstat(self.dir(run_id) / RUN_FILE).st_size
        except OSError:
            state_bytes = 0
        wanted = max(RESERVE_MIN_BYTES, 2 * state_bytes + (64 << 10))
        with store.disk_full_is_typed(path):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                if os.fstat(fd).st_size < wanted:
                    _allocate(fd, wanted)
            except OSError:
                os.unlink(path)
                raise
            finally:
                os.close(fd)

    def release_reserve(self, run_id: str) -> None:
        """Give the reserved space back (to save the run in it)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.dir(run_id) / RESERVE_FILE)

    def engine_running(self, run_id: str) -> bool:
        """True when some process holds the run's engine lock."""
        with self.engine_lock(run_id) as mine:
            return not mine

    # ---------------------------------------------------------------- artifacts
    def record_artifact(self, run_id: str, path: Path, *, role: str, session: str | None,
                        task: str | None) -> dict[str, Any] | None:
        """Add a file to the manifest of who made what; None when it is not a plain regular file.

        A symlink, FIFO or device is never opened (an agent may have put one there).
        """
        try:
            fd = store.open_regular(path)
        except (FileNotFoundError, StateError):
            return None
        digest = hashlib.sha256()
        try:
            size = os.fstat(fd).st_size
            while chunk := os.read(fd, 1 << 20):
                digest.update(chunk)
        finally:
            os.close(fd)
        entry = {"path": str(path), "role": role, "session": session, "task": task,
                 "sha256": digest.hexdigest(), "size": size, "at": time.time()}
        # the engine lock makes its holder the only writer of the manifest: no lock file to wait on
        store.append_jsonl(self.artifacts_dir(run_id) / MANIFEST_FILE, entry, single_writer=True)
        return entry

    def write_artifact(self, run_id: str, name: str, text: str, *, role: str,
                       session: str | None = None) -> Path:
        """Write a file the run itself produces (synthesis, transcript...) into its artifacts, with its manifest entry."""
        path = self.artifacts_dir(run_id) / name
        store.atomic_write_text(path, text)
        self.record_artifact(run_id, path, role=role, session=session, task=None)
        return path

    def manifest(self, run_id: str) -> list[dict[str, Any]]:
        """Every well-formed manifest entry, oldest first."""
        entries, _ = store.read_jsonl(self.artifacts_dir(run_id) / MANIFEST_FILE)
        return [e for e in entries if manifest_problem(e) is None]


def _allocate(fd: int, size: int) -> None:
    """Make the file `size` bytes of really allocated space (zeros where fallocate is not supported)."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
        block = bytes(1 << 16)
        for _ in range(0, size, len(block)):
            os.write(fd, block)
        os.fsync(fd)


def _identity(path: Path) -> tuple[int, int] | None:
    """Which file is at `path` now (a replaced run.json is another inode)."""
    try:
        info = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return info.st_ino, info.st_mtime_ns


def _replay(data: dict[str, Any], record: dict[str, Any]) -> str | None:
    """Apply one journal line to the run's JSON `data`; what is wrong with the line, or None."""
    fields, events = record.get("run"), record.get("events", [])
    if not isinstance(fields, dict) or not isinstance(events, list):
        return "a journal line without its `run` fields or `events`"
    for key in ("tasks", "checkpoints", "jobs", "all_jobs"):
        if key in record and not isinstance(record[key], dict):
            return f"`{key}` is not an object"
    data.update({k: v for k, v in fields.items() if k not in _NOT_JOURNALLED})
    data["tasks"].update(record.get("tasks", {}))
    data["checkpoints"].update(record.get("checkpoints", {}))
    if "all_jobs" in record:
        data["jobs"] = dict(record["all_jobs"])
    for job_id, job in record.get("jobs", {}).items():
        if job is None:
            data["jobs"].pop(job_id, None)
        else:
            data["jobs"][job_id] = job
    data["outbox"].extend(events)
    return None


def _line_of(message: str) -> int | None:
    """The line number in a `path:LINE: ...` message."""
    head = message.split(": ", 1)[0]
    number = head.rsplit(":", 1)[-1]
    return int(number) if number.isdigit() else None


def _event_problem(record: dict[str, Any], state: dict[str, Any]) -> str | None:
    """What is wrong with one decision-log record (None when nothing)."""
    seq = record.get("seq")
    run: Run = state["run"]
    if type(seq) is not int or not 0 < seq <= MAX_SEQ:
        return f"event without a valid seq ({str(seq)[:40]})"
    if not isinstance(record.get("type"), str) or not isinstance(record.get("what", ""), str):
        return "event with a `type` or `what` that is not a string"
    if seq > run.seq:
        return f"event seq {seq} is beyond the run's seq {run.seq}"
    if seq <= state["seq"]:
        return f"event seq {seq} does not follow seq {state['seq']}"
    state["seq"] = seq
    return None


_COMMAND_TEXT = ("id", "task", "checkpoint", "text", "note", "into")


def _command_problem(record: dict[str, Any], state: dict[str, Any]) -> str | None:
    """What is wrong with one inbox command (None when nothing)."""
    if not isinstance(record.get("action"), str):
        return "command without a string `action`"
    for key in _COMMAND_TEXT:
        if record.get(key) is not None and not isinstance(record[key], str):
            return f"command field {key!r} is not a string"
    return None


def command_problem(command: dict[str, Any]) -> str | None:
    """What is wrong with the shape of a human command (None when nothing)."""
    return _command_problem(command, {})


def manifest_problem(entry: dict[str, Any]) -> str | None:
    """What is wrong with the shape of an artifact manifest entry (None when nothing)."""
    return _manifest_problem(entry, {})


def _manifest_problem(record: dict[str, Any], state: dict[str, Any]) -> str | None:
    """What is wrong with one artifact manifest entry (None when nothing)."""
    if not isinstance(record.get("path"), str):
        return "manifest entry without a string `path`"
    for key in ("role", "session", "task", "sha256"):
        if record.get(key) is not None and not isinstance(record[key], str):
            return f"manifest field {key!r} is not a string"
    for key in ("size", "at"):
        if record.get(key) is not None and (isinstance(record[key], bool) or not isinstance(record[key], int | float)):
            return f"manifest field {key!r} is not a number"
    return None


def _append_lines(path: Path, records: list[dict[str, Any]]) -> None:
    """Append JSON lines with one write and one fsync.

    No lock file: whoever flushes an outbox holds the run's engine lock, so it is the
    log's only writer. A last line cut short by a crash mid-append is ended first, so the
    new lines start on their own line (the torn one is skipped by readers and re-sent
    from the outbox).
    """
    data = b"".join((json.dumps(r, ensure_ascii=False, default=str) + "\n").encode("utf-8") for r in records)
    path.parent.mkdir(parents=True, exist_ok=True)
    with store.disk_full_is_typed(path):
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                data = b"\n" + data
            while data:
                data = data[os.write(fd, data):]
            os.fsync(fd)
        finally:
            os.close(fd)
