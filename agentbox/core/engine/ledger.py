"""The run ledger: the one owner of a run's typed state and the only code that changes it.

Everything above it (the engine's loop, the policies, the modes) reads the `Run` and asks
the ledger to record a decision: an event, a task transition, a turn enqueued, a
checkpoint opened or answered, the run's status. Each change that matters to a reader is
an event in the run's outbox, saved with the state; the few that log nothing (a turn
enqueued, a pid learned) mark the ledger `dirty`, so the loop knows to save.

A mode's own progress (`run.mode_state`, the typed model of the run's mode) changes the
same way: the mode hands new values to `change_mode_state`, which validates them.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, Unpack, cast

from agentbox.core.engine.changeset import Changes
from agentbox.core.engine.ladder_model import LadderState, Transition
from agentbox.core.engine.mode_state import ModeState
from agentbox.core.engine.models import (
    Acceptance,
    ChangedPath,
    Checkpoint,
    CheckpointData,
    CheckpointKind,
    CheckResult,
    EngineHolder,
    Failure,
    Job,
    JobData,
    JobKind,
    NoteAuthor,
    PendingGate,
    ReviewPanel,
    RoleSpend,
    Run,
    RunResult,
    RunStatus,
    Task,
    TaskNote,
    Verdict,
)
from agentbox.core.engine.records import Event, EventFields, EventKind, TaskEventKind
from agentbox.core.engine.replies import NodeResult, Submission
from agentbox.core.runtimes.base import Usage
from agentbox.core.tasks import TaskEvent, transition


class RunLedger:
    """Records and changes one run; `wake` is called when new work may start (the loop's wake-up)."""

    def __init__(self, run: Run, *, clock: Callable[[], float],
                 on_event: Callable[[Event], None] | None = None,
                 wake: Callable[[], None] = lambda: None) -> None:
        self.run = run
        self.clock = clock
        self.on_event = on_event
        self.wake = wake
        self.dirty = False
        """Something changed that no event records (saved with the next state write)."""
        self.changes = Changes()
        """The tasks, checkpoints and turns changed since the last save (what the save journals)."""

    def reload(self, run: Run) -> None:
        """Take over `run` as read from disk (the engine validated it under its lock)."""
        self.run = run
        self.changes = Changes()

    def _task(self, task: Task) -> Task:
        self.changes.tasks.add(task.id)
        return task

    def _job(self, job: Job) -> Job:
        self.changes.jobs.add(job.id)
        return job

    # ------------------------------------------------------------------ the log
    def event(self, type_: EventKind, what: str, why: str | None = None, *, task: str | None = None,
              role: str | None = None, session: str | None = None, fingerprint: str | None = None,
              tokens: int | None = None, human_required: bool = False, **extra: Unpack[EventFields]) -> Event:
        """Add one line to the decision log (saved with the next state write).

        `extra` holds the fields of the kind's `Event` record (a test checks each call against it)."""
        self.run.seq += 1
        line: dict[str, Any] = {"seq": self.run.seq, "at": self.clock(), "run": self.run.id, "type": type_,
                                "what": what, "why": why, "task": task, "role": role, "session": session,
                                "fingerprint": fingerprint, "tokens": tokens, "human_required": human_required,
                                **extra}
        self.run.outbox.append(line)  # the outbox keeps the lines as JSON, as events.jsonl will
        record = cast("Event", line)
        if self.on_event is not None:
            self.on_event(record)
        return record

    def mark_dirty(self) -> None:
        """A change that logs nothing happened (a pid learned, the inbox read)."""
        self.dirty = True

    def next_id(self, prefix: str) -> str:
        """A short id unique in this run (`cp-3`, `job-17`)."""
        n = self.run.next_ids.get(prefix, 0) + 1
        self.run.next_ids[prefix] = n
        return f"{prefix}-{n}"

    # ------------------------------------------------------------------ tasks
    def add_task(self, task: Task, why: str) -> Task:
        """Register a new task (queued)."""
        task.created = task.updated = self.clock()
        self.run.tasks[self._task(task).id] = task
        self.event("task.created", f"{task.id} → {task.assignee}: {task.brief[:120]}", why, task=task.id, role=task.assignee)
        return task

    def transition(self, task: Task, event: TaskEvent, why: str, *, evidence: Any = None, human: bool = False) -> None:
        """Apply a task state change through the transition table (illegal ones raise)."""
        before = self._task(task).state
        task.state = transition(task.state, event, evidence=evidence)
        task.updated = self.clock()
        self.event(task_event_kind(event), f"{task.id}: {before} → {task.state}", why, task=task.id,
                   role=task.assignee, human_required=human)

    # ------------------------------------------------------------------ jobs
    def enqueue(self, kind: JobKind, role: str, prompt: str, *, task: str | None = None,
                session_id: str | None = None, attempt: int = 1, corrective: bool = False,
                data: JobData | None = None) -> Job:
        """Add a pending turn; the scheduler starts it when the rules allow."""
        job = Job(id=self.next_id("job"), kind=kind, role=role, task=task, session_id=session_id,
                  prompt=prompt, attempt=attempt, corrective=corrective, data=data or JobData())
        self.run.jobs[self._job(job).id] = job
        self.dirty = True
        self.wake()
        return job

    def drop_jobs(self, task_id: str) -> None:
        """Forget the pending turns of a task (cancelled, paused, decided by a human)."""
        for job in [j for j in self.run.pending_jobs() if j.task == task_id]:
            del self.run.jobs[self._job(job).id]

    def forget_job(self, job_id: str) -> None:
        """A turn ended or was stopped: it is no longer pending or running."""
        self.run.jobs.pop(job_id, None)
        self.changes.jobs.add(job_id)

    def drop_pending(self) -> None:
        """Forget every pending turn (the run is cancelled; running ones are stopped by the loop)."""
        self.run.jobs = {k: j for k, j in self.run.jobs.items() if j.started}
        self.changes.all_jobs = True

    def forget_all_jobs(self) -> None:
        """The run ended: no turn is pending or running any more."""
        self.run.jobs = {}
        self.changes.all_jobs = True

    def start_job(self, job: Job, dispatched: Task | None) -> str:
        """Mark `job` started (one more attempt of the task it `dispatched`, if any); returns its session."""
        if dispatched is not None:
            self._task(dispatched).attempts += 1
        session = self.session_for(job)
        self._job(job).started = self.clock()
        return session

    def hold_job(self, job: Job, why: str | None) -> None:
        """The runner holds `job` back for room (`why`), or no longer does (None); logged when that changes."""
        if job.data.held == why:
            return
        before = job.data.held
        self._job(job).data.held = why
        self.dirty = True
        if why is not None and (before is None or before.split(":")[0] != why.split(":")[0]):
            self.event("admission", f"{job.kind} turn of {job.role} waits: {why}", "the runner admits a turn only when "
                       "its machine has room for it", task=job.task, role=job.role, job=job.id)
        elif why is None:
            self.event("admission", f"{job.kind} turn of {job.role} admitted", before, task=job.task, role=job.role,
                       job=job.id)

    def learned_pid(self, job: Job, pid: int, create_time: float | None) -> None:
        """The turn's process started (recorded so a new engine can find it after a crash)."""
        self._job(job)
        job.pid, job.pid_create_time = pid, create_time
        self.dirty = True

    def requeue_interrupted(self, job: Job, prompt: str) -> None:
        """A turn a crash interrupted waits to be resumed with `prompt`."""
        self._job(job).started = 0.0
        job.pid = job.pid_create_time = None
        job.prompt = prompt

    def session_for(self, job: Job) -> str:
        """The agentbox session a job runs in (chosen and recorded before it starts)."""
        if job.session_id:
            return job.session_id
        task = self.run.tasks.get(job.task or "")
        new = str(uuid.uuid4())
        self._job(job)
        if task is not None:
            self._task(task)
        if job.kind == "work" and task is not None:
            task.session_id = task.session_id or new
            job.session_id = task.session_id
        elif job.kind == "review" and task is not None and task.panel is not None and job.role in task.panel.reviewers:
            job.session_id = task.review_sessions.setdefault(job.role, new)  # each reviewer of two in its own
        elif job.kind == "review" and task is not None:
            task.review_session_id = task.review_session_id or new
            job.session_id = task.review_session_id
        else:
            key = job.data.session_key or job.role
            job.session_id = self.run.sessions.setdefault(key, new)
        return job.session_id

    # ------------------------------------------------------------------ checkpoints and counters
    def checkpoint(self, kind: CheckpointKind, question: str, *, options: list[str] | None = None, task: str | None = None,
                   role: str | None = None, data: CheckpointData | None = None) -> Checkpoint:
        """Open a question for the human; the run waits on it (other work continues)."""
        cp = Checkpoint(id=self.next_id("cp"), kind=kind, question=question, options=options or [],
                        task=task, role=role, created=self.clock(), data=data or CheckpointData())
        self.run.checkpoints[cp.id] = cp
        self.changes.checkpoints.add(cp.id)
        self.event("checkpoint", f"{cp.id} ({kind}) waits for the human", _headline(question), task=task, role=role,
                   human_required=True, checkpoint=cp.id)
        return cp

    def close_checkpoint(self, cp: Checkpoint, answer: str) -> None:
        """Mark `cp` answered with `answer` (no event: the caller says why)."""
        cp.status, cp.answer, cp.answered_at = "answered", answer, self.clock()
        self.changes.checkpoints.add(cp.id)

    def set_ladder(self, task: Task, state: LadderState, transition: Transition | None = None) -> None:
        """The task's new place on the failure ladder; a move of level or mode is one `ladder` event
        (from/to level and mode, why), saved with the state it leads to."""
        self._task(task).ladder = state
        self.dirty = True
        if transition is not None:
            to = f"{transition.to_level.value} {transition.to_mode.value}"
            came = f"{transition.from_level.value} {transition.from_mode.value}"
            self.event("ladder", f"{task.id}: {came} → {to}" if came != to else f"{task.id}: stays at {to}",
                       transition.why, task=task.id,
                       role=task.assignee, from_level=transition.from_level.value,
                       to_level=transition.to_level.value, from_mode=transition.from_mode.value,
                       to_mode=transition.to_mode.value, fingerprint=transition.fingerprint)

    def rewrite_brief(self, task: Task, brief: str, acceptance: list[Acceptance], writes: list[str]) -> None:
        """The lead's new plan entry of a failing task (a rewrite or a coverage fill)."""
        self._task(task)
        task.brief, task.acceptance, task.writes = brief, list(acceptance), list(writes)

    def replace_dependency(self, task: Task, old: str, new: str) -> None:
        """`task` waits on `new` where it waited on `old` (a task replaced by a controlled rewrite or a bypass)."""
        self._task(task).depends_on = [new if d == old else d for d in task.depends_on]

    def record_failure(self, task: Task, failure: Failure) -> None:
        """A typed failure of `task` (its history; the routing is decided elsewhere)."""
        self._task(task).failures.append(failure)

    def add_verdict(self, task: Task, verdict: Verdict) -> None:
        """A review outcome of `task` (a reviewer's, the human's, the engine's)."""
        self._task(task).verdicts.append(verdict)

    def open_panel(self, task: Task, reviewers: list[str]) -> None:
        """A double review of the task's current submission starts (any earlier one is done with)."""
        self._task(task).panel = ReviewPanel(reviewers=list(reviewers))

    def panel_verdict(self, task: Task, role: str, verdict: Verdict) -> None:
        """One reviewer's verdict of the double review (also in the task's verdicts)."""
        panel = self._task(task).panel
        assert panel is not None
        panel.verdicts[role] = verdict
        task.verdicts.append(verdict)

    def close_panel(self, task: Task, outcome: str, reason: str) -> None:
        """What the comparison of the two verdicts decided."""
        assert task.panel is not None
        self._task(task)
        task.panel = task.panel.model_copy(update={"outcome": outcome, "reason": reason})

    def leave_note(self, task: Task, note: str | None, *, by: NoteAuthor) -> None:
        """A note passed to the task's worker on its next work turn, signed by who wrote it."""
        self._task(task).note = note
        task.note_by = by

    def record_submission(self, task: Task, submission: Submission | NodeResult) -> None:
        """The worker's submission of `task`."""
        self._task(task).submission = submission

    def bind_session(self, task: Task, session_id: str) -> None:
        """`task`'s work goes on in the agentbox session `session_id` (a rework resumes it)."""
        self._task(task).session_id = session_id

    def take_note(self, task: Task) -> TaskNote | None:
        """The note waiting for the task's next work turn, which consumes it."""
        self._task(task)
        note, task.note = task.note, None
        return TaskNote(note, task.note_by) if note else None

    def record_git(self, task: Task, *, branch: str, base: str, head: str, changed: list[ChangedPath],
                   more: int = 0) -> None:
        """Where a worktree task's branch stands and what it changed, from git (`more`: files beyond `changed`)."""
        self._task(task)
        task.branch, task.base, task.head, task.changed_files = branch, base, head, list(changed)
        task.changed_more = more

    def placed(self, job: Job, node_id: str, host: str) -> None:
        """A turn's process runs on a cluster node: a work turn's node is kept on its task while it runs
        (`status`, the members table); the decision log's line comes when it ends (`record_placement`)."""
        task = self.run.tasks.get(job.task or "")
        if task is not None and job.works_on_task:
            self._task(task).ran_on = f"{node_id}@{host}"
            self.dirty = True

    def record_placement(self, job: Job, node_id: str, host: str) -> None:
        """A turn ran on a cluster node: logged, and a work turn's node kept on its task (the faces show it)."""
        task = self.run.tasks.get(job.task or "")
        if task is not None and job.works_on_task:
            self._task(task).ran_on = f"{node_id}@{host}"
        self.event("placement", f"{job.kind} turn of {job.role} ran on node {node_id[:12]} ({host})",
                   task=job.task, role=job.role, session=job.session_id, job=job.id, node=node_id, host=host)

    def record_merge(self, task: Task, commit: str) -> None:
        """The task's work was merged into the run's integration branch as `commit`."""
        self._task(task).merged = commit

    def record_delivery(self, commit: str, into: str | None = None) -> None:
        """The run's integration branch reached the person's branch `into` at `commit`."""
        if self.run.git is not None:
            self.run.git = self.run.git.model_copy(update={"delivered": commit, "delivered_into": into})

    def command_applied(self, command_id: str) -> None:
        """The inbox command `command_id` was applied (never again)."""
        self.run.applied_commands.append(command_id)

    def raise_task_budget(self, task: Task, tokens: int, usd: float = 0.0) -> None:
        """Add `tokens` to the task's token budget and `usd` to its money budget."""
        self._task(task).budget_extra += tokens
        task.budget_extra_usd += usd

    def hold_review(self, task: Task, held: bool) -> None:
        """The task's submitted work waits for a budget decision before its review (or no longer does)."""
        self._task(task).review_pending = held

    def account(self, task: Task | None, usage: Usage, role: str | None = None) -> None:
        """Add a finished turn's usage and cost to the run's totals, to its task and to its role."""
        self.run.totals.add(usage)
        tokens = usage.total_tokens
        if task is not None:
            self._task(task)
            if tokens is None:
                task.unknown_usage_turns += 1
            else:
                task.tokens += tokens
            if usage.cost_usd is not None:
                task.cost_usd = (task.cost_usd or 0.0) + usage.cost_usd
            else:
                task.unknown_cost_turns += 1
        if role is not None:
            spend = self.run.spend_by_role.setdefault(role, RoleSpend())
            spend.turns += 1
            spend.tokens += tokens or 0
            if usage.cost_usd is not None:
                spend.cost_usd = (spend.cost_usd or 0.0) + usage.cost_usd
            else:
                spend.unknown_cost_turns += 1

    def count_retry(self, fingerprint: str) -> None:
        """One more automatic retry of the failure `fingerprint`."""
        self.run.retries[fingerprint] = self.run.retries.get(fingerprint, 0) + 1

    def reset_retries(self, fingerprint: str) -> None:
        """A human said retry: the failure `fingerprint` may be retried automatically again."""
        self.run.retries[fingerprint] = 0

    def raise_run_budget(self, tokens: int, usd: float = 0.0) -> None:
        """Add `tokens` to the run's token budget and `usd` to its money budget."""
        self.run.budget_extra += tokens
        self.run.budget_extra_usd += usd

    # ------------------------------------------------------------------ gates and checks
    def open_gate(self, gate: PendingGate, why: str) -> PendingGate:
        """A gate's checks wait to run (the loop starts them; see `engine.gates`)."""
        self.run.gates[gate.id] = gate
        self.event("gate.opened", f"{gate.stage} checks of {gate.task or 'the run'}: {', '.join(gate.checks)}", why,
                   task=gate.task, gate=gate.id, stage=gate.stage, commit=gate.commit, checks=list(gate.checks))
        self.wake()
        return gate

    def check_started(self, gate: PendingGate) -> None:
        """The gate's next check runs now (saved before its process starts)."""
        gate.started = self.clock()
        self.dirty = True

    def check_interrupted(self, gate: PendingGate, why: str) -> None:
        """The check running when the engine died runs again (nothing of it was recorded)."""
        name = gate.checks[0] if gate.checks else "?"
        gate.started = 0.0
        self.event("recover", f"check {name} of {gate.task or 'the run'} was interrupted; running it again", why,
                   task=gate.task, gate=gate.id, check=name)

    def record_check(self, gate: PendingGate, result: CheckResult) -> None:
        """One check of the gate ended: its result on the task (or the run) and in the log, at once."""
        task = self.run.tasks.get(gate.task or "")
        if task is not None and gate.stage != "run_end":
            self._task(task).checks.append(result)
        else:
            self.run.checks.append(result)
        if result.status != "error":  # a check that could not run stays on the list (it runs again)
            if gate.checks and gate.checks[0] == result.name:
                gate.checks.pop(0)
            gate.attempt, gate.not_before = 1, 0.0
        gate.started = 0.0
        verdict = "passed" + (" (flaky)" if result.flaky else "") if result.passed else (
            "could not run" if result.status == "error" else "failed" + (" (flaky)" if result.flaky else ""))
        self.event("check", f"{result.stage} check {result.name} on {(result.commit or 'the live tree')[:10]}: {verdict}",
                   (f"exit status {result.exit_status}" if result.exit_status is not None else result.cannot_run),
                   task=gate.task, gate=gate.id, check=result.name, stage=result.stage, commit=result.commit,
                   passed=result.passed, status=result.status, flaky=result.flaky, exit_status=result.exit_status,
                   duration_s=round(result.duration_s, 2), log=result.log, human_required=False)

    def check_backoff(self, gate: PendingGate, not_before: float) -> None:
        """The gate's check could not run: it runs again from `not_before` on."""
        gate.started, gate.not_before = 0.0, not_before
        gate.attempt += 1
        self.dirty = True

    def gate_merged(self, gate: PendingGate, merged: str, undo_to: str | None) -> None:
        """An integration gate's task was merged as `merged`: its checks judge that commit."""
        gate.merged, gate.commit, gate.undo_to = merged, merged, undo_to
        self.dirty = True

    def undo_merge(self, task: Task) -> None:
        """The task's merge was taken back off the run's branch."""
        self._task(task).merged = None

    def close_gate(self, gate: PendingGate) -> None:
        """The gate is decided (the caller logs how)."""
        self.run.gates.pop(gate.id, None)
        self.dirty = True
        self.wake()

    # ------------------------------------------------------------------ the run
    def set_paused(self, paused: bool) -> None:
        """Pause (nothing new starts) or resume the run."""
        self.run.paused = paused
        self.wake()

    def set_status(self, status: RunStatus, why: str | None) -> None:
        """The run's status changed (no event: the caller logs it)."""
        self.run.status = status
        self.run.status_reason = why

    def finish(self, status: RunStatus, why: str, result: RunResult | None = None) -> None:
        """End the run (done, failed, cancelled)."""
        self.set_status(status, why)
        self.run.finished = self.clock()
        if result is not None:
            self.run.result = result
        self.event("run.finished", f"run {status}", why)

    def read_inbox_to(self, offset: int) -> None:
        """The inbox was applied up to byte `offset`."""
        self.run.inbox_offset = offset
        self.dirty = True

    def held_by(self, pid: int | None) -> None:
        """The engine process `pid` runs the run (None: no engine holds it)."""
        self.run.engine = None if pid is None else EngineHolder(pid=pid, started=self.clock())

    def mode_started(self) -> bool:
        """Mark the mode started; False when it already was (a resumed run)."""
        if self.run.mode_started:
            return False
        self.run.mode_started = True
        return True

    # ------------------------------------------------------------------ the mode's own state
    @property
    def mode_state(self) -> ModeState:
        """The mode's own progress (read it; change it with `change_mode_state`)."""
        return self.run.mode_state

    def change_mode_state(self, **changes: Any) -> None:
        """Set fields of the mode's state to new values (each validated; an unknown field raises)."""
        state = self.run.mode_state
        for name, value in changes.items():
            setattr(state, name, value)
        self.dirty = True


def task_event_kind(event: TaskEvent) -> TaskEventKind:
    """The kind of event that logs a task's `event` (`task.<event>`)."""
    return cast("TaskEventKind", f"task.{event.value}")


def _headline(text: str, limit: int = 300) -> str:
    """The first line of a checkpoint's question, for the one-line event (the checkpoint keeps it whole)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    first = lines[0][:limit]
    return first + " …" if len(lines) > 1 or len(lines[0]) > limit else first
