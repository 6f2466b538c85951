"""What waits on the human, shown as a bright bar that cannot be missed."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from agentbox.core.engine.models import TERMINAL_RUN_STATES, Run
from agentbox.tui import model

SHOWN = 3
"""Checkpoints listed in the bar; the rest are counted."""


class CheckpointBar(Static):
    """Open checkpoints of the run: hidden when none wait, bold and coloured when one does."""

    run: reactive[Run | None] = reactive(None, always_update=True)

    def watch_run(self, run: Run | None) -> None:
        """Show the open checkpoints (or hide the bar)."""
        waiting = model.open_checkpoints(run) if run and run.status not in TERMINAL_RUN_STATES else []
        self.set_class(bool(waiting), "-open")
        if not waiting:
            self.update("")
            return
        lines = []
        for cp in waiting[:SHOWN]:
            line = Text.assemble(("⚑ WAITING ON YOU ", "bold reverse"), (f" {cp.id} ", "bold"), (cp.kind, "italic"))
            if cp.role or cp.task:
                line.append(f" · {cp.role or ''}{' on ' + cp.task if cp.task else ''}")
            line.append("\n  " + cp.question.strip().splitlines()[0] if cp.question.strip() else "")
            lines.append(line)
        footer = f"{len(waiting) - SHOWN} more waiting · " if len(waiting) > SHOWN else ""
        lines.append(Text(f"{footer}press a to answer", style="bold"))
        self.update(Text("\n").join(lines))
