"""Turns a person typed in an attached session, read back from the tool's own session files.

An attached (interactive) session gives agentbox no output to parse: afterwards the tool's
session files are the only record of what was said. Each adapter reads its own tool's
files (`Adapter.read_transcript`): claude (`projects/<cwd>/<id>.jsonl`), codex
(`sessions/YYYY/MM/DD/rollout-…-<id>.jsonl`), opencode (its SQLite `opencode.db`), hermes
(its SQLite `state.db`) and the scripted runtime (`sessions/<id>.json`). They were written
by the agent's process, so they are read as hostile (`runtimes.common`): regular files only
(no symlink followed), bounded; a SQLite file is opened read-only, must be a regular file
(its side files too), must hold tables (not views) and is queried under a time limit.
"""

from __future__ import annotations

from pathlib import Path

from agentbox.core.runtimes import adapter_for
from agentbox.core.runtimes.base import TypedTurn
from agentbox.core.runtimes.common import MAX_TRANSCRIPT_BYTES as MAX_TRANSCRIPT_BYTES

__all__ = ["MAX_TRANSCRIPT_BYTES", "TypedTurn", "typed_turns"]


def typed_turns(tool: str, config_dir: Path, native_id: str | None) -> list[TypedTurn]:
    """Every turn the tool's own files hold for session `native_id`, oldest first (none for an id that
    is not a plain name: it becomes part of a path)."""
    if native_id is None or "/" in native_id or native_id in ("", ".", ".."):
        return []
    return adapter_for(tool).read_transcript(config_dir, native_id)
