"""Live view of a project's files: what changed under `.agent-box/`, and incremental reads.

`watch_project` runs watchfiles' Rust watcher (a blocking loop in a thread per watcher) on the project's `.agent-box/` (and, when asked,
the profiles directory: its entries and each profile's profile.yaml) and turns each batch of raw file changes into a
few small typed facts (`RunChanged`, `EventsAppended`, ...). Temporary files of atomic
writes, lock files and raw agent output are not news. What a fact calls for is then read
through `agentbox.core.runs` (the decision log from a byte offset, the run only when it
changed), as every face reads a run.

Headless: no Textual here; the TUI wraps these facts in its own messages.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentbox.core.engine.run_store import EVENTS_FILE, RUN_FILE, is_journal
from agentbox.core.paths import CREW_FILE, PROFILE_FILE, ProjectPaths

DEBOUNCE_MS = 50
"""Longest time changes are grouped before a batch is yielded."""
STEP_MS = 10
"""A batch is yielded once no new change arrived for this long."""
RUST_TIMEOUT_MS = 1000
"""Longest wait inside the watcher before it looks at its stop event again (it also looks every step)."""


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


def _rust_watcher() -> Any | None:
    """watchfiles' Rust watcher class (`RustNotify`, the interface its `_rust_notify.pyi` documents),
    loaded without the watchfiles package, whose `__init__` imports anyio and multiprocessing
    (~0.6 MB) for the async and process helpers this module does not use.

    None when it cannot be loaded so, or where watchfiles' own defaults would differ from the
    plain ones used below (a `WATCHFILES_*` setting, WSL's forced polling): `watchfiles.watch` then.
    """
    if any(name.startswith("WATCHFILES_") for name in os.environ) or "microsoft-standard" in os.uname().release.lower():
        return None
    module = sys.modules.get("watchfiles._rust_notify")
    if module is None:
        import importlib.machinery
        import importlib.util

        try:
            package = importlib.util.find_spec("watchfiles")  # found, not imported
            where = list(package.submodule_search_locations or ()) if package is not None else []
            for directory, suffix in ((d, s) for d in where for s in importlib.machinery.EXTENSION_SUFFIXES):
                path = os.path.join(directory, f"_rust_notify{suffix}")
                if os.path.isfile(path):
                    loader = importlib.machinery.ExtensionFileLoader("watchfiles._rust_notify", path)
                    spec = importlib.util.spec_from_file_location("watchfiles._rust_notify", path, loader=loader)
                    if spec is None:
                        return None
                    module = importlib.util.module_from_spec(spec)
                    loader.exec_module(module)
                    sys.modules["watchfiles._rust_notify"] = module  # `import watchfiles` later uses this one
                    break
        except (ImportError, OSError, ValueError):
            return None
    return getattr(module, "RustNotify", None)


def _changes(paths: list[Path], keep_path: Any, recursive: bool, debounce_ms: int, step_ms: int,
             stop: Any, armed: Callable[[], None] = lambda: None) -> Iterator[set[tuple[int, str]]]:
    """Batches of (change, path) under `paths` that `keep_path` keeps, until `stop` is set (blocking).

    `armed` is called once the paths are watched (with `watchfiles.watch`: just before it starts).
    """
    notify = _rust_watcher()
    if notify is None:
        from watchfiles import watch

        armed()
        for batch in watch(*paths, watch_filter=keep_path, debounce=debounce_ms, step=step_ms, stop_event=stop,
                           recursive=recursive, rust_timeout=RUST_TIMEOUT_MS, raise_interrupt=False):
            yield {(int(change), path) for change, path in batch}
        return
    # watch_paths, debug, force_polling, poll_delay_ms, recursive, ignore_permission_denied: watchfiles' defaults
    with notify([str(p) for p in paths], False, False, 300, recursive, False) as watcher:
        armed()  # RustNotify adds its inotify watches when made
        while True:
            raw = watcher.watch(debounce_ms, step_ms, RUST_TIMEOUT_MS, stop)
            if raw == "timeout":
                continue
            if isinstance(raw, str):  # "stop" (or "signal", which only the main thread sees)
                return
            changes = {(change, path) for change, path in raw if keep_path(change, path)}
            if changes:
                yield changes


async def watch_project(project: ProjectPaths, *, profiles_dir: Path | None = None, debounce_ms: int = DEBOUNCE_MS,
                        step_ms: int = STEP_MS, stop_event: Any = None,
                        ready: Callable[[], None] | None = None) -> AsyncIterator[list[BoxChange]]:
    """Yield batches of facts about `.agent-box/` (and the profiles dir) until cancelled or stopped.

    The watchers start in threads once the first batch is awaited; `ready` is called on the
    loop when every one of them watches (a change made before may be missed).

    The profiles directory is not watched recursively: agents write their tool state
    inside profile dirs all the time, and none of that is news for the dashboard. Its
    entries are watched, and each profile dir present at the start for its profile.yaml
    (a profile made later shows up; edits of its profile.yaml are seen after a restart).
    """
    import asyncio
    import threading

    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[list[BoxChange] | BaseException | None] = asyncio.Queue()
    halt = threading.Event()

    class _Stop:
        """What the watcher threads look at: this generator closed, or the caller's stop_event set."""

        def is_set(self) -> bool:
            return halt.is_set() or (stop_event is not None and bool(stop_event.is_set()))

    def keep(_change: object, path: str) -> bool:
        return not is_noise(path)

    def profile_news(_change: object, path: str) -> bool:
        return classify(project, path, profiles_dir) is not None

    streams: list[tuple[list[Path], Any, bool]] = [([project.box], keep, True)]
    if profiles_dir is not None and profiles_dir.is_dir():
        dirs = [profiles_dir, *sorted(d for d in profiles_dir.iterdir() if d.is_dir() and not d.name.startswith("."))]
        streams.append((dirs, profile_news, False))

    def put(item: list[BoxChange] | BaseException | None) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody reads any more
            loop.call_soon_threadsafe(queue.put_nowait, item)

    waiting = [len(streams)]
    arming = threading.Lock()

    def armed() -> None:
        with arming:
            waiting[0] -= 1
            last = waiting[0] == 0
        if last and ready is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(ready)

    def pump(paths: list[Path], keep_path: Any, recursive: bool) -> None:
        try:
            for changes in _changes(paths, keep_path, recursive, debounce_ms, step_ms, _Stop(), armed):
                facts = classify_all(project, (p for _, p in changes), profiles_dir)
                if facts and not halt.is_set():
                    put(facts)
        except Exception as exc:  # noqa: BLE001 - handed to the reader, which raises it
            put(exc)
        finally:
            put(None)

    pumps = [threading.Thread(target=pump, args=stream, name="agentbox-watch", daemon=True) for stream in streams]
    for thread in pumps:
        thread.start()
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
        halt.set()  # each thread sees it within step_ms and ends (daemon threads: never waited for here)
