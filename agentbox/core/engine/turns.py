"""One turn of one agent: its sandboxed agent, its process, and what happens when it ends.

`run_turn` and `complete` are bound as `Engine._turn` and `Engine._complete`: the engine's
loop starts a turn as a task of its own and hands each finished one back.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentbox.core import services
from agentbox.core.engine.failures import classify_invoke_error
from agentbox.core.engine.models import Job
from agentbox.core.engine.recovery import _session_exists
from agentbox.core.errors import AgentboxError
from agentbox.core.invoke import InvokeResult, invoke
from agentbox.core.tasks import TaskState

if TYPE_CHECKING:
    from agentbox.core.engine.engine import Engine


def agent_for(engine: Engine, job: Job) -> Any:
    """The role's agent for `job`, allowed to write the task's write scope and its handoff folder."""
    task = engine.run.tasks.get(job.task or "")
    extra_rw: tuple[Path, ...] = ()
    writes: tuple[str, ...] = ()
    if job.works_on_task and task is not None:
        handoff = engine.store.artifacts_dir(engine.run.id) / task.id
        handoff.mkdir(parents=True, exist_ok=True)
        extra_rw = (handoff,)
        writes = tuple(task.writes)
    elif "writes" in job.data:
        writes = tuple(job.data["writes"])
    if job.role not in engine._role_agents:  # profile and instructions are read once per run
        engine._role_agents[job.role] = services.role_agent(engine.project, job.role, crew=engine.crew)
    return dataclasses.replace(engine._role_agents[job.role], writes=writes, extra_rw=extra_rw)


async def run_turn(engine: Engine, job: Job) -> tuple[Job, InvokeResult]:
    """Run `job` in its session (resumed if it exists); failures to start become an error result."""
    session = job.session_id
    assert session is not None
    try:
        agent = agent_for(engine, job)
    except AgentboxError as exc:  # the role or its profile cannot be loaded any more
        return job, InvokeResult(status="error", session_id=session, error_kind="spawn_failed",
                                 error=exc.message, role=job.role)
    exists = _session_exists(agent.sessions, session)

    def spawned(record: Any, pid: int) -> None:
        engine.ledger.learned_pid(job, pid, (record.running or {}).get("create_time"))

    timeout = engine.limits.task_timeout_s
    try:
        result = await invoke(agent, job.prompt, session if exists else None, timeout_s=timeout,
                              on_spawn=spawned, new_session_id=None if exists else session,
                              run_id=engine.run.id, task_id=job.task)
    except AgentboxError as exc:  # sandbox cannot be built, session busy: an environment failure
        result = InvokeResult(status="error", session_id=session, error_kind="spawn_failed", error=exc.message,
                              role=job.role)
    return job, result


def complete(engine: Engine, job: Job, result: InvokeResult) -> None:
    """Account for a finished turn, log it, and route its failure or hand its result to the mode."""
    engine.ledger.forget_job(job.id)
    engine.ledger.account(engine.run.tasks.get(job.task or ""), result.usage)
    engine.ledger.event("turn", f"{job.kind} turn of {job.role} ended: {result.status}"
                 + (f" ({result.error_kind})" if result.error_kind else ""),
                 result.error if not result.ok else None, task=job.task, role=job.role,
                 session=result.session_id, tokens=result.usage.total_tokens, job=job.id,
                 duration_s=round(result.duration_s, 2), turn=result.turn)
    task = engine.run.tasks.get(job.task or "")
    if task is not None and task.is_terminal:
        return  # decided meanwhile (cancelled, approved by a human): the late answer is ignored
    if job.kind == "review" and task is not None and task.state != TaskState.REVIEWING:
        return
    if not result.ok:
        kind = classify_invoke_error(result.error_kind or "nonzero_exit")
        engine.fail(job, kind, f"{result.error_kind}: {result.error or ''}")
        return
    engine.mode.on_success(job, result)
