"""Helpers shared by the CLI adapters: JSON lines, prompt composition, scratch files."""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from agentbox.core import safe_io
from agentbox.core.errors import SandboxError
from agentbox.core.runtimes.base import TurnRequest

if TYPE_CHECKING:  # imported by the reader that opens a database, not by every turn
    import sqlite3


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


def json_object(line: str) -> dict[str, Any] | None:
    """`line` as a JSON object, or None when it is not one."""
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


SUMMARY_CHARS = 400
"""Most characters of a tool call's input shown live."""
_INPUT_KEYS = ("command", "cmd", "file_path", "filePath", "path", "pattern", "query", "url", "description")


def input_summary(value: Any) -> str:
    """A tool call's input in one short line: its command or path when it has one, else compact JSON."""
    if isinstance(value, dict):
        for key in _INPUT_KEYS:
            if isinstance(value.get(key), str) and value[key]:
                return clip(value[key], SUMMARY_CHARS)
    if isinstance(value, str):
        return clip(value, SUMMARY_CHARS)
    try:
        return clip(json.dumps(value, ensure_ascii=False), SUMMARY_CHARS)
    except (TypeError, ValueError):
        return ""


def clip(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, with … where it was cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def block_text(content: Any) -> str:
    """The text of a message content: a string, or the text of its text blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text") or "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


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


SQLITE_QUERY_S = 2.0
"""How long reading a tool's SQLite database may take before it is abandoned."""

_T = TypeVar("_T")


def read_sqlite(db: Path, tables: tuple[str, ...], read: Callable[[sqlite3.Connection], _T]) -> _T | None:
    """`read(connection)` on a tool's database, or None when it cannot be read safely.

    The agent can rewrite the tool's home, so the database and its side files must be
    regular files (no symlink out, no FIFO to block on), it is opened read-only, each of
    `tables` must be a table (a view could compute forever), and reading is abandoned
    after `SQLITE_QUERY_S`.
    """
    for path in (db, *(db.with_name(db.name + suffix) for suffix in ("-wal", "-shm", "-journal"))):
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            if path == db:
                return None
            continue
        except OSError:
            return None
        if not stat.S_ISREG(mode):
            return None
    import sqlite3

    deadline = time.monotonic() + SQLITE_QUERY_S
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=SQLITE_QUERY_S)
        try:
            conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)
            for table in tables:
                kind = conn.execute("SELECT type FROM sqlite_master WHERE name = ?", (table,)).fetchone()
                if kind is None or kind[0] != "table":
                    return None
            return read(conn)
        finally:
            conn.close()
    except sqlite3.Error:
        return None


MAX_TRANSCRIPT_BYTES = 32 << 20
"""Largest session file of a tool read back (an attached session's turns); a bigger one gives no turns."""


def read_transcript_file(path: Path) -> bytes | None:
    """A tool's session file, read as hostile (the agent could rewrite it): a regular file, bounded; else None."""
    try:
        return safe_io.read_bounded(path, max_bytes=MAX_TRANSCRIPT_BYTES)
    except (OSError, safe_io.UnsafeFileError):
        return None


def sqlite_rows(db: Path, tables: tuple[str, ...], query: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """Rows of a read-only query, or none when the database is not plainly a file of those tables."""
    return read_sqlite(db, tables, lambda conn: conn.execute(query, params).fetchmany(10_000)) or []
