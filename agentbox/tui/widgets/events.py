"""The decision log, followed incrementally: new records are appended, old ones scroll away."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from rich.text import Text
from textual.actions import SkipAction
from textual.widgets import RichLog

from agentbox.core.engine.records import Event
from agentbox.core.termtext import for_line
from agentbox.tui import model

MAX_LINES = 300
"""Records kept on screen; older ones are dropped (the file keeps them all)."""

STYLES = {"checkpoint": "bold yellow", "failure": "red", "escalation": "bold red", "run.finished": "bold green",
          "verdict": "magenta", "submission": "cyan", "dispatch": "blue", "retry": "yellow", "plan": "green",
          "run.status": "bold", "command": "bold cyan", "artifact": "green"}


def event_line(record: Event) -> Text:
    """`12:03:01 verdict        greet: reject by reviewer — no docstring ⚑`."""
    kind = for_line(str(record.get("type", "?"))[:40])
    style = STYLES.get(kind, "dim" if kind.startswith("task.") else "")
    at = record.get("at")
    stamp = model.clock_time(at) if isinstance(at, int | float) and 0 <= at < 1e11 else "--:--:--"
    line = Text.assemble((stamp + " ", "dim"), (f"{kind:<17} ", style), for_line(record.get("what", "")))
    why = record.get("why")
    if why and kind in ("checkpoint", "failure", "run.finished", "escalation", "run.status", "verdict", "command"):
        line.append(f" — {for_line(why)}", style="dim")
    tokens = record.get("tokens")
    if tokens and kind == "turn" and isinstance(tokens, int | float) and not isinstance(tokens, bool):
        line.append(f"  {model.count(int(tokens))} tok", style="dim")
    if record.get("human_required"):
        line.append("  ⚑ human", style="bold yellow")
    return line


class EventLog(RichLog):
    """The run's decision log."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(max_lines=MAX_LINES, min_width=20, wrap=True, markup=False, highlight=False, auto_scroll=True, **kwargs)
        self.records_shown = 0
        self._kept: deque[Event] = deque(maxlen=MAX_LINES)
        self._wrapped_at = 0

    def action_page_down(self) -> None:
        """One page down at once (a scroll animation would redraw the whole log on every frame of it)."""
        if not self.allow_vertical_scroll:
            raise SkipAction()
        self.scroll_page_down(animate=False)

    def action_page_up(self) -> None:
        """One page up at once."""
        if not self.allow_vertical_scroll:
            raise SkipAction()
        self.scroll_page_up(animate=False)

    def on_resize(self) -> None:
        """Re-wrap the kept records at the new width; stay at the end."""
        width = self.scrollable_content_region.width
        if self._wrapped_at and width != self._wrapped_at and self._kept:
            super().clear()
            for record in self._kept:
                self.write(event_line(record))
        self._wrapped_at = width
        if self.auto_scroll:
            self.call_after_refresh(self.scroll_end, animate=False, immediate=True)

    def reset(self) -> None:
        """Forget the records of the previous run."""
        self.clear()
        self._kept.clear()
        self.records_shown = 0

    def add_records(self, records: Iterable[Event]) -> None:
        """Append records (only the last MAX_LINES of a big batch are written)."""
        batch = list(records)
        for record in batch[-MAX_LINES:]:
            self._kept.append(record)
            self.write(event_line(record), scroll_end=False)
        self.records_shown += len(batch)
        if batch and self.auto_scroll and self._size_known:
            # the log's size is known, so its new end is too: scroll there now, in the frame
            # that shows the new lines, not in a second frame after it
            self.scroll_end(animate=False, immediate=True, x_axis=False)
        elif batch and self.auto_scroll:
            self.call_after_refresh(self.scroll_end, animate=False, immediate=True)
