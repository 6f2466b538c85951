"""Failure routing: what the engine does when a turn fails or its reply is unusable.

An invalid structured reply gets one corrective re-prompt; environment failures are
retried with back-off; other failures are retried automatically per fingerprint; when
retries run out the human is asked. `route_failure` decides which (a `FailureDecision`);
`FailureRouter.fail` records the failure and carries the decision out. The modes reach
`structured`, `fail` and `escalate` through their `ModeContext`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from pydantic import BaseModel

from agentbox.core.agents.invoke import InvokeResult
from agentbox.core.engine.failures import FailureKind, counts_against_task, fingerprint
from agentbox.core.engine.ledger import RunLedger
from agentbox.core.engine.models import CheckpointData, EscalatedTurn, Failure, Job, JobData, Run
from agentbox.core.engine.replies import ReplyError, corrective_prompt, parse_reply
from agentbox.core.tasks import TaskEvent, TaskState

M = TypeVar("M", bound=BaseModel)

ENV_RETRIES = 3
"""Environment failures of one turn are retried this many times (1 s, 4 s, 16 s + jitter)."""


@dataclass(frozen=True)
class RetryAfter:
    """Decision: run the same turn again after a back-off (an environment failure)."""

    delay_s: float
    attempt: int
    """The attempt number of the retry."""


@dataclass(frozen=True)
class AutoRetry:
    """Decision: retry a counted failure automatically (the mode decides how)."""

    count: int
    """This is the `count`-th automatic retry of the fingerprint."""
    max_retries: int


@dataclass(frozen=True)
class Escalate:
    """Decision: stop retrying and ask the human `question`."""

    question: str


FailureDecision = RetryAfter | AutoRetry | Escalate


def route_failure(run: Run, job: Job, kind: FailureKind, message: str, fp: str,
                  delays: Sequence[float]) -> FailureDecision:
    """What to do about a typed failure of `job`, given the run's retry counts and the back-off `delays`."""
    if not counts_against_task(kind):  # an environment failure: retried after a back-off
        if job.attempt <= min(ENV_RETRIES, len(delays)):
            return RetryAfter(delay_s=delays[job.attempt - 1], attempt=job.attempt + 1)
        return Escalate(f"{job.kind} turn of {job.role} kept failing ({message[:300]})")
    count = run.retries.get(fp, 0)
    max_retries = run.contract.limits.max_auto_retries
    if count >= max_retries:
        return Escalate(f"the same failure happened {count + 1} times: {message[:300]}")
    return AutoRetry(count=count + 1, max_retries=max_retries)


@dataclass
class FailureRouter:
    """Carries failure decisions out over the ledger; `retry` is the mode's way to retry a counted failure."""

    ledger: RunLedger
    backoff: Callable[[float], list[float]]
    """The waits before each environment retry of a turn, given the most they may add up to."""
    retry: Callable[..., None]
    """The mode's `retry(job, kind, message, original_prompt, data)`."""
    ladder: Callable[..., bool] | None = None
    """The failure ladder's `failed(job, kind, message, fingerprint, files)`: True when it took the failure."""
    environment_wait: Callable[[str | None, float], bool] = lambda _task, _delay: True
    """Whether task `task` may wait `delay` more seconds out an environment failure (the ladder's budget of
    waiting per task, across its turns); records the wait when it may."""

    def structured(self, job: Job, result: InvokeResult, model: type[M],
                   check: Callable[[M], list[str]] | None = None) -> M | None:
        """The reply as `model`, or None after arranging the corrective re-prompt / failure."""
        try:
            reply = parse_reply(model, result.text)
            problems = check(reply) if check is not None else []
        except ReplyError as exc:
            reply, problems = None, list(exc.reasons)
        if not problems:
            return reply
        if not job.corrective:
            self.ledger.event("reply.invalid", f"{job.role}'s {model.__name__} is invalid; one corrective re-prompt",
                         "; ".join(problems), task=job.task, role=job.role, session=result.session_id)
            self.ledger.enqueue(job.kind, job.role, corrective_prompt(model, problems), task=job.task,
                                session_id=result.session_id, corrective=True,
                                data=job.data.for_retry(job.original_prompt))
            return None
        self.fail(job, FailureKind.CONTRACT_DEFECT, f"invalid {model.__name__}: " + "; ".join(problems))
        return None

    def fail(self, job: Job, kind: FailureKind, message: str, files: tuple[str, ...] = ()) -> None:
        """Record a typed failure and carry out its route: back off, retry, or ask the human."""
        fp = fingerprint(kind, message, files)
        ledger = self.ledger
        task = ledger.run.tasks.get(job.task or "")
        if task is not None:
            ledger.record_failure(task, Failure(kind=kind.value, fingerprint=fp, message=message[:2000],
                                                at=self.ledger.clock(), job=job.id))
        ledger.event("failure", f"{kind.value} in {job.kind} turn of {job.role}", message[:500], task=job.task,
                     role=job.role, session=job.session_id, fingerprint=fp)
        if self.ladder is not None and self.ladder(job, kind, message, fp, files):
            return
        original, data = job.original_prompt, job.data
        delays = self.backoff(self.ledger.run.contract.limits.retry_max_s)
        decision = route_failure(self.ledger.run, job, kind, message, fp, delays)
        if isinstance(decision, Escalate):
            self.escalate(job, fp, decision.question, original, data)
        elif isinstance(decision, RetryAfter) and not self.environment_wait(job.task, decision.delay_s):
            self.escalate(job, fp, f"{job.kind} turn of {job.role} kept failing ({message[:300]}); task {job.task} "
                          f"has waited out the environment for {self.ledger.run.contract.limits.retry_max_s:.0f} s "
                          "in all, its budget", original, data)
        elif isinstance(decision, RetryAfter):
            if task is not None and task.state == TaskState.EXECUTING:
                ledger.transition(task, TaskEvent.REQUEUE, "environment failure: retry after back-off")
            ledger.enqueue(job.kind, job.role, original, task=job.task, session_id=job.session_id,
                           attempt=decision.attempt,
                           data=data.for_retry(original, not_before=self.ledger.clock() + decision.delay_s))
            ledger.event("retry", f"retry {decision.attempt - 1}/{ENV_RETRIES} of {job.kind} turn in "
                         f"{decision.delay_s:.1f} s",
                         "environment failures are retried with back-off and not counted against the task",
                         task=job.task, role=job.role, fingerprint=fp)
        else:
            ledger.count_retry(fp)
            ledger.event("retry", f"automatic retry {decision.count}/{decision.max_retries} ({kind.value})",
                         f"same fingerprint seen {decision.count} time(s)", task=job.task, role=job.role,
                         fingerprint=fp)
            self.retry(job, kind, message, original, data)

    def escalate(self, job: Job, fp: str, question: str, original: str, data: JobData) -> None:
        """Stop retrying and ask the human (a retry-escalation checkpoint)."""
        task = self.ledger.run.tasks.get(job.task or "")
        if task is not None and job.kind != "review" and not task.is_terminal and task.state != TaskState.BLOCKED:
            self.ledger.transition(task, TaskEvent.BLOCK, "retries exhausted: waiting for a human")
        self.ledger.checkpoint("retry_escalation", question + "\nAnswer 'retry' (optionally with a note), or 'cancel'.",
                          options=["retry", "cancel"], task=job.task, role=job.role,
                          data=CheckpointData(fingerprint=fp, job=EscalatedTurn(
                              kind=job.kind, role=job.role, task=job.task, session_id=job.session_id, prompt=original,
                              data=data.for_retry(None))))
        self.ledger.event("escalation", f"{job.kind} turn of {job.role} escalated to the human", question[:300],
                     task=job.task, role=job.role, fingerprint=fp, human_required=True)
