"""Which turn a person means by `agentbox tail ROLE|TASK`, and where its live view is.

A role means its running turn (the newest, when it runs several), else its last turn; a
task means the turn running for it (the worker's or the reviewer's), else the last turn
of its sessions. The live log's place is derived from the session store and the turn
number, never taken from a path in a record.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from agentbox.core.agents.sessions import SessionRecord, SessionStore
from agentbox.core.errors import NotFoundError, StateError
from agentbox.core.paths import ProjectPaths


@dataclass(frozen=True)
class LiveSource:
    """One turn of one session to watch."""

    what: str
    """What was asked for, for messages ("builder", "task t1 (builder)")."""
    session: SessionRecord
    turn: int
    directory: Path
    """The turn's live log (see `agentbox.core.agents.live`)."""
    running: bool


def _turn_of(store: SessionStore, record: SessionRecord) -> tuple[int, bool]:
    running = record.running if record.status == "running" and isinstance(record.running, dict) else None
    turn = running.get("turn") if running is not None else None
    if isinstance(turn, int) and not isinstance(turn, bool) and turn > 0:
        return turn, True
    return record.turns, False


def source_of(store: SessionStore, what: str, record: SessionRecord) -> LiveSource:
    """The turn of `record` to show: the one running, else its last."""
    turn, running = _turn_of(store, record)
    return LiveSource(what, record, turn, store.logs_dir(record) / f"turn-{turn}.live", running)


def _newest(store: SessionStore, what: str, records: list[SessionRecord]) -> LiveSource | None:
    """Of `records`, the newest one running, else the newest that had a turn (`what` may name its `{owner}`)."""
    ordered = sorted(records, key=lambda r: r.updated, reverse=True)
    chosen = next((r for r in ordered if _turn_of(store, r)[1]), None) or next((r for r in ordered if r.turns > 0), None)
    return None if chosen is None else source_of(store, what.format(owner=chosen.owner), chosen)


def role_source(project: ProjectPaths, role: str) -> LiveSource | None:
    """The turn of `role` to show, or None when it has had none."""
    store = SessionStore(project.sessions_dir)
    return _newest(store, "{owner}", store.list(role))


def find_source(project: ProjectPaths, target: str, run_id: str | None = None) -> LiveSource:
    """The turn `target` (a role of the crew, else a task of a run) means; NotFoundError when it has none."""
    from agentbox.core.config import project as project_mod

    roles = project_mod.load_crew(project).crew.roles
    if target in roles and run_id is None:
        found = role_source(project, target)
        if found is None:
            raise NotFoundError(f"{target} has not run a turn yet", f"`agentbox invoke {target} PROMPT` runs one")
        return found
    return _task_source(project, target, run_id)


def _task_source(project: ProjectPaths, task_id: str, run_id: str | None) -> LiveSource:
    from agentbox.core import runs

    found_run, task_id = runs.resolve_task(project, task_id, run_id)  # a prefix names its task
    run = runs.load(project, found_run)
    task = run.tasks.get(task_id)
    if task is None:
        raise NotFoundError(f"run {run.id} has no task {task_id!r}", f"`agentbox status {run.id}` lists its tasks")
    store = SessionStore(project.sessions_dir)
    what = f"task {task_id} ({{owner}})"  # the worker's or the reviewer's turn
    running_ids = [job.session_id for job in run.running_jobs() if job.task == task_id and job.session_id]
    session_ids = list(dict.fromkeys([*running_ids, *(i for i in (task.session_id, task.review_session_id) if i)]))
    records = []
    for session_id in session_ids:
        try:
            records.append(store.find(session_id))
        except (NotFoundError, StateError):
            continue
    found = _newest(store, what, records)
    if found is None:
        raise NotFoundError(f"task {task_id} of run {run.id} has not run a turn yet",
                            f"it is {task.state}; `agentbox tail {task.assignee}` follows its assignee")
    return found


def still_running(project: ProjectPaths, source: LiveSource) -> bool:
    """Whether the turn of `source` is still in flight (its session record says so)."""
    store = SessionStore(project.sessions_dir)
    try:
        record = store.find(source.session.id)
    except (NotFoundError, StateError):
        return False
    turn, running = _turn_of(store, record)
    return running and turn == source.turn
