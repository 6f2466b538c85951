"""A run's state on disk: `run.json`, a snapshot, and the journal of the saves after it.

A save costs what changed, not what the run weighs: each save after a snapshot appends one
line to the snapshot's journal (`journal-<saves>.jsonl`) holding the run's small fields, the
tasks, checkpoints and turns the ledger touched, and the new events. A load replays the
journal onto the snapshot; a journal grown past twice the snapshot (and `JOURNAL_MIN_BYTES`)
is folded into a new snapshot, as is every first save of an engine and the save of a
finished run. A journal line cut short by a crash is a save that never happened: ignored,
and the engine's next save is a snapshot. Readers in other processes read run.json and then
its journal; a journal that vanished under them means a newer snapshot exists, which they
read again.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agentbox.core import store
from agentbox.core.engine.changeset import Changes
from agentbox.core.engine.models import TERMINAL_RUN_STATES, Run
from agentbox.core.engine.rundir import events
from agentbox.core.engine.rundir.damage import DamagedRunError, line_of
from agentbox.core.errors import NotFoundError, StateError
from agentbox.core.safe_io import UnsafeFileError, read_bounded

RUN_FILE = "run.json"
MAX_RUN_BYTES = 64 << 20
"""Cap for run.json (and for its journal)."""
JOURNAL_MIN_BYTES = 1 << 20
"""A journal smaller than this is never folded into a snapshot."""
VERIFY_JOURNAL = os.environ.get("AGENTBOX_VERIFY_JOURNAL") == "1"
"""Read every journalled save back and compare it with the state in memory (the test-suite sets it):
a change the ledger did not record would be lost at the next load, and this finds it at once."""
_NOT_JOURNALLED = frozenset({"contract", "tasks", "checkpoints", "jobs", "outbox"})
"""Run fields a journal line does not repeat whole: the contract never changes, the rest by id."""
_SAVES = re.compile(rb'^\{"id":"[^"\\]*","saves":(\d+),')


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


class Snapshots:
    """run.json and its journal, for the runs of one store (it remembers the journals it wrote)."""

    def __init__(self) -> None:
        self._journals: dict[str, list[int]] = {}
        """Run id → [saves of its snapshot, snapshot bytes, journal bytes] for the runs this store saved."""

    # ---------------------------------------------------------------- reading
    @staticmethod
    def read_raw(directory: Path, run_id: str) -> bytes:
        """The bytes of run.json: a regular file, at most MAX_RUN_BYTES."""
        path = directory / RUN_FILE
        try:
            return read_bounded(path, max_bytes=MAX_RUN_BYTES)
        except FileNotFoundError:
            raise NotFoundError(f"no run {run_id!r} in {directory.parent}",
                                "`agentbox runs` lists the runs") from None
        except UnsafeFileError as exc:
            raise DamagedRunError(path, exc.reason, run_id=run_id) from None
        except OSError as exc:
            raise DamagedRunError(path, f"cannot be read: {exc.strerror or exc}", run_id=run_id) from None

    def read_state(self, directory: Path, run_id: str) -> StateBytes:
        """run.json and the complete lines of its journal, read consistently.

        A journal that vanishes, or a run.json replaced while it is read, means a newer
        snapshot was saved meanwhile: read again.
        """
        path = directory / RUN_FILE
        for _ in range(20):
            before = _identity(path)
            raw = self.read_raw(directory, run_id)
            found = _SAVES.match(raw)
            journal = directory / journal_name(int(found.group(1)) if found else 0)
            try:
                data = read_bounded(journal, max_bytes=MAX_RUN_BYTES)
            except FileNotFoundError:
                data = b""
            except UnsafeFileError as exc:
                raise DamagedRunError(journal, exc.reason, run_id=run_id) from None
            if before == _identity(path):
                return StateBytes(raw, data[: data.rfind(b"\n") + 1], journal)
        raise DamagedRunError(path, "kept changing while it was read (20 tries)", run_id=run_id)

    def load(self, directory: Path, run_id: str) -> Run:
        """Read and validate the run's state (run.json with its journal replayed)."""
        return self.parse_state(directory, run_id, self.read_state(directory, run_id))

    @staticmethod
    def parse(directory: Path, run_id: str, raw: bytes) -> Run:
        """Validate the bytes of a run.json already read (by a reader that hashed them first)."""
        path = directory / RUN_FILE
        try:
            run = Run.model_validate_json(raw)
        except ValidationError as exc:
            raise _damage(path, raw, exc, run_id) from None
        if run.id != run_id:
            raise DamagedRunError(path, f"holds run {run.id!r}, not {run_id!r}", run_id=run_id)
        return run

    def parse_state(self, directory: Path, run_id: str, state: StateBytes) -> Run:
        """The run from a snapshot and its journal (as `read_state` returns them)."""
        if not state.journal:
            return self.parse(directory, run_id, state.snapshot)
        path = directory / RUN_FILE
        try:
            data = store.parse_json(path, state.snapshot)
        except StateError as bad_json:
            raise DamagedRunError(path, bad_json.message.split(": ", 1)[-1], line=line_of(bad_json.message),
                                  run_id=run_id) from None
        if not isinstance(data, dict) or not all(isinstance(data.get(k), dict) for k in ("tasks", "checkpoints", "jobs")):
            return self.parse(directory, run_id, state.snapshot)  # not a run: say what is wrong with it
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
            last = events.last_seq(directory / events.EVENTS_FILE, run_id)
            run.outbox = [e for e in run.outbox if e.get("seq", 0) > last]
        return run

    @staticmethod
    def state_stamp(directory: Path) -> tuple[int, ...]:
        """Changes whenever the run's state does (run.json replaced, its journal appended): cheap to poll."""
        stamp: list[int] = []
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.name == RUN_FILE or is_journal(entry.name):
                    info = entry.stat(follow_symlinks=False)
                    stamp += [info.st_ino, info.st_mtime_ns, info.st_size]
        return tuple(stamp)

    # ---------------------------------------------------------------- saving
    def save(self, directory: Path, run: Run, changes: Changes | None) -> None:
        """Save the state: a journal line with `changes`, else a whole snapshot (the outbox is the caller's).

        No `changes` (or `changes.full`), a first save by this store, a journal grown big, and
        a finished run save a snapshot.
        """
        run.updated = time.time()
        run.saves += 1
        journal = self._journals.get(run.id)
        if (changes is None or changes.full or journal is None or run.status in TERMINAL_RUN_STATES
                or journal[2] > max(JOURNAL_MIN_BYTES, 2 * journal[1])
                or not self._journal_save(directory, run, changes)):
            self._snapshot(directory, run)

    def _snapshot(self, directory: Path, run: Run) -> None:
        """Write run.json whole (atomically) and drop the journals it replaces."""
        data = run.model_dump_json().encode()  # compact: ~40% faster, 20% smaller
        store.atomic_write_bytes(directory / RUN_FILE, data)
        self._journals[run.id] = [run.saves, len(data), 0]
        keep = journal_name(run.saves)
        with os.scandir(directory) as entries:
            stale = [e.path for e in entries if is_journal(e.name) and e.name != keep]
        for name in stale:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)

    def _journal_save(self, directory: Path, run: Run, changes: Changes) -> bool:
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
        # not the journal this store wrote (another writer, a torn end): start again from a snapshot
        if not store.append_lines(directory / journal_name(journal[0]), data, expect_size=journal[2]):
            return False
        journal[2] += len(data)
        if VERIFY_JOURNAL:
            self._verify(directory, run)
        return True

    def _verify(self, directory: Path, run: Run) -> None:
        """The state read back from disk is the state in memory (see VERIFY_JOURNAL)."""
        skip = {"outbox", "updated"}
        on_disk = self.load(directory, run.id).model_dump(exclude=skip)
        in_memory = run.model_dump(exclude=skip)
        if on_disk != in_memory:
            differ = sorted(k for k in in_memory if on_disk.get(k) != in_memory[k])
            raise StateError(f"run {run.id}: the journal lost a change to {', '.join(differ)} "
                             "(a change made outside the ledger's record-and-change operations)")


def _damage(path: Path, raw: bytes, exc: ValidationError, run_id: str) -> DamagedRunError:
    """The error for a run.json that does not validate: JSON syntax with its line, else the field."""
    try:
        store.parse_json(path, raw)
    except StateError as bad_json:
        return DamagedRunError(path, bad_json.message.split(": ", 1)[-1],
                               line=line_of(bad_json.message), run_id=run_id)
    first = exc.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or "(top level)"
    return DamagedRunError(path, f"{field}: {first['msg']}", run_id=run_id)


def _identity(path: Path) -> tuple[int, int] | None:
    """Which file is at `path` now (a replaced run.json is another inode)."""
    try:
        info = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return info.st_ino, info.st_mtime_ns


def _replay(data: dict[str, Any], record: dict[str, Any]) -> str | None:
    """Apply one journal line to the run's JSON `data`; what is wrong with the line, or None."""
    fields, events_ = record.get("run"), record.get("events", [])
    if not isinstance(fields, dict) or not isinstance(events_, list):
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
    data["outbox"].extend(events_)
    return None
