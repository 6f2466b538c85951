"""What waits on the human, shown as a bright bar that cannot be missed."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.reactive import var
from textual.widgets import Static

from agentbox.core.engine.models import TERMINAL_RUN_STATES, Checkpoint, Run
from agentbox.core.termtext import for_line
from agentbox.tui import model

SHOWN = 3
"""Checkpoints listed in the bar; the rest are counted."""


class CheckpointBar(Static):
    """Open checkpoints of the run: hidden when none wait, bold and coloured when one does."""

    run: var[Run | None] = var(None, always_update=True)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._shown: Text | None = None

    def watch_run(self, run: Run | None) -> None:
        """Show the open checkpoints (or hide the bar); nothing is redrawn when they did not change."""
        waiting = model.open_checkpoints(run) if run and run.status not in TERMINAL_RUN_STATES else []
        self.set_class(bool(waiting), "-open")
        text = self._text(waiting)
        if text != self._shown:  # an update lays the screen out again, and runs are saved often
            self._shown = text
            self.update(text)

    @staticmethod
    def _text(waiting: list[Checkpoint]) -> Text:
        if not waiting:
            return Text("")
        lines = []
        for cp in waiting[:SHOWN]:
            line = Text.assemble(("⚑ WAITING ON YOU ", "bold reverse"), (f" {cp.id} ", "bold"), (cp.kind, "italic"))
            if cp.role or cp.task:
                line.append(for_line(f" · {cp.role or ''}{' on ' + cp.task if cp.task else ''}"))
            line.append("\n  " + for_line(cp.question.strip().splitlines()[0]) if cp.question.strip() else "")
            lines.append(line)
        footer = f"{len(waiting) - SHOWN} more waiting · " if len(waiting) > SHOWN else ""
        lines.append(Text(f"{footer}press a to answer", style="bold"))
        return Text("\n").join(lines)
