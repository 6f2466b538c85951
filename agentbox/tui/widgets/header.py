"""The run summary at the top: which run, its mode and state, elapsed time, tokens and cost."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.text import Text
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget

from agentbox.core.engine.models import Run
from agentbox.core.runs import ENGINE_STOPPED
from agentbox.core.termtext import for_line, for_terminal
from agentbox.tui import model


class RunHeader(Widget):
    """Goal, mode, state, elapsed, tokens and cost against the budget; a click opens the run switcher."""

    run: reactive[Run | None] = reactive(None, always_update=True)
    run_ids: reactive[tuple[str, ...]] = reactive(())
    now: reactive[float] = reactive(0.0)
    engine: reactive[str] = reactive("ended")
    """Whether an engine drives the run (`agentbox.core.runs.EngineState`)."""

    class SwitcherRequested(Message):
        """The person clicked the header to switch runs."""

    def __init__(self, project_name: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.project_name = project_name

    def watch_run(self, old: Run | None, new: Run | None) -> None:
        """Lay the screen out again only when the header's height may change (a run saved
        several times a second must not cost a layout each time)."""
        if _lines_shape(old) != _lines_shape(new):
            self.refresh(layout=True)

    def render(self) -> Group:
        width = max(20, self.size.width or 80)
        run = self.run
        title = Text.assemble(("agentbox", "bold"), (f" · {for_line(self.project_name)}", "dim"))
        if run is None:
            title.append("  no run yet", style="italic")
            return Group(title, Text("press n to start a run · ctrl+p: every action", style="dim"))
        title.append(f"  {run.id}", style="bold")
        if len(self.run_ids) > 1:
            position = self.run_ids.index(run.id) + 1 if run.id in self.run_ids else len(self.run_ids)
            title.append(f" ({position}/{len(self.run_ids)}, r: switch)", style="dim")
        _append_if_fits(title, Text("  ctrl+p: every action", style="dim"), width)
        if self.engine == "stopped":  # nothing drives it: no ticking clock, no status that waits for nothing
            status = Text.assemble((f"● {ENGINE_STOPPED}", "bold red"), (f" (stopped while {run.status})", "red"),
                                   f"  {run.contract.mode}  {model.elapsed(model.run_elapsed(run, run.updated))}")
            _append_if_fits(status, Text("  R: resume the engine", style="bold"), width)
            _append_if_fits(status, Text(f"  {model.budget_line(run)}", style="dim"), width)
        else:
            status = Text.assemble((f"● {run.status}", model.RUN_STATUS_STYLE.get(run.status, "")),
                                   (" (paused)" if run.paused and run.status != "paused" else "", "yellow"),
                                   f"  {run.contract.mode}  {model.elapsed(model.run_elapsed(run, self.now))}")
            _append_if_fits(status, Text(f"  {model.budget_line(run)}", style="dim"), width)
            gates = gates_line(run)
            if gates:
                _append_if_fits(status, Text(f"  {gates}", style="dim"), width)
            if run.status_reason and run.status not in ("running", "planning"):
                _append_if_fits(status, Text(f"  {for_line(run.status_reason)}", style="dim italic"), width)
            health = model.health_line(run)  # after the reason: what waits for the person comes first
            if health:
                _append_if_fits(status, Text(f"  {health}", style="dim"), width)
        for line in (title, status):
            line.no_wrap = True
            line.overflow = "ellipsis"
        goal = Text.assemble(("goal ", "dim"), (for_terminal(run.contract.goal), "italic"))
        return Group(title, status, goal)

    def on_click(self) -> None:
        """Open the run switcher."""
        self.post_message(self.SwitcherRequested())


def gates_line(run: Run) -> str:
    """The run's gates in a few words (`gates: submission smoke,full · integration smoke`; "" without any),
    with how many tasks are being checked now."""
    gates = run.contract.gates
    stages = [f"{stage.replace('_', ' ')} {','.join(gates.of(stage))}"
              for stage in ("submission", "integration", "run_end") if gates.of(stage)]
    if not stages:
        return ""
    checking = len(run.checking())
    return "gates: " + " · ".join(stages) + (f" ({checking} checking)" if checking else "")


def _lines_shape(run: Run | None) -> str | None:
    """What the header's line count depends on: a run or not, and its goal (which wraps)."""
    return None if run is None else run.contract.goal


def _append_if_fits(line: Text, extra: Text, width: int) -> None:
    """Add `extra` to a one-line header entry only when the line still fits."""
    if line.cell_len + extra.cell_len <= width:
        line.append_text(extra)
