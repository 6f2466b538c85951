"""Crash recovery: taking over a run whose previous engine died mid-turn.

The saved state names every running turn's session before its process starts, so a new
engine can kill what is left of those turns and resume each one in its own session.
`interrupted_turns` decides, `recover` carries the decisions out on the ledger.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any

from agentbox.core.agents.sessions import SessionStore
from agentbox.core.engine.ledger import RunLedger
from agentbox.core.engine.models import Job, Run
from agentbox.core.engine.prompts import interrupted_prompt
from agentbox.core.engine.run_store import RunStore
from agentbox.core.errors import NotFoundError
from agentbox.core.tasks import TaskEvent, TaskState


@dataclass(frozen=True)
class ResumeTurn:
    """Decision: a turn the crash interrupted is resumed in its session with `prompt`."""

    job_id: str
    prompt: str
    requeue_task: bool
    """Its task was executing: it goes back to the queue until the turn starts again."""


def interrupted_turns(run: Run) -> list[ResumeTurn]:
    """What to do with each turn that was running when the previous engine died."""
    decisions = []
    for job in run.running_jobs():
        task = run.tasks.get(job.task or "")
        decisions.append(ResumeTurn(job.id, interrupted_prompt(job.original_prompt),
                                    task is not None and task.state == TaskState.EXECUTING and job.works_on_task))
    return decisions


def recover(store: RunStore, ledger: RunLedger) -> None:
    """After a crash: flush the outbox, kill orphaned agents, re-queue interrupted turns."""
    store.flush_outbox(ledger.run)
    for decision in interrupted_turns(ledger.run):
        job = ledger.run.jobs[decision.job_id]
        _kill_orphan(job)
        ledger.event("recover", f"{job.kind} turn of {job.role} was interrupted; resuming it in its session",
                     "engine restarted", task=job.task, role=job.role, session=job.session_id)
        ledger.requeue_interrupted(job, decision.prompt)
        task = ledger.run.tasks.get(job.task or "")
        if decision.requeue_task and task is not None:
            ledger.transition(task, TaskEvent.REQUEUE, "interrupted turn re-queued")
    ledger.event("engine.started", f"engine pid {os.getpid()} took the run", None)


def _session_exists(sessions: SessionStore, session_id: str) -> bool:
    """Whether the agentbox session exists, so a turn resumes it rather than creating it."""
    try:
        sessions.find(session_id)
    except NotFoundError:
        return False
    return True


def _kill_orphan(job: Job) -> None:
    """Kill what is left of an interrupted turn, with its children.

    That is the recorded process if it is provably the one agentbox started (see
    `_is_our_turn`), and any process still working in the turn's session
    (`AGENTBOX_SESSION_ID` in its environment): the pid reaches run.json with the next save
    after the spawn, which a crash may precede.
    """
    import psutil

    found: list[Any] = []
    if job.pid is not None:
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(job.pid)
            if _is_our_turn(proc, job):
                found.append(proc)
    if job.session_id:
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if proc.pid != os.getpid() and proc.environ().get("AGENTBOX_SESSION_ID") == job.session_id:
                    found.append(proc)
    for proc in found:
        with contextlib.suppress(psutil.Error):
            for child in proc.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    child.kill()
            proc.kill()


def _is_our_turn(proc: Any, job: Job) -> bool:
    """True when `proc` is the process agentbox started for `job`, so it may be killed.

    run.json can be edited, and pids are reused: both the start time recorded at the spawn
    must match, and the process (or, for a sandbox that passes the environment on to its
    child, a descendant) must carry the turn's `AGENTBOX_SESSION_ID`. Anything that cannot
    be checked (no recorded start time, no session, an environment we may not read) is left alone.
    """
    import psutil

    if job.pid_create_time is None or not job.session_id or proc.pid in (os.getpid(), 1):
        return False
    try:
        if abs(proc.create_time() - job.pid_create_time) > 0.01:
            return False
        for candidate in (proc, *proc.children(recursive=True)):
            with contextlib.suppress(psutil.Error):
                if candidate.environ().get("AGENTBOX_SESSION_ID") == job.session_id:
                    return True
    except psutil.Error:
        return False
    return False
