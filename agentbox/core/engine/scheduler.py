"""Which pending turns may start now: max_workers, write-scope overlap, member slots, deps.

Pure functions over the run state, so the rules are tested without processes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import PurePosixPath

from agentbox.core.engine.models import Job, Run, Task
from agentbox.core.tasks import TaskState, holds_slot


def _static_parts(pattern: str) -> tuple[tuple[str, ...], bool]:
    """The literal leading path components of a glob, and whether the whole pattern is literal."""
    parts = PurePosixPath(pattern.strip("/") or ".").parts
    static: list[str] = []
    for part in parts:
        if any(ch in part for ch in "*?["):
            return tuple(static), False
        static.append(part)
    return tuple(static), True


def globs_overlap(first: Iterable[str], second: Iterable[str]) -> bool:
    """True when some path could match a pattern of both lists (conservative).

    Two patterns overlap when the literal prefix of one is a path prefix of the other's
    (`src/**` and `src/app/*.py`), or both are the same literal path. Read-only tasks
    (empty lists) overlap nothing.
    """
    for a in first:
        a_static, a_literal = _static_parts(a)
        for b in second:
            b_static, b_literal = _static_parts(b)
            if a_literal and b_literal:
                if a_static == b_static or a_static[: len(b_static)] == b_static or b_static[: len(a_static)] == a_static:
                    return True
                continue
            shorter = min(len(a_static), len(b_static))
            if a_static[:shorter] == b_static[:shorter]:
                if a_literal and len(a_static) < len(b_static):
                    continue  # a literal file cannot contain b's deeper paths
                if b_literal and len(b_static) < len(a_static):
                    continue
                return True
    return False


def deps_state(task: Task, tasks: dict[str, Task]) -> str:
    """`ready` when every dependency is approved, `failed` when one can never be, else `waiting`."""
    for dep in task.depends_on:
        other = tasks.get(dep)
        if other is None or other.state in (TaskState.CANCELLED, TaskState.BLOCKED):
            return "failed"
        if other.state != TaskState.APPROVED:
            return "waiting"
    return "ready"


def job_writes(job: Job, run: Run) -> list[str]:
    """The write scope a job needs (work turns only; reviews, plans and chats are read-only)."""
    if job.kind in ("work", "node") and job.task and job.task in run.tasks:
        return run.tasks[job.task].writes
    return list(job.data.get("writes", []))


def member_busy(role: str, task_id: str | None, run: Run) -> bool:
    """True when the role holds a slot with another task (submitted work keeps its slot)."""
    return any(
        t.assignee == role and t.id != task_id and holds_slot(TaskState(t.state))
        for t in run.tasks.values()
    )


def pick(pending: Sequence[Job], in_flight: Sequence[Job], run: Run, max_workers: int, now: float) -> list[Job]:
    """The pending jobs to start now, in order, respecting every scheduling rule."""
    chosen: list[Job] = []
    active = list(in_flight)
    for job in pending:
        if len(active) >= max_workers:
            break
        if float(job.data.get("not_before", 0)) > now:
            continue
        writes = job_writes(job, run)
        if writes and any(globs_overlap(writes, job_writes(other, run)) for other in active):
            continue
        if job.kind in ("work", "node") and member_busy(job.role, job.task, run):
            continue
        if job.kind in ("work", "node") and any(o.kind in ("work", "node") and o.role == job.role for o in active):
            continue
        chosen.append(job)
        active.append(job)
    return chosen
