"""Runs on disk: `.agent-box/runs/<run-id>/` with run.json, events.jsonl, the inbox and artifacts.

Single-writer rule: the engine holds an exclusive lock on `engine.lock` for as long as it
runs a run, and is then the only writer of run.json. Another process (the CLI, the TUI)
that wants to change the run appends a command to `inbox.jsonl`; the engine applies it
and acknowledges it in the decision log. When no engine holds the lock, the caller takes
the lock itself and applies the command directly, so there is never a second writer.

`RunStore` is the one object the rest of agentbox holds; each of its jobs is a module of
`agentbox.core.engine.rundir`: `snapshot` (run.json and its journal), `events` (the
decision log), `inbox`, `manifest`, `lock` (the engine lock), `reserve` (the disk reserve),
`catalog` (which runs there are) and `damage` (what a damaged run raises, and the check of
its logs). Every write goes through `agentbox.core.store`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentbox.core import store
from agentbox.core.engine.changeset import Changes
from agentbox.core.engine.models import Run
from agentbox.core.engine.records import ArtifactEntry, Event
from agentbox.core.engine.rundir import catalog, events, inbox, lock, manifest, reserve
from agentbox.core.engine.rundir.catalog import new_run_id as new_run_id
from agentbox.core.engine.rundir.damage import DamagedRun as DamagedRun
from agentbox.core.engine.rundir.damage import DamagedRunError as DamagedRunError
from agentbox.core.engine.rundir.damage import check_lines
from agentbox.core.engine.rundir.events import EVENTS_FILE as EVENTS_FILE
from agentbox.core.engine.rundir.inbox import INBOX_FILE as INBOX_FILE
from agentbox.core.engine.rundir.inbox import command_problem as command_problem
from agentbox.core.engine.rundir.lock import ENGINE_LOCK as ENGINE_LOCK
from agentbox.core.engine.rundir.manifest import MANIFEST_FILE as MANIFEST_FILE
from agentbox.core.engine.rundir.manifest import manifest_problem as manifest_problem
from agentbox.core.engine.rundir.snapshot import RUN_FILE as RUN_FILE
from agentbox.core.engine.rundir.snapshot import Snapshots
from agentbox.core.engine.rundir.snapshot import StateBytes as StateBytes
from agentbox.core.engine.rundir.snapshot import is_journal as is_journal
from agentbox.core.engine.rundir.snapshot import journal_name as journal_name
from agentbox.core.ids import check_id
from agentbox.core.paths import ProjectPaths


class RunStore:
    """Every read and write of one project's runs."""

    def __init__(self, project: ProjectPaths) -> None:
        self.project = project
        self._state = Snapshots()

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

    # ---------------------------------------------------------------- run.json and its journal
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
        return self._state.read_raw(self.dir(run_id), run_id)

    def read_state(self, run_id: str) -> StateBytes:
        """run.json and the complete lines of its journal, read consistently."""
        return self._state.read_state(self.dir(run_id), run_id)

    def load(self, run_id: str) -> Run:
        """Read and validate the run's state (run.json with its journal replayed)."""
        return self._state.load(self.dir(run_id), run_id)

    def parse(self, run_id: str, raw: bytes) -> Run:
        """Validate the bytes of a run.json already read (by a reader that hashed them first)."""
        return self._state.parse(self.dir(run_id), run_id, raw)

    def parse_state(self, run_id: str, state: StateBytes) -> Run:
        """The run from a snapshot and its journal (as `read_state` returns them)."""
        return self._state.parse_state(self.dir(run_id), run_id, state)

    def state_stamp(self, run_id: str) -> tuple[int, ...]:
        """Changes whenever the run's state does (run.json replaced, its journal appended): cheap to poll."""
        return self._state.state_stamp(self.dir(run_id))

    def save(self, run: Run, changes: Changes | None = None) -> None:
        """Save the state (a journal line with `changes`, or a whole snapshot), then move its outbox into events.jsonl."""
        self._state.save(self.dir(run.id), run, changes)
        if run.outbox:
            self.flush_outbox(run)
        if changes is not None:
            changes.clear()

    # ---------------------------------------------------------------- the decision log
    def flush_outbox(self, run: Run) -> None:
        """Append the outbox events not yet in events.jsonl (idempotent by `seq`)."""
        events.flush_outbox(self.events_path(run.id), run)

    def last_event_seq(self, run_id: str) -> int:
        """The seq of the last complete line of events.jsonl (0 when empty)."""
        return events.last_seq(self.events_path(run_id), run_id)

    def events(self, run_id: str, offset: int = 0) -> tuple[list[Event], int]:
        """Decision-log records from byte `offset`, and the next offset."""
        return events.read(self.events_path(run_id), offset)

    # ---------------------------------------------------------------- which runs
    def list_ids(self) -> list[str]:
        """Run ids, oldest first (ids sort by time); directories whose name is no valid id are left out."""
        return catalog.list_ids(self.project.runs_dir)

    def latest_id(self) -> str:
        """The newest run's id."""
        return catalog.latest_id(self.project.runs_dir)

    def resolve_id(self, run_id: str | None) -> str:
        """`None`/`latest` → the latest run; a unique prefix → the full id."""
        return catalog.resolve_id(self.project.runs_dir, run_id)

    def scan(self) -> list[Run | DamagedRun]:
        """Every run, oldest first, each loaded and quickly checked; a damaged one as `DamagedRun`."""
        found: list[Run | DamagedRun] = []
        for run_id in self.list_ids():
            try:
                found.append(self.load_checked(run_id, full=False))
            except DamagedRunError as exc:
                found.append(DamagedRun(run_id, exc))
        return found

    # ---------------------------------------------------------------- validation
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

    def check_logs(self, run: Run, *, full: bool = True) -> None:
        """Raise DamagedRunError when events.jsonl, the inbox or the manifest is not what agentbox wrote.

        Events must be JSON objects with a string `type` and seqs increasing up to the run's
        seq; inbox lines and manifest entries JSON objects of their shape.
        """
        check_lines(run, self.events_path(run.id), full, events.line_problem)
        check_lines(run, self.dir(run.id) / INBOX_FILE, full, inbox.line_problem)
        check_lines(run, self.artifacts_dir(run.id) / MANIFEST_FILE, full, manifest.line_problem)

    # ---------------------------------------------------------------- inbox
    def post_command(self, run_id: str, command: dict[str, Any]) -> str:
        """Append a command for the engine; returns its id."""
        return inbox.post(self.dir(run_id) / INBOX_FILE, command)

    def commands(self, run_id: str, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
        """Inbox commands from byte `offset`, and the next offset."""
        return inbox.read(self.dir(run_id) / INBOX_FILE, offset)

    # ---------------------------------------------------------------- engine lock and disk reserve
    @contextlib.contextmanager
    def engine_lock(self, run_id: str, *, wait: bool = False) -> Iterator[bool]:
        """Try to become the run's only writer; yields False when another process is."""
        with lock.engine_lock(self.dir(run_id), wait=wait) as mine:
            yield mine

    def engine_running(self, run_id: str) -> bool:
        """True when some process holds the run's engine lock."""
        return lock.engine_running(self.dir(run_id))

    def reserve(self, run_id: str) -> None:
        """Set space aside for saving the run on a full disk (a DiskFullError when it is not there)."""
        reserve.reserve(self.dir(run_id))

    def release_reserve(self, run_id: str) -> None:
        """Give the reserved space back (to save the run in it)."""
        reserve.release(self.dir(run_id))

    # ---------------------------------------------------------------- artifacts
    def record_artifact(self, run_id: str, path: Path, *, role: str, session: str | None,
                        task: str | None) -> ArtifactEntry | None:
        """Add a file to the manifest of who made what; None when it is not a plain regular file."""
        return manifest.record(self.artifacts_dir(run_id) / MANIFEST_FILE, path, role=role, session=session, task=task)

    def write_artifact(self, run_id: str, name: str, text: str, *, role: str,
                       session: str | None = None) -> Path:
        """Write a file the run itself produces (synthesis, transcript...) into its artifacts, with its manifest entry."""
        path = self.artifacts_dir(run_id) / name
        store.atomic_write_text(path, text)
        self.record_artifact(run_id, path, role=role, session=session, task=None)
        return path

    def manifest(self, run_id: str) -> list[ArtifactEntry]:
        """Every well-formed manifest entry, oldest first."""
        return manifest.entries(self.artifacts_dir(run_id) / MANIFEST_FILE)
