"""Runtime adapters: one per agent CLI plus the scripted runtime, looked up by tool name.

Which tools exist, their adapter classes and executables are listed once, in
`agentbox.core.tools`.
"""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path

from agentbox.core.runtimes.base import Adapter
from agentbox.core.tools import TOOL_TABLE


def adapter_for(tool: str) -> Adapter:
    """The adapter instance of `tool` (imported on first use)."""
    module_name, _, class_name = TOOL_TABLE[tool].adapter.partition(":")
    adapter: Adapter = getattr(importlib.import_module(module_name), class_name)()
    return adapter


def find_executable(tool: str, command: str | None = None) -> Path | None:
    """The absolute path of the tool's executable (`command` overrides the usual name)."""
    name = command or TOOL_TABLE[tool].executable
    if name is None:  # the scripted runtime runs with agentbox's own Python
        import sys

        return Path(sys.executable)
    if "/" in name:
        path = Path(name).expanduser()
        return path.absolute() if path.exists() else None
    found = shutil.which(name)
    return Path(found) if found else None
