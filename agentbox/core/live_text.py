"""A live event as text for a terminal or a Textual `Text`: what an agent wrote never reaches a screen raw."""

from __future__ import annotations

import re

from agentbox.core.live import LiveEvent

RESULT_LINES = 12
"""Lines of a tool's result shown; the rest is counted."""


_INVISIBLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def visible(text: str) -> str:
    """`text` safe to print on a terminal: control characters (ESC, CR, BEL, C1) and bidi
    overrides become visible escapes such as `\\x1b`; newlines and tabs stay."""
    return _INVISIBLE.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", text)


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
