"""The engine: one run, driven to the end under the hard rules.

The engine owns the run's state while it holds the run's engine lock. Its loop: apply
inbox commands, start the pending turns the scheduler allows, wait for a turn to end
(or a command, or a back-off timer), hand the result to the mode, save. Everything a
mode does goes through the engine's small API (`enqueue`, `transition`, `checkpoint`,
`structured`, `fail`, `finish`), which records each decision in the log.

Parts of that API live in sibling modules whose functions are bound as Engine methods:
`turns` (running a turn), `routing` (failures), `budgets` and `recovery` (after a crash).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

from agentbox.core import project as project_mod
from agentbox.core.config import Limits
from agentbox.core.engine import budgets, recovery, routing, scheduler, turns
from agentbox.core.engine.budgets import BUDGET_PAUSE_RATIO as BUDGET_PAUSE_RATIO
from agentbox.core.engine.failures import backoff_delays
from agentbox.core.engine.models import TERMINAL_RUN_STATES, Checkpoint, Job, Run, Task
from agentbox.core.engine.recovery import _kill_orphan
from agentbox.core.engine.routing import ENV_RETRIES as ENV_RETRIES
from agentbox.core.engine.run_store import RUN_FILE, DamagedRunError, RunStore
from agentbox.core.errors import IllegalTransitionError, NotFoundError, UsageError
from agentbox.core.invoke import InvokeResult
from agentbox.core.paths import ProjectPaths
from agentbox.core.store import DiskFullError, disk_full_is_typed
from agentbox.core.tasks import TaskEvent, TaskState, transition

POLL_S = 0.2
"""How often the engine looks at its inbox while turns are running."""
LOCK_WAIT_S = 3.0
"""How long a starting engine waits for the run's lock held by a command or a probe."""


class Engine:
    """Drives one run; `execute()` is the loop, `apply_command()` the only way to steer it."""

    def __init__(self, project: ProjectPaths, run: Run, *, on_event: Callable[[dict[str, Any]], None] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        from agentbox.core.engine.modes import driver_for

        self.project = project
        self.store = RunStore(project)
        self.run = run
        self.on_event = on_event
        self.clock = clock
        self.crew = project_mod.load_crew(project).crew
        self.mode = driver_for(run.contract.mode)(self)
        self._flights: dict[str, asyncio.Task[tuple[Job, InvokeResult]]] = {}
        self._dirty = False
        self._role_agents: dict[str, Any] = {}
        self._wake: asyncio.Event | None = None
        """Set by anything that should wake the loop at once (made by `execute`)."""

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, project: ProjectPaths, run_id: str, **kw: Any) -> Engine:
        """An engine over a run on disk (no lock taken yet)."""
        return cls(project, RunStore(project).load(run_id), **kw)

    @property
    def limits(self) -> Limits:
        """The limits of the run contract."""
        return self.run.contract.limits

    # ------------------------------------------------------------------ recording
    def event(self, type_: str, what: str, why: str | None = None, *, task: str | None = None,
              role: str | None = None, session: str | None = None, fingerprint: str | None = None,
              tokens: int | None = None, human_required: bool = False, **extra: Any) -> dict[str, Any]:
        """Add one line to the decision log (saved with the next state write)."""
        self.run.seq += 1
        record = {"seq": self.run.seq, "at": self.clock(), "run": self.run.id, "type": type_, "what": what,
                  "why": why, "task": task, "role": role, "session": session, "fingerprint": fingerprint,
                  "tokens": tokens, "human_required": human_required, **extra}
        self.run.outbox.append(record)
        if self.on_event is not None:
            self.on_event(record)
        return record

    def save(self) -> None:
        """Persist the state and flush the decision log."""
        self.store.save(self.run)
        self._dirty = False

    def save_if_changed(self) -> None:
        """Save only when something happened since the last save.

        Every decision is an event, so an unsaved event (in the outbox) means new state; the
        few changes that log nothing (a turn enqueued, a pid learned) mark the engine dirty. An idle run
        waiting on a human is then not rewritten (the dashboard would see a change each time).
        """
        if self._dirty or self.run.outbox:
            self.save()

    def next_id(self, prefix: str) -> str:
        """A short id unique in this run (`cp-3`, `job-17`)."""
        n = self.run.next_ids.get(prefix, 0) + 1
        self.run.next_ids[prefix] = n
        return f"{prefix}-{n}"

    # ------------------------------------------------------------------ tasks
    def add_task(self, task: Task, why: str) -> Task:
        """Register a new task (queued)."""
        task.created = task.updated = self.clock()
        self.run.tasks[task.id] = task
        self.event("task.created", f"{task.id} → {task.assignee}: {task.brief[:120]}", why, task=task.id, role=task.assignee)
        return task

    def transition(self, task: Task, event: TaskEvent, why: str, *, evidence: Any = None, human: bool = False) -> None:
        """Apply a task state change through the transition table (illegal ones raise)."""
        before = task.state
        task.state = transition(task.state, event, evidence=evidence)
        task.updated = self.clock()
        self.event(f"task.{event.value}", f"{task.id}: {before} → {task.state}", why, task=task.id,
                   role=task.assignee, human_required=human)

    # ------------------------------------------------------------------ jobs
    def enqueue(self, kind: str, role: str, prompt: str, *, task: str | None = None,
                session_id: str | None = None, not_before: float = 0.0, **data: Any) -> Job:
        """Add a pending turn; the scheduler starts it when the rules allow."""
        job = Job(id=self.next_id("job"), kind=kind, role=role, task=task, session_id=session_id,  # type: ignore[arg-type]
                  prompt=prompt, data={"not_before": not_before, **data})
        self.run.jobs[job.id] = job
        self._dirty = True
        self._poke()
        return job

    def pending(self) -> list[Job]:
        """Turns waiting to start, oldest first."""
        return self.run.pending_jobs()

    def in_flight(self) -> list[Job]:
        """Turns running now."""
        return self.run.running_jobs()

    def drop_jobs(self, task_id: str) -> None:
        """Forget the pending turns of a task (cancelled, paused, decided by a human)."""
        for job in [j for j in self.pending() if j.task == task_id]:
            del self.run.jobs[job.id]

    def abort_turns(self, task_id: str, why: str) -> None:
        """Stop the running turns of a task a human has decided: their answers would be stale."""
        for job in [j for j in self.in_flight() if j.task == task_id]:
            flight = self._flights.get(job.id)
            if flight is not None:
                flight.cancel()
            else:
                _kill_orphan(job)
            del self.run.jobs[job.id]
            self.event("turn.aborted", f"{job.kind} turn of {job.role} on {task_id} stopped", why, task=task_id,
                       role=job.role, session=job.session_id, job=job.id)

    def session_for(self, job: Job) -> str:
        """The agentbox session a job runs in (chosen and recorded before it starts)."""
        if job.session_id:
            return job.session_id
        task = self.run.tasks.get(job.task or "")
        new = str(uuid.uuid4())
        if job.kind == "work" and task is not None:
            task.session_id = task.session_id or new
            job.session_id = task.session_id
        elif job.kind == "review" and task is not None:
            task.review_session_id = task.review_session_id or new
            job.session_id = task.review_session_id
        else:
            key = job.data.get("session_key") or job.role
            job.session_id = self.run.sessions.setdefault(key, new)
        return job.session_id

    def _start(self, job: Job) -> None:
        """Mark `job` started in its session and schedule its turn.

        The turn's process starts only once the loop yields, and the loop saves the state
        before it yields: the saved state names the session before the process exists.
        """
        task = self.run.tasks.get(job.task or "")
        if task is not None:
            if job.works_on_task and task.state in (TaskState.QUEUED, TaskState.REWORK):
                self.transition(task, TaskEvent.DISPATCH, f"{job.role} starts {task.id}")
                task.attempts += 1
            elif job.kind == "review" and task.state == TaskState.SUBMITTED:
                self.transition(task, TaskEvent.START_REVIEW, f"{job.role} reviews {task.id}")
        session = self.session_for(job)
        job.started = self.clock()
        self.event("dispatch", f"{job.kind} turn of {job.role}" + (f" on {job.task}" if job.task else ""),
                   "scheduler: slot free, dependencies met, no write-scope overlap",
                   task=job.task, role=job.role, session=session, job=job.id, attempt=job.attempt)
        self._flights[job.id] = asyncio.ensure_future(self._turn(job))

    # ------------------------------------------------------------------ turns and results
    _turn = turns.run_turn
    _complete = turns.complete
    _account = budgets.account

    # ------------------------------------------------------------------ failure routing
    structured = routing.structured
    fail = routing.fail
    escalate = routing.escalate

    def _retry_delays(self) -> list[float]:
        """The back-off waits before each environment retry of a turn (`retry_max_s` caps them).

        `backoff_delays` is looked up in this module when called, so a test can shorten the waits.
        """
        return backoff_delays(self.limits.retry_max_s)

    # ------------------------------------------------------------------ checkpoints
    def checkpoint(self, kind: str, question: str, *, options: list[str] | None = None, task: str | None = None,
                   role: str | None = None, data: dict[str, Any] | None = None) -> Checkpoint:
        """Open a question for the human; the run waits on it (other work continues)."""
        cp = Checkpoint(id=self.next_id("cp"), kind=kind, question=question, options=options or [],  # type: ignore[arg-type]
                        task=task, role=role, created=self.clock(), data=data or {})
        self.run.checkpoints[cp.id] = cp
        self.event("checkpoint", f"{cp.id} ({kind}) waits for the human", question[:300], task=task, role=role,
                   human_required=True, checkpoint=cp.id)
        return cp

    # ------------------------------------------------------------------ budgets
    _over_budget = budgets.over_budget

    # ------------------------------------------------------------------ commands
    def apply_command(self, command: dict[str, Any]) -> tuple[bool, str]:
        """Apply one human command (from the inbox or directly); refuses illegal or malformed ones."""
        from agentbox.core.engine import commands

        if command.get("id") in self.run.applied_commands:
            return True, "already applied"
        try:
            message = commands.apply(self, commands.parse(command))
            ok = True
        except (IllegalTransitionError, NotFoundError, UsageError) as exc:
            ok, message = False, exc.message
        if command.get("id"):
            self.run.applied_commands.append(str(command["id"]))

        def text(key: str) -> str | None:
            value = command.get(key)
            return value if isinstance(value, str) else None

        self.event("command", f"{str(command.get('action'))[:40]} {'applied' if ok else 'refused'}: {message}",
                   text("note"), task=text("task"), human_required=False, command_id=text("id"), ok=ok)
        self._poke()
        return ok, message

    def _apply_inbox(self) -> None:
        commands, offset = self.store.commands(self.run.id, self.run.inbox_offset)
        if offset == self.run.inbox_offset:
            return
        for command in commands:
            self.apply_command(command)
        self.run.inbox_offset = offset
        self._dirty = True  # saved with what the loop decides next, before it waits again

    # ------------------------------------------------------------------ status
    def finish(self, status: str, why: str, result: dict[str, Any] | None = None) -> None:
        """End the run (done, failed, cancelled)."""
        self.run.status = status  # type: ignore[assignment]
        self.run.status_reason = why
        self.run.finished = self.clock()
        if result is not None:
            self.run.result = result
        self.event("run.finished", f"run {status}", why)

    def _update_status(self) -> None:
        run = self.run
        if run.status in TERMINAL_RUN_STATES:
            return
        if run.paused:
            new, why = "paused", "paused by the human"
        elif not self.run.run_budget_left():
            new, why = ("circuit_broken", "run token budget exhausted") if not self.in_flight() else ("running", "budget spent: finishing running turns")
        elif self.in_flight() or self._dispatchable():
            new, why = (run.mode_state.get("phase") == "planning" and "planning") or "running", None
        elif self.run.open_checkpoints():
            new, why = "waiting_user", f"{len(self.run.open_checkpoints())} checkpoint(s) wait for the human"
        elif self.pending():
            new, why = "running", "waiting for a back-off timer"
        else:
            new, why = "blocked", "nothing can run: tasks are blocked"
        if new != run.status:
            run.status = new  # type: ignore[assignment]
            run.status_reason = why
            self.event("run.status", f"run is {new}", why, human_required=new in ("waiting_user", "blocked", "circuit_broken"))
            if new == "circuit_broken":
                budgets.ask_for_run_budget(self)

    def _dispatchable(self) -> bool:
        if self.run.paused or not self.run.run_budget_left():
            return False
        return bool(scheduler.pick(self.pending(), self.in_flight(), self.run, self._max_workers(), float("inf")))

    def _max_workers(self) -> int:
        return self.limits.max_workers

    # ------------------------------------------------------------------ the loop
    def _dispatch(self) -> None:
        if self.run.paused or not self.run.run_budget_left() or self.run.status in TERMINAL_RUN_STATES:
            return
        for job in scheduler.pick(self.pending(), self.in_flight(), self.run, self._max_workers(), self.clock()):
            if not budgets.pause_if_over_budget(self, job):
                self._start(job)

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    recover = recovery.recover

    async def execute(self) -> Run:
        """Drive the run until it is done, failed or cancelled (waits on the human meanwhile).

        The lock may be held for a moment by a command applied directly or a process probing
        whether an engine runs, so taking it is retried for `LOCK_WAIT_S` before giving up.
        """
        self._wake = asyncio.Event()
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            with self.store.engine_lock(self.run.id) as mine:
                if mine:
                    return await self._execute_locked()
            if time.monotonic() >= deadline:
                raise UsageError(f"run {self.run.id} already has an engine running",
                                 "watch it with `agentbox status` or the dashboard")
            await asyncio.sleep(0.05)

    async def _execute_locked(self) -> Run:
        """The run under its lock: validate and recover from disk, start the mode, loop, release.

        A full disk stops the engine with a `DiskFullError` after pausing the run (see
        `_stop_for_full_disk`); `run --resume` continues once there is space again.
        """
        self.run = self.store.load_checked(self.run.id)
        self._check_roles()
        self.store.reserve(self.run.id)
        try:
            self.run.engine = {"pid": os.getpid(), "started": self.clock()}
            self.recover()
            if not self.run.mode_state.get("started"):
                self.run.mode_state["started"] = True
                self.mode.start()
            self.save()
            await self._loop()
        except DiskFullError as exc:
            await self._stop_for_full_disk(exc)
            raise
        finally:
            await self._cancel_flights()
            self.run.engine = None
            with contextlib.suppress(DiskFullError):
                self.save()
            self.store.release_reserve(self.run.id)
        return self.run

    def _check_roles(self) -> None:
        """Every pending or running turn, and every open task, names a role of the crew."""
        roles = self.crew.roles
        named = [(f"jobs.{job.id}.role", job.role) for job in self.run.jobs.values()]
        named += [(f"tasks.{task.id}.assignee", task.assignee) for task in self.run.tasks.values()
                  if task.state not in ("approved", "cancelled")]
        for field, role in named:
            if role not in roles:
                raise DamagedRunError(self.store.dir(self.run.id) / RUN_FILE,
                                      f"{field}: role {role[:64]!r} is not in crew.yaml "
                                      f"(roles: {', '.join(roles) or 'none'})", run_id=self.run.id)

    async def _cancel_flights(self) -> None:
        for flight in self._flights.values():
            flight.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*self._flights.values(), return_exceptions=True)

    async def _stop_for_full_disk(self, exc: DiskFullError) -> None:
        """Stop the running turns and save the run paused, in the space the run's reserve gave back.

        Turns that ended before are recorded as done, so a resume does not run them again;
        the stopped ones are resumed in their sessions.
        """
        await self._cancel_flights()
        self._flights.clear()
        self.store.release_reserve(self.run.id)
        self.run.status = "paused"
        self.run.status_reason = f"disk full: {exc.message}"
        self.event("run.status", "run is paused: the disk is full", exc.message, human_required=True)
        with contextlib.suppress(DiskFullError):
            self.save()

    async def _loop(self) -> None:
        while True:
            self._apply_inbox()
            if self.run.status in TERMINAL_RUN_STATES:
                for flight in self._flights.values():
                    flight.cancel()
                self.run.jobs = {}
                return
            self._dispatch()
            self.mode.tick()
            self._update_status()
            self.save_if_changed()
            if self.run.status in TERMINAL_RUN_STATES:
                continue
            assert self._wake is not None
            self._wake.clear()
            waiters: list[asyncio.Future[Any]] = [*self._flights.values(), asyncio.ensure_future(self._wake.wait())]
            done, _ = await asyncio.wait(waiters, timeout=POLL_S, return_when=asyncio.FIRST_COMPLETED)
            waiters[-1].cancel()
            for job_id, flight in list(self._flights.items()):
                if flight.done():
                    del self._flights[job_id]
                    if flight.cancelled():
                        continue
                    with disk_full_is_typed(self.store.dir(self.run.id)):
                        job, result = flight.result()
                    self._complete(job, result)
