"""The engine: one run, driven to the end under the hard rules.

The engine owns the run's state while it holds the run's engine lock. Its loop: apply
inbox commands, start the pending turns the scheduler allows, wait for a turn to end
(or a command, or a back-off timer), hand the result to the mode, save. Everything a
mode does goes through the engine's small API (`enqueue`, `transition`, `checkpoint`,
`structured`, `fail`, `finish`), which records each decision in the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from agentbox.core import project as project_mod
from agentbox.core import services
from agentbox.core.engine import scheduler
from agentbox.core.engine.failures import (
    FailureKind,
    backoff_delays,
    classify_invoke_error,
    fingerprint,
)
from agentbox.core.engine.models import TERMINAL_RUN_STATES, Checkpoint, Failure, Job, Run, Task
from agentbox.core.engine.prompts import interrupted_prompt
from agentbox.core.engine.replies import ReplyError, corrective_prompt, parse_reply
from agentbox.core.engine.run_store import RunStore
from agentbox.core.errors import AgentboxError, IllegalTransitionError, NotFoundError, UsageError
from agentbox.core.invoke import InvokeResult, invoke
from agentbox.core.paths import ProjectPaths
from agentbox.core.runtimes.base import add_usage
from agentbox.core.sessions import SessionStore
from agentbox.core.tasks import TaskEvent, TaskState, is_terminal, transition

M = TypeVar("M", bound=BaseModel)

ENV_RETRIES = 3
"""Environment failures of one turn are retried this many times (1 s, 4 s, 16 s + jitter)."""
BUDGET_PAUSE_RATIO = 1.2
"""A task over this share of its token budget is paused for a human."""
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
        self._saved_seq = run.seq
        self._dirty = False
        self._role_agents: dict[str, Any] = {}
        self._wake = asyncio.Event() if _has_loop() else None
        self._rng = None

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, project: ProjectPaths, run_id: str, **kw: Any) -> Engine:
        """An engine over a run on disk (no lock taken yet)."""
        return cls(project, RunStore(project).load(run_id), **kw)

    @property
    def limits(self) -> dict[str, Any]:
        """The limits snapshot of the run contract."""
        return self.run.contract.limits

    @property
    def settings(self) -> dict[str, Any]:
        """The mode's settings snapshot."""
        return self.run.contract.settings

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
        self._saved_seq = self.run.seq
        self._dirty = False

    def save_if_changed(self) -> None:
        """Save only when something happened since the last save.

        Every decision is an event, so a new `seq` means new state; the few changes that
        log nothing (a turn enqueued, a pid learned) mark the engine dirty. An idle run
        waiting on a human is then not rewritten (the dashboard would see a change each time).
        """
        if self._dirty or self.run.seq != self._saved_seq or self.run.outbox:
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
        task.state = transition(TaskState(task.state), event, evidence=evidence).value
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
        return [j for j in self.run.jobs.values() if not j.started]

    def in_flight(self) -> list[Job]:
        """Turns running now."""
        return [j for j in self.run.jobs.values() if j.started]

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

    def _agent(self, job: Job) -> Any:
        task = self.run.tasks.get(job.task or "")
        extra_rw: tuple[Path, ...] = ()
        writes: tuple[str, ...] = ()
        if job.kind in ("work", "node") and task is not None:
            handoff = self.store.artifacts_dir(self.run.id) / task.id
            handoff.mkdir(parents=True, exist_ok=True)
            extra_rw = (handoff,)
            writes = tuple(task.writes)
        elif "writes" in job.data:
            writes = tuple(job.data["writes"])
        if job.role not in self._role_agents:  # profile and instructions are read once per run
            self._role_agents[job.role] = services.role_agent(self.project, job.role, crew=self.crew)
        return dataclasses.replace(self._role_agents[job.role], writes=writes, extra_rw=extra_rw)

    def _start(self, job: Job) -> None:
        """Mark `job` started in its session and schedule its turn.

        The turn's process starts only once the loop yields, and the loop saves the state
        before it yields: the saved state names the session before the process exists.
        """
        task = self.run.tasks.get(job.task or "")
        if task is not None:
            if job.kind in ("work", "node") and task.state in (TaskState.QUEUED, TaskState.REWORK):
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

    async def _turn(self, job: Job) -> tuple[Job, InvokeResult]:
        session = job.session_id
        assert session is not None
        try:
            agent = self._agent(job)
        except AgentboxError as exc:  # the role or its profile cannot be loaded any more
            return job, InvokeResult(status="error", session_id=session, error_kind="spawn_failed",
                                     error=exc.message, role=job.role)
        exists = _session_exists(agent.sessions, session)

        def spawned(_record: Any, pid: int) -> None:
            job.pid = pid
            self._dirty = True
            with contextlib.suppress(Exception):
                import psutil

                job.pid_create_time = psutil.Process(pid).create_time()

        timeout = float(self.limits.get("task_timeout_s", 900))
        try:
            result = await invoke(agent, job.prompt, session if exists else None, timeout_s=timeout,
                                  on_spawn=spawned, new_session_id=None if exists else session,
                                  run_id=self.run.id, task_id=job.task)
        except AgentboxError as exc:  # sandbox cannot be built, session busy: an environment failure
            result = InvokeResult(status="error", session_id=session, error_kind="spawn_failed", error=exc.message,
                                  role=job.role)
        return job, result

    # ------------------------------------------------------------------ results
    def _account(self, job: Job, result: InvokeResult) -> None:
        usage = result.usage
        totals = self.run.totals
        totals.turns += 1
        tokens = usage.total_tokens
        add_usage(totals, usage)
        totals.tokens += tokens or 0
        task = self.run.tasks.get(job.task or "")
        if task is not None:
            if tokens is None:
                task.unknown_usage_turns += 1
            else:
                task.tokens += tokens
            if usage.cost_usd is not None:
                task.cost_usd = (task.cost_usd or 0.0) + usage.cost_usd

    def _complete(self, job: Job, result: InvokeResult) -> None:
        self.run.jobs.pop(job.id, None)
        self._account(job, result)
        self.event("turn", f"{job.kind} turn of {job.role} ended: {result.status}"
                   + (f" ({result.error_kind})" if result.error_kind else ""),
                   result.error if not result.ok else None, task=job.task, role=job.role,
                   session=result.session_id, tokens=result.usage.total_tokens, job=job.id,
                   duration_s=round(result.duration_s, 2), turn=result.turn)
        task = self.run.tasks.get(job.task or "")
        if task is not None and is_terminal(TaskState(task.state)):
            return  # decided meanwhile (cancelled, approved by a human): the late answer is ignored
        if job.kind == "review" and task is not None and task.state != TaskState.REVIEWING:
            return
        if not result.ok:
            kind = classify_invoke_error(result.error_kind or "nonzero_exit")
            self.fail(job, kind, f"{result.error_kind}: {result.error or ''}")
            return
        self.mode.on_success(job, result)

    # ------------------------------------------------------------------ structured replies
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
            self.event("reply.invalid", f"{job.role}'s {model.__name__} is invalid; one corrective re-prompt",
                       "; ".join(problems), task=job.task, role=job.role, session=result.session_id)
            retry = self.enqueue(job.kind, job.role, corrective_prompt(model, problems), task=job.task,
                                 session_id=result.session_id, **{k: v for k, v in job.data.items() if k != "not_before"})
            retry.corrective = True
            retry.data["original_prompt"] = job.data.get("original_prompt", job.prompt)
            return None
        self.fail(job, FailureKind.CONTRACT_DEFECT, f"invalid {model.__name__}: " + "; ".join(problems))
        return None

    # ------------------------------------------------------------------ failure routing
    def fail(self, job: Job, kind: FailureKind, message: str, files: tuple[str, ...] = ()) -> None:
        """Route a typed failure: back off, retry, re-prompt, or ask the human."""
        fp = fingerprint(kind, message, files)
        task = self.run.tasks.get(job.task or "")
        if task is not None:
            task.failures.append(Failure(kind=kind.value, fingerprint=fp, message=message[:2000], at=self.clock(), job=job.id))
        self.event("failure", f"{kind.value} in {job.kind} turn of {job.role}", message[:500], task=job.task,
                   role=job.role, session=job.session_id, fingerprint=fp)
        original = job.data.get("original_prompt", job.prompt)
        data = {k: v for k, v in job.data.items() if k not in ("not_before", "original_prompt")}
        if kind == FailureKind.ENVIRONMENT_FAILURE:
            delays = backoff_delays(float(self.limits.get("retry_max_s", 300)))
            if job.attempt <= min(ENV_RETRIES, len(delays)):
                delay = delays[job.attempt - 1]
                if task is not None and task.state == TaskState.EXECUTING:
                    self.transition(task, TaskEvent.REQUEUE, "environment failure: retry after back-off")
                retry = self.enqueue(job.kind, job.role, original, task=job.task, session_id=job.session_id,
                                     not_before=self.clock() + delay, original_prompt=original, **data)
                retry.attempt = job.attempt + 1
                self.event("retry", f"retry {retry.attempt - 1}/{ENV_RETRIES} of {job.kind} turn in {delay:.1f} s",
                           "environment failures are retried with back-off and not counted against the task",
                           task=job.task, role=job.role, fingerprint=fp)
                return
            self.escalate(job, fp, f"{job.kind} turn of {job.role} kept failing ({message[:300]})", original, data)
            return
        count = self.run.retries.get(fp, 0)
        max_retries = int(self.limits.get("max_auto_retries", 2))
        if count >= max_retries:
            self.escalate(job, fp, f"the same failure happened {count + 1} times: {message[:300]}", original, data)
            return
        self.run.retries[fp] = count + 1
        self.event("retry", f"automatic retry {count + 1}/{max_retries} ({kind.value})", "same fingerprint seen "
                   f"{count + 1} time(s)", task=job.task, role=job.role, fingerprint=fp)
        self.mode.retry(job, kind, message, original, data)

    def escalate(self, job: Job, fp: str, question: str, original: str, data: dict[str, Any]) -> None:
        """Stop retrying and ask the human (a retry-escalation checkpoint)."""
        task = self.run.tasks.get(job.task or "")
        if task is not None and job.kind != "review" and not is_terminal(TaskState(task.state)) and task.state != TaskState.BLOCKED:
            self.transition(task, TaskEvent.BLOCK, "retries exhausted: waiting for a human")
        self.checkpoint("retry_escalation", question + "\nAnswer 'retry' (optionally with a note), or 'cancel'.",
                        options=["retry", "cancel"], task=job.task, role=job.role,
                        data={"fingerprint": fp, "job": {"kind": job.kind, "role": job.role, "task": job.task,
                                                          "session_id": job.session_id, "prompt": original, "data": data}})
        self.event("escalation", f"{job.kind} turn of {job.role} escalated to the human", question[:300],
                   task=job.task, role=job.role, fingerprint=fp, human_required=True)

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

    def open_checkpoints(self) -> list[Checkpoint]:
        """Checkpoints still waiting."""
        return [c for c in self.run.checkpoints.values() if c.status == "open"]

    # ------------------------------------------------------------------ budgets
    def task_budget(self, task: Task) -> int | None:
        """The task's token budget (plus what a human added), None when unlimited."""
        per_task = (self.limits.get("budget") or {}).get("tokens_per_task")
        return None if per_task is None else int(per_task) + task.budget_extra

    def run_budget_left(self) -> bool:
        """False once the run's token budget is spent."""
        total = (self.limits.get("budget") or {}).get("tokens_total")
        extra = int(self.run.mode_state.get("budget_extra", 0))
        return total is None or self.run.totals.tokens < int(total) + extra

    def _over_budget(self, task: Task) -> bool:
        budget = self.task_budget(task)
        return budget is not None and task.tokens > BUDGET_PAUSE_RATIO * budget

    # ------------------------------------------------------------------ commands
    def apply_command(self, command: dict[str, Any]) -> tuple[bool, str]:
        """Apply one human command (from the inbox or directly); refuses illegal ones."""
        from agentbox.core.engine import commands

        if command.get("id") in self.run.applied_commands:
            return True, "already applied"
        try:
            message = commands.apply(self, command)
            ok = True
        except (IllegalTransitionError, NotFoundError, UsageError) as exc:
            ok, message = False, exc.message
        if command.get("id"):
            self.run.applied_commands.append(str(command["id"]))
        self.event("command", f"{command.get('action')} {'applied' if ok else 'refused'}: {message}",
                   command.get("note"), task=command.get("task"), human_required=False,
                   command_id=command.get("id"), ok=ok)
        self._poke()
        return ok, message

    def _apply_inbox(self) -> None:
        commands, offset = self.store.commands(self.run.id, self.run.inbox_offset)
        if offset == self.run.inbox_offset:
            return
        for command in commands:
            self.apply_command(command)
        self.run.inbox_offset = offset
        self.save()

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
        elif not self.run_budget_left():
            new, why = ("circuit_broken", "run token budget exhausted") if not self.in_flight() else ("running", "budget spent: finishing running turns")
        elif self.in_flight() or self._dispatchable():
            new, why = (run.mode_state.get("phase") == "planning" and "planning") or "running", None
        elif self.open_checkpoints():
            new, why = "waiting_user", f"{len(self.open_checkpoints())} checkpoint(s) wait for the human"
        elif self.pending():
            new, why = "running", "waiting for a back-off timer"
        else:
            new, why = "blocked", "nothing can run: tasks are blocked"
        if new != run.status:
            run.status = new  # type: ignore[assignment]
            run.status_reason = why
            self.event("run.status", f"run is {new}", why, human_required=new in ("waiting_user", "blocked", "circuit_broken"))
            if new == "circuit_broken" and not any(c.kind == "run_budget" for c in self.open_checkpoints()):
                self.checkpoint("run_budget", "The run's token budget is spent. Answer 'raise N' to add N tokens, or 'cancel'.",
                                options=["raise 1000000", "cancel"])

    def _dispatchable(self) -> bool:
        if self.run.paused or not self.run_budget_left():
            return False
        return bool(scheduler.pick(self.pending(), self.in_flight(), self.run, self._max_workers(), float("inf")))

    def _max_workers(self) -> int:
        return int(self.limits.get("max_workers", 2))

    # ------------------------------------------------------------------ the loop
    def _dispatch(self) -> None:
        if self.run.paused or not self.run_budget_left() or self.run.status in TERMINAL_RUN_STATES:
            return
        for job in scheduler.pick(self.pending(), self.in_flight(), self.run, self._max_workers(), self.clock()):
            task = self.run.tasks.get(job.task or "")
            if task is not None and job.kind in ("work", "node") and self._over_budget(task) \
                    and task.state != TaskState.PAUSED_FOR_BUDGET:
                self.drop_jobs(task.id)
                self.transition(task, TaskEvent.PAUSE_BUDGET, f"{task.tokens} tokens > {BUDGET_PAUSE_RATIO:.0%} of its budget")
                self.checkpoint("budget", f"Task {task.id} used {task.tokens} tokens, over 120% of its budget "
                                f"({self.task_budget(task)}). Answer 'continue' to add one more budget, or 'cancel'.",
                                options=["continue", "cancel"], task=task.id, role=task.assignee)
                continue
            self._start(job)

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def recover(self) -> None:
        """After a crash: flush the outbox, kill orphaned agents, re-queue interrupted turns."""
        self.store.flush_outbox(self.run)
        for job in self.in_flight():
            _kill_orphan(job)
            self.event("recover", f"{job.kind} turn of {job.role} was interrupted; resuming it in its session",
                       "engine restarted", task=job.task, role=job.role, session=job.session_id)
            job.started = 0.0
            job.pid = job.pid_create_time = None
            job.prompt = interrupted_prompt(job.data.get("original_prompt", job.prompt))
            task = self.run.tasks.get(job.task or "")
            if task is not None and task.state == TaskState.EXECUTING and job.kind in ("work", "node"):
                self.transition(task, TaskEvent.REQUEUE, "interrupted turn re-queued")
        self.event("engine.started", f"engine pid {os.getpid()} took the run", None)

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
        """The run under its lock: recover from disk, start the mode, loop, release."""
        self.run = self.store.load(self.run.id)
        self.run.engine = {"pid": os.getpid(), "started": self.clock()}
        self.recover()
        if not self.run.mode_state.get("started"):
            self.run.mode_state["started"] = True
            self.mode.start()
        self.save()
        try:
            await self._loop()
        finally:
            for flight in self._flights.values():
                flight.cancel()
            with contextlib.suppress(Exception):
                await asyncio.gather(*self._flights.values(), return_exceptions=True)
            self.run.engine = None
            self.save()
        return self.run

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
                    job, result = flight.result()
                    self._complete(job, result)


def _session_exists(sessions: SessionStore, session_id: str) -> bool:
    try:
        sessions.find(session_id)
    except NotFoundError:
        return False
    return True


def _kill_orphan(job: Job) -> None:
    """Kill what is left of an interrupted turn, with its children.

    That is the recorded process if it is still the same one (pid and start time), and any
    process still working in the turn's session (`AGENTBOX_SESSION_ID` in its environment):
    the pid reaches run.json with the next save after the spawn, which a crash may precede.
    """
    import psutil

    found: list[Any] = []
    if job.pid is not None:
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(job.pid)
            if job.pid_create_time is None or abs(proc.create_time() - job.pid_create_time) <= 0.01:
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


def _has_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
