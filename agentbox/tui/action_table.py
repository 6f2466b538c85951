"""The dashboard's actions in one table: its key bindings, when each is offered, and the palette's rule.

The footer (`bindings`), `check_action` and the command palette all ask `enabled`, so the
rule that, say, approving needs a task in review is written once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from textual.binding import Binding, BindingType

from agentbox.core.engine.models import TERMINAL_RUN_STATES, Run
from agentbox.tui import model


def _active(run: Run | None) -> bool:
    return run is not None and run.status not in TERMINAL_RUN_STATES


RULES: dict[str, Callable[[Run | None], bool]] = {
    "approve": lambda run: _active(run) and model.has_task_in(run, "reviewing"),
    "rework": lambda run: _active(run) and model.has_task_in(run, "reviewing"),
    "answer": lambda run: _active(run) and bool(model.open_checkpoints(run)),
    "pause": lambda run: _active(run) and run is not None and not run.paused,
    "resume": lambda run: _active(run) and run is not None and run.paused,
    "cancel_run": _active,
    "cancel_task": _active,
    "changes": model.is_worktree_run,
    "merge": model.can_merge,
}
"""When a run-dependent action is offered; actions not named here always are."""

ENGINE_RULES: dict[str, Callable[[Run | None, str], bool]] = {
    "resume_engine": lambda run, engine: run is not None and engine == "stopped",
}
"""Actions offered by whether an engine drives the run (`agentbox.core.runs.EngineState`)."""


@dataclass(frozen=True)
class ActionSpec:
    """One dashboard action: its key and footer label."""

    name: str
    key: str
    label: str
    tooltip: str = ""
    show: bool = True


ACTIONS: tuple[ActionSpec, ...] = (
    ActionSpec("start_run", "n", "run", "start a run"),
    ActionSpec("answer", "a", "answer", "answer a checkpoint"),
    ActionSpec("approve", "y", "approve", "approve a task in review"),
    ActionSpec("rework", "w", "rework", "send a task in review back"),
    ActionSpec("talk", "t", "talk", "talk to the highlighted member"),
    ActionSpec("history", "s", "history", "session history of the highlighted member"),
    ActionSpec("pause", "p", "pause"),
    ActionSpec("resume", "p", "resume"),
    ActionSpec("cancel_run", "x", "cancel", "cancel the run"),
    ActionSpec("resume_engine", "R", "resume engine", "start the engine of a run whose engine is not running"),
    ActionSpec("changes", "c", "changes", "the files each task changed, and the run's stat"),
    ActionSpec("merge", "m", "merge", "merge the run's branch into yours (shows the stat first)"),
    ActionSpec("attach", "o", "attach", show=False),
    ActionSpec("live", "l", "live", "the live output of the highlighted member", show=False),
    ActionSpec("shell", "h", "shell", "a shell in the selected task's worktree, in its role's sandbox", show=False),
    ActionSpec("discard", "D", "discard run", show=False),
    ActionSpec("switch_run", "r", "runs", show=False),
    ActionSpec("task_detail", "d", "task detail", show=False),
    ActionSpec("edit_artifact", "e", "edit artifact", show=False),
    ActionSpec("view_artifact", "v", "view artifact", show=False),
    ActionSpec("profiles", "f", "profiles", show=False),
    ActionSpec("stats", "i", "stats", "cost and first-pass rate per run, figures by role and model", show=False),
    ActionSpec("ask", "k", "ask", "ask the liaison where things stand", show=False),
)

CONTEXT_ACTIONS = frozenset(RULES) | frozenset(ENGINE_RULES)
"""Actions whose offer depends on the run (the footer redraws when one of them changes)."""


def bindings() -> list[BindingType]:
    """The dashboard's key bindings, in footer order."""
    return [Binding(a.key, a.name, a.label, show=a.show, tooltip=a.tooltip) for a in ACTIONS]


def enabled(action: str, run: Run | None, engine: str = "running") -> bool:
    """Whether `action` makes sense for the run as it is now (`engine`: whether an engine drives it)."""
    if action in ENGINE_RULES:
        return ENGINE_RULES[action](run, engine)
    rule = RULES.get(action)
    return True if rule is None else rule(run)


def offered(run: Run | None, engine: str = "running") -> frozenset[str]:
    """The run-dependent actions that make sense for the run as it is now (each rule asked once)."""
    return (frozenset(action for action, rule in RULES.items() if rule(run))
            | frozenset(action for action, rule in ENGINE_RULES.items() if rule(run, engine)))
