"""What every mode shares: task work, submissions, reviews, dependencies, artifacts."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Generic, TypeVar

from agentbox.core.agents.invoke import InvokeResult
from agentbox.core.engine import budgets, prompts, reviews
from agentbox.core.engine.failures import FailureKind
from agentbox.core.engine.mode_context import ModeContext
from agentbox.core.engine.mode_state import ModeState
from agentbox.core.engine.models import Checkpoint, EscalatedTurn, Job, JobData, Run, Task, Verdict
from agentbox.core.engine.replies import Submission
from agentbox.core.engine.replies import Verdict as VerdictReply
from agentbox.core.engine.reply_rules import check_verdict
from agentbox.core.engine.scheduler import deps_state
from agentbox.core.engine.workspaces import StaleApproval, merge_conflict_note
from agentbox.core.tasks import TaskEvent, TaskState, round_can_close

StateT = TypeVar("StateT", bound=ModeState)


class ModeDriver(Generic[StateT]):
    """Base driver: the task lifecycle (work → submission → review → approval) and its hooks.

    `StateT` is the model of the mode's own progress (`state_model`), kept in `run.mode_state`.
    """

    name = "base"
    state_model: type[StateT]

    def __init__(self, ctx: ModeContext) -> None:
        self.ctx = ctx
        """What the mode may read and decide (not the engine)."""

    @property
    def run(self) -> Run:
        """The run state."""
        return self.ctx.run

    @property
    def state(self) -> StateT:
        """This mode's persisted progress (read it here; change it with `update_state`)."""
        state = self.ctx.ledger.mode_state
        if not isinstance(state, self.state_model):
            raise TypeError(f"a {self.run.contract.mode} run has no {self.state_model.__name__}")
        return state

    def update_state(self, **changes: Any) -> None:
        """Give fields of this mode's progress new values, through the ledger (each one validated)."""
        self.ctx.ledger.change_mode_state(**changes)

    # ------------------------------------------------------------------ hooks (override)
    def start(self) -> None:
        """Seed the run's first work."""
        raise NotImplementedError

    def on_success(self, job: Job, result: InvokeResult) -> None:
        """A turn answered: dispatch on the job kind."""
        if job.kind == "work":
            self.handle_submission(job, result)
        elif job.kind == "review":
            self.handle_verdict(job, result)

    def after_submit(self, task: Task) -> None:
        """What happens to a submitted task (default: review by the reviewer role, or by two, independently)."""
        reviewers = self.reviewers_for(task)
        if len(reviewers) > 1:
            self.ctx.ledger.open_panel(task, reviewers)
        for role in reviewers:  # the same prompt for both: neither sees the other's verdict
            self.ctx.ledger.enqueue("review", role, prompts.review_prompt(self.run, task), task=task.id)

    def reviewer_for(self, task: Task) -> str:
        """The role reviewing `task`."""
        raise NotImplementedError

    def reviewers_for(self, task: Task) -> list[str]:
        """The roles reviewing `task`: one, or two compared in code (see `engine.reviews`)."""
        return [self.reviewer_for(task)]

    def tick(self) -> None:
        """Called every loop: close rounds, finish the run."""

    def on_answer(self, checkpoint: Checkpoint, text: str) -> None:
        """A mode-specific checkpoint was answered."""

    def on_task_approved(self, task: Task) -> None:
        """Start what was waiting on `task`."""
        self.release_dependents()

    def on_task_cancelled(self, task: Task) -> None:
        """Tasks depending on a cancelled one can never run: block them."""
        self.release_dependents()

    # ------------------------------------------------------------------ task work
    def requeue(self, task: Task, queued: set[str] | None = None) -> None:
        """Enqueue the work turn of a queued (or rework) task, in its own session.

        `queued`: the tasks that already have a work turn (computed once by a caller
        requeueing many tasks; it is kept up to date).
        """
        if task.state not in (TaskState.QUEUED, TaskState.REWORK):
            return
        if task.review_pending and task.state == TaskState.QUEUED and task.submission is not None:
            self.resume_review(task)
            return
        if queued is None:
            queued = self._tasks_with_work()
        if task.id in queued:
            return
        queued.add(task.id)
        note = self.ctx.ledger.take_note(task)
        upstream = prompts.upstream(self.upstream_of(task), self.artifacts_root())
        prompt = prompts.work_prompt(self.run, task, self.artifacts_root(), upstream, note)
        self.ctx.ledger.enqueue("work", task.assignee, prompt, task=task.id, session_id=task.session_id,
                                data=JobData(original_prompt=prompt))

    def upstream_of(self, task: Task) -> list[Task]:
        """The finished tasks whose results `task`'s worker is given (default: its dependencies)."""
        return [self.run.tasks[d] for d in task.depends_on if d in self.run.tasks]

    def resume_review(self, task: Task) -> None:
        """A person raised the budget of work paused before its review: the same submission goes to review."""
        self.ctx.ledger.hold_review(task, False)
        why = "budget raised: the submitted work goes to review"
        self.ctx.ledger.transition(task, TaskEvent.DISPATCH, why)
        self.ctx.ledger.transition(task, TaskEvent.SUBMIT, why)
        if not budgets.pause_before_review(self.ctx.ledger, task):
            self.to_review(task, EscalatedTurn(kind="work", role=task.assignee, task=task.id,
                                               session_id=task.session_id, prompt=""))

    def to_review(self, task: Task, turn: EscalatedTurn) -> None:
        """The one place deciding checks green → review: the submission gate's checks run first (the
        engine calls `after_submit` once they pass); with no check to run the task goes to review now."""
        if not self.ctx.submitted(task, turn):
            return
        if not self.ctx.gate(task, turn):
            self.after_submit(task)

    def _tasks_with_work(self) -> set[str]:
        return {j.task for j in self.ctx.run.jobs.values() if j.kind == "work" and j.task}

    def release_dependents(self) -> None:
        """Queue every task whose dependencies are now approved; block those that can never run."""
        queued = self._tasks_with_work()
        for task in self.run.tasks.values():
            if task.state != TaskState.QUEUED or task.id in queued:
                continue
            status = deps_state(task, self.run.tasks)
            if status == "ready":
                self.requeue(task, queued)
            elif status == "failed":
                self.ctx.ledger.drop_jobs(task.id)
                self.ctx.ledger.transition(task, TaskEvent.BLOCK, "a dependency was cancelled: it can never run")

    def write_artifact(self, name: str, text: str, *, role: str, what: str, session: str | None = None) -> Path:
        """Write one of the run's own artifacts (synthesis, transcript, final answer) and log it."""
        path = self.ctx.store.write_artifact(self.run.id, name, text, role=role, session=session)
        self.ctx.ledger.event("artifact", what, None, role=role, session=session)
        return path

    def ask_human(self, task: Task, role: str, question: str, why: str) -> None:
        """The agent needs a human decision (a domain gap): block the task and open a question."""
        self.ctx.ledger.transition(task, TaskEvent.BLOCK, "the agent needs a human decision (domain gap)")
        self.ctx.ledger.event("failure", f"domain_gap in {task.id}", why[:300], task=task.id, role=role)
        self.ctx.ledger.checkpoint("question", question, task=task.id, role=role)

    def artifacts_root(self) -> str:
        """The run's artifact dir as agents see it (same path inside the sandbox)."""
        return str(self.ctx.store.artifacts_dir(self.run.id))

    def handle_submission(self, job: Job, result: InvokeResult) -> None:
        """Validate a worker's submission; a question becomes a checkpoint."""
        task = self.run.tasks[job.task]
        reply = self.ctx.structured(job, result, Submission)
        if reply is None:
            return
        if reply.question:
            self.ask_human(task, job.role, reply.question, f"domain_gap: {reply.question}")
            return
        self.ctx.ledger.record_submission(task, reply)
        self.record_artifacts(task, reply.artifacts, job, result)
        self.ctx.ledger.transition(task, TaskEvent.SUBMIT, reply.summary[:200])
        self.ctx.ledger.event("submission", f"{task.id} submitted by {job.role}", reply.summary[:300], task=task.id,
                          role=job.role, session=result.session_id, tokens=task.tokens)
        if not budgets.pause_before_review(self.ctx.ledger, task):
            self.to_review(task, EscalatedTurn(kind=job.kind, role=job.role, task=job.task, session_id=job.session_id,
                                               prompt=job.original_prompt, data=job.data.for_retry(None)))

    def record_artifacts(self, task: Task, listed: list[str], job: Job, result: InvokeResult) -> None:
        """Add the files a submission names (and its hand-on dir) to the run's manifest."""
        project_root = self.ctx.project_root
        handoff = self.ctx.store.artifacts_dir(self.run.id) / task.id
        paths: list[Path] = []
        for item in listed:
            path = Path(item)
            candidates = [path] if path.is_absolute() else [project_root / path, handoff / path]
            paths.extend(c for c in candidates if c.is_file())
        if handoff.is_dir():
            paths.extend(p for p in handoff.rglob("*") if p.is_file())
        seen: set[Path] = set()
        for path in paths:
            resolved = path.resolve()
            if resolved in seen or not resolved.is_relative_to(project_root.resolve()):
                continue
            seen.add(resolved)
            entry = self.ctx.store.record_artifact(self.run.id, resolved, role=job.role,
                                                      session=result.session_id, task=task.id)
            if entry is not None:
                self.ctx.ledger.event("artifact", f"{resolved.relative_to(project_root.resolve())} by {job.role}",
                                  None, task=task.id, role=job.role, session=result.session_id, sha256=entry["sha256"])

    def handle_verdict(self, job: Job, result: InvokeResult) -> None:
        """Validate a review; approve with evidence or send back for rework."""
        task = self.run.tasks[job.task]
        panel = task.panel
        if panel is not None and job.role in panel.reviewers:
            if panel.outcome is None and job.role not in panel.verdicts:
                self.handle_panel_verdict(job, result, task)
            else:  # the double review was decided already: a late answer never decides it again
                self.ctx.ledger.event("verdict.ignored", f"{task.id}: a late review by {job.role} is ignored",
                                      "the two independent reviews were already in", task=task.id, role=job.role)
            return
        ids = [a.id for a in task.acceptance]
        gap: list[str] = []

        def check(v: VerdictReply) -> list[str]:
            cited = [b.acceptance_id for b in v.blocking_issues if b.acceptance_id] if v.verdict == "reject" else []
            gap[:] = self.ctx.coverage_gap(task, cited)
            return check_verdict(v, [*ids, *gap])

        reply = self.ctx.structured(job, result, VerdictReply, check)
        if reply is None:
            return
        verdict = Verdict(verdict=reply.verdict, by=job.role, at=self.ctx.clock(),
                          evidence=[c.evidence for c in reply.checklist if c.pass_ and c.evidence],
                          blocking_issues=list(reply.blocking_issues), checklist=list(reply.checklist),
                          confidence=reply.confidence, commit=task.head if self.run.in_worktrees else None)
        self.ctx.ledger.add_verdict(task, verdict)
        self.ctx.ledger.event("verdict", f"{task.id}: {reply.verdict} by {job.role}",
                          "; ".join(b.detail for b in reply.blocking_issues)[:300] or None, task=task.id,
                          role=job.role, session=result.session_id)
        if reply.verdict == "approve":
            self.approve_reviewed(job, task, f"review by {job.role} passed every criterion", verdict.evidence,
                                  verdict.commit)
            return
        if gap:  # the review judged criteria the brief never gave: the brief is at fault, not the work
            self.ctx.fill(job, task, tuple(gap))
            return
        failing = sorted({b.acceptance_id for b in reply.blocking_issues if b.acceptance_id}
                         | {c.acceptance_id for c in reply.checklist if not c.pass_})
        message = "review rejected: " + "; ".join(
            (f"[{b.acceptance_id}] " if b.acceptance_id else "") + b.detail for b in reply.blocking_issues)
        self.ctx.fail(job, FailureKind.IMPLEMENTATION_DEFECT, message + " " + ",".join(failing),
                         tuple(task.writes))

    def approve_reviewed(self, job: Job, task: Task, why: str, evidence: list[str], commit: str | None) -> None:
        """The review passed on `commit`: merge exactly that (a conflict is rework, a moved branch makes the
        approval stale), run the integration checks when the crew has them, and approve the task."""
        if self.ctx.integration(task, commit, evidence, job.role):
            return  # merged and checked on the run's branch first; approved once its checks pass
        try:
            conflicts = self.ctx.integrate(task, commit)
        except StaleApproval as exc:  # someone committed on the branch during the review: judge it again
            self.ctx.ledger.event("approval.stale", f"{task.id}: {job.role}'s approval is stale", exc.message,
                                  task=task.id, role=job.role, commit=commit, head=exc.head)
            self.ctx.fail(job, FailureKind.IMPLEMENTATION_DEFECT, exc.message, tuple(task.writes))
            return
        if conflicts:  # nothing was merged: the worker resolves what the approved work brought in
            self.ctx.fail(job, FailureKind.IMPLEMENTATION_DEFECT, merge_conflict_note(conflicts), tuple(conflicts))
            return
        self.ctx.ledger.transition(task, TaskEvent.APPROVE, why, evidence=evidence)
        self.on_task_approved(task)

    def handle_panel_verdict(self, job: Job, result: InvokeResult, task: Task) -> None:
        """One of two independent reviews came in; with both in, compare them and carry the decision out.

        An invalid reply is not re-prompted: it is recorded as an `invalid` verdict, and the
        comparison asks a person.
        """
        verdict = reviews.read_verdict(result.text, task, job.role, self.ctx.clock())
        self.ctx.ledger.panel_verdict(task, job.role, verdict)
        detail = verdict.note if verdict.verdict == "invalid" else "; ".join(b.detail for b in verdict.blocking_issues)
        self.ctx.ledger.event("verdict", f"{task.id}: {verdict.verdict} by {job.role} (independent review)",
                              (detail or "")[:300] or None, task=task.id, role=job.role, session=result.session_id)
        panel = task.panel
        assert panel is not None
        if len(panel.verdicts) < len(panel.reviewers):
            return
        decision = reviews.compare_panel(panel)
        self.ctx.ledger.close_panel(task, decision.outcome, decision.reason)
        self.ctx.ledger.event("review.compared", f"{task.id}: two reviews compared → {decision.outcome}",
                              decision.reason[:500], task=task.id, outcome=decision.outcome,
                              reviewers=list(panel.reviewers), to_verify=[list(k) for k in decision.to_verify])
        by = " + ".join(panel.reviewers)
        if decision.outcome == "approve":
            evidence = [e for v in panel.verdicts.values() for e in v.evidence]
            self.approve_reviewed(job, task, f"both reviews ({by}) passed every criterion", evidence,
                                  task.head if self.run.in_worktrees else None)
        elif decision.outcome == "rework":
            self.ctx.ledger.add_verdict(task, reviews.combined_verdict(decision, by, self.ctx.clock()))
            message = "reviews rejected: " + "; ".join(
                (f"[{b.acceptance_id}] " if b.acceptance_id else "") + b.detail for b in decision.issues)
            self.ctx.fail(job, FailureKind.IMPLEMENTATION_DEFECT, message, tuple(task.writes))
        else:
            self.ctx.ledger.checkpoint("review_disagreement", reviews.checkpoint_question(task, decision),
                                       options=["approve", "rework", "cancel"], task=task.id)

    def retry(self, job: Job, kind: FailureKind, message: str, original: str, data: JobData) -> None:
        """Automatic retry of a counted failure (the fingerprint ledger allowed it)."""
        task = self.run.tasks.get(job.task or "")
        if kind == FailureKind.IMPLEMENTATION_DEFECT and task is not None:
            if task.state == TaskState.EXECUTING:  # found before any review (a graph node's merge conflict)
                self.ctx.ledger.transition(task, TaskEvent.REQUEUE, "rework in the same session: " + message[:200])
            else:
                self.ctx.ledger.transition(task, TaskEvent.REJECT, "rework in the same session with the verdict")
            self.requeue(task)
            return
        if task is not None and job.works_on_task:
            if task.state == TaskState.EXECUTING:
                self.ctx.ledger.transition(task, TaskEvent.REQUEUE, "invalid reply: do the task again")
            self.ctx.ledger.leave_note(task, f"Your previous reply could not be used: {message[:500]}", by="agentbox")
            self.requeue(task)
            return
        prompt = f"{original}\n\nYour previous reply could not be used: {message[:500]}"
        self.ctx.ledger.enqueue(job.kind, job.role, prompt, task=job.task, session_id=job.session_id,
                                data=data.for_retry(original))

    def all_closed(self) -> bool:
        """True when the run has tasks and the round can close (every one approved or cancelled)."""
        return bool(self.run.tasks) and round_can_close(t.state for t in self.run.tasks.values())
