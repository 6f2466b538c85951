"""One line's worth of facts about a run, for `agentbox runs` (and any face that lists runs).

Tokens and cost are what the tools reported: a run whose turns all came back without
usage has unknown tokens (None), a run no tool reported a cost for has an unknown cost
(None) — never 0.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from agentbox.core.engine.models import Run
from agentbox.core.tasks import TaskState


@dataclass(frozen=True)
class RunSummary:
    """What `agentbox runs` shows of one run."""

    id: str
    status: str
    mode: str
    goal: str
    created: float
    age_s: float
    tasks: int
    tasks_done: int
    """Tasks approved."""
    tokens: int | None
    """Tokens the tools reported; None when turns ran and none of them reported usage."""
    unknown_usage_turns: int
    """Turns whose usage the tool did not report (their tokens are not in `tokens`)."""
    cost_usd: float | None
    """What the turns cost where known (the tools' figures, else the price table); None when none is known."""
    unknown_cost_turns: int
    """Turns whose cost is unknown (not in `cost_usd`)."""
    subscription_turns: int
    """Turns run on a subscription login (their cost is what the tokens would cost, not a bill)."""
    workspace: str
    merged: bool | None
    """A worktree run's work is in the person's branch; None for a shared run (its work is in the tree)."""
    merged_into: str | None
    merge_commit: str | None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (`agentbox runs --json`)."""
        return asdict(self)


def summarise(run: Run, now: float) -> RunSummary:
    """The summary of `run` at time `now`."""
    totals = run.totals
    tokens: int | None = totals.tokens
    if totals.turns and totals.unknown_usage_turns >= totals.turns and not totals.tokens:
        tokens = None
    git = run.git if run.in_worktrees else None
    delivered = git.delivered if git is not None else None
    return RunSummary(
        id=run.id, status=run.status, mode=run.contract.mode, goal=run.contract.goal, created=run.created,
        age_s=max(0.0, now - run.created) if run.created else 0.0, tasks=len(run.tasks),
        tasks_done=sum(1 for t in run.tasks.values() if t.state == TaskState.APPROVED),
        tokens=tokens, unknown_usage_turns=totals.unknown_usage_turns, cost_usd=totals.cost_usd,
        unknown_cost_turns=totals.unknown_cost_turns, subscription_turns=totals.subscription_turns,
        workspace="worktree" if git is not None else "shared",
        merged=None if git is None else delivered is not None,
        merged_into=(git.delivered_into or git.branch) if git is not None and delivered else None,
        merge_commit=delivered,
    )


def age_text(seconds: float) -> str:
    """An age in its largest unit: 45s, 12m, 5h, 3d."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"
