"""The inbox, `inbox.jsonl`: commands other processes (the CLI, the TUI) post for the engine.

The engine applies each and acknowledges it in the decision log; when no engine holds the
run, the poster takes the engine lock and applies the command itself, so a run never has
a second writer.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

from agentbox.core import store

INBOX_FILE = "inbox.jsonl"
_COMMAND_TEXT = ("id", "task", "checkpoint", "text", "note", "into")


def post(path: Path, command: dict[str, Any]) -> str:
    """Append a command for the engine; returns its id."""
    command = {"id": f"cmd-{time.time_ns():x}-{secrets.token_hex(2)}", "at": time.time(), **command}
    store.append_jsonl(path, command)
    return str(command["id"])


def read(path: Path, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """Inbox commands from byte `offset`, and the next offset."""
    return store.read_jsonl(path, offset)


def line_problem(record: dict[str, Any], state: dict[str, Any]) -> str | None:
    """What is wrong with one inbox command (None when nothing)."""
    if not isinstance(record.get("action"), str):
        return "command without a string `action`"
    for key in _COMMAND_TEXT:
        if record.get(key) is not None and not isinstance(record[key], str):
            return f"command field {key!r} is not a string"
    return None


def command_problem(command: dict[str, Any]) -> str | None:
    """What is wrong with the shape of a human command (None when nothing)."""
    return line_problem(command, {})
