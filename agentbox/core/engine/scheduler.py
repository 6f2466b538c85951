"""Which pending turns may start now: max_workers, write-scope overlap, member slots, deps.

`max_workers` caps the workers: turns that work on a task (work and graph node turns) or
may write (a handoff). The lead's plan and synthesis, the reviewer's reviews and chat
speeches are read-only, so the workspace conflicts the cap exists for cannot come from
them, and a review never waits for a worker's slot. Each member holds at most one slot
(see `member_busy`), so at most one review per worker member can be waiting or running.

Pure functions over the run state, so the rules are tested without processes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from agentbox.core.engine.models import Job, Run, Task
from agentbox.core.sandbox.scopes import glob_static_prefix
from agentbox.core.tasks import TaskState, holds_slot


def globs_overlap(first: Iterable[str], second: Iterable[str]) -> bool:
    """True when some path could match a pattern of both lists (conservative).

    Two patterns overlap when the literal prefix of one is a path prefix of the other's
    (`src/**` and `src/app/*.py`, `src` and `src/x/*.py`: a literal may be a directory),
    or both are the same literal path. Read-only tasks (empty lists) overlap nothing.
    """
    for a in first:
        a_static, _ = glob_static_prefix(a)
        for b in second:
            b_static, _ = glob_static_prefix(b)
            shorter = min(len(a_static), len(b_static))
            if a_static[:shorter] == b_static[:shorter]:
                return True
    return False


def deps_state(task: Task, tasks: dict[str, Task]) -> str:
    """`ready` when every dependency is approved, `failed` when one can never be, else `waiting`.

    A dependency can never be approved when it is missing, cancelled, or blocked because
    one of its own dependencies failed. A task blocked on a human (a question, a retry
    escalation) may still come back, so its dependents wait for it.
    """
    return _deps_state(task, tasks, set())


def _deps_state(task: Task, tasks: dict[str, Task], seen: set[str]) -> str:
    status = "ready"
    for dep in task.depends_on:
        other = tasks.get(dep)
        if other is None or other.state == TaskState.CANCELLED:
            return "failed"
        if other.state == TaskState.BLOCKED and dep not in seen:
            seen.add(dep)
            if _deps_state(other, tasks, seen) == "failed":
                return "failed"
        if other.state != TaskState.APPROVED:
            status = "waiting"
    return status


def job_writes(job: Job, run: Run) -> list[str]:
    """The write scope a job needs (work turns only; reviews, plans and chats are read-only)."""
    if job.works_on_task and job.task and job.task in run.tasks:
        return run.tasks[job.task].writes
    return list(job.data.writes or [])


def member_busy(role: str, task_id: str | None, run: Run) -> bool:
    """True when the role holds a slot with another task (submitted work keeps its slot)."""
    return bool(_slot_holders(run).get(role, set()) - {task_id})


def _slot_holders(run: Run) -> dict[str, set[str]]:
    """Role → the tasks holding its slot (executing, submitted, reviewing, rework)."""
    holders: dict[str, set[str]] = {}
    for task in run.tasks.values():
        if holds_slot(task.state):
            holders.setdefault(task.assignee, set()).add(task.id)
    return holders


def is_worker_turn(job: Job, run: Run) -> bool:
    """What `max_workers` counts: work on a task (work, graph node) or any turn that may write."""
    return job.works_on_task or bool(job_writes(job, run))


def pick(pending: Sequence[Job], in_flight: Sequence[Job], run: Run, max_workers: int, now: float) -> list[Job]:
    """The pending jobs to start now, in order, respecting every scheduling rule."""
    chosen: list[Job] = []
    active = list(in_flight)
    workers = sum(1 for job in active if is_worker_turn(job, run))
    holders = _slot_holders(run)
    working_roles = {o.role for o in active if o.works_on_task}
    for job in pending:
        if job.data.not_before > now:
            continue
        if is_worker_turn(job, run) and workers >= max_workers:
            continue
        is_work = job.works_on_task
        if is_work and (job.role in working_roles or holders.get(job.role, set()) - {job.task}):
            continue
        writes = job_writes(job, run)
        if writes and any(globs_overlap(writes, job_writes(other, run)) for other in active):
            continue
        chosen.append(job)
        active.append(job)
        if is_worker_turn(job, run):
            workers += 1
        if is_work:
            working_roles.add(job.role)
    return chosen
