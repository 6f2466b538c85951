"""Session history: a record per session and one JSON line per turn.

In a project: `.agent-box/sessions/<role>/<uuid>.json` + `<uuid>.turns.jsonl`; outside a
project, per profile under `$AGENT_BOX_HOME/sessions/<profile>/`. The record maps
agentbox's UUID to the tool's native session id, so resuming one resumes the other.
Raw output of each turn is kept in `<uuid>.logs/`.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentbox.core import store
from agentbox.core.errors import NotFoundError
from agentbox.core.runtimes.base import TOKEN_FIELDS, Usage, add_usage


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
        """Inverse of as_dict."""
        data = dict(data)
        totals = dict(data.pop("totals", {}) or {})
        totals.pop("tokens", None)
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known, totals=Totals(**totals))


class SessionStore:
    """Session records under one root (a project's sessions/ or the home's)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _record_path(self, owner: str, session_id: str) -> Path:
        return self.root / _safe(owner) / f"{session_id}.json"

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
        """The record of `session_id`, whichever role it belongs to."""
        for path in self.root.glob(f"*/{session_id}.json"):
            return SessionRecord.from_dict(store.read_json(path))
        raise NotFoundError(f"no session {session_id} under {self.root}",
                            "`agentbox sessions` lists the known sessions")

    def list(self, owner: str | None = None) -> list[SessionRecord]:
        """Records of one owner (or all), newest first."""
        pattern = f"{_safe(owner)}/*.json" if owner else "*/*.json"
        records = []
        for path in self.root.glob(pattern):
            data = store.read_json(path)
            if isinstance(data, dict) and "id" in data:
                records.append(SessionRecord.from_dict(data))
        return sorted(records, key=lambda r: r.updated, reverse=True)

    def latest(self, owner: str) -> SessionRecord | None:
        """The most recently used session of `owner`."""
        records = self.list(owner)
        return records[0] if records else None

    def append_turn(self, record: SessionRecord, turn: dict[str, Any]) -> None:
        """Add one turn line (called under the session's turn lock: one writer at a time)."""
        store.append_jsonl(self.turns_path(record), turn, durable=False, single_writer=True)

    def turns(self, record: SessionRecord) -> list[dict[str, Any]]:
        """Every turn of a session, oldest first."""
        lines, _ = store.read_jsonl(self.turns_path(record))
        return lines


def _safe(owner: str) -> str:
    return owner.replace("/", "_").replace(":", "@")
