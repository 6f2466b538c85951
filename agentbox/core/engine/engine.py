"""The engine: one run, driven to the end under the hard rules.

The engine holds the run's engine lock while it runs. Its loop: apply inbox commands,
start the pending turns the scheduler allows, wait for a turn to end (or a command, or a
back-off timer), hand the result to the mode, save. Every change to the run goes through
its `RunLedger` (`ledger`), which records each decision in the log; the policies
(`budgets`, `routing`, `recovery`, `commands`) decide, and the engine or the ledger carry
their decisions out.

The engine keeps only the loop and carrying out: `turns.Turns` prepares each turn and its
`runners.TurnRunner` runs it (admitted when its machine has room),
`routing.FailureRouter` carries failure decisions out, `commands` applies a human command
through a `CommandContext`, and each mode sees a `ModeContext`. None of them imports the
engine back.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable
from typing import Any

from agentbox.core.agents.egress_turn import denied_line
from agentbox.core.agents.invoke import InvokeResult
from agentbox.core.config import project as project_mod
from agentbox.core.config.models import Limits
from agentbox.core.engine import budgets, commands, recovery, scheduler
from agentbox.core.engine.budgets import BUDGET_PAUSE_RATIO as BUDGET_PAUSE_RATIO
from agentbox.core.engine.failures import backoff_delays, classify_invoke_error
from agentbox.core.engine.gates import GateRunner
from agentbox.core.engine.ladder_run import LadderRunner
from agentbox.core.engine.ledger import RunLedger
from agentbox.core.engine.mode_context import ModeContext
from agentbox.core.engine.models import TERMINAL_RUN_STATES, Job, Run, no_engine_reason
from agentbox.core.engine.notify import Notifier
from agentbox.core.engine.recovery import _kill_orphan
from agentbox.core.engine.routing import ENV_RETRIES as ENV_RETRIES
from agentbox.core.engine.routing import FailureRouter
from agentbox.core.engine.run_store import RUN_FILE, DamagedRunError, RunStore
from agentbox.core.engine.runners.base import TurnRunner
from agentbox.core.engine.turns import Turns
from agentbox.core.engine.workspaces import TurnGit, Workspaces
from agentbox.core.errors import IllegalTransitionError, NotFoundError, UsageError
from agentbox.core.paths import ProjectPaths
from agentbox.core.store import DiskFullError, disk_full_is_typed
from agentbox.core.tasks import TaskEvent, TaskState
from agentbox.core.telemetry import tracing as telemetry

POLL_S = 0.2
"""How often the engine looks at its inbox while turns are running."""
HELD_PREFIXES = ("waiting for memory", "waiting for CPU")
"""How a status reason of turns held back for room begins (see `runners.admission`)."""
LOCK_WAIT_S = 3.0
"""How long a starting engine waits for the run's lock held by a command or a probe."""


class Engine:
    """Drives one run; `execute()` is the loop, `apply_command()` the only way to steer it."""

    def __init__(self, project: ProjectPaths, run: Run, *, on_event: Callable[[dict[str, Any]], None] | None = None,
                 clock: Callable[[], float] = time.time,
                 backoff: Callable[[float], list[float]] = backoff_delays,
                 runner: TurnRunner | None = None) -> None:
        """`runner`: where the turns run (default: the one the user's config.yaml names, see `runners`)."""
        from agentbox.core.engine.modes import driver_for

        self.project = project
        self.store = RunStore(project)
        self.clock = clock
        self.ledger = RunLedger(run, clock=clock, on_event=on_event, wake=self._poke)
        self.crew = project_mod.load_crew(project).crew
        self.router = FailureRouter(self.ledger, backoff, retry=lambda *args: self.mode.retry(*args))
        self.workspaces = Workspaces(project.root, self.ledger)
        """The git side of a worktree run (inert in a shared one)."""
        self.gates = GateRunner(project.root, self.store, self.ledger, self.workspaces, self.router,
                                passed=lambda task: self.mode.after_submit(task),
                                approved=lambda task: self.mode.on_task_approved(task))
        """The checks of crew.yaml's gates, run off the loop (see `gates`)."""
        self.mode = driver_for(run.contract.mode)(ModeContext(
            ledger=self.ledger, crew=self.crew, store=self.store, project_root=project.root,
            structured=self.router.structured, fail=self.router.fail, escalate=self.router.escalate,
            save=self.save, integrate=self.workspaces.integrate, gate=self.gates.submission,
            integration=self.gates.integration, submitted=lambda task, turn: self.ladder.submitted(task, turn),
            coverage_gap=lambda task, cited: self.ladder.coverage_gap(task, cited),
            fill=lambda job, task, gap: self.ladder.fill(job, task, gap)))
        self.ladder = LadderRunner(project.root, self.store, self.ledger, lambda: self.mode, self.router.structured,
                                   self.router.escalate)
        """The failure ladder of the run's tasks (hierarchical runs, unless crew.yaml says `ladder: false`; see `ladder_run`)."""
        self.router.ladder = self.ladder.failed
        self.router.environment_wait = self.ladder.environment_wait
        self.gates.retryable = self.ladder.retryable
        self.turns = Turns(project, self.store, self.crew, self.ledger, self.workspaces, runner)
        self._commands = commands.CommandContext(self.ledger, self.mode, self.abort_turns, self.workspaces,
                                                 self.gates.integration, self.ladder.answer)
        self._flights: dict[str, asyncio.Task[tuple[Job, InvokeResult, TurnGit | None]]] = {}
        self._wake: asyncio.Event | None = None
        """Set by anything that should wake the loop at once (made by `execute`)."""
        self.notifier = Notifier(project, run.id, log=self.ledger.event)
        """Tells the person of what the saved log says needs them (user's config.yaml; see `notify`)."""
        self.tracer: telemetry.RunTracer = telemetry.UNTRACED
        """Turns the saved log into OpenTelemetry spans while this engine executes the run (see `telemetry`)."""

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, project: ProjectPaths, run_id: str, **kw: Any) -> Engine:
        """An engine over a run on disk (no lock taken yet)."""
        return cls(project, RunStore(project).load(run_id), **kw)

    @property
    def run(self) -> Run:
        """The run's state (read it here; change it through `ledger`)."""
        return self.ledger.run

    @property
    def limits(self) -> Limits:
        """The limits of the run contract."""
        return self.run.contract.limits

    def save(self) -> None:
        """Persist the state and flush the decision log, then let the notifier read what is new in it."""
        self.store.save(self.run, self.ledger.changes)
        self.ledger.dirty = False
        self.tracer.after_save(self.run)
        if self.notifier.after_save(self.run):  # it logged a delivery problem: persist that too
            self.save()

    def save_if_changed(self) -> None:
        """Save only when something happened since the last save.

        Every decision is an event, so an unsaved event (in the outbox) means new state; the
        few changes that log nothing (a turn enqueued, a pid learned) mark the ledger dirty. An idle run
        waiting on a human is then not rewritten (the dashboard would see a change each time).
        """
        if self.ledger.dirty or self.run.outbox:
            self.save()

    def pending(self) -> list[Job]:
        """Turns waiting to start, oldest first."""
        return self.run.pending_jobs()

    def in_flight(self) -> list[Job]:
        """Turns running now."""
        return self.run.running_jobs()

    def abort_turns(self, task_id: str, why: str) -> None:
        """Stop the running turns (and checks) of a task a human has decided: their answers would be stale."""
        self.gates.cancel(task_id)
        for job in [j for j in self.in_flight() if j.task == task_id]:
            flight = self._flights.get(job.id)
            if flight is not None:
                flight.cancel()
            else:
                _kill_orphan(job)
            self.ledger.forget_job(job.id)
            self.ledger.event("turn.aborted", f"{job.kind} turn of {job.role} on {task_id} stopped", why, task=task_id,
                       role=job.role, session=job.session_id, job=job.id)

    def _start(self, job: Job) -> None:
        """Mark `job` started in its session and schedule its turn.

        The turn's process starts only once the loop yields, and the loop saves the state
        before it yields: the saved state names the session before the process exists.
        """
        task = self.run.tasks.get(job.task or "")
        dispatched = None
        if task is not None:
            if job.works_on_task and task.state in (TaskState.QUEUED, TaskState.REWORK):
                self.ledger.transition(task, TaskEvent.DISPATCH, f"{job.role} starts {task.id}")
                dispatched = task
            elif job.kind == "review" and task.state == TaskState.SUBMITTED:
                self.ledger.transition(task, TaskEvent.START_REVIEW, f"{job.role} reviews {task.id}")
        session = self.ledger.start_job(job, dispatched)
        self.ledger.event("dispatch", f"{job.kind} turn of {job.role}" + (f" on {job.task}" if job.task else ""),
                   "scheduler: slot free, dependencies met, no write-scope overlap",
                   task=job.task, role=job.role, session=session, job=job.id, attempt=job.attempt,
                   kind=job.kind, started=job.started)  # the turn's span is keyed by its job and start
        self._flights[job.id] = asyncio.ensure_future(self._turn(job))

    # ------------------------------------------------------------------ turns and results
    async def _turn(self, job: Job) -> tuple[Job, InvokeResult, TurnGit | None]:
        return await self.turns.run(job)

    def _complete(self, job: Job, result: InvokeResult, turn_git: TurnGit | None = None) -> None:
        """Account for a finished turn, log it and its commit, and route its failure or hand its result to the mode."""
        ledger = self.ledger
        task = self.run.tasks.get(job.task or "")
        ledger.forget_job(job.id)
        ledger.account(task, result.usage, job.role)
        if turn_git is not None:
            self.workspaces.record(turn_git, job)
        ledger.event("turn", f"{job.kind} turn of {job.role} ended: {result.status}"
                     + (f" ({result.error_kind})" if result.error_kind else ""),
                     result.error if not result.ok else None, task=job.task, role=job.role,
                     session=result.session_id, tokens=result.usage.total_tokens, job=job.id,
                     duration_s=round(result.duration_s, 2), turn=result.turn,
                     cost_usd=result.usage.cost_usd, model=result.model or result.model_asked,
                     profile=result.profile, tool=result.tool, kind=job.kind)
        refused = denied_line(result.network)
        if refused is not None:
            ledger.event("network", refused, task=job.task, role=job.role, session=result.session_id, turn=result.turn)
        if task is not None and task.is_terminal:
            return  # decided meanwhile (cancelled, approved by a human): the late answer is ignored
        if job.kind == "review" and task is not None and task.state != TaskState.REVIEWING:
            return
        if not result.ok:
            kind = classify_invoke_error(result.error_kind or "nonzero_exit")
            self.router.fail(job, kind, f"{result.error_kind}: {result.error or ''}")
            return
        if job.kind == "rewrite":
            self.ladder.rewrite_replied(job, result)
            return
        self.mode.on_success(job, result)

    # ------------------------------------------------------------------ commands
    def apply_command(self, command: dict[str, Any]) -> tuple[bool, str]:
        """Apply one human command (from the inbox or directly); refuses illegal or malformed ones."""
        if command.get("id") in self.run.applied_commands:
            return True, "already applied"
        try:
            message = commands.apply(self._commands, commands.parse(command))
            ok = True
        except (IllegalTransitionError, NotFoundError, UsageError) as exc:
            ok, message = False, exc.message
        if command.get("id"):
            self.ledger.command_applied(str(command["id"]))

        def text(key: str) -> str | None:
            value = command.get(key)
            return value if isinstance(value, str) else None

        self.ledger.event("command", f"{str(command.get('action'))[:40]} {'applied' if ok else 'refused'}: {message}",
                   text("note"), task=text("task"), human_required=False, command_id=text("id"), ok=ok)
        self._poke()
        return ok, message

    def _apply_inbox(self) -> None:
        commands, offset = self.store.commands(self.run.id, self.run.inbox_offset)
        if offset == self.run.inbox_offset:
            return
        for command in commands:
            self.apply_command(command)
        self.ledger.read_inbox_to(offset)  # saved with what the loop decides next, before it waits again

    def settle_without_engine(self) -> None:
        """After a command applied with no engine running: the status as the run now stands
        (an answered checkpoint no longer waits), saying that the engine must go on."""
        self._update_status(idle_why=no_engine_reason(self.run.id))

    def _update_status(self, idle_why: str | None = None) -> None:
        """Set the status the run is in; `idle_why`: the reason for work that waits for an engine."""
        run = self.run
        if run.status in TERMINAL_RUN_STATES:
            return
        if run.paused:
            new, why = "paused", "paused by the human"
        elif not self.run.run_budget_left():
            spent = "run money budget spent" if budgets.money_spent(run) else "run token budget exhausted"
            new, why = ("circuit_broken", spent) if not self.in_flight() else ("running", "budget spent: finishing running turns")
        elif self.in_flight() or self._dispatchable() or self.gates.busy():
            new, why = "planning" if run.mode_state.phase == "planning" else "running", idle_why
        elif self.run.open_checkpoints():
            new, why = "waiting_user", f"{len(self.run.open_checkpoints())} checkpoint(s) wait for the human"
        elif self.pending():
            new, why = "running", "waiting for a back-off timer"
        else:
            new, why = "blocked", "nothing can run: tasks are blocked"
        if new == run.status and why != run.status_reason and run.status_reason == no_engine_reason(run.id):
            self.ledger.set_status(new, why)  # type: ignore[arg-type]  # an engine drives it again
            self.ledger.dirty = True
        if new != run.status:
            self.ledger.set_status(new, why)  # type: ignore[arg-type]
            self.ledger.event("run.status", f"run is {new}", why, human_required=new in ("waiting_user", "blocked", "circuit_broken"))
            if new == "circuit_broken":
                ask = budgets.check_run(self.run)
                if ask is not None:
                    budgets.ask(self.ledger, ask)

    def _dispatchable(self) -> bool:
        if self.run.paused or not self.run.run_budget_left():
            return False
        return bool(scheduler.pick(self.pending(), self.in_flight(), self.run, self.limits.max_workers, float("inf")))

    # ------------------------------------------------------------------ the loop
    def _dispatch(self) -> None:
        if self.run.paused or not self.run.run_budget_left() or self.run.status in TERMINAL_RUN_STATES:
            return
        for job in scheduler.pick(self.pending(), self.in_flight(), self.run, self.limits.max_workers, self.clock()):
            pause = budgets.check_work(self.run, job)
            if pause is not None:
                budgets.pause(self.ledger, pause)
                continue
            held = self.turns.room(job)
            self.ledger.hold_job(job, held)
            if held is None:
                self._start(job)
        self._show_held()

    def _show_held(self) -> None:
        """The run's status says when turns wait for the machine's room (memory, CPU), and stops saying it after."""
        run = self.run
        held = [job.data.held for job in self.pending() if job.data.held]
        reason = (held[0] + (f" ({len(held)} turns wait)" if len(held) > 1 else "")) if held else None
        showing = (run.status_reason or "").startswith(HELD_PREFIXES)
        if run.status in ("running", "planning") and (reason or showing) and reason != run.status_reason:
            self.ledger.set_status(run.status, reason)
            self.ledger.mark_dirty()

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def recover(self) -> None:
        """Take the run over from an engine that died (see `recovery`); an interrupted check runs again."""
        recovery.recover(self.store, self.ledger)
        self.gates.recover()

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
        self.ledger.reload(self.store.load_checked(self.run.id))
        self._check_roles()
        self.store.reserve(self.run.id)
        self.tracer = telemetry.run_tracer(self.project, self.run.id)
        try:
            self.ledger.held_by(os.getpid())
            self.recover()
            self.workspaces.recover()
            if self.ledger.mode_started():
                self.workspaces.started()
                self.mode.start()
            self.save()
            await self._loop()
        except DiskFullError as exc:
            await self._stop_for_full_disk(exc)
            raise
        finally:
            await self._cancel_flights()
            self.ledger.held_by(None)
            with contextlib.suppress(DiskFullError):
                self.save()
            self.tracer.close()
            self.store.release_reserve(self.run.id)
        return self.run

    def _check_roles(self) -> None:
        """Every pending or running turn, and every open task, names a role of the crew."""
        roles = self.crew.roles
        named = [(f"jobs.{job.id}.role", job.role) for job in self.run.jobs.values()]
        named += [(f"tasks.{task.id}.assignee", task.assignee) for task in self.run.tasks.values()
                  if not task.is_terminal]
        for field, role in named:
            if role not in roles:
                raise DamagedRunError(self.store.dir(self.run.id) / RUN_FILE,
                                      f"{field}: role {role[:64]!r} is not in crew.yaml "
                                      f"(roles: {', '.join(roles) or 'none'})", run_id=self.run.id)

    async def _cancel_flights(self) -> None:
        for flight in self._flights.values():
            flight.cancel()
        self.gates.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*self._flights.values(), *self.gates.flights.values(), return_exceptions=True)

    async def _stop_for_full_disk(self, exc: DiskFullError) -> None:
        """Stop the running turns and save the run paused, in the space the run's reserve gave back.

        Turns that ended before are recorded as done, so a resume does not run them again;
        the stopped ones are resumed in their sessions.
        """
        await self._cancel_flights()
        self._flights.clear()
        self.store.release_reserve(self.run.id)
        self.ledger.set_status("paused", f"disk full: {exc.message}")
        self.ledger.event("run.status", "run is paused: the disk is full", exc.message, human_required=True)
        with contextlib.suppress(DiskFullError):
            self.save()

    async def _loop(self) -> None:
        while True:
            self._apply_inbox()
            if self.run.status in TERMINAL_RUN_STATES:
                for flight in self._flights.values():
                    flight.cancel()
                self.gates.cancel()
                self.ledger.forget_all_jobs()
                report = await self.gates.run_end() if self.run.status == "done" else None
                self.workspaces.finish(report)
                return
            self._dispatch()
            self.gates.start_ready(self.clock())
            self.mode.tick()
            self._update_status()
            self.save_if_changed()
            if self.run.status in TERMINAL_RUN_STATES:
                continue
            assert self._wake is not None
            self._wake.clear()
            waiters: list[asyncio.Future[Any]] = [*self._flights.values(), *self.gates.flights.values(),
                                                  asyncio.ensure_future(self._wake.wait())]
            done, _ = await asyncio.wait(waiters, timeout=POLL_S, return_when=asyncio.FIRST_COMPLETED)
            waiters[-1].cancel()
            for job_id, flight in list(self._flights.items()):
                if flight.done():
                    del self._flights[job_id]
                    if flight.cancelled():
                        continue
                    with disk_full_is_typed(self.store.dir(self.run.id)):
                        job, result, turn_git = flight.result()
                    self._complete(job, result, turn_git)
            self.gates.collect()
