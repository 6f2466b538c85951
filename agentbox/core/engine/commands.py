"""Human commands applied to a run: answer, approve, rework, cancel, pause, resume.

A command is one of the typed models below (picked by its `action`), applied by the
handler the `HANDLERS` table gives its type. The same code applies a command whether it
arrives through the running engine's inbox or is applied directly by the CLI when no
engine holds the run (see run_store).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Protocol, Self

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from agentbox.core.engine import budgets, reviews
from agentbox.core.engine.failures import FailureKind
from agentbox.core.engine.ledger import RunLedger
from agentbox.core.engine.models import TERMINAL_RUN_STATES, Checkpoint, Run, Task, Verdict
from agentbox.core.engine.replies import BlockingIssue
from agentbox.core.engine.run_store import command_problem
from agentbox.core.engine.workspaces import Workspaces
from agentbox.core.errors import IllegalTransitionError, NotFoundError, UsageError
from agentbox.core.tasks import TaskEvent, TaskState, has_evidence


class ModeHooks(Protocol):
    """What a command tells the run's mode about the human's decision."""

    def on_task_approved(self, task: Task) -> None: ...
    def on_task_cancelled(self, task: Task) -> None: ...
    def requeue(self, task: Task) -> None: ...
    def on_answer(self, checkpoint: Checkpoint, text: str) -> None: ...


@dataclass(frozen=True)
class CommandContext:
    """What applying a command may touch: the ledger, the mode's hooks, and a way to stop a task's turns."""

    ledger: RunLedger
    mode: ModeHooks
    abort_turns: Callable[[str, str], None]
    """Stop the running turns of a task (its id, why): their answers would be stale."""
    workspaces: Workspaces
    """The git side of a worktree run: merge on approval, worktrees away, delivery."""
    integration: Callable[..., bool] = lambda task, at, evidence, by: False
    """Hand an approved task's merge to the integration gate: True when its checks run first."""
    ladder: Callable[[Checkpoint, str], str] | None = None
    """Carry out the answer to a failure-ladder checkpoint (refused with a UsageError, the checkpoint open)."""

    @property
    def run(self) -> Run:
        """The run (change it through `ledger`)."""
        return self.ledger.run

    def clock(self) -> float:
        """Now, on the run's clock."""
        return self.ledger.clock()


class _Command(BaseModel):
    """What every command carries: its inbox id, when it was posted, a note."""

    model_config = ConfigDict(extra="ignore", use_attribute_docstrings=True)

    id: str | None = None
    """Inbox id (a command is applied once per id)."""
    at: float | None = None
    """When it was posted."""
    note: str | None = None
    """The person's note."""

    @classmethod
    def of(cls, **fields: Any) -> Self:
        """This command from what a person gave (a commit, a branch), or a UsageError saying what is wrong."""
        try:
            return cls(**fields)
        except ValidationError as exc:
            raise _malformed(exc, skip=0) from None


class Answer(_Command):
    """Answer an open checkpoint."""

    action: Literal["answer"] = "answer"
    checkpoint: str | None = None
    text: str | None = None


class Approve(_Command):
    """Approve a task (with the note as evidence) at the commit the person judged."""

    action: Literal["approve"] = "approve"
    task: str | None = None
    commit: Annotated[str, Field(pattern=r"^[0-9a-f]{7,40}$")] | None = None
    """The commit (or a prefix of it) the person looked at; absent: the task's head as the run recorded it."""


class Rework(_Command):
    """Send a task back to its worker with the note."""

    action: Literal["rework"] = "rework"
    task: str | None = None


class CancelTask(_Command):
    """Cancel one task."""

    action: Literal["cancel_task"] = "cancel_task"
    task: str | None = None


class CancelRun(_Command):
    """Cancel the whole run."""

    action: Literal["cancel_run"] = "cancel_run"


class Pause(_Command):
    """Start nothing new; running turns finish."""

    action: Literal["pause"] = "pause"


class Resume(_Command):
    """Undo a pause."""

    action: Literal["resume"] = "resume"


class Deliver(_Command):
    """Bring a worktree run's integration branch into the person's branch (`agentbox merge`)."""

    action: Literal["deliver"] = "deliver"
    into: str | None = Field(default=None, max_length=255)
    """The branch (default: the one checked out when the run started)."""
    squash: bool = False
    """One commit instead of a merge commit."""


Command = Annotated[Answer | Approve | Rework | CancelTask | CancelRun | Pause | Resume | Deliver, Field(discriminator="action")]
"""A human command, picked by its `action`."""
_COMMAND: TypeAdapter[Command] = TypeAdapter(Command)
ACTIONS = ("answer", "approve", "rework", "cancel_task", "cancel_run", "pause", "resume", "deliver")


def parse(raw: dict[str, Any]) -> Command:
    """`raw` (an inbox line, a face's request) as a typed command, or a UsageError saying what is wrong."""
    problem = command_problem(raw)
    if problem:
        raise UsageError(f"malformed command: {problem}")
    if raw.get("action") not in ACTIONS:
        raise UsageError(f"unknown command {raw.get('action')!r}")
    try:
        return _COMMAND.validate_python(raw)
    except ValidationError as exc:
        raise _malformed(exc, skip=1) from None


def _malformed(exc: ValidationError, *, skip: int) -> UsageError:
    """The UsageError of a command that does not validate (`skip`: the leading parts of the field's
    location that name the union member, not a field)."""
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"][skip:]) or "command"
    return UsageError(f"malformed command: {where}: {first['msg']}")


def as_json(command: Command) -> dict[str, Any]:
    """The command as its inbox line holds it (the fields given, each once)."""
    return command.model_dump(mode="json", exclude_unset=True) | {"action": command.action}


def apply(ctx: CommandContext, command: Command) -> str:
    """Apply `command`; returns what happened or raises a UsageError subclass."""
    run = ctx.run
    if run.status in TERMINAL_RUN_STATES and not isinstance(command, Answer | Deliver):
        raise IllegalTransitionError(f"run {run.id} is {run.status}")
    return HANDLERS[type(command)](ctx, command)


def _task(ctx: CommandContext, task_id: str | None) -> Any:
    task = ctx.run.tasks.get(task_id or "")
    if task is None:
        raise NotFoundError(f"no task {task_id!r} in run {ctx.run.id}",
                            f"tasks: {', '.join(ctx.run.tasks) or '(none yet)'}")
    return task


def _approve(ctx: CommandContext, command: Approve) -> str:
    task = _task(ctx, command.task)
    note = (command.note or "").strip()
    judged = command.commit or (task.head if ctx.run.in_worktrees else None)
    if command.commit and not ctx.run.in_worktrees:
        raise UsageError(f"run {ctx.run.id} has no commits to approve: its workspace is shared", "approve it without --at")
    if task.state == TaskState.REVIEWING and has_evidence(note):  # the approval will be taken: merge first
        ctx.abort_turns(task.id, "approved by the human")
        if ctx.integration(task, judged, [note], "human"):
            ctx.ledger.add_verdict(task, Verdict(verdict="approve", by="human", at=ctx.clock(), evidence=[note],
                                                 note=note, commit=judged))
            ctx.ledger.drop_jobs(task.id)
            _close_task_checkpoints(ctx, task.id, "approved by the human")
            return (f"task {task.id} approved at {str(judged)[:10]}: it is merged and the integration checks run "
                    "on the run's branch; it counts as approved once they pass")
        conflicts = ctx.workspaces.integrate(task, judged)
        if conflicts:
            ctx.ledger.transition(task, TaskEvent.REJECT, "approved by the human, but its branch conflicts with "
                                  "the run's approved work in " + ", ".join(conflicts[:10]), human=True)
            ctx.ledger.drop_jobs(task.id)
            ctx.mode.requeue(task)
            return f"task {task.id} conflicts with approved work in {', '.join(conflicts[:10])}: sent back for rework"
    ctx.ledger.transition(task, TaskEvent.APPROVE, f"approved by the human: {note}", evidence=note, human=True)
    if judged and task.branch is not None and task.head != judged:  # approved at a later commit: record it
        turn = ctx.workspaces.heads(task.id)
        ctx.ledger.record_git(task, branch=turn.branch, base=turn.base, head=turn.head, changed=turn.changed)
    ctx.ledger.add_verdict(task, Verdict(verdict="approve", by="human", at=ctx.clock(), evidence=[note], note=note,
                                         commit=task.head if judged else None))
    ctx.ledger.drop_jobs(task.id)
    ctx.abort_turns(task.id, "approved by the human")
    _close_task_checkpoints(ctx, task.id, "approved by the human")
    ctx.mode.on_task_approved(task)
    return f"task {task.id} approved"


def _rework(ctx: CommandContext, command: Rework) -> str:
    task = _task(ctx, command.task)
    note = (command.note or "").strip()
    if not note:
        raise UsageError("rework needs a note saying what to fix")
    ctx.ledger.transition(task, TaskEvent.REJECT, f"sent back by the human: {note}", human=True)
    ctx.ledger.add_verdict(task, Verdict(verdict="reject", by="human", at=ctx.clock(), note=note,
                                 blocking_issues=[BlockingIssue(id="human", severity="blocker", detail=note)]))
    ctx.ledger.drop_jobs(task.id)
    ctx.abort_turns(task.id, "sent back by the human")
    _close_task_checkpoints(ctx, task.id, "sent back by the human")
    ctx.mode.requeue(task)
    return f"task {task.id} sent back for rework"


def _close_task_checkpoints(ctx: CommandContext, task_id: str, why: str) -> None:
    for cp in ctx.run.open_checkpoints():
        if cp.task == task_id and cp.kind in ("retry_escalation", "review_disagreement"):
            ctx.ledger.close_checkpoint(cp, why)


def _cancel_task(ctx: CommandContext, command: CancelTask) -> str:
    task = _task(ctx, command.task)
    ctx.ledger.transition(task, TaskEvent.CANCEL, "cancelled by the human", human=True)
    ctx.ledger.drop_jobs(task.id)
    ctx.abort_turns(task.id, "task cancelled by the human")
    ctx.workspaces.release(task, discard=True)
    for cp in ctx.run.open_checkpoints():
        if cp.task == task.id:
            ctx.ledger.close_checkpoint(cp, "task cancelled")
    ctx.mode.on_task_cancelled(task)
    return f"task {task.id} cancelled"


def _cancel_run(ctx: CommandContext, command: CancelRun) -> str:
    for task in ctx.run.tasks.values():
        if not task.is_terminal:
            ctx.ledger.transition(task, TaskEvent.CANCEL, "run cancelled", human=True)
    ctx.ledger.drop_pending()
    for cp in ctx.run.open_checkpoints():
        ctx.ledger.close_checkpoint(cp, "run cancelled")
    ctx.ledger.finish("cancelled", command.note or "cancelled by the human")
    ctx.workspaces.finish()
    return f"run {ctx.run.id} cancelled"


def _pause(ctx: CommandContext, command: Pause) -> str:
    ctx.ledger.set_paused(True)
    return "run paused: running turns finish, nothing new starts"


def _deliver(ctx: CommandContext, command: Deliver) -> str:
    return ctx.workspaces.deliver(command.into, squash=command.squash)


def _resume(ctx: CommandContext, command: Resume) -> str:
    ctx.ledger.set_paused(False)
    return "run resumed"


@dataclass(frozen=True)
class CancelTaskAt:
    """Decision: the human cancelled the checkpoint's task."""


@dataclass(frozen=True)
class CancelRunAt:
    """Decision: the human ended the run at its budget checkpoint."""


@dataclass(frozen=True)
class RetryEscalated:
    """Decision: retry what was escalated; `how` says what the task's state allows."""

    fingerprint: str | None
    note: str | None
    how: Literal["unblock", "rework", "rerun", "none"]


@dataclass(frozen=True)
class RaiseTaskBudget:
    """Decision: add `tokens` (and `usd`) to the paused task's budget and resume it (nothing added: nothing to resume)."""

    tokens: int
    usd: float = 0.0


@dataclass(frozen=True)
class RaiseRunBudget:
    """Decision: add `tokens` to the run's token budget and `usd` to its money budget."""

    tokens: int
    usd: float = 0.0


@dataclass(frozen=True)
class PassAnswer:
    """Decision: give the human's answer to the task's worker (unblocking the task first if needed)."""

    note: str
    unblock: bool


@dataclass(frozen=True)
class DeliverNow:
    """Decision: bring the done run into the person's branch (as one commit with `squash`)."""

    squash: bool


@dataclass(frozen=True)
class DeliverLater:
    """Decision: leave the run's branch for `agentbox merge`."""


@dataclass(frozen=True)
class SettleReview:
    """Decision: the human settles two reviews that did not: approve, or rework with every issue either raised."""

    approve: bool
    note: str


@dataclass(frozen=True)
class ModeAnswer:
    """Decision: the mode's own checkpoint (plan approval, ping-pong): the mode reads the answer."""


AnswerDecision = (CancelTaskAt | CancelRunAt | RetryEscalated | RaiseTaskBudget | RaiseRunBudget | PassAnswer
                  | DeliverNow | DeliverLater | SettleReview | ModeAnswer)


DELIVER_NOW = ("merge", "squash", "yes", "y")
"""Answers to a deliver checkpoint that merge now (`squash`: as one commit)."""
DELIVER_LATER = ("later", "no", "n")
"""Answers to a deliver checkpoint that leave the branch for `agentbox merge`."""


def decide_answer(run: Run, cp: Checkpoint, text: str) -> AnswerDecision:
    """What the human's non-empty answer `text` to the open checkpoint `cp` decides."""
    word = text.split()[0].lower()
    task = run.tasks.get(cp.task or "")
    if cp.kind in ("retry_escalation", "budget", "review_disagreement") and word == "cancel":
        return CancelTaskAt()
    if cp.kind == "run_budget" and word in ("cancel", "stop"):
        return CancelRunAt()
    if cp.kind == "deliver":
        if word in DELIVER_NOW:
            return DeliverNow(squash=word == "squash")
        if word in DELIVER_LATER:
            return DeliverLater()
        raise UsageError(f"{cp.id} asks whether to merge the run: answer 'merge', 'squash' (one commit) or "
                         f"'later', not {text.strip()[:60]!r}",
                         f"to throw the run away instead: agentbox discard {run.id}")
    if cp.kind == "retry_escalation":
        fp = cp.data.fingerprint
        note = None if word == "retry" and len(text.split()) == 1 else text
        how: Literal["unblock", "rework", "rerun", "none"] = "none"
        if task is not None and task.state == TaskState.BLOCKED:
            how = "unblock"
        elif task is not None and task.state == TaskState.REVIEWING and _rejected_for(task, fp):
            how = "rework"
        elif task is None or task.state == TaskState.REVIEWING:
            how = "rerun"
        return RetryEscalated(fp, note, how)
    if cp.kind == "budget":
        if task is not None and task.state == TaskState.PAUSED_FOR_BUDGET:
            return RaiseTaskBudget(_number(text) or _one_more_budget(run, task), _one_more_usd(run, task))
        return RaiseTaskBudget(0)
    if cp.kind == "run_budget":
        dollars = _dollars(text)
        if dollars is not None:
            return RaiseRunBudget(0, dollars)
        money = run.contract.limits.budget.usd_total
        return RaiseRunBudget(_number(text) or run.contract.limits.budget.tokens_total or 0,
                              money if money is not None and budgets.money_spent(run) else 0.0)
    if cp.kind == "review_disagreement":
        said = word.strip(":,.;!")
        rest = text.split(None, 1)[1].strip() if len(text.split(None, 1)) > 1 else ""
        if said in ("approve", "approved", "yes", "y"):
            return SettleReview(approve=True, note=text)
        return SettleReview(approve=False, note=rest if said == "rework" else text)
    if cp.kind == "question" and task is not None:
        return PassAnswer(f"You asked: {cp.question}\nThe human answered: {text}", task.state == TaskState.BLOCKED)
    return ModeAnswer()


def _answer(ctx: CommandContext, command: Answer) -> str:
    cp_id = command.checkpoint or ""
    cp = ctx.run.checkpoints.get(cp_id)
    if cp is None:
        open_ids = ", ".join(c.id for c in ctx.run.open_checkpoints()) or "(none open)"
        raise NotFoundError(f"no checkpoint {cp_id!r} in run {ctx.run.id}", f"open checkpoints: {open_ids}")
    if cp.status != "open":
        raise IllegalTransitionError(f"checkpoint {cp.id} was already answered: {cp.answer!r}")
    text = (command.text or "").strip()
    if not text:
        raise UsageError("the answer is empty")
    if cp.kind == "ladder" and ctx.ladder is not None:
        return f"{cp.id}: " + ctx.ladder(cp, text)
    decision = decide_answer(ctx.run, cp, text)
    if isinstance(decision, DeliverNow):  # closes the checkpoint when it worked; a refusal leaves it open
        return f"{cp.id}: {ctx.workspaces.deliver(None, squash=decision.squash)}"
    ledger = ctx.ledger
    task = ctx.run.tasks.get(cp.task or "")
    ledger.close_checkpoint(cp, text)
    if isinstance(decision, CancelRunAt):
        return _cancel_run(ctx, CancelRun(action="cancel_run", note=f"run budget spent; cancelled at {cp.id}"))
    ledger.event("checkpoint.answered", f"{cp.id} ({cp.kind}) answered", text[:300], task=cp.task, role=cp.role,
                 checkpoint=cp.id)
    if isinstance(decision, CancelTaskAt):
        if task is not None and not task.is_terminal:
            ledger.transition(task, TaskEvent.CANCEL, f"cancelled by the human at {cp.id}", human=True)
            ledger.drop_jobs(task.id)
            ctx.mode.on_task_cancelled(task)
        return f"{cp.id}: cancelled"
    if isinstance(decision, RetryEscalated):
        if decision.fingerprint:
            ledger.reset_retries(decision.fingerprint)
        if task is not None and task.ladder.environment_waited_s:  # the person looked: a fresh environment budget
            ledger.set_ladder(task, task.ladder.model_copy(update={"environment_waited_s": 0.0}))
        if task is not None and decision.how in ("unblock", "rework"):
            if decision.how == "unblock":
                ledger.transition(task, TaskEvent.UNBLOCK, f"human said retry at {cp.id}", human=True)
            else:
                ledger.transition(task, TaskEvent.REJECT, f"human said retry at {cp.id}: rework with the verdict",
                                  human=True)
            if decision.note or task.note_by != "agentbox":  # a bare retry keeps what agentbox told the worker
                ledger.leave_note(task, decision.note, by="human")
            ctx.mode.requeue(task)
        elif decision.how == "rerun":
            spec = cp.data.job
            if spec is not None:
                prompt = spec.prompt + (f"\n\nNote from the human: {decision.note}" if decision.note else "")
                ledger.enqueue(spec.kind, spec.role, prompt, task=spec.task, session_id=spec.session_id,
                               data=spec.data)
        return f"{cp.id}: retrying"
    if isinstance(decision, RaiseTaskBudget):
        if task is not None and (decision.tokens or decision.usd):
            ledger.raise_task_budget(task, decision.tokens, decision.usd)
            ledger.transition(task, TaskEvent.RESUME, f"budget raised by {decision.tokens} at {cp.id}", human=True)
            ctx.mode.requeue(task)
        return f"{cp.id}: task budget raised"
    if isinstance(decision, DeliverLater):
        return f"{cp.id}: the run's branch waits for `agentbox merge {ctx.run.id}`"
    if isinstance(decision, RaiseRunBudget):
        ledger.raise_run_budget(decision.tokens, decision.usd)
        raised = " and ".join(part for part in (f"{decision.tokens}" if decision.tokens else "",
                                                 f"${decision.usd:g}" if decision.usd else "") if part)
        return f"{cp.id}: run budget raised by {raised or 0}"
    if isinstance(decision, SettleReview) and task is not None:
        return f"{cp.id}: " + _settle_review(ctx, task, decision, cp.id)
    if isinstance(decision, PassAnswer) and task is not None:
        if decision.unblock:
            ledger.transition(task, TaskEvent.UNBLOCK, f"the human answered {cp.id}", human=True)
        ledger.leave_note(task, decision.note, by="human")
        ctx.mode.requeue(task)
        return f"{cp.id}: answer passed to {task.assignee}"
    ctx.mode.on_answer(cp, text)
    return f"{cp.id}: answered"


def _settle_review(ctx: CommandContext, task: Task, decision: SettleReview, cp_id: str) -> str:
    """Approve the twice-reviewed task, or send it back with the union of both reviews' issues and the note."""
    if task.state != TaskState.REVIEWING:
        return f"task {task.id} is {task.state}: nothing to settle"
    if decision.approve:
        return _approve(ctx, Approve(action="approve", task=task.id, note=decision.note))
    issues = list(reviews.compare_panel(task.panel).issues) if task.panel is not None else []
    ctx.ledger.transition(task, TaskEvent.REJECT, f"sent back by the human at {cp_id}", human=True)
    ctx.ledger.add_verdict(task, Verdict(verdict="reject", by="human", at=ctx.clock(), blocking_issues=issues,
                                         note=decision.note or None))
    ctx.ledger.drop_jobs(task.id)
    ctx.mode.requeue(task)
    return f"task {task.id} sent back for rework with both reviews' issues"


def _rejected_for(task: Task, fp: str | None) -> bool:
    """True when the task's latest failure is the review rejection escalated as `fp` (the worker must fix it)."""
    last = task.failures[-1] if task.failures else None
    return last is not None and last.fingerprint == fp and last.kind == FailureKind.IMPLEMENTATION_DEFECT


def _one_more_budget(run: Run, task: Task) -> int:
    """Tokens to add so the task may spend one more budget from where it is now (never less than one budget)."""
    budget = run.task_budget(task) or 0
    base = budget - task.budget_extra
    return max(budget, task.tokens + base - budget)


def _one_more_usd(run: Run, task: Task) -> float:
    """US dollars to add so the task may spend one more money budget from where it is now (0: no money budget)."""
    budget = run.task_usd_budget(task)
    if budget is None:
        return 0.0
    base = budget - task.budget_extra_usd
    return max(budget, (task.cost_usd or 0.0) + base - budget)


def _dollars(text: str) -> float | None:
    """The amount of `$N` in an answer (None: it names no dollars)."""
    match = re.search(r"\$\s*(\d[\d_,]*(?:\.\d+)?)", text)
    return float(match.group(1).replace(",", "").replace("_", "")) if match else None


def _number(text: str) -> int | None:
    match = re.search(r"(\d[\d_,]*)", text)
    return int(match.group(1).replace(",", "").replace("_", "")) if match else None


HANDLERS: dict[type[BaseModel], Callable[[CommandContext, Any], str]] = {
    Answer: _answer, Approve: _approve, Rework: _rework, CancelTask: _cancel_task, CancelRun: _cancel_run,
    Pause: _pause, Resume: _resume, Deliver: _deliver,
}
"""The handler of each command type."""
