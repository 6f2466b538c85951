"""A live event as text for a terminal or a Textual `Text`: what an agent wrote never reaches a screen raw."""

from __future__ import annotations

from agentbox.core.agents.live import LiveEvent
from agentbox.core.termtext import for_terminal

RESULT_LINES = 12
"""Lines of a tool's result shown; the rest is counted."""


def visible(text: str) -> str:
    """`text` safe to print on a terminal (the one rule of `termtext.for_terminal`): control
    characters and escape sequences made visible; newlines and tabs stay."""
    return for_terminal(text)


def render(event: LiveEvent) -> str:
    """One event as terminal-safe text (what an agent wrote never reaches the terminal raw)."""
    text = visible(event.text.rstrip("\n"))
    name = visible(event.name) if event.name else ""
    if event.kind == "text":
        return text
    if event.kind == "tool":
        return f"→ {name or 'tool'}" + (f": {text}" if text else "")
    if event.kind in ("result", "error"):
        lines = text.splitlines() or [""]
        shown = lines[:RESULT_LINES]
        if len(lines) > RESULT_LINES:
            shown.append(f"… ({len(lines) - RESULT_LINES} more lines)")
        mark = "←" if event.kind == "result" else "✗"
        return "\n".join(f"  {mark if i == 0 else ' '} {line}" for i, line in enumerate(shown))
    if event.kind == "stderr":
        return f"  stderr: {text}"
    if event.kind == "end":
        return f"— turn ended: {text}"
    if event.kind == "cut":
        return text
    return f"· {text}"
