"""Live view of a project's files: what changed under `.agent-box/`, and incremental reads.

`watch_project` runs `watchfiles.awatch` on the project's `.agent-box/` (and, when asked,
the profiles directory: its entries and each profile's profile.yaml) and turns each batch of raw file changes into a
few small typed facts (`RunChanged`, `EventsAppended`, ...). Temporary files of atomic
writes, lock files and raw agent output are not news. The readers below let a face
follow a run without re-reading whole files: the decision log from a byte offset, its
last records when a run is opened, the artifact manifest from an offset.

Headless: no Textual here; the TUI wraps these facts in its own messages.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentbox.core import store
from agentbox.core.engine.models import Run
from agentbox.core.engine.records import ArtifactEntry, Event, as_artifact_entries, as_events
from agentbox.core.engine.run_store import (
    EVENTS_FILE,
    MANIFEST_FILE,
    RUN_FILE,
    RunStore,
    is_journal,
    manifest_problem,
)
from agentbox.core.paths import CREW_FILE, PROFILE_FILE, ProjectPaths

DEBOUNCE_MS = 50
"""Longest time changes are grouped before a batch is yielded."""
STEP_MS = 10
"""A batch is yielded once no new change arrived for this long."""


# ----------------------------------------------------------------------------- facts
@dataclass(frozen=True, order=True)
class RunChanged:
    """A run's state changed: run.json was written, created or removed, or its journal appended."""

    run_id: str


@dataclass(frozen=True, order=True)
class EventsAppended:
    """Lines were appended to a run's decision log (events.jsonl)."""

    run_id: str


@dataclass(frozen=True, order=True)
class ArtifactsChanged:
    """A file in a run's artifact area or its manifest changed."""

    run_id: str


@dataclass(frozen=True, order=True)
class SessionChanged:
    """A session record or its turns changed (a turn started, ended or was added)."""

    role: str
    """The session owner's directory name (the role)."""
    session_id: str


@dataclass(frozen=True, order=True)
class CrewChanged:
    """crew.yaml, a role's instructions or the shared knowledge changed."""


@dataclass(frozen=True, order=True)
class GraphsChanged:
    """A work graph file changed."""


@dataclass(frozen=True, order=True)
class ProfilesChanged:
    """A profile directory appeared or disappeared, or a profile.yaml was edited."""


BoxChange = RunChanged | EventsAppended | ArtifactsChanged | SessionChanged | CrewChanged | GraphsChanged | ProfilesChanged

_IGNORED_SUFFIXES = (".tmp", ".lock", ".swp", "~")
_IGNORED_DIRS = {".locks", "__pycache__", ".git"}


def is_noise(path: str) -> bool:
    """True for files that never carry news: temp files of atomic writes, locks, editor swaps."""
    name = os.path.basename(path)
    return name.endswith(_IGNORED_SUFFIXES) or name.startswith(".#")


def classify(project: ProjectPaths, path: str | Path, profiles_dir: Path | None = None) -> BoxChange | None:
    """The fact a change of `path` means, or None when it is noise."""
    path = Path(path)
    if is_noise(str(path)):
        return None
    if profiles_dir is not None and (path.parent == profiles_dir
                                     or (path.name == PROFILE_FILE and path.parent.parent == profiles_dir)):
        return ProfilesChanged()
    try:
        parts = path.relative_to(project.box).parts
    except ValueError:
        return None
    if not parts or _IGNORED_DIRS.intersection(parts):
        return None
    top = parts[0]
    if top == "runs" and len(parts) >= 3:
        run_id, name = parts[1], parts[2]
        if (name == RUN_FILE or is_journal(name)) and len(parts) == 3:
            return RunChanged(run_id)
        if name == EVENTS_FILE and len(parts) == 3:
            return EventsAppended(run_id)
        if name == "artifacts":
            return ArtifactsChanged(run_id)
        return None
    if top == "runs" and len(parts) == 2:
        return RunChanged(parts[1])
    if top == "sessions" and len(parts) == 3:
        owner, name = parts[1], parts[2]
        for suffix in (".turns.jsonl", ".json"):
            if name.endswith(suffix):
                return SessionChanged(owner, name[: -len(suffix)])
        return None
    if top in (CREW_FILE, "roles", "knowledge"):
        return CrewChanged()
    if top == "graphs":
        return GraphsChanged()
    return None


def classify_all(project: ProjectPaths, paths: Iterable[str | Path], profiles_dir: Path | None = None) -> list[BoxChange]:
    """The distinct facts of a batch of changed paths, in a stable order."""
    facts = {fact for path in paths if (fact := classify(project, path, profiles_dir)) is not None}
    return sorted(facts, key=lambda f: (type(f).__name__, repr(f)))


async def watch_project(project: ProjectPaths, *, profiles_dir: Path | None = None, debounce_ms: int = DEBOUNCE_MS,
                        step_ms: int = STEP_MS, stop_event: Any = None) -> AsyncIterator[list[BoxChange]]:
    """Yield batches of facts about `.agent-box/` (and the profiles dir) until cancelled or stopped.

    The profiles directory is not watched recursively: agents write their tool state
    inside profile dirs all the time, and none of that is news for the dashboard. Its
    entries are watched, and each profile dir present at the start for its profile.yaml
    (a profile made later shows up; edits of its profile.yaml are seen after a restart).
    """
    import asyncio

    from watchfiles import awatch

    def keep(_change: object, path: str) -> bool:
        return not is_noise(path)

    streams = [awatch(project.box, watch_filter=keep, debounce=debounce_ms, step=step_ms, stop_event=stop_event)]
    if profiles_dir is not None and profiles_dir.is_dir():
        def profile_news(_change: object, path: str) -> bool:
            return classify(project, path, profiles_dir) is not None

        dirs = [profiles_dir, *sorted(d for d in profiles_dir.iterdir() if d.is_dir() and not d.name.startswith("."))]
        streams.append(awatch(*dirs, watch_filter=profile_news, debounce=debounce_ms, step=step_ms,
                              stop_event=stop_event, recursive=False))
    queue: asyncio.Queue[list[BoxChange] | BaseException | None] = asyncio.Queue()

    async def pump(stream: AsyncIterator[set[tuple[Any, str]]]) -> None:
        try:
            async for changes in stream:
                facts = classify_all(project, (p for _, p in changes), profiles_dir)
                if facts:
                    queue.put_nowait(facts)
        except Exception as exc:  # noqa: BLE001 - handed to the reader, which raises it
            queue.put_nowait(exc)
        finally:
            queue.put_nowait(None)

    pumps = [asyncio.ensure_future(pump(s)) for s in streams]
    try:
        finished = 0
        while finished < len(pumps):
            batch = await queue.get()
            if batch is None:
                finished += 1
            elif isinstance(batch, BaseException):
                raise batch  # the caller falls back to polling
            else:
                yield batch
    finally:
        for task in pumps:
            task.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.gather(*pumps, return_exceptions=True)


# ----------------------------------------------------------------------------- incremental reads
_SAVE_TIME = re.compile(rb'"updated":[-+0-9.eE]+,"finished":')
"""run.json's top-level save time (compact JSON; only the run's own `updated` precedes `finished`)."""
_SAVES = re.compile(rb'^(\{"id":"[^"\\]*","saves":)\d+')
"""run.json's save counter (second in the file), which every save moves."""


def read_run_if_changed(project: ProjectPaths, run_id: str, last_digest: bytes | None) -> tuple[Run | None, bytes]:
    """The run, or None when its state differs from `last_digest` only by run.json's save time.

    A running engine saves its state several times a second even when nothing happened;
    hashing the bytes is far cheaper than validating a big run again. If the file's
    layout ever changes, every read simply counts as a change.
    """
    runs = RunStore(project)
    state = runs.read_state(run_id)  # bounded, regular files only; "no run" / damaged errors
    snapshot = _SAVES.sub(rb"\1", _SAVE_TIME.sub(b'"finished":', state.snapshot, count=1), count=1)
    digest = hashlib.blake2b(snapshot, digest_size=16)
    digest.update(state.journal)  # a journal line is only written for a real change
    if digest.digest() == last_digest:
        return None, digest.digest()
    return runs.parse_state(run_id, state), digest.digest()


def read_events(project: ProjectPaths, run_id: str, offset: int) -> tuple[list[Event], int]:
    """Decision-log records appended since byte `offset`, and the next offset."""
    return RunStore(project).events(run_id, offset)


def tail_events(project: ProjectPaths, run_id: str, limit: int, chunk: int = 1 << 18) -> tuple[list[Event], int]:
    """The last `limit` decision-log records and the offset of the end of the log.

    Reads backwards from the end in chunks, so opening a run with a huge log costs only
    the records shown; follow it afterwards with `read_events` from the returned offset.
    """
    path = RunStore(project).events_path(run_id)
    try:
        handle = os.fdopen(store.open_regular(path), "rb")
    except FileNotFoundError:
        return [], 0
    with handle:
        handle.seek(0, os.SEEK_END)
        size = handle.tell()
        data = handle.read(0)
        end = size
        start = size
        while start > 0:
            start = max(0, start - chunk)
            handle.seek(start)
            data = handle.read(end - start) + data
            end = start
            if data.count(b"\n") > limit:
                break
    last_newline = data.rfind(b"\n")
    if last_newline < 0:
        return [], size - len(data)
    complete_end = size - len(data) + last_newline + 1
    lines = data[: last_newline + 1].splitlines()
    if start > 0:
        lines = lines[1:]  # the first line may be cut
    records: list[dict[str, Any]] = []
    for raw in lines[-limit:] if limit else []:
        if raw.strip() and (record := store.parse_line(raw)) is not None:
            records.append(record)
    return as_events(records), complete_end


def task_events(project: ProjectPaths, run_id: str, task_id: str, offset: int = 0,
                limit: int = 500) -> tuple[list[Event], int]:
    """The last `limit` decision-log records about one task from byte `offset`, and the next offset.

    A task detail view reads the log once, then follows it from the returned offset; only
    complete lines are read (a line being appended is left for the next call).
    """
    needle = json.dumps(task_id, ensure_ascii=False).encode("utf-8")
    marker = b'"task": ' + needle
    path = RunStore(project).events_path(run_id)
    found: list[dict[str, Any]] = []
    try:
        with os.fdopen(store.open_regular(path), "rb") as handle:
            handle.seek(offset)
            for raw in handle:
                if not raw.endswith(b"\n"):
                    break
                offset += len(raw)
                if marker in raw:
                    record = store.parse_line(raw)
                    if record is not None and record.get("task") == task_id:
                        found.append(record)
    except FileNotFoundError:
        return [], offset
    return as_events(found[-limit:]), offset


def read_manifest(project: ProjectPaths, run_id: str, offset: int = 0) -> tuple[list[ArtifactEntry], int]:
    """Well-formed artifact manifest entries added since byte `offset`, and the next offset."""
    entries, offset = store.read_jsonl(RunStore(project).artifacts_dir(run_id) / MANIFEST_FILE, offset)
    return as_artifact_entries([e for e in entries if manifest_problem(e) is None]), offset
