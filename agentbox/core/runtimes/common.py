"""Helpers shared by the CLI adapters: JSON lines, prompt composition."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any


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


def positional(prompt: str) -> list[str]:
    """A prompt as the last argv item; `--` first when it could be read as an option."""
    return ["--", prompt] if prompt.startswith("-") else [prompt]
