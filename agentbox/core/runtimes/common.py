"""Helpers shared by the CLI adapters: JSON lines, prompt composition, scratch files."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentbox.core import safe_io
from agentbox.core.errors import SandboxError
from agentbox.core.runtimes.base import TurnRequest


def json_lines(text: str) -> Iterator[dict[str, Any]]:
    """Every line of `text` that is a JSON object (other lines are skipped)."""
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            yield value


def with_instructions(prompt: str, instructions: str | None, first_turn: bool) -> str:
    """The prompt with the role's instructions in front, on a session's first turn.

    For tools without a system-prompt flag (codex, opencode, hermes).
    """
    if not first_turn or not instructions:
        return prompt
    return f"{instructions.strip()}\n\n---\n\n{prompt}"


def scratch_file(request: TurnRequest, name: str, text: str) -> Path:
    """Write `text` to `name` in the turn's scratch dir, for the tool to read; its path.

    Prompts and instructions go to the tool through files and stdin, never its command
    line (which every local user can read in /proc). The scratch dir is writable inside
    the sandbox, so whatever an earlier turn left at `name` (a symlink out included) is
    replaced, never written through.
    """
    path = request.scratch / name
    try:
        safe_io.write_fresh(path, text.encode("utf-8"))
    except OSError as exc:
        raise SandboxError(f"cannot write {path} for the agent: {exc}",
                           "remove what is in the way; agentbox does not write through it") from None
    return path
