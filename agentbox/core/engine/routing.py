"""Failure routing: what the engine does when a turn fails or its reply is unusable.

An invalid structured reply gets one corrective re-prompt; environment failures are
retried with back-off; other failures are retried automatically per fingerprint; when
retries run out the human is asked. These functions are bound as `Engine` methods
(`engine.structured`, `engine.fail`, `engine.escalate`), so modes call them on the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from agentbox.core.engine.failures import FailureKind, counts_against_task, fingerprint
from agentbox.core.engine.models import Failure, Job
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
        engine.event("reply.invalid", f"{job.role}'s {model.__name__} is invalid; one corrective re-prompt",
                     "; ".join(problems), task=job.task, role=job.role, session=result.session_id)
        retry = engine.enqueue(job.kind, job.role, corrective_prompt(model, problems), task=job.task,
                               session_id=result.session_id, **{k: v for k, v in job.data.items() if k != "not_before"})
        retry.corrective = True
        retry.data["original_prompt"] = job.data.get("original_prompt", job.prompt)
        return None
    engine.fail(job, FailureKind.CONTRACT_DEFECT, f"invalid {model.__name__}: " + "; ".join(problems))
    return None


def fail(engine: Engine, job: Job, kind: FailureKind, message: str, files: tuple[str, ...] = ()) -> None:
    """Route a typed failure: back off, retry, re-prompt, or ask the human."""
    fp = fingerprint(kind, message, files)
    task = engine.run.tasks.get(job.task or "")
    if task is not None:
        task.failures.append(Failure(kind=kind.value, fingerprint=fp, message=message[:2000], at=engine.clock(), job=job.id))
    engine.event("failure", f"{kind.value} in {job.kind} turn of {job.role}", message[:500], task=job.task,
                 role=job.role, session=job.session_id, fingerprint=fp)
    original = job.data.get("original_prompt", job.prompt)
    data = {k: v for k, v in job.data.items() if k not in ("not_before", "original_prompt")}
    if not counts_against_task(kind):  # an environment failure: retried after a back-off
        delays = engine._retry_delays()
        if job.attempt <= min(ENV_RETRIES, len(delays)):
            delay = delays[job.attempt - 1]
            if task is not None and task.state == TaskState.EXECUTING:
                engine.transition(task, TaskEvent.REQUEUE, "environment failure: retry after back-off")
            retry = engine.enqueue(job.kind, job.role, original, task=job.task, session_id=job.session_id,
                                   not_before=engine.clock() + delay, original_prompt=original, **data)
            retry.attempt = job.attempt + 1
            engine.event("retry", f"retry {retry.attempt - 1}/{ENV_RETRIES} of {job.kind} turn in {delay:.1f} s",
                         "environment failures are retried with back-off and not counted against the task",
                         task=job.task, role=job.role, fingerprint=fp)
            return
        engine.escalate(job, fp, f"{job.kind} turn of {job.role} kept failing ({message[:300]})", original, data)
        return
    count = engine.run.retries.get(fp, 0)
    max_retries = engine.limits.max_auto_retries
    if count >= max_retries:
        engine.escalate(job, fp, f"the same failure happened {count + 1} times: {message[:300]}", original, data)
        return
    engine.run.retries[fp] = count + 1
    engine.event("retry", f"automatic retry {count + 1}/{max_retries} ({kind.value})", "same fingerprint seen "
                 f"{count + 1} time(s)", task=job.task, role=job.role, fingerprint=fp)
    engine.mode.retry(job, kind, message, original, data)


def escalate(engine: Engine, job: Job, fp: str, question: str, original: str, data: dict[str, Any]) -> None:
    """Stop retrying and ask the human (a retry-escalation checkpoint)."""
    task = engine.run.tasks.get(job.task or "")
    if task is not None and job.kind != "review" and not task.is_terminal and task.state != TaskState.BLOCKED:
        engine.transition(task, TaskEvent.BLOCK, "retries exhausted: waiting for a human")
    engine.checkpoint("retry_escalation", question + "\nAnswer 'retry' (optionally with a note), or 'cancel'.",
                      options=["retry", "cancel"], task=job.task, role=job.role,
                      data={"fingerprint": fp, "job": {"kind": job.kind, "role": job.role, "task": job.task,
                                                        "session_id": job.session_id, "prompt": original, "data": data}})
    engine.event("escalation", f"{job.kind} turn of {job.role} escalated to the human", question[:300],
                 task=job.task, role=job.role, fingerprint=fp, human_required=True)
