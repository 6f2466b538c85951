"""Budgets: when a task or the run must stop for a person to decide about more tokens or money.

A task far over its token or money budget is paused for a human before its next work turn, or
before the review of the work that took it there; a run whose budget is spent starts nothing
new. Money is counted where a turn's cost is known (the tool's figure or the price table's):
a turn of unknown cost adds nothing to it, and the question says so.
The `check_*` functions read the run and return a decision (None: go on); `pause` and
`ask` carry a decision out on the ledger. What each turn cost is recorded by the ledger
(`RunLedger.account`).
"""

from __future__ import annotations

from dataclasses import dataclass

from agentbox.core.engine.ledger import RunLedger
from agentbox.core.engine.models import Job, Run, Task
from agentbox.core.tasks import TaskEvent, TaskState

BUDGET_PAUSE_RATIO = 1.2
"""A task over this share of its token or money budget is paused for a human."""


@dataclass(frozen=True)
class PauseForBudget:
    """Decision: pause the task for a human, asking `question` (its work kept when `before_review`)."""

    task_id: str
    why: str
    question: str
    before_review: bool = False


@dataclass(frozen=True)
class AskForRunBudget:
    """Decision: ask the human to raise the run's spent token budget, or cancel."""

    question: str = "The run's token budget is spent. Answer 'raise N' to add N tokens, or 'cancel'."
    options: tuple[str, ...] = ("raise 1000000", "cancel")


def _usd(value: float) -> str:
    return f"${value:.4f}" if value < 100 else f"${value:,.2f}"


def over_tokens(run: Run, task: Task) -> bool:
    """Whether `task` used more than `BUDGET_PAUSE_RATIO` of its token budget."""
    budget = run.task_budget(task)
    return budget is not None and task.tokens > BUDGET_PAUSE_RATIO * budget


def over_money(run: Run, task: Task) -> bool:
    """Whether `task` cost more than `BUDGET_PAUSE_RATIO` of its money budget (known costs only)."""
    budget = run.task_usd_budget(task)
    return budget is not None and (task.cost_usd or 0.0) > BUDGET_PAUSE_RATIO * budget


def over_budget(run: Run, task: Task) -> bool:
    """Whether `task` is over its token or its money budget."""
    return over_tokens(run, task) or over_money(run, task)


def _spent(run: Run, task: Task) -> tuple[str, str]:
    """What `task` spent past its budget: a short why and the sentence of the question."""
    if over_tokens(run, task):
        return (f"{task.tokens} tokens > {BUDGET_PAUSE_RATIO:.0%} of its budget",
                f"Task {task.id} used {task.tokens} tokens, over {BUDGET_PAUSE_RATIO:.0%} of its budget "
                f"({run.task_budget(task)})")
    cost, budget = task.cost_usd or 0.0, run.task_usd_budget(task) or 0.0
    unknown = (f"; {task.unknown_cost_turns} turn(s) of unknown cost are not counted"
               if task.unknown_cost_turns else "")
    return (f"{_usd(cost)} > {BUDGET_PAUSE_RATIO:.0%} of its money budget",
            f"Task {task.id} cost {_usd(cost)}, over {BUDGET_PAUSE_RATIO:.0%} of its money budget "
            f"({_usd(budget)}{unknown})")


def check_work(run: Run, job: Job) -> PauseForBudget | None:
    """Pause the task of `job` instead of starting it when the task is over budget.

    Only work turns are held back: a review of work already submitted still runs.
    """
    task = run.tasks.get(job.task or "")
    if task is None or not job.works_on_task or not over_budget(run, task) or task.state == TaskState.PAUSED_FOR_BUDGET:
        return None
    why, spent = _spent(run, task)
    return PauseForBudget(task.id, why, f"{spent}. Answer 'continue' to add one more budget, or 'cancel'.")


def check_review(run: Run, task: Task) -> PauseForBudget | None:
    """Pause submitted work whose turns took `task` over budget, instead of sending it to review.

    One turn can take a task far past its budget; reviewing and approving that work would
    spend more without asking. The task waits for a human with its submission kept:
    raising its budget sends that work to review (`review_pending`), not back to work.
    """
    if not over_budget(run, task):
        return None
    why, spent = _spent(run, task)
    return PauseForBudget(
        task.id, f"{why}: paused before review",
        f"{spent}, and its work is submitted. Answer 'continue' to add one more "
        "budget and send the work to review, or 'cancel'.", before_review=True)


def money_spent(run: Run) -> bool:
    """Whether the run's money budget (not its token budget) is what is spent."""
    budget = run.usd_budget
    tokens = run.token_budget
    return (budget is not None and (run.totals.cost_usd or 0.0) >= budget
            and (tokens is None or run.totals.tokens < tokens))


def check_run(run: Run) -> AskForRunBudget | None:
    """Ask for more run budget, unless a run-budget checkpoint already waits for the human."""
    if any(c.kind == "run_budget" for c in run.open_checkpoints()):
        return None
    if money_spent(run):
        step = run.contract.limits.budget.usd_total or 0.0
        return AskForRunBudget(
            f"The run's money budget is spent ({_usd(run.totals.cost_usd or 0.0)} of {_usd(run.usd_budget or 0.0)}). "
            f"Answer 'raise $N' to add N US dollars, or 'cancel'.", (f"raise ${step:g}", "cancel"))
    return AskForRunBudget()


def pause(ledger: RunLedger, decision: PauseForBudget) -> None:
    """Carry out a budget pause: drop the task's pending turns, pause it, open the checkpoint."""
    task = ledger.run.tasks[decision.task_id]
    ledger.drop_jobs(task.id)
    if decision.before_review:
        ledger.hold_review(task, True)
    ledger.transition(task, TaskEvent.PAUSE_BUDGET, decision.why)
    ledger.checkpoint("budget", decision.question, options=["continue", "cancel"], task=task.id, role=task.assignee)


def ask(ledger: RunLedger, decision: AskForRunBudget) -> None:
    """Carry out a run-budget question: open its checkpoint."""
    ledger.checkpoint("run_budget", decision.question, options=list(decision.options))


def pause_before_review(ledger: RunLedger, task: Task) -> bool:
    """Check submitted `task` before its review and carry the decision out; True when it was paused."""
    decision = check_review(ledger.run, task)
    if decision is None:
        ledger.hold_review(task, False)
        return False
    pause(ledger, decision)
    return True
