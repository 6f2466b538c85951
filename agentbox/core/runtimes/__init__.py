"""Runtime adapters: one per agent CLI plus the scripted runtime, looked up by tool name."""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path

from agentbox.core.runtimes.base import Adapter

_ADAPTERS: dict[str, str] = {
    "claude": "agentbox.core.runtimes.claude:ClaudeAdapter",
    "codex": "agentbox.core.runtimes.codex:CodexAdapter",
    "opencode": "agentbox.core.runtimes.opencode:OpencodeAdapter",
    "hermes": "agentbox.core.runtimes.hermes:HermesAdapter",
    "scripted": "agentbox.core.runtimes.scripted:ScriptedAdapter",
}

_EXECUTABLES = {"claude": "claude", "codex": "codex", "opencode": "opencode", "hermes": "hermes"}


def adapter_for(tool: str) -> Adapter:
    """The adapter instance of `tool` (imported on first use)."""
    module_name, _, class_name = _ADAPTERS[tool].partition(":")
    return getattr(importlib.import_module(module_name), class_name)()


def find_executable(tool: str, command: str | None = None) -> Path | None:
    """The absolute path of the tool's executable (`command` overrides the usual name)."""
    if tool == "scripted" and command is None:
        import sys

        return Path(sys.executable)
    name = command or _EXECUTABLES[tool]
    if "/" in name:
        path = Path(name).expanduser()
        return path.absolute() if path.exists() else None
    found = shutil.which(name)
    return Path(found) if found else None
