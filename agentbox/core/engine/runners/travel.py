"""A session's files on their way between the head and a node, so a turn may run on any node.

A node shares nothing with the head but what the task carries. Before a turn the head
packs the profile (its profile.yaml, scenario, the tool's config home) with the files of
this one session only (claude's `projects/<dir>/<native id>.jsonl`, codex's rollout file,
the scripted runtime's session file; whatever the tool keeps per session, found by its
native id under the dirs `SESSION_DIRS` names) and the session's agentbox record. The node
unpacks them into a home of its own, in memory-backed storage when the node has it
(`/dev/shm`), runs the turn there and sends back what the turn changed in the tool's
config home, the session's new record, its turn line and its logs. The head stores them
where a local turn leaves them, so the next turn of the session, on whichever node, starts
from the same files. A turn's dirs on a node are named with its worker's pid, so those of a
worker that died mid-turn are removed by the next turn there (`sweep_left_behind`).

Login files (`LOGIN_FILES`: a tool's OAuth tokens or keys) travel with the secrets, in
the task's small inline argument, never through Ray's object store, and never come back:
a login the tool refreshes on a node stays there until the turn's home is removed.
What a node sends back is untrusted as far as the agent could write it: only files of
the tool's config home outside what the tool loads as settings or code are taken, as
plain files, never through a link.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentbox.core import safe_io
from agentbox.core.errors import AgentboxError
from agentbox.core.process import pid_alive

if TYPE_CHECKING:
    from agentbox.core.agents.invoke import Agent
    from agentbox.core.config.profiles import ProfileInfo
    from agentbox.core.records import TurnRecord

SESSION_DIRS: dict[str, tuple[str, ...]] = {
    "claude": ("projects", "file-history", "tasks"),
    "codex": ("sessions",),
    "scripted": ("sessions",),
}
"""Dirs of a tool's config home holding one entry per session, named by its id: only this session's
entries travel. Everything else travels whole (claude's plans, named by a slug; hermes' and
opencode's database, which holds every session)."""
LOGIN_FILES = frozenset({".credentials.json", ".claude.json", "auth.json", ".env"})
"""Names of the files a tool keeps its login in (anywhere in its config home)."""
MAX_PACK_BYTES = 256 << 20
"""The most a session's files may weigh, each way."""
NODE_TURN_DIR = "agentbox-node-turn."
"""Prefix of a turn's scratch dir on a node (the repository it works in), in memory-backed storage or the temp dir
(`scratch_parent`)."""
MEMORY_CLONE_MAX_BYTES = 32 << 20
"""The largest pack of a turn's tree a node checks out in memory-backed storage (a larger one goes to the temp dir)."""
MEMORY_RESERVE_BYTES = 512 << 20
"""What memory-backed storage keeps free beyond a checkout's room (Ray's object store lives there too)."""
NODE_HOME_DIR = "agentbox-node-home."
"""Prefix of a turn's home on a node (the profile, the session's files), memory-backed when it can be."""


@dataclass(frozen=True)
class SessionPack:
    """What the head sends a node for one turn: the profile's files and the session's record."""

    state: dict[str, bytes]
    """Files of the profile's state dir (relative paths), login files left out."""
    directory: dict[str, bytes]
    """Files of the profile's own dir when it is not its state dir (a bundled profile's template)."""
    record: dict[str, Any] | None
    """The session's record when the turn resumes it."""


@dataclass(frozen=True)
class SessionBack:
    """What a node sends back after the turn: the session's files as the turn left them."""

    config: dict[str, bytes]
    """Files of the tool's config home the turn made or changed (relative paths)."""
    record: dict[str, Any] | None
    turn_lines: list[TurnRecord] = field(default_factory=list)
    logs: dict[str, bytes] = field(default_factory=dict)
    """The turn's log files (relative to the session's logs dir)."""
    store_root: str = ""
    """Where the node kept the session (paths under it name the head's store once back)."""


def _files(root: Path, keep: Callable[[str], bool] | None = None) -> Iterator[tuple[str, Path]]:
    """Every regular file under `root` (links and special files skipped), as (relative path, path);
    with `keep`, only those whose relative path it keeps (judged before the file is looked at, so a
    profile's thousand other sessions cost a name test each)."""
    if not root.is_dir() or root.is_symlink():
        return
    top = str(root)
    for folder, dirs, names in os.walk(top):
        dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(folder, d)))
        prefix = "" if folder == top else os.path.relpath(folder, top).replace(os.sep, "/") + "/"
        for name in sorted(names):
            relative = prefix + name
            if keep is not None and not keep(relative):
                continue
            path = os.path.join(folder, name)
            if stat.S_ISREG(os.lstat(path).st_mode):
                yield relative, Path(path)


def _is_login(relative: str) -> bool:
    return relative.rpartition("/")[2] in LOGIN_FILES


def _this_session(relative: str, tool: str, ids: tuple[str, ...]) -> bool:
    """False for another session's entry in one of the tool's per-session dirs."""
    top = relative.partition("/")[0]
    if top not in SESSION_DIRS.get(tool, ()) or "/" not in relative:
        return True
    return any(ident in relative for ident in ids)


def _read(path: Path, total: list[int]) -> bytes:
    data = path.read_bytes()
    total[0] += len(data)
    if total[0] > MAX_PACK_BYTES:
        raise AgentboxError(f"the session's files weigh more than {MAX_PACK_BYTES >> 20} MB; "
                            f"too much to send to a node ({path})", "start a new session")
    return data


def pack(agent: Agent, session_id: str, resume: bool) -> tuple[SessionPack, dict[str, bytes]]:
    """The session's files for a node, and (apart, as secrets) the profile's login files."""
    info = agent.profile
    record = agent.sessions.find(session_id) if resume else None
    ids = tuple(i for i in (record.id if record else None, record.native_id if record else None) if i)
    config = info.config_dir.relative_to(info.state_dir).as_posix() + "/" \
        if info.config_dir.is_relative_to(info.state_dir) else None
    total = [0]
    state: dict[str, bytes] = {}
    logins: dict[str, bytes] = {}
    def wanted(relative: str) -> bool:  # not another session's entry in the tool's per-session dirs
        return not (config and relative.startswith(config) and not _this_session(relative[len(config):], info.tool, ids))

    for relative, path in _files(info.state_dir, wanted):
        if _is_login(relative):
            logins[relative] = _read(path, total)
        else:
            state[relative] = _read(path, total)
    directory = {}
    if info.directory.resolve() != info.state_dir.resolve():
        directory = {relative: _read(path, total) for relative, path in _files(info.directory)}
    return SessionPack(state, directory, record.as_dict() if record else None), logins


def _safe_relative(relative: str) -> bool:
    parts = relative.split("/")
    return bool(relative) and not relative.startswith("/") and all(p not in ("", ".", "..") for p in parts)


def _write_tree(root: Path, files: dict[str, bytes]) -> None:
    for relative, data in files.items():
        if not _safe_relative(relative):
            raise AgentboxError(f"a session file has an unsafe path: {relative[:200]!r}")
        target = root / relative
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        safe_io.write_new(target, data, 0o600)  # a fresh home: nothing is there yet


@dataclass(frozen=True)
class NodeHome:
    """The session's files unpacked on a node: the profile and session store the turn uses there."""

    root: Path
    profile: ProfileInfo
    store_root: Path
    shipped: dict[str, bytes]
    """The config home's files as they arrived (what changed is what goes back)."""


def unpack(root: Path, info: ProfileInfo, sent: SessionPack, logins: dict[str, bytes]) -> NodeHome:
    """The pack written under `root` (the node's AGENT_BOX_HOME for the turn)."""
    import dataclasses

    from agentbox.core import store

    state = root / "profiles" / info.name
    state.mkdir(mode=0o700, parents=True)
    _write_tree(state, {**sent.state, **logins})
    directory = state
    if sent.directory:
        directory = root / "templates" / info.name
        _write_tree(directory, sent.directory)
    profile = dataclasses.replace(info, state_dir=state, directory=directory)
    store_root = root / "sessions"
    if sent.record is not None:
        from agentbox.core.agents.sessions import SessionRecord, SessionStore

        record = SessionRecord.from_dict(sent.record)
        path = SessionStore(store_root).turns_path(record).with_name(f"{record.id}.json")
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        store.atomic_write_json(path, sent.record, durable=False)
    prefix = profile.config_dir.relative_to(state).as_posix() + "/"
    shipped = {r[len(prefix):]: data for r, data in {**sent.state, **logins}.items() if r.startswith(prefix)}
    return NodeHome(root, profile, store_root, shipped)


def collect(home: NodeHome, session_id: str) -> SessionBack:
    """What the turn left on the node: changed files of the tool's config home, the record, its logs."""
    from agentbox.core.agents.sessions import SessionStore
    from agentbox.core.errors import NotFoundError

    total = [0]
    config = {}
    for relative, path in _files(home.profile.config_dir):
        if _is_login(relative):
            continue
        data = _read(path, total)
        if home.shipped.get(relative) != data:
            config[relative] = data
    node_store = SessionStore(home.store_root)
    try:
        record = node_store.find(session_id)
    except NotFoundError:  # the turn never started (its sandbox could not be built)
        return SessionBack(config, None, store_root=str(home.store_root))
    logs = {relative: _read(path, total) for relative, path in _files(node_store.logs_dir(record))}
    return SessionBack(config, record.as_dict(), node_store.turns(record), logs, str(home.store_root))


def _loaded(relative: str, loaded_config: tuple[str, ...]) -> bool:
    """True for what the tool loads as settings or code (never taken from a node)."""
    return any(relative == name or (name.endswith("/") and relative.startswith(name)) for name in loaded_config)


def store_back(agent: Agent, back: SessionBack) -> None:
    """Keep what came back where a local turn leaves it: the config home's files in the profile,
    the record, its turn line and logs in the session store."""
    from agentbox.core import store
    from agentbox.core.agents.sessions import SessionRecord
    from agentbox.core.runtimes import adapter_for
    from agentbox.core.sandbox.tool_homes import check_bind_source

    info = agent.profile
    loaded = adapter_for(info.tool).loaded_config
    for relative, data in back.config.items():
        if not _safe_relative(relative) or _is_login(relative) or _loaded(relative, loaded):
            continue
        target = info.config_dir / relative
        check_bind_source(target, info.state_dir)  # no link an agent planted here is followed
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        store.atomic_write_bytes(target, data, durable=False, mode=0o600)
    if back.record is None:
        return
    sessions = agent.sessions
    here = str(sessions.root)

    def local(value: Any) -> Any:  # the node's store paths, named as the head's
        return json.loads(json.dumps(value).replace(json.dumps(back.store_root)[1:-1], json.dumps(here)[1:-1]))

    record = SessionRecord.from_dict(local(back.record))
    logs = sessions.logs_dir(record)
    for relative, data in back.logs.items():
        if _safe_relative(relative):
            target = logs / relative
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            store.atomic_write_bytes(target, data, durable=False, mode=0o600)
    for line in back.turn_lines:
        sessions.append_turn(record, local(line))
    sessions.save(record)


def local_path(back: SessionBack, agent: Agent, path: str | None) -> str | None:
    """A path the node named under its session store, as the head's."""
    if path is None or not back.store_root or not path.startswith(back.store_root):
        return path
    return str(agent.sessions.root) + path[len(back.store_root):]


def node_home_parent() -> str | None:
    """Memory-backed storage for a node's turn homes when the node has it (None: the temp dir)."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None


def scratch_parent(pack_bytes: int) -> str | None:
    """Where a turn's scratch dir (the repository it works in) goes on a node: memory-backed
    storage when the node has it, programs may run from it, the tree's pack is small and the storage has
    room for its checkout many times over (None: the temp dir). A checkout there writes no disk."""
    shm = node_home_parent()
    if shm is None or pack_bytes > MEMORY_CLONE_MAX_BYTES:
        return None
    free = os.statvfs(shm)
    if free.f_flag & os.ST_NOEXEC or free.f_bavail * free.f_frsize < 16 * pack_bytes + MEMORY_RESERVE_BYTES:
        return None
    return shm


def node_dir(prefix: str, parent: str | None) -> Path:
    """A fresh dir of this worker's turn, named with the worker's pid (see `sweep_left_behind`)."""
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}.", dir=parent))


def sweep_left_behind() -> None:
    """Remove the dirs of turns whose worker died mid-turn (killed with its node, its driver, or a
    cancel), so no session's files or login outlive it on the node."""
    for parent in {tempfile.gettempdir(), node_home_parent() or tempfile.gettempdir()}:
        with contextlib.suppress(OSError), os.scandir(parent) as entries:
            for entry in entries:
                prefix = next((p for p in (NODE_TURN_DIR, NODE_HOME_DIR) if entry.name.startswith(p)), None)
                pid = entry.name[len(prefix):].partition(".")[0] if prefix else ""
                if pid.isdigit() and not pid_alive(int(pid)) and entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)



def pack_folders(folders: tuple[Path, ...]) -> dict[str, dict[str, bytes]]:
    """The files of a turn's writable folders on the head (its task's hand-off folder), by the folder's path."""
    total = [0]
    return {str(folder): {relative: _read(path, total) for relative, path in _files(folder)} for folder in folders}


def unpack_folder(local: Path, files: dict[str, bytes]) -> None:
    """A hand-off folder's files written where the node's turn has it."""
    local.mkdir(mode=0o700, parents=True, exist_ok=True)
    _write_tree(local, files)


def collect_folder(local: Path, sent: dict[str, bytes]) -> dict[str, bytes]:
    """What the turn made or changed in a hand-off folder on the node."""
    total = [0]
    return {relative: data for relative, path in _files(local)
            if sent.get(relative) != (data := _read(path, total))}


def store_folders_back(folders: dict[str, dict[str, bytes]], allowed: tuple[Path, ...]) -> None:
    """Keep what a node's turn wrote in its hand-off folders in the head's (only folders it was given,
    plain files, never through a link the agent planted)."""
    from agentbox.core import store
    from agentbox.core.sandbox.tool_homes import check_bind_source

    for name, files in folders.items():
        folder = Path(name)
        if folder not in allowed:
            continue
        for relative, data in files.items():
            if not _safe_relative(relative):
                continue
            target = folder / relative
            check_bind_source(target, folder)
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            store.atomic_write_bytes(target, data, durable=False)
