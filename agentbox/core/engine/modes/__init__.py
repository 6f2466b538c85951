"""Orchestration modes: each a driver plugged into the same engine and hard rules."""

from __future__ import annotations

import importlib
from typing import Any

_DRIVERS = {
    "hierarchical": "agentbox.core.engine.modes.hierarchical:HierarchicalMode",
    "sequential": "agentbox.core.engine.modes.sequential:SequentialMode",
    "group_chat": "agentbox.core.engine.modes.group_chat:GroupChatMode",
    "handoff": "agentbox.core.engine.modes.handoff:HandoffMode",
    "graph": "agentbox.core.engine.modes.graph:GraphMode",
}


def driver_for(mode: str) -> Any:
    """The driver class of `mode`."""
    module_name, _, class_name = _DRIVERS[mode].partition(":")
    return getattr(importlib.import_module(module_name), class_name)
