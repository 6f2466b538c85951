"""What a mode may read and decide: the narrow context a mode driver receives instead of the engine."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentbox.core.config.models import Crew
from agentbox.core.engine.ledger import RunLedger
from agentbox.core.engine.models import EscalatedTurn, Job, Run, Task
from agentbox.core.engine.run_store import RunStore


@dataclass(frozen=True)
class ModeContext:
    """The run's ledger (read the run, record decisions), the crew, the run's files, and reply checking.

    `structured` reads a reply as a model (arranging the corrective re-prompt when it is
    invalid); `fail` and `escalate` hand a failure to the engine's routing; `save` commits
    the state before a mode writes a file that must never run ahead of it.
    """

    ledger: RunLedger
    crew: Crew
    store: RunStore
    project_root: Path
    structured: Callable[..., Any]
    fail: Callable[..., None]
    escalate: Callable[..., None]
    save: Callable[[], None]
    integrate: Callable[..., list[str]] = lambda task, at=None: []
    """Merge an approved task's branch into the run's (worktree runs) at the commit `at` the approval
    judged: the conflicting files, or []; `StaleApproval` when the branch moved from it."""
    integration: Callable[..., bool] = lambda task, at, evidence, by: False
    """Hand an approved task's merge to the integration gate (`(task, commit judged, evidence, by)`): True
    when its checks run on the run's branch first (the task is approved once they pass)."""
    gate: Callable[[Task, EscalatedTurn], bool] = lambda task, turn: False
    """Open the task's submission gate (its checks run before any review): False when no check applies."""
    coverage_gap: Callable[[Task, list[str]], tuple[str, ...]] = lambda task, cited: ()
    """The acceptance ids a rejection cites that the task's brief has no entry for, when the failure
    ladder takes such a gap back to the lead (() otherwise: an unknown id is the reviewer's defect)."""
    fill: Callable[[Job, Task, tuple[str, ...]], None] = lambda job, task, gap: None
    """Hand a coverage gap to the failure ladder: the lead fills the brief, nothing is counted."""
    submitted: Callable[[Task, EscalatedTurn], bool] = lambda task, turn: True
    """The failure ladder's look at a submission before its checks: False when it took it (a compromise
    patch refused for want of its tag, an advisor's patch waiting for the human)."""

    @property
    def run(self) -> Run:
        """The run's state (change it through `ledger`)."""
        return self.ledger.run

    def clock(self) -> float:
        """Now, on the run's clock."""
        return self.ledger.clock()
