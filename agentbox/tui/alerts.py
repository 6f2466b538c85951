"""Which new statuses of a run the person is told of, with the bell and a banner: pure, no widgets.

A run that ended (done), failed, stopped on its token budget, is blocked, or was paused
by something other than the person (a full disk) waits for someone; a run the person
cancelled or paused needs no telling. New checkpoints have their own alert.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agentbox.core.engine.models import Run
from agentbox.tui import model

Severity = Literal["information", "warning", "error"]


@dataclass(frozen=True)
class Banner:
    """What a notification toast says, and how loudly."""

    title: str
    text: str
    severity: Severity
    timeout: float


def status_banner(run: Run) -> Banner | None:
    """The banner the run's status (just reached) calls for, or None when it needs nobody."""
    goal = run.contract.goal.strip().splitlines()[0] if run.contract.goal.strip() else run.id
    goal = goal if len(goal) <= 80 else goal[:77] + "..."
    reason = f"\n{run.status_reason}" if run.status_reason else ""
    if run.status == "done":
        text = goal
        if model.can_merge(run):
            assert run.git is not None
            text += f"\npress m to merge it into {run.git.branch or 'your branch'} (c: what it changed)"
        return Banner(f"run {run.id} is done", text, "information", 10)
    if run.status == "failed":
        return Banner(f"run {run.id} failed", goal + reason, "error", 15)
    if run.status == "circuit_broken":
        return Banner(f"run {run.id} stopped: its token budget is spent", goal + reason, "error", 15)
    if run.status == "blocked":
        return Banner(f"run {run.id} is blocked: nothing can run", goal + reason, "warning", 12)
    if run.status == "paused" and not run.paused:  # paused by the engine itself (a full disk), not by a person
        return Banner(f"run {run.id} is paused", goal + reason, "warning", 12)
    return None
