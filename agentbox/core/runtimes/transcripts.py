"""Turns a person typed in an attached session, read back from the tool's own session files.

An attached (interactive) session gives agentbox no output to parse: afterwards the tool's
session files are the only record of what was said. They were written by the agent's
process, so they are read as hostile: regular files only (no symlink followed), bounded.
Known: claude (`projects/<cwd>/<id>.jsonl`) and the scripted runtime
(`sessions/<id>.json`); other tools give no turns.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentbox.core import safe_io
from agentbox.core.runtimes.base import Usage, optional_int

MAX_TRANSCRIPT_BYTES = 32 << 20
"""Largest session file read back; a bigger one gives no turns."""


@dataclass(frozen=True)
class TypedTurn:
    """One exchange of an attached session."""

    prompt: str
    text: str
    usage: Usage


def typed_turns(tool: str, config_dir: Path, native_id: str | None) -> list[TypedTurn]:
    """Every turn the tool's own files hold for session `native_id`, oldest first."""
    if native_id is None or "/" in native_id or native_id in ("", ".", ".."):
        return []
    if tool == "scripted":
        return _scripted(config_dir / "sessions" / f"{native_id}.json")
    if tool == "claude":
        return _claude(config_dir / "projects", native_id)
    return []


def _read(path: Path) -> bytes | None:
    try:
        return safe_io.read_bounded(path, max_bytes=MAX_TRANSCRIPT_BYTES)
    except (OSError, safe_io.UnsafeFileError):
        return None


def _scripted(path: Path) -> list[TypedTurn]:
    raw = _read(path)
    try:
        data = json.loads(raw) if raw is not None else None
    except (ValueError, RecursionError):
        return []
    turns = data.get("turns") if isinstance(data, dict) else None
    return [TypedTurn(str(t.get("prompt") or ""), str(t.get("reply") or ""), Usage())
            for t in turns or [] if isinstance(t, dict)]


def _claude(projects: Path, native_id: str) -> list[TypedTurn]:
    """claude's JSON lines: a person's prompt starts a turn; the assistant's text and usage follow."""
    try:
        if not stat.S_ISDIR(os.lstat(projects).st_mode):
            return []
        dirs = sorted(entry for entry in os.scandir(projects) if entry.is_dir(follow_symlinks=False))
    except OSError:
        return []
    raw = next((data for d in dirs if (data := _read(Path(d.path) / f"{native_id}.jsonl")) is not None), None)
    if raw is None:
        return []
    turns: list[dict[str, Any]] = []
    counted: set[str] = set()
    for line in raw.decode("utf-8", "replace").splitlines():
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):
            continue
        message = event.get("message") if isinstance(event, dict) else None
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if event.get("type") == "user" and not event.get("isMeta"):
            prompt = _text(content, user=True)
            if prompt is not None:
                turns.append({"prompt": prompt, "text": "", "usage": {}})
        elif event.get("type") == "assistant" and turns:
            text = _text(content, user=False)
            if text:
                turns[-1]["text"] = text
            usage, message_id = message.get("usage"), str(message.get("id") or id(message))
            if isinstance(usage, dict) and message_id not in counted:  # one message may span several lines
                counted.add(message_id)
                for key in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens", "output_tokens"):
                    value = optional_int(usage.get(key))
                    if value is not None:
                        turns[-1]["usage"][key] = turns[-1]["usage"].get(key, 0) + value
    return [TypedTurn(t["prompt"], t["text"], Usage(
        input_tokens=t["usage"].get("input_tokens"), cached_input_tokens=t["usage"].get("cache_read_input_tokens"),
        cache_write_tokens=t["usage"].get("cache_creation_input_tokens"), output_tokens=t["usage"].get("output_tokens"),
    )) for t in turns]


def _text(content: Any, *, user: bool) -> str | None:
    """The text of a message; None for a user message that only carries tool results."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    texts = [str(b.get("text") or "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
    if user and not texts:
        return None
    return "\n".join(texts)
