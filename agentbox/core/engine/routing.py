"""Failure routing: what the engine does when a turn fails or its reply is unusable.

An invalid structured reply gets one corrective re-prompt; environment failures are
retried with back-off; other failures are retried automatically per fingerprint; when
retries run out the human is asked. `route_failure` decides which (a `FailureDecision`);
`fail` records the failure and carries the decision out. `structured`, `fail` and
`escalate` are bound as `Engine` methods, so modes call them on the engine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from agentbox.core.engine.failures import FailureKind, counts_against_task, fingerprint
from agentbox.core.engine.models import Failure, Job, Run
from agentbox.core.engine.replies import ReplyError, corrective_prompt, parse_reply
from agentbox.core.invoke import InvokeResult
from agentbox.core.tasks import TaskEvent, TaskState

if TYPE_CHECKING:
    from agentbox.core.engine.engine import Engine

M = TypeVar("M", bound=BaseModel)

ENV_RETRIES = 3
"""Environment failures of one turn are retried this many times (1 s, 4 s, 16 s + jitter)."""


def structured(engine: Engine, job: Job, result: InvokeResult, model: type[M],
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
        engine.ledger.event("reply.invalid", f"{job.role}'s {model.__name__} is invalid; one corrective re-prompt",
                     "; ".join(problems), task=job.task, role=job.role, session=result.session_id)
        data = {k: v for k, v in job.data.items() if k != "not_before"}
        data["original_prompt"] = job.data.get("original_prompt", job.prompt)
        engine.ledger.enqueue(job.kind, job.role, corrective_prompt(model, problems), task=job.task,
                              session_id=result.session_id, corrective=True, **data)
        return None
    engine.fail(job, FailureKind.CONTRACT_DEFECT, f"invalid {model.__name__}: " + "; ".join(problems))
    return None


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


def fail(engine: Engine, job: Job, kind: FailureKind, message: str, files: tuple[str, ...] = ()) -> None:
    """Record a typed failure and carry out its route: back off, retry, or ask the human."""
    fp = fingerprint(kind, message, files)
    ledger = engine.ledger
    task = engine.run.tasks.get(job.task or "")
    if task is not None:
        ledger.record_failure(task, Failure(kind=kind.value, fingerprint=fp, message=message[:2000],
                                            at=engine.clock(), job=job.id))
    ledger.event("failure", f"{kind.value} in {job.kind} turn of {job.role}", message[:500], task=job.task,
                 role=job.role, session=job.session_id, fingerprint=fp)
    original = job.data.get("original_prompt", job.prompt)
    data = {k: v for k, v in job.data.items() if k not in ("not_before", "original_prompt")}
    decision = route_failure(engine.run, job, kind, message, fp, engine.backoff(engine.limits.retry_max_s))
    if isinstance(decision, Escalate):
        engine.escalate(job, fp, decision.question, original, data)
    elif isinstance(decision, RetryAfter):
        if task is not None and task.state == TaskState.EXECUTING:
            ledger.transition(task, TaskEvent.REQUEUE, "environment failure: retry after back-off")
        ledger.enqueue(job.kind, job.role, original, task=job.task, session_id=job.session_id,
                       not_before=engine.clock() + decision.delay_s, attempt=decision.attempt,
                       original_prompt=original, **data)
        ledger.event("retry", f"retry {decision.attempt - 1}/{ENV_RETRIES} of {job.kind} turn in "
                     f"{decision.delay_s:.1f} s",
                     "environment failures are retried with back-off and not counted against the task",
                     task=job.task, role=job.role, fingerprint=fp)
    else:
        ledger.count_retry(fp)
        ledger.event("retry", f"automatic retry {decision.count}/{decision.max_retries} ({kind.value})",
                     f"same fingerprint seen {decision.count} time(s)", task=job.task, role=job.role,
                     fingerprint=fp)
        engine.mode.retry(job, kind, message, original, data)


def escalate(engine: Engine, job: Job, fp: str, question: str, original: str, data: dict[str, Any]) -> None:
    """Stop retrying and ask the human (a retry-escalation checkpoint)."""
    task = engine.run.tasks.get(job.task or "")
    if task is not None and job.kind != "review" and not task.is_terminal and task.state != TaskState.BLOCKED:
        engine.ledger.transition(task, TaskEvent.BLOCK, "retries exhausted: waiting for a human")
    engine.ledger.checkpoint("retry_escalation", question + "\nAnswer 'retry' (optionally with a note), or 'cancel'.",
                      options=["retry", "cancel"], task=job.task, role=job.role,
                      data={"fingerprint": fp, "job": {"kind": job.kind, "role": job.role, "task": job.task,
                                                        "session_id": job.session_id, "prompt": original, "data": data}})
    engine.ledger.event("escalation", f"{job.kind} turn of {job.role} escalated to the human", question[:300],
                 task=job.task, role=job.role, fingerprint=fp, human_required=True)
