"""hermes-agent 0.19.0: new turns with `-z` + `--usage-file`, resumed turns with `chat -q --resume`.

Why two variants: in 0.19.0 `-z` silently ignores `--resume` (a new session, no history),
while `hermes chat -q PROMPT -Q --resume ID` really resumes. `chat -q` writes no usage
file, so a resumed turn's usage is the difference of the session's cumulative counters in
`$HERMES_HOME/state.db` before and after the turn.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any, ClassVar

from agentbox.core.runtimes.base import (
    CapturedOutput,
    HomeBind,
    ParsedTurn,
    ParseError,
    ToolCommand,
    TurnRequest,
    Usage,
    bound_home,
    optional_int,
)
from agentbox.core.runtimes.common import with_instructions

USAGE_FILE = "hermes-usage.json"
_SESSION_LINE = re.compile(r"session_id:\s*(\S+)")
_DB_COUNTERS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens",
                "estimated_cost_usd")


class HermesAdapter:
    """Nous Research's hermes. The profile's `dot-hermes/` is `HERMES_HOME` inside the sandbox."""

    tool: ClassVar[str] = "hermes"
    executable_name: ClassVar[str] = "hermes"
    env_defaults: ClassVar[dict[str, str]] = {"PIP_DISABLE_PIP_VERSION_CHECK": "1"}

    def homes(self, config_dir: Path, home: Path) -> tuple[list[HomeBind], dict[str, str]]:
        """dot-hermes/ → ~/.hermes."""
        return bound_home(config_dir, home / ".hermes", "HERMES_HOME")

    def _model(self, request: TurnRequest) -> list[str]:
        return ["-m", request.model] if request.model else []

    def build(self, request: TurnRequest) -> ToolCommand:
        """`hermes -z PROMPT --usage-file F` (new) or `hermes chat -q PROMPT -Q --yolo --resume ID`."""
        prompt = with_instructions(request.prompt, request.instructions, request.first_turn)
        if request.native_id is None:
            usage_file = request.scratch / USAGE_FILE
            argv = [request.executable, "-z", prompt, "--usage-file", str(usage_file), *self._model(request)]
        else:
            argv = [request.executable, "chat", "-q", prompt, "-Q", "--yolo", "--resume", request.native_id,
                    *self._model(request)]
        env = {} if request.read_only else {"HERMES_YOLO_MODE": "1"}
        return ToolCommand([*argv, *request.extra_args], env=env)

    def interactive(self, request: TurnRequest) -> ToolCommand:
        """The hermes chat TUI resuming the session."""
        argv = [request.executable, "chat"]
        if request.native_id is not None:
            argv += ["--resume", request.native_id]
        return ToolCommand([*argv, *self._model(request), *request.extra_args])

    def parse(self, output: CapturedOutput, request: TurnRequest) -> ParsedTurn:
        """stdout is the answer; the usage file (new) or state.db deltas (resume) give the rest."""
        text = output.stdout.strip()
        state = dict(request.adapter_state)
        if request.native_id is None:
            usage_path = output.scratch / USAGE_FILE
            try:
                data = json.loads(usage_path.read_text())
            except (OSError, json.JSONDecodeError):
                if output.exit_code == 0 and not text:
                    raise ParseError("hermes wrote no usage file and no answer") from None
                data = {}
            native = data.get("session_id")
            usage = Usage(
                input_tokens=optional_int(data.get("input_tokens")),
                cached_input_tokens=optional_int(data.get("cache_read_tokens")),
                cache_write_tokens=optional_int(data.get("cache_write_tokens")),
                output_tokens=optional_int(data.get("output_tokens")),
                reasoning_tokens=optional_int(data.get("reasoning_tokens")),
                cost_usd=_cost(data.get("estimated_cost_usd"), data.get("cost_status")),
            )
            if native:
                state["cumulative"] = _session_counters(request.config_dir, native)
            failed = bool(data.get("failed")) or (bool(data) and data.get("completed") is False)
            if failed:  # hermes exits 0 on a failed run: only the usage file tells
                return ParsedTurn(text=text, native_id=native, usage=usage, is_error=True,
                                  error=text or "hermes reported a failed run", adapter_state=state)
            if not data and output.exit_code != 0:
                raise ParseError("hermes failed before writing its usage file")
            return ParsedTurn(text=text, native_id=native, usage=usage, adapter_state=state)
        ids = _SESSION_LINE.findall(output.stderr)
        native = ids[-1] if ids else request.native_id
        now = _session_counters(request.config_dir, native)
        before = state.get("cumulative") or {}
        state["cumulative"] = now
        usage = _usage_delta(now, before) if now else Usage()
        if output.exit_code not in (0, None):
            return ParsedTurn(text=text, native_id=native, usage=usage, is_error=True,
                              error=text or output.stderr.strip() or "hermes failed", adapter_state=state)
        return ParsedTurn(text=text, native_id=native, usage=usage, adapter_state=state)


def _cost(value: Any, status: Any) -> float | None:
    if status == "unknown" or not isinstance(value, int | float):
        return None
    return float(value)


def _session_counters(config_dir: Path, session_id: str) -> dict[str, Any]:
    """The session's cumulative counters in state.db (empty when unreadable)."""
    db = config_dir / "state.db"
    if not db.is_file():
        return {}
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            conn.row_factory = sqlite3.Row
            row = conn.execute("SELECT * FROM sessions WHERE id = ?", (session_id,)).fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return {}
    if row is None:
        return {}
    keys = row.keys()
    return {k: row[k] for k in (*_DB_COUNTERS, "cost_status") if k in keys}


def _usage_delta(now: dict[str, Any], before: dict[str, Any]) -> Usage:
    def delta(key: str) -> int | None:
        value = optional_int(now.get(key))
        if value is None:
            return None
        return value - (optional_int(before.get(key)) or 0)

    cost_now, cost_before = now.get("estimated_cost_usd"), before.get("estimated_cost_usd") or 0.0
    cost = None
    if now.get("cost_status") not in (None, "unknown") and isinstance(cost_now, int | float):
        cost = float(cost_now) - float(cost_before)
    return Usage(input_tokens=delta("input_tokens"), cached_input_tokens=delta("cache_read_tokens"),
                 cache_write_tokens=delta("cache_write_tokens"), output_tokens=delta("output_tokens"),
                 reasoning_tokens=delta("reasoning_tokens"), cost_usd=cost)
