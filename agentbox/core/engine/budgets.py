"""Token accounting and budgets: what each turn cost, and when a task or the run must stop.

A task far over its token budget is paused for a human before its next work turn, or before
the review of the work that took it there; a run whose budget is spent starts nothing new.
These functions are bound as `Engine` methods (`engine._account`, `engine._over_budget`,
...), so modes and commands call them there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentbox.core.engine.models import Job, Task
from agentbox.core.invoke import InvokeResult
from agentbox.core.runtimes.base import add_usage
from agentbox.core.tasks import TaskEvent, TaskState

if TYPE_CHECKING:
    from agentbox.core.engine.engine import Engine

BUDGET_PAUSE_RATIO = 1.2
"""A task over this share of its token budget is paused for a human."""


def account(engine: Engine, job: Job, result: InvokeResult) -> None:
    """Add a finished turn's usage to the run's totals and to its task."""
    usage = result.usage
    totals = engine.run.totals
    totals.turns += 1
    tokens = usage.total_tokens
    add_usage(totals, usage)
    totals.tokens += tokens or 0
    task = engine.run.tasks.get(job.task or "")
    if task is not None:
        if tokens is None:
            task.unknown_usage_turns += 1
        else:
            task.tokens += tokens
        if usage.cost_usd is not None:
            task.cost_usd = (task.cost_usd or 0.0) + usage.cost_usd


def over_budget(engine: Engine, task: Task) -> bool:
    """Whether `task` used more than `BUDGET_PAUSE_RATIO` of its token budget."""
    budget = engine.run.task_budget(task)
    return budget is not None and task.tokens > BUDGET_PAUSE_RATIO * budget


def pause_if_over_budget(engine: Engine, job: Job) -> bool:
    """Instead of starting `job`, pause its task for a human when the task is over budget.

    Only work turns are held back: a review of work already submitted still runs.
    """
    task = engine.run.tasks.get(job.task or "")
    if task is None or not job.works_on_task or not engine._over_budget(task) \
            or task.state == TaskState.PAUSED_FOR_BUDGET:
        return False
    engine.drop_jobs(task.id)
    engine.transition(task, TaskEvent.PAUSE_BUDGET, f"{task.tokens} tokens > {BUDGET_PAUSE_RATIO:.0%} of its budget")
    engine.checkpoint("budget", f"Task {task.id} used {task.tokens} tokens, over {BUDGET_PAUSE_RATIO:.0%} of its budget "
                      f"({engine.run.task_budget(task)}). Answer 'continue' to add one more budget, or 'cancel'.",
                      options=["continue", "cancel"], task=task.id, role=task.assignee)
    return True


def pause_before_review(engine: Engine, task: Task) -> bool:
    """Pause submitted work whose turns took `task` over budget, instead of sending it to review.

    One turn can take a task far past its budget; reviewing and approving that work would
    spend more without asking. The task waits for a human with its submission kept:
    raising its budget sends that work to review (`review_pending`), not back to work.
    """
    if not engine._over_budget(task):
        task.review_pending = False
        return False
    engine.drop_jobs(task.id)
    task.review_pending = True
    engine.transition(task, TaskEvent.PAUSE_BUDGET, f"{task.tokens} tokens > {BUDGET_PAUSE_RATIO:.0%} of its budget: "
                      "paused before review")
    engine.checkpoint("budget", f"Task {task.id} used {task.tokens} tokens, over {BUDGET_PAUSE_RATIO:.0%} of its budget "
                      f"({engine.run.task_budget(task)}), and its work is submitted. Answer 'continue' to add one more "
                      "budget and send the work to review, or 'cancel'.",
                      options=["continue", "cancel"], task=task.id, role=task.assignee)
    return True


def ask_for_run_budget(engine: Engine) -> None:
    """Open the run-budget checkpoint, unless one already waits for the human."""
    if not any(c.kind == "run_budget" for c in engine.run.open_checkpoints()):
        engine.checkpoint("run_budget", "The run's token budget is spent. Answer 'raise N' to add N tokens, or 'cancel'.",
                          options=["raise 1000000", "cancel"])
