"""Session history: a record per session and one JSON line per turn.

In a project: `.agent-box/sessions/<role>/<uuid>.json` + `<uuid>.turns.jsonl`; outside a
project, per profile under `$AGENT_BOX_HOME/sessions/<profile>/`. The record maps
agentbox's UUID to the tool's native session id, so resuming one resumes the other.
Raw output of each turn is kept in `<uuid>.logs/`. Session ids become file names, so one
that is not a plain id (`../x`, `*`) is refused before any path is made of it; records
are read bounded and validated (a damaged one is a StateError naming its file).
"""

from __future__ import annotations

import builtins
import os
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from agentbox.core import store
from agentbox.core.errors import NotFoundError, StateError
from agentbox.core.ids import by_prefix, check_id, is_valid_id
from agentbox.core.runtimes.base import TOKEN_FIELDS, Usage, add_usage

MAX_RECORD_BYTES = 4 << 20
"""Cap for one session record."""


def check_session_id(session_id: str) -> str:
    """`session_id` when it is a valid session id; else a UsageError (exit 2)."""
    return check_id("session", session_id)


def now() -> float:
    """Wall-clock time (a seam for tests with a frozen clock)."""
    return time.time()


@dataclass
class Totals:
    """Sums over a session's turns; turns with unknown usage are counted, not summed as 0."""

    input_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float | None = None
    unknown_usage_turns: int = 0
    unknown_cost_turns: int = 0
    subscription_turns: int = 0
    """Turns run on a subscription login (their cost is what the tokens would cost, not a bill)."""

    def add(self, usage: Usage) -> None:
        """Add one turn's usage."""
        add_usage(self, usage)

    @property
    def tokens(self) -> int:
        """All known tokens."""
        return sum(getattr(self, key) for key in TOKEN_FIELDS)


@dataclass
class SessionRecord:
    """One agentbox session of one role (or profile)."""

    id: str
    owner: str
    """Directory name: the role, or `profile:NAME` outside a project."""
    role: str | None
    profile: str
    tool: str
    cwd: str
    created: float
    updated: float
    native_id: str | None = None
    turns: int = 0
    status: str = "idle"
    """idle, or running while a turn is in flight."""
    last_status: str | None = None
    last_error_kind: str | None = None
    sandboxed: bool = True
    running: dict[str, Any] | None = None
    """The turn in flight: turn number, pid, process start time, log path."""
    adapter_state: dict[str, Any] = field(default_factory=dict)
    totals: Totals = field(default_factory=Totals)
    run_id: str | None = None
    task_id: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        data = asdict(self)
        data["totals"]["tokens"] = self.totals.tokens
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SessionRecord:
        """Inverse of as_dict; a ValueError says which field is not of its type."""
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        data = dict(data)
        totals = data.pop("totals", {}) or {}
        if not isinstance(totals, dict):
            raise ValueError("totals: not an object")
        totals = {k: v for k, v in totals.items() if k in Totals.__dataclass_fields__}
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        for name in ("id", "owner", "profile", "tool", "cwd", "created", "updated"):
            if name not in known:
                raise ValueError(f"{name}: missing")
        record = cls(**known, totals=Totals(**totals))
        _check_types(record)
        return record


class SessionStore:
    """Session records under one root (a project's sessions/ or the home's)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _record_path(self, owner: str, session_id: str) -> Path:
        return self.root / _safe(owner) / f"{check_session_id(session_id)}.json"

    def logs_dir(self, record: SessionRecord) -> Path:
        """Where the raw output of each turn is kept."""
        return self.root / _safe(record.owner) / f"{record.id}.logs"

    def turns_path(self, record: SessionRecord) -> Path:
        """The JSON-lines file of a session's turns."""
        return self.root / _safe(record.owner) / f"{record.id}.turns.jsonl"

    def save(self, record: SessionRecord) -> None:
        """Write the record atomically."""
        record.updated = now()
        # history, not engine state: atomic (a killed process leaves old or new) but not fsynced
        store.atomic_write_json(self._record_path(record.owner, record.id), record.as_dict(), durable=False)

    def find(self, session_id: str) -> SessionRecord:
        """The record of `session_id` (or of the only session whose id it begins), whichever role it
        belongs to; a StateError when it is damaged, a UsageError listing them when several match."""
        name = f"{check_session_id(session_id)}.json"
        owner_dirs = [d for d in sorted(self.root.iterdir()) if d.is_dir() and not d.is_symlink()] \
            if self.root.is_dir() else []
        for owner_dir in owner_dirs:
            path = owner_dir / name
            if os.path.lexists(path):
                return self.read(path)
        found = {p.name.removesuffix(".json"): p for d in owner_dirs for p in d.glob(f"{session_id}*.json")}
        chosen = by_prefix("session", session_id, found)  # the id's characters hold no glob pattern
        if chosen is not None:
            return self.read(found[chosen])
        raise NotFoundError(f"no session {session_id} under {self.root}",
                            "`agentbox sessions` lists the known sessions")

    def read(self, path: Path) -> SessionRecord:
        """The record in `path`, validated; a StateError naming the file when it is damaged."""
        data = store.read_json(path, max_bytes=MAX_RECORD_BYTES)
        try:
            record = SessionRecord.from_dict(data)
        except (TypeError, ValueError) as exc:
            raise StateError(f"{path}: not a valid session record: {exc}",
                             "move the file away; the session's turns stay in its .turns.jsonl") from None
        if f"{record.id}.json" != path.name:
            raise StateError(f"{path}: holds session {record.id[:80]!r}", "move the file away")
        return record

    def list(self, owner: str | None = None, damaged: list[StateError] | None = None) -> list[SessionRecord]:
        """Records of one owner (or all), newest first; damaged ones are left out (and added to `damaged`)."""
        pattern = f"{_safe(owner)}/*.json" if owner else "*/*.json"
        records = []
        for path in self.root.glob(pattern):
            try:
                records.append(self.read(path))
            except StateError as exc:
                if damaged is not None:
                    damaged.append(exc)
        return sorted(records, key=lambda r: r.updated, reverse=True)

    def latest(self, owner: str) -> SessionRecord | None:
        """The most recently used session of `owner`."""
        records = self.list(owner)
        return records[0] if records else None

    def append_turn(self, record: SessionRecord, turn: dict[str, Any]) -> None:
        """Add one turn line (called under the session's turn lock: one writer at a time)."""
        store.append_jsonl(self.turns_path(record), turn, durable=False, single_writer=True)

    def turns(self, record: SessionRecord) -> builtins.list[dict[str, Any]]:
        """Every turn of a session, oldest first."""
        lines, _ = store.read_jsonl(self.turns_path(record))
        return lines


_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "id": (str,), "owner": (str,), "role": (str, type(None)), "profile": (str,), "tool": (str,), "cwd": (str,),
    "created": (int, float), "updated": (int, float), "native_id": (str, type(None)), "turns": (int,),
    "status": (str,), "last_status": (str, type(None)), "last_error_kind": (str, type(None)), "sandboxed": (bool,),
    "running": (dict, type(None)), "adapter_state": (dict,), "run_id": (str, type(None)),
    "task_id": (str, type(None)),
}


def _check_types(record: SessionRecord) -> None:
    """A ValueError naming the first field of `record` that is not of its type."""
    for item in fields(record):
        allowed = _FIELD_TYPES.get(item.name)
        value = getattr(record, item.name)
        if allowed is not None and (not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed)):
            raise ValueError(f"{item.name}: {type(value).__name__} where {allowed[0].__name__} was expected")
    if not is_valid_id(record.id):
        raise ValueError(f"id: {record.id[:80]!r} is not a session id")
    for item in fields(record.totals):
        value = getattr(record.totals, item.name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise ValueError(f"totals.{item.name}: not a number")


def _safe(owner: str) -> str:
    return owner.replace("/", "_").replace(":", "@")
