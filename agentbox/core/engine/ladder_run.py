"""The failure ladder carried out in a run: `ladder.decide` decides, this module does what it says.

A hierarchical run (unless crew.yaml says `ladder: false`) hands every counted failure of a task (a
red submission check, a rejected review, a merge conflict) to the task's `LadderState`
instead of the per-fingerprint retry count:

    Rework(normal)        the worker redoes the task with the failure (L0, or a new brief)
    RequestRewrite        a `rewrite` turn of the lead: the task's plan entry again, with a
                          one-sentence root cause and its evidence (refused without it)
    Rework(compromise)    the rework prompt allows a patch tagged `FIXME: Tech Debt`; the
                          submission is refused when its diff has no tag, else each tagged
                          line is recorded in debt.yaml
    Rework(advisor)       the worker's turn is read-only; its guide and patch go to the human,
                          `agentbox apply TASK` applies the patch in the task's worktree
    Ask / HighRot         a `ladder` checkpoint saying the level and what each answer does;
                          at L3 the module is recorded in zones.yaml first

The state is written through the ledger with the task, and every move of level or mode is
one `ladder` event saved in the same write: an engine killed between two moves finds the
first one saved (with the turn it asked for) and never the second. Environment failures,
contract defects and a domain gap keep their own routes (`routing`); they never count here.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol, TypeGuard, get_args

from pydantic import BaseModel, ConfigDict, Field

from agentbox.core.agents.invoke import InvokeResult
from agentbox.core.config import zones
from agentbox.core.config.models import HierarchicalSettings
from agentbox.core.engine.failures import FailureKind
from agentbox.core.engine.ladder import advisor_delivered, decide, matches_any
from agentbox.core.engine.ladder_briefs import (
    DEBT_TAG,
    PATCH_FILE,
    REWRITE_PROMPT_HEAD,
    PlanEntry,
    advisor_section,
    classify_brief_change,
    coverage_gap,
    rewrite_prompt_head,
    root_cause_problem,
)
from agentbox.core.engine.ladder_model import (
    ApplyPatch,
    Ask,
    AskLeadToFill,
    Block,
    BriefReplied,
    Bypass,
    Cancel,
    ControlledRewrite,
    CoverageGap,
    Decision,
    Event,
    Failed,
    HighRot,
    HumanAnswered,
    HumanCancelled,
    LadderAnswer,
    LadderPolicy,
    Level,
    Mode,
    Passed,
    RecordDebt,
    Refuse,
    RequestRewrite,
    Rework,
    UpstreamNotReady,
    UseBrief,
)
from agentbox.core.engine.ledger import RunLedger
from agentbox.core.engine.models import (
    Acceptance,
    Checkpoint,
    CheckpointData,
    EscalatedTurn,
    Job,
    JobData,
    Run,
    Task,
)
from agentbox.core.engine.run_store import RunStore
from agentbox.core.errors import UsageError
from agentbox.core.tasks import TaskEvent, TaskState
from agentbox.core.workspace.gitcmd import git as git_run
from agentbox.core.workspace.gitcmd import git_bounded

DEBT_DIFF_BYTES = 8 * 1024 * 1024
"""How much of a compromise's diff is searched for its tags."""
DEBT_DUE_DAYS = 30
"""A compromise's debt is due this many days after it was recorded."""


class RewriteReply(BaseModel):
    """The lead's reply to a rewrite turn: the task's plan entry again, and why it failed."""

    model_config = ConfigDict(extra="forbid")

    brief: str = Field(min_length=1, max_length=20_000)
    acceptance: list[dict[str, str]] = Field(min_length=1, max_length=100)
    writes: list[str] = Field(default_factory=list, max_length=100)
    root_cause: str = Field(default="", max_length=2000)
    evidence: list[str] = Field(default_factory=list, max_length=50)


class LadderHooks(Protocol):
    """What the ladder asks of the run's mode."""

    def retry(self, job: Job, kind: FailureKind, message: str, original: str, data: JobData) -> None: ...
    def requeue(self, task: Task) -> None: ...
    def to_review(self, task: Task, turn: Any) -> None: ...
    def on_task_cancelled(self, task: Task) -> None: ...
    def release_dependents(self) -> None: ...


def entry_of(task: Task) -> PlanEntry:
    """The parts of a task's plan entry a rewrite may change."""
    return PlanEntry(task.brief, tuple((a.id, a.criterion) for a in task.acceptance), tuple(task.writes))


def fill_prompt(run: Run, task: Task, gap: tuple[str, ...], said: str) -> str:
    """The lead's coverage-fill turn: acceptance ids the review judged that the brief lacks."""
    acceptance = "\n".join(f"- [{a.id}] {a.criterion}" for a in task.acceptance)
    return "\n\n".join([
        REWRITE_PROMPT_HEAD.format(task=task.id) + f" fill={','.join(gap)}]",
        f"Run goal: {run.contract.goal}",
        f"The review of task {task.id} ({task.assignee}) judged acceptance item(s) {', '.join(gap)}, which its plan "
        f"entry has no entry for (a coverage gap: not counted against the worker). What the review said: "
        f"{said or '(nothing more)'}",
        f"The plan entry now:\nBrief: {task.brief}\nAcceptance:\n{acceptance}\nWrites: {', '.join(task.writes) or '[]'}",
        "Reply with the task's plan entry again as one JSON object: "
        '{"brief": "...", "acceptance": [{"id": "A1", "criterion": "..."}], "writes": ["..."]}, keeping the brief, '
        f"the writes and every acceptance item word for word and adding {', '.join(gap)} (a coverage fill). Any "
        "other change is a rewrite, which was not asked for and is refused.",
    ])


def rewrite_prompt(run: Run, task: Task, fingerprint: str, message: str, automatic: bool) -> str:
    """The lead's rewrite turn: the failure, the current plan entry, and the reply it wants."""
    acceptance = "\n".join(f"- [{a.id}] {a.criterion}" for a in task.acceptance)
    who = "automatically (the one automatic rewrite)" if automatic else "because the human allowed a second rewrite"
    return "\n\n".join([
        rewrite_prompt_head(task.id, fingerprint),
        f"Run goal: {run.contract.goal}",
        f"Task {task.id} ({task.assignee}) failed the same way twice; you are asked {who} to rewrite its "
        f"plan entry so that the next attempt succeeds. The failure:\n{message[:3000]}",
        f"The plan entry now:\nBrief: {task.brief}\nAcceptance:\n{acceptance}\nWrites: {', '.join(task.writes) or '[]'}",
        "Reply with the task's plan entry again as one JSON object: "
        '{"brief": "...", "acceptance": [{"id": "A1", "criterion": "..."}], "writes": ["..."], '
        '"root_cause": "one sentence naming what breaks and why", "evidence": ["failing check, test or '
        'acceptance id, or a log line in backticks"]}. A reply that only adds acceptance items is a coverage '
        "fill (not counted as a rewrite); any other change is a rewrite and needs the root cause with evidence, "
        "or it is refused.",
    ])


class LadderRunner:
    """Carries the ladder's decisions out over the ledger; the mode's hooks redo, review and cancel tasks."""

    def __init__(self, root: Path, store: RunStore, ledger: RunLedger, mode: Callable[[], LadderHooks],
                 structured: Callable[..., Any], escalate: Callable[..., None],
                 today: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.root = root
        self.store = store
        self.ledger = ledger
        self._mode = mode
        self.structured = structured
        self.escalate = escalate
        self.today = today
        self._applying: str | None = None
        """The task whose advisor patch is being resubmitted (its submission is the human's, not the advisor's)."""

    @property
    def run(self) -> Run:
        return self.ledger.run

    @property
    def mode(self) -> LadderHooks:
        return self._mode()

    @property
    def box(self) -> Path:
        return self.root / ".agent-box"

    def on(self) -> bool:
        """The run climbs the ladder (a hierarchical run whose contract says so: crew.yaml's `ladder`, true by default)."""
        return self.run.contract.ladder and isinstance(self.run.contract.settings, HierarchicalSettings)

    def policy(self) -> LadderPolicy:
        return LadderPolicy(no_compromise=tuple(self.run.contract.no_compromise))

    def _decide(self, task: Task, event: Event) -> Decision:
        decision = decide(task.ladder, event, self.policy())
        if not isinstance(decision.action, Refuse):
            self.ledger.set_ladder(task, decision.state, decision.transition)
        return decision

    def _lead(self) -> str:
        settings = self.run.contract.settings
        return settings.lead if isinstance(settings, HierarchicalSettings) else "lead"

    def _block(self, task: Task, why: str) -> None:
        if task.state not in (TaskState.BLOCKED, TaskState.CANCELLED, TaskState.APPROVED):
            self.ledger.transition(task, TaskEvent.BLOCK, why)

    # ------------------------------------------------------------------ a counted failure
    def failed(self, job: Job, kind: FailureKind, message: str, fp: str, files: tuple[str, ...]) -> bool:
        """A typed failure of `job`: True when the ladder took it (a counted failure of a task)."""
        task = self.run.tasks.get(job.task or "")
        if not self.on() or task is None or task.is_terminal or kind != FailureKind.IMPLEMENTATION_DEFECT:
            return False
        if job.kind not in ("work", "review"):
            return False
        upstream = self._upstream_of(task, files)
        if upstream is not None:
            self._upstream_not_ready(job, task, upstream, files, fp, message)
            return True
        paths = (*task.writes, *files, *(c.path for c in task.changed_files))
        decision = self._decide(task, Failed(fp, paths=paths, at=self.ledger.clock()))
        action = decision.action
        if isinstance(action, Rework):
            self.mode.retry(job, kind, message, job.original_prompt, job.data)
        elif isinstance(action, RequestRewrite):
            self._block(task, "the lead rewrites the brief (failure ladder L1)")
            self._ask_rewrite(task, fp, message, automatic=action.automatic)
        elif isinstance(action, HighRot):
            self._high_rot(task, fp, action)
        elif isinstance(action, Ask):
            self._block(task, "the failure ladder asks the human")
            self._checkpoint(task, action.text, action.options, fp)
        else:  # a failure while the task waits on the human: nothing should have run
            self.ledger.event("ladder.refused", f"{task.id}: the failure ladder refused a failure",
                              getattr(action, "reason", None), task=task.id, fingerprint=fp)
        return True

    def environment_wait(self, task_id: str | None, delay: float) -> bool:
        """Whether task `task_id` may wait `delay` more seconds out an environment failure: on the ladder a
        task's back-offs add up across its turns and checks to at most the limits' `retry_max_s` (always,
        when the ladder is off or the turn is no task's). The wait is recorded with the task."""
        task = self.run.tasks.get(task_id or "")
        if not self.on() or task is None:
            return True
        waited = task.ladder.environment_waited_s + delay
        if waited > self.run.contract.limits.retry_max_s:
            return False
        self.ledger.set_ladder(task, task.ladder.model_copy(update={"environment_waited_s": waited}))
        return True

    def retryable(self, why: str | None) -> bool:
        """Whether an environment failure is worth waiting out (always, when the ladder is off)."""
        return not self.on() or why is None or why in self.policy().retryable_errors

    # ------------------------------------------------------------------ a coverage gap
    def coverage_gap(self, task: Task, cited: list[str]) -> tuple[str, ...]:
        """The ids a rejection cites that the brief has no entry for, when the ladder is on."""
        if not self.on() or task.ladder.mode in (Mode.HIGH_ROT, Mode.CLOSED):
            return ()
        return coverage_gap([a.id for a in task.acceptance], cited)

    def fill(self, job: Job, task: Task, gap: tuple[str, ...]) -> None:
        """Back to the lead to fill the brief (not counted against the task)."""
        decision = self._decide(task, CoverageGap(gap, at=self.ledger.clock()))
        assert isinstance(decision.action, AskLeadToFill)
        self.ledger.event("ladder.coverage", f"{task.id}: the review cites {', '.join(gap)}, which its brief has no "
                          "entry for: back to the lead to fill it", "a coverage gap is not counted against the task",
                          task=task.id, role=job.role, acceptance=list(gap), counted=False)
        self._block(task, "coverage gap: the lead fills the brief")
        verdict = task.verdicts[-1] if task.verdicts else None
        said = "; ".join(f"[{b.acceptance_id}] {b.detail}" for b in (verdict.blocking_issues if verdict else [])
                         if b.acceptance_id in gap)
        prompt = fill_prompt(self.run, task, gap, said)
        self.ledger.enqueue("rewrite", self._lead(), prompt, task=task.id,
                            data=JobData(session_key=self._lead(), original_prompt=prompt))

    def _upstream_of(self, task: Task, files: tuple[str, ...]) -> Task | None:
        """The dependency whose output the failure is in: the failure names files of that dependency's
        writes and none of the task's own (files no task writes, such as the test that failed, say
        nothing either way); None: the failure is the task's."""
        named = [f for f in files if f and not f.startswith("/")]
        if not named or any(matches_any((f,), task.writes) for f in named):
            return None
        for dep in task.depends_on:
            upstream = self.run.tasks.get(dep)
            if upstream is not None and any(matches_any((f,), upstream.writes) for f in named):
                return upstream
        return None

    def _upstream_not_ready(self, job: Job, task: Task, upstream: Task, files: tuple[str, ...], fp: str,
                            message: str) -> None:
        """Not counted: the task is blocked until its upstream's output is fixed (a person says when)."""
        decision = self._decide(task, UpstreamNotReady(upstream.id, message[:300], at=self.ledger.clock()))
        assert isinstance(decision.action, Block)
        names = ", ".join(files[:10])
        self.ledger.event("ladder.upstream", f"{task.id}: its upstream {upstream.id} is not ready ({names})",
                          "the failure is in the upstream's files, not the task's: not counted against it",
                          task=task.id, upstream=upstream.id, files=list(files[:50]), counted=False)
        self.escalate(job, fp, f"{task.id} is blocked: its failure names only files of its upstream {upstream.id} "
                      f"({names}), so {upstream.id}'s output does not match what {task.id} needs; this is not counted "
                      f"against {task.id}. Fix {upstream.id}'s output first (by hand on the run's branch, or cancel "
                      f"{task.id} and plan the fix), then answer retry; or cancel. The failure: {message[:500]}",
                      job.original_prompt, job.data)

    def _ask_rewrite(self, task: Task, fp: str, message: str, *, automatic: bool) -> None:
        prompt = rewrite_prompt(self.run, task, fp, message, automatic)
        self.ledger.enqueue("rewrite", self._lead(), prompt, task=task.id,
                            data=JobData(session_key=self._lead(), original_prompt=prompt))

    def _checkpoint(self, task: Task, text: str, options: tuple[tuple[str, str], ...], fp: str | None) -> None:
        listing = "\n".join(f"- {answer}: {does}" for answer, does in options)
        self.ledger.checkpoint("ladder", f"{task.id} at {task.ladder.label}. {text}\nAnswers:\n{listing}",
                               options=[a for a, _ in options], task=task.id, role=task.assignee,
                               data=CheckpointData(fingerprint=fp))

    def _high_rot(self, task: Task, fp: str, action: HighRot) -> None:
        self._block(task, "the failure ladder reached L3: a high-rot zone")
        module = zones.module_of(task.writes or [c.path for c in task.changed_files])
        try:
            zone_id, _ = zones.record_zone(self.box, module, zones.ZoneFailure(
                fingerprint=fp, level="L3", task=task.id, run=self.run.id, at=self.today()),
                escape_hatches_used=task.ladder.escape_hatches_used)
            self.ledger.event("zone", f"{module} recorded as high-rot zone {zone_id}", f"task {task.id} reached L3",
                              task=task.id, zone=zone_id, module=module)
        except Exception as exc:  # noqa: BLE001  (a damaged zones.yaml must not stop the run: say so)
            self.ledger.event("zone", f"{module} could not be recorded as a high-rot zone", str(exc)[:300],
                              task=task.id, module=module)
        self._checkpoint(task, action.text, action.options, fp)

    # ------------------------------------------------------------------ the lead's rewrite
    def rewrite_replied(self, job: Job, result: InvokeResult) -> None:
        """The lead's rewrite turn answered: take the new plan entry (a fill is not counted), or refuse it."""
        task = self.run.tasks.get(job.task or "")
        if task is None or task.is_terminal:
            return
        decided: list[Decision] = []

        def check(reply: RewriteReply) -> list[str]:
            problems = self._entry_problems(task, reply)
            if problems:
                return problems
            new = PlanEntry(reply.brief, tuple((a["id"], a["criterion"]) for a in reply.acceptance),
                            tuple(reply.writes))
            change = classify_brief_change(entry_of(task), new)
            known = [a.id for a in task.acceptance] + [c.name for c in task.checks if not c.passed]
            problem = None if change.kind == "fill" else root_cause_problem(reply.root_cause, reply.evidence, known)
            decision = decide(task.ladder, BriefReplied(change, problem, at=self.ledger.clock()), self.policy())
            if isinstance(decision.action, Refuse):
                return [f"contract defect: {decision.action.reason}"]
            decided.append(decision)
            return []

        reply = self.structured(job, result, RewriteReply, check)
        if reply is None:
            return
        decision = decided[-1]
        assert isinstance(decision.action, UseBrief)
        self.ledger.set_ladder(task, decision.state, decision.transition)
        acceptance = [Acceptance(id=a["id"], criterion=a["criterion"]) for a in reply.acceptance]
        self.ledger.rewrite_brief(task, reply.brief, acceptance, reply.writes)
        state = decision.state
        if decision.action.counted:
            self.ledger.event("ladder.brief", f"{task.id}: the lead rewrote the brief (rewrite {state.rewrites_total} "
                              f"of {self.policy().brief_rewrite_total})", reply.root_cause, task=task.id,
                              role=job.role, counted=True, evidence=list(reply.evidence))
            note = f"The lead rewrote your task's brief. Root cause: {reply.root_cause}"
        else:
            self.ledger.event("ladder.brief", f"{task.id}: the lead filled the brief's coverage (not counted)",
                              "only acceptance items were added", task=task.id, role=job.role, counted=False)
            note = "The lead added acceptance items to your task's brief."
        self.ledger.leave_note(task, note, by="agentbox")
        if task.state == TaskState.BLOCKED:
            self.ledger.transition(task, TaskEvent.UNBLOCK, "the brief was rewritten: the worker goes on")
        self.mode.requeue(task)

    def _entry_problems(self, task: Task, reply: RewriteReply) -> list[str]:
        from agentbox.core.sandbox.protected import overlaps

        problems = []
        ids = [a.get("id", "") for a in reply.acceptance]
        if any(set(a) != {"id", "criterion"} or not a["id"].strip() or not a["criterion"].strip()
               for a in reply.acceptance):
            problems.append("every acceptance item is {\"id\": ..., \"criterion\": ...}, both non-empty")
        if len(set(ids)) != len(ids):
            problems.append("acceptance ids are unique")
        protected = self._crew_protected()
        for pattern in reply.writes:
            if pattern.startswith(("/", "~")) or ".." in pattern.split("/"):
                problems.append(f"writes {pattern!r} is not a glob relative to the project")
            for guarded in protected:
                if overlaps(pattern, guarded):
                    problems.append(f"writes {pattern!r} reaches the protected path {guarded!r}")
        return problems

    def _crew_protected(self) -> list[str]:
        from agentbox.core.config import project as project_mod
        from agentbox.core.paths import ProjectPaths

        try:
            return list(project_mod.load_crew(ProjectPaths(self.root)).crew.protected)
        except Exception:  # noqa: BLE001  (the engine read the crew at start; it was valid then)
            return []

    # ------------------------------------------------------------------ a submission
    def submitted(self, task: Task, turn: Any) -> bool:
        """A submission is about to be checked: False when the ladder took it (refused, or the advisor's)."""
        if not self.on():
            return True
        mode = task.ladder.mode
        if task.id == self._applying:
            return True
        if mode == Mode.COMPROMISE:
            return self._compromise_submitted(task)
        if mode == Mode.ADVISOR:
            self._advisor_submitted(task)
            return False
        return True

    def _compromise_submitted(self, task: Task) -> bool:
        tagged = self._tagged_lines(task)
        decision = self._decide(task, Passed(debt_tags=len(tagged), at=self.ledger.clock()))
        if isinstance(decision.action, Refuse):
            self.ledger.event("ladder.refused", f"{task.id}: the compromise patch is refused", decision.action.reason,
                              task=task.id, role=task.assignee)
            self.ledger.transition(task, TaskEvent.REJECT, "refused: a compromise patch must carry its tag")
            self.ledger.leave_note(task, f"Your submission was refused: {decision.action.reason}. Tag every "
                                   f"compromise change with a `{DEBT_TAG}` comment and submit again.", by="agentbox")
            self.mode.requeue(task)
            return False
        assert isinstance(decision.action, RecordDebt)
        due = (self.today() + timedelta(days=DEBT_DUE_DAYS)).date()
        try:
            recorded = zones.record_debts(self.box, tagged, owner_role=task.assignee, task=task.id, run=self.run.id,
                                          due=due)
            ids = [i for i, _ in recorded]
            self.ledger.event("debt", f"{task.id}: {len(ids)} tech debt(s) recorded in debt.yaml ({', '.join(ids)})",
                              "a compromise patch passed with its tagged changes", task=task.id, role=task.assignee,
                              debts=ids, files=[f"{t.file}:{t.line}" for t in tagged][:50])
        except Exception as exc:  # noqa: BLE001  (say it; the work goes on)
            self.ledger.event("debt", f"{task.id}: its tech debt could not be recorded", str(exc)[:300], task=task.id)
        return True

    def _tagged_lines(self, task: Task) -> list[zones.TaggedLine]:
        if task.base and task.head:  # agent-made commits: through the hardened git runner, bounded
            diff, _cut = git_bounded(self.root, "diff", "--no-color", "--no-renames", task.base, task.head, "--",
                                     max_bytes=DEBT_DIFF_BYTES)
            return zones.debt_tags_in_diff(diff.decode("utf-8", "replace"))
        found = []  # a shared workspace: the tag in the files of the task's scope
        for pattern in task.writes:
            for path in self.root.glob(pattern):
                if path.is_file() and not path.is_symlink():
                    text = path.read_text("utf-8", errors="replace")
                    found += [zones.TaggedLine(str(path.relative_to(self.root)), n, line.strip())
                              for n, line in enumerate(text.splitlines(), 1) if DEBT_TAG in line]
        return found

    def _advisor_submitted(self, task: Task) -> None:
        patch = self.store.artifacts_dir(self.run.id) / task.id / PATCH_FILE
        if not patch.is_file():
            self.ledger.transition(task, TaskEvent.REJECT, "advisor mode hands in a patch")
            self.ledger.leave_note(task, f"Advisor mode: no {PATCH_FILE} was handed in. "
                                   + advisor_section(task.id, str(self.store.artifacts_dir(self.run.id))),
                                   by="agentbox")
            self.mode.requeue(task)
            return
        decision = advisor_delivered(task.ladder)
        self.ledger.set_ladder(task, decision.state)
        self._block(task, "advisor mode handed in a guide and a patch: the human decides")
        assert isinstance(decision.action, Ask)
        self.ledger.event("advisor", f"{task.id}: the read-only worker handed in a guide and a patch",
                          str(patch), task=task.id, role=task.assignee, patch=str(patch))
        self._checkpoint(task, decision.action.text + f" ({patch}; `agentbox apply {task.id}`)",
                         decision.action.options, task.ladder.last_fingerprint)

    # ------------------------------------------------------------------ the human's answer
    def answer(self, cp: Checkpoint, text: str) -> str:
        """The human's answer to a `ladder` checkpoint: carried out, or a UsageError saying why not
        (the checkpoint stays open)."""
        task = self.run.tasks.get(cp.task or "")
        if task is None or task.is_terminal:
            self.ledger.close_checkpoint(cp, text)
            return "the task is closed"
        word, _, rest = text.strip().partition(" ")
        word = word.lower().strip(":,.;!")
        rest = rest.strip()
        if word == "cancel":
            decision = self._decide(task, HumanCancelled(at=self.ledger.clock()))
        else:
            decision = self._decide(task, self._answered(task, word, rest))
        action = decision.action
        if isinstance(action, Refuse):
            raise UsageError(f"{cp.id}: {action.reason}", "answer with one of: " + ", ".join(cp.options))
        self.ledger.close_checkpoint(cp, text)
        self.ledger.event("checkpoint.answered", f"{cp.id} (ladder) answered", text[:300], task=task.id,
                          checkpoint=cp.id)
        if isinstance(action, Cancel):
            self._resolve_zone(task, "abandon" if action.abandoned else "cancelled")
            self.ledger.transition(task, TaskEvent.CANCEL, f"{'abandoned' if action.abandoned else 'cancelled'} by "
                                   f"the human at {cp.id}", human=True)
            self.ledger.drop_jobs(task.id)
            self.mode.on_task_cancelled(task)
            return "the task is cancelled; the run goes on without it"
        if isinstance(action, RequestRewrite):
            self._ask_rewrite(task, task.ladder.last_fingerprint or "", "the same failure came back after the "
                              "automatic rewrite", automatic=False)
            return "the lead rewrites the brief once more"
        if isinstance(action, ApplyPatch):
            return self._apply(task)
        if isinstance(action, Rework):  # advisor again
            self._resolve_zone(task, "advisor_again")
            self.ledger.transition(task, TaskEvent.UNBLOCK, f"advisor again at {cp.id}", human=True)
            self.ledger.leave_note(task, f"New information from the human: {rest}", by="human")
            self.mode.requeue(task)
            return "one more advisor round"
        if isinstance(action, ControlledRewrite | Bypass):
            return self._replace(task, bypass=isinstance(action, Bypass), root_cause=rest)
        return "answered"

    def _answered(self, task: Task, word: str, rest: str) -> HumanAnswered:
        exits = {"controlled_rewrite", "advisor_again", "bypass", "abandon"}
        answers = set(get_args(LadderAnswer))  # retry, rewrite, apply and the exits
        if not _is_answer(word):
            raise UsageError(f"{word!r} is not an answer of the failure ladder", "answer with one of: "
                             + ", ".join(sorted(answers | {"cancel"})))
        problem = root_cause_problem(rest) if word in exits - {"abandon", "advisor_again"} else None
        overdue: tuple[str, ...] = ()
        if word == "controlled_rewrite":
            module = zones.module_of(task.writes)
            overdue = tuple(zones.overdue_on(zones.load_debts(self.box), module, self.today().date()))
        return HumanAnswered(answer=word, root_cause_problem=problem, new_information=rest,
                             overdue_debts=overdue, at=self.ledger.clock())

    def _resolve_zone(self, task: Task, resolution: str, bypass: str | None = None) -> None:
        if task.ladder.level != Level.L3:
            return
        module = zones.module_of(task.writes)
        try:
            found = [i for i, z in zones.load_zones(self.box).items() if z.module_path == module]
            if found:
                zones.resolve_zone(self.box, found[0], resolution, suggested_bypass=bypass)
        except Exception as exc:  # noqa: BLE001
            self.ledger.event("zone", f"zone of {module} not updated", str(exc)[:300], task=task.id)

    def _replace(self, task: Task, *, bypass: bool, root_cause: str) -> str:
        """Controlled rewrite or bypass: a new task replaces `task` (its dependents wait on the new one)."""
        module = zones.module_of(task.writes)
        suffix = "bypass" if bypass else "rewrite"
        new_id = f"{task.id}-{suffix}"
        n = 2
        while new_id in self.run.tasks:
            new_id, n = f"{task.id}-{suffix}{n}", n + 1
        if bypass:
            beside = f"{module.rstrip('/')}_bypass" if module != "." else "bypass"
            writes = [f"{beside}/**"]
            brief = (f"Bypass of {module} (replaces {task.id}, whose module is a high-rot zone): build a new module in "
                     f"{beside}/ beside the old one and leave the old files untouched (they are outside this task's "
                     f"writes). The original task: {task.brief}")
        else:
            writes = list(task.writes)
            brief = (f"Controlled rewrite of {module} (replaces {task.id}, whose module is a high-rot zone): rewrite "
                     f"the module from its contract rather than patching it. Root cause: {root_cause}. The original "
                     f"task: {task.brief}")
        self._resolve_zone(task, "bypass" if bypass else "controlled_rewrite", writes[0] if bypass else None)
        new = Task(id=new_id, assignee=task.assignee, brief=brief, acceptance=list(task.acceptance), writes=writes,
                   depends_on=list(task.depends_on))
        self.ledger.add_task(new, f"{'bypass' if bypass else 'controlled rewrite'} of {task.id} chosen by the human")
        for other in self.run.tasks.values():
            if task.id in other.depends_on:
                self.ledger.replace_dependency(other, task.id, new_id)
        self.ledger.transition(task, TaskEvent.CANCEL, f"replaced by {new_id}", human=True)
        self.ledger.drop_jobs(task.id)
        self.mode.release_dependents()
        return f"{new_id} replaces {task.id}"

    # ------------------------------------------------------------------ applying the advisor's patch
    def _apply(self, task: Task) -> str:
        """Apply the advisor's patch in the task's worktree, commit it, and resubmit the task."""
        from agentbox.core import workspace as git

        patch = self.store.artifacts_dir(self.run.id) / task.id / PATCH_FILE
        if not self.run.in_worktrees:
            raise UsageError("applying an advisor patch needs a worktree run", f"apply {patch} by hand")
        if not patch.is_file():
            raise UsageError(f"no advisor patch at {patch}")
        tree = git.ensure_task_worktree(self.root, self.run.id, task.id)
        touched = patch_paths(tree.path, patch)
        problem = patch_scope_problem(touched, task.writes)
        if problem is not None:
            raise UsageError(f"the advisor patch {patch} {problem}", "edit the patch, or answer cancel")
        done = git_run(tree.path, "apply", "--whitespace=nowarn", str(patch), ok=(0, 1, 128))
        if done.returncode != 0:
            raise UsageError(f"the advisor patch does not apply: {done.error_text[:300]}",
                             "edit the patch, or answer cancel")
        commit = git.commit_turn(tree.path, author_name="agentbox (advisor patch)",
                                 author_email="agentbox@agentbox.invalid",
                                 message=f"{task.id}: the advisor's patch, applied by the human\n\nRun: {self.run.id}\n")
        heads = git.task_heads(self.root, self.run.id, task.id)
        from agentbox.core.engine.changed_files import changed_paths

        if heads.base and heads.head:
            self.ledger.record_git(task, branch=heads.branch, base=heads.base, head=heads.head,
                                   changed=changed_paths(self.root, heads.base, heads.head))
        self.ledger.event("advisor.applied", f"{task.id}: the advisor's patch applied and committed",
                          ", ".join(touched[:20]), task=task.id, commit=commit)
        self.ledger.transition(task, TaskEvent.UNBLOCK, "the advisor's patch was applied: resubmitted", human=True)
        self.ledger.transition(task, TaskEvent.DISPATCH, "the advisor's patch is the task's submission")
        self.ledger.transition(task, TaskEvent.SUBMIT, "the advisor's patch, applied by the human")
        self._applying = task.id
        try:
            self.mode.to_review(task, EscalatedTurn(kind="work", role=task.assignee, task=task.id,
                                                    session_id=task.session_id, prompt=""))
        finally:
            self._applying = None
        return f"the patch is applied on {task.id}'s branch and resubmitted (its checks run next)"


def patch_scope_problem(touched: list[str], writes: list[str]) -> str | None:
    """Why a patch may not be applied for a task writing `writes` (None: every file it changes is inside)."""
    outside = [p for p in touched if not matches_any((p,), writes)]
    if outside:
        return "writes outside the task's scope: " + ", ".join(outside[:10])
    return None if touched else "changes no file"


def patch_paths(tree: Path, patch: Path) -> list[str]:
    """Every file a patch touches: what `git apply --numstat` says it changes, and each side of its
    `---`/`+++`, rename and copy headers (numstat names only the new side of a rename); [] when git
    cannot read it."""
    done = git_run(tree, "apply", "--numstat", "-z", str(patch), ok=(0, 1, 128))
    if done.returncode != 0:
        return []
    found: list[str] = []
    for item in done.stdout.decode("utf-8", "replace").split("\0"):
        parts = item.split("\t")
        name = parts[2] if len(parts) == 3 else item if "\t" not in item else ""
        if name:
            found.append(name)
    heads = ("--- ", "+++ ", "rename from ", "rename to ", "copy from ", "copy to ")
    for line in patch.read_text("utf-8", errors="replace").splitlines():
        head = next((h for h in heads if line.startswith(h)), None)
        if head is None:
            continue
        name = _unquoted(line[len(head):].split("\t")[0])
        if head in ("--- ", "+++ "):
            if name == "/dev/null":
                continue
            name = name[2:] if name.startswith(("a/", "b/")) else name
        found.append(name)
    return list(dict.fromkeys(f for f in found if f))


def _unquoted(name: str) -> str:
    """A path as git writes it, unquoted (`"\\303\\251"` → `é`)."""
    if len(name) > 1 and name.startswith('"') and name.endswith('"'):
        raw = name[1:-1].encode("utf-8").decode("unicode_escape")
        return raw.encode("latin-1", "replace").decode("utf-8", "replace")
    return name


def level_of(task: Task) -> str:
    """The ladder level as the faces show it (`-` before any counted failure)."""
    return task.ladder.label


def _is_answer(word: str) -> TypeGuard[LadderAnswer]:
    """`word` is one of the ladder's answers."""
    return word in get_args(LadderAnswer)
