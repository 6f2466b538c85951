"""The tools agentbox drives: one table, from which every list of tool names derives.

profile.yaml's `runtime.tool`, the adapter registry, `agentbox doctor`'s version checks and
the tests all read this table. It imports nothing of agentbox, so the config models and
`agentbox --version` can use it without loading an adapter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

Tool = Literal["claude", "codex", "opencode", "hermes", "scripted"]
"""A tool's name as written in profile.yaml (`runtime.tool`)."""


@dataclass(frozen=True)
class ToolInfo:
    """What agentbox knows of one tool before importing its adapter."""

    name: Tool
    adapter: str
    """The adapter class, as `module:Class` (imported on first use)."""
    executable: str | None
    """The executable's usual name on PATH; None for the scripted runtime (agentbox's Python)."""
    version_args: tuple[str, ...] = ("--version",)
    """Arguments that make the executable print its version (`agentbox doctor`)."""
    model_hosts: tuple[str, ...] = ()
    """The vendor's hosts the tool talks to when its profile names no endpoint of its own
    (the sandbox's network allowlist then holds these, on port 443)."""


TOOL_TABLE: dict[str, ToolInfo] = {
    info.name: info
    for info in (
        ToolInfo("claude", "agentbox.core.runtimes.claude:ClaudeAdapter", "claude",
                 model_hosts=("api.anthropic.com", "console.anthropic.com", "claude.ai")),
        ToolInfo("codex", "agentbox.core.runtimes.codex:CodexAdapter", "codex",
                 model_hosts=("api.openai.com", "chatgpt.com", "auth.openai.com")),
        ToolInfo("opencode", "agentbox.core.runtimes.opencode:OpencodeAdapter", "opencode",
                 model_hosts=("opencode.ai", "api.anthropic.com", "api.openai.com", "openrouter.ai")),
        ToolInfo("hermes", "agentbox.core.runtimes.hermes:HermesAdapter", "hermes",
                 model_hosts=("openrouter.ai", "inference-api.nousresearch.com", "portal.nousresearch.com")),
        ToolInfo("scripted", "agentbox.core.runtimes.scripted:ScriptedAdapter", None),
    )
}
"""Tool name → what agentbox knows of it; the keys are exactly the `Tool` names, in order."""

TOOLS: tuple[str, ...] = get_args(Tool)
"""Every tool name, in the order of `Tool`."""

AGENT_CLIS: tuple[str, ...] = tuple(name for name, info in TOOL_TABLE.items() if info.executable is not None)
"""The tools that are external agent CLIs (installed by scripts/install-clis.sh)."""
