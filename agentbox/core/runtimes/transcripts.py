"""Turns a person typed in an attached session, read back from the tool's own session files.

An attached (interactive) session gives agentbox no output to parse: afterwards the tool's
session files are the only record of what was said. They were written by the agent's
process, so they are read as hostile: regular files only (no symlink followed), bounded.
Known: claude (`projects/<cwd>/<id>.jsonl`), codex (`sessions/YYYY/MM/DD/rollout-…-<id>.jsonl`),
opencode (its SQLite `opencode.db`), hermes (its SQLite `state.db`) and the scripted runtime
(`sessions/<id>.json`). A SQLite file is opened read-only, must be a regular file (its side
files too), must hold tables (not views) and is queried under a time limit.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentbox.core import safe_io
from agentbox.core.runtimes.base import Usage, optional_int
from agentbox.core.runtimes.common import read_sqlite
from agentbox.core.runtimes.opencode import DATABASE as OPENCODE_DATABASE
from agentbox.core.runtimes.opencode import step_tokens

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
    if tool == "codex":
        return _codex(config_dir / "sessions", native_id)
    if tool == "opencode":
        return _opencode(config_dir / OPENCODE_DATABASE, native_id)
    if tool == "hermes":
        return _hermes(config_dir / "state.db", native_id)
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
        dirs = sorted((entry for entry in os.scandir(projects) if entry.is_dir(follow_symlinks=False)),
                      key=lambda entry: entry.name)
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


# ----------------------------------------------------------------------------- codex


def _codex(sessions: Path, native_id: str) -> list[TypedTurn]:
    """codex's rollout JSON lines: a user message starts a turn; `token_count` gives its usage."""
    path = _find_rollout(sessions, native_id)
    raw = _read(path) if path is not None else None
    if raw is None:
        return []
    turns: list[dict[str, Any]] = []
    for line in raw.decode("utf-8", "replace").splitlines():
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):
            continue
        payload = event.get("payload") if isinstance(event, dict) else None
        if not isinstance(payload, dict):
            continue
        if event.get("type") == "response_item" and payload.get("type") == "message":
            texts = [str(b.get("text") or "") for b in payload.get("content") or []
                     if isinstance(b, dict) and b.get("type") in ("input_text", "output_text")]
            text = "\n".join(texts)
            if payload.get("role") == "user" and not text.lstrip().startswith("<"):  # context blocks are <tagged>
                turns.append({"prompt": text, "text": "", "usage": None})
            elif payload.get("role") == "assistant" and turns:
                turns[-1]["text"] = text
        elif event.get("type") == "event_msg" and payload.get("type") == "token_count" and turns:
            info = payload.get("info")
            last = info.get("last_token_usage") if isinstance(info, dict) else None
            if isinstance(last, dict):
                turns[-1]["usage"] = last
    return [TypedTurn(t["prompt"], t["text"], _codex_usage(t["usage"])) for t in turns]


def _codex_usage(last: dict[str, Any] | None) -> Usage:
    """codex counts cached input inside input and reasoning inside output: split them out."""
    if last is None:
        return Usage()
    raw_input, cached = optional_int(last.get("input_tokens")), optional_int(last.get("cached_input_tokens"))
    raw_output, reasoning = optional_int(last.get("output_tokens")), optional_int(last.get("reasoning_output_tokens"))
    return Usage(input_tokens=None if raw_input is None else raw_input - (cached or 0), cached_input_tokens=cached,
                 output_tokens=None if raw_output is None else raw_output - (reasoning or 0),
                 reasoning_tokens=reasoning)


def _find_rollout(sessions: Path, native_id: str) -> Path | None:
    """`sessions/YYYY/MM/DD/rollout-…-<id>.jsonl`, walking real directories only."""
    suffix = f"-{native_id}.jsonl"

    def walk(directory: Path, depth: int) -> Iterator[Path]:
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name, reverse=True)
        except OSError:
            return
        for entry in entries:
            if depth and entry.is_dir(follow_symlinks=False):
                yield from walk(Path(entry.path), depth - 1)
            elif not depth and entry.name.endswith(suffix) and entry.is_file(follow_symlinks=False):
                yield Path(entry.path)

    return next(walk(sessions, 3), None)


# ----------------------------------------------------------------------------- SQLite (opencode, hermes)

def _rows(db: Path, tables: tuple[str, ...], query: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """Rows of a read-only query, or none when the database is not plainly a file of those tables."""
    return read_sqlite(db, tables, lambda conn: conn.execute(query, params).fetchmany(10_000)) or []


def _hermes(db: Path, native_id: str) -> list[TypedTurn]:
    """hermes's `messages`: a user message starts a turn, the assistant's last text ends it (usage unknown)."""
    rows = _rows(db, ("messages",), "SELECT role, content FROM messages WHERE session_id = ? ORDER BY id",
                 (native_id,))
    turns: list[dict[str, str]] = []
    for role, content in rows:
        if not isinstance(content, str):
            continue
        if role == "user":
            turns.append({"prompt": content, "text": ""})
        elif role == "assistant" and turns and content.strip():
            turns[-1]["text"] = content
    return [TypedTurn(t["prompt"], t["text"], Usage()) for t in turns]


def _opencode(db: Path, native_id: str) -> list[TypedTurn]:
    """opencode's `message` and `part` rows: user text starts a turn; step-finish parts carry its tokens."""
    rows = _rows(db, ("message", "part"),
                 "SELECT m.data, p.data FROM part p JOIN message m ON m.id = p.message_id "
                 "WHERE p.session_id = ? ORDER BY m.time_created, m.id, p.time_created, p.id", (native_id,))
    turns: list[dict[str, Any]] = []
    for message_data, part_data in rows:
        try:
            message, part = json.loads(message_data), json.loads(part_data)
        except (TypeError, ValueError, RecursionError):
            continue
        if not isinstance(message, dict) or not isinstance(part, dict):
            continue
        if message.get("role") == "user" and part.get("type") == "text":
            turns.append({"prompt": str(part.get("text") or ""), "text": "", "tokens": {}})
        elif message.get("role") == "assistant" and turns:
            if part.get("type") == "text":
                turns[-1]["text"] = str(part.get("text") or "")
            elif part.get("type") == "step-finish":
                sums = turns[-1]["tokens"]
                for key, number in step_tokens(part.get("tokens")).items():
                    sums[key] = sums.get(key, 0) + number
    return [TypedTurn(t["prompt"], t["text"], Usage(
        input_tokens=t["tokens"].get("input"), cached_input_tokens=t["tokens"].get("cache_read"),
        cache_write_tokens=t["tokens"].get("cache_write"), output_tokens=t["tokens"].get("output"),
        reasoning_tokens=t["tokens"].get("reasoning"),
    )) for t in turns]
