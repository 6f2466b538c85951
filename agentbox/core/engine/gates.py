"""The verification gates: crew.yaml's checks run by the code layer on exactly the commit they judge.

A writer's submission opens a `submission` gate before any review: its checks run in
order, each in its own sandbox over the task's worktree at the submitted commit (see
`core.checks`), and the first red one stops the gate. Red is an implementation defect
whose fingerprint comes from the check's output, and the task goes back to its worker with
that output; a check that could not run is an environment failure, retried with back-off
and not counted; a red check runs once more, and red then green is flaky (passing only
with `flaky: allow`). Only a gate that ends green hands the task on to review.

A gate is kept in the run (`Run.gates`) until it is decided, and a check's result is
recorded in the same save that takes it off the gate's list, so an engine killed during a
check runs that check again and never records it twice.

`failure_signature` and `decide` are pure; `GateRunner` carries their decisions out for
the engine through the ledger.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agentbox.core import workspace as git
from agentbox.core.agents.checks import CheckOutcome, applies, run_check
from agentbox.core.engine.failures import FailureKind, fingerprint
from agentbox.core.engine.ledger import RunLedger
from agentbox.core.engine.models import CheckResult, EscalatedTurn, Job, PendingGate, Run, Task
from agentbox.core.engine.routing import ENV_RETRIES, FailureRouter
from agentbox.core.engine.run_store import RunStore
from agentbox.core.engine.workspaces import StaleApproval, Workspaces, merge_conflict_note
from agentbox.core.errors import AgentboxError
from agentbox.core.process import kill_tree
from agentbox.core.tasks import TaskEvent, TaskState
from agentbox.core.workspace.gitcmd import GitError, is_ancestor, rev, update_refs
from agentbox.core.workspace.layout import common_dir, task_worktree_path

_TEST_ID = re.compile(r"^(?:FAILED|ERROR|FAIL|not ok)\b[\s:]*(\S+)", re.MULTILINE)
_ERROR_TYPE = re.compile(r"\b([A-Z][A-Za-z0-9]*(?:Error|Exception|Failure))\b")
_FILE = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-]+\.(?:py|js|jsx|ts|tsx|go|rs|rb|java|kt|c|h|cc|cpp|hpp|cs|php|sh|"
                   r"swift|scala|ex|exs|ml|hs|lua|toml|yaml|yml|json|cfg|ini))\b")
SIGNATURE_LINES = 12
"""Lines of a red check's output that name it when no test id or error type does."""


def failure_signature(tail: str) -> tuple[str, tuple[str, ...]]:
    """What names a red check's root cause in its output: (failing test ids and error types, files).

    Two runs failing the same tests the same way give the same signature whatever their line
    numbers, paths, durations or ids (the fingerprint normalises those away); when the output
    names no test and no error type, its last lines stand in.
    """
    ids = sorted({m.group(1).split("[")[0] for m in _TEST_ID.finditer(tail)})
    errors = sorted(set(_ERROR_TYPE.findall(tail)))
    files = sorted({f for f in _FILE.findall(tail) if not f.startswith("/")})
    if ids or errors:
        text = "; ".join(part for part in (" ".join(ids), " ".join(errors)) if part)
    else:
        lines = [line.strip() for line in tail.splitlines() if line.strip()]
        text = " | ".join(lines[-SIGNATURE_LINES:])
    return text[:1500], tuple(files[:50])


def submission_checks(run: Run, task: Task) -> list[str]:
    """The submission gate's checks that apply to `task`'s changes (its `paths:` filters), in order."""
    changed = [p for c in task.changed_files for p in (c.path, c.old_path) if p]
    return [name for name in run.contract.gates.submission
            if name in run.contract.checks and (task.changed_more or applies(run.contract.checks[name], changed))]


_Layer = tuple[Path | None, tuple[Path, ...], dict[str, str]]
"""A sparse worktree's shared base and its own dirs over it ((None, ()): a whole tree)."""


@dataclass(frozen=True)
class Flown:
    """What one check's flight brought back."""

    gate_id: str
    name: str
    commit: str | None
    outcome: CheckOutcome | None
    flaky: bool = False
    stale: str | None = None
    """Why nothing ran: the work moved on from the commit the gate judges."""


class GateRunner:
    """Runs the pending gates' checks off the loop and carries out what each result decides."""

    def __init__(self, root: Path, store: RunStore, ledger: RunLedger, workspaces: Workspaces,
                 router: FailureRouter, passed: Callable[[Task], None],
                 approved: Callable[[Task], None] = lambda task: None) -> None:
        self.root = root
        self.store = store
        self.ledger = ledger
        self.workspaces = workspaces
        self.router = router
        self.passed = passed
        """What follows a green submission gate (the mode sends the task to review)."""
        self.approved = approved
        """What follows a green integration gate, once the task is approved (the mode releases its dependents)."""
        self.flights: dict[str, asyncio.Task[Flown]] = {}
        self._common: Path | None = None
        """The repository's git common dir (asked of git once)."""
        self.retryable: Callable[[str | None], bool] = lambda why: True
        """Whether waiting may cure why a check could not run (the failure ladder's whitelist asks at once
        about a command that is not found or not executable, or a sandbox that will not start)."""
        self.pids: dict[str, int] = {}
        """Gate id → the process group of its running check (to kill it when the check is abandoned)."""

    @property
    def run(self) -> Run:
        return self.ledger.run

    # ------------------------------------------------------------------ opening
    def submission(self, task: Task, turn: EscalatedTurn) -> bool:
        """Open `task`'s submission gate when checks apply to it; False when there is nothing to run."""
        names = submission_checks(self.run, task)
        if not names:
            return False
        gate = PendingGate(id=self.ledger.next_id("gate"), stage="submission", task=task.id,
                           commit=task.head if self.run.in_worktrees else None, checks=names, turn=turn)
        self.ledger.open_gate(gate, "the submission gate runs before any review")
        return True

    def integration(self, task: Task, at: str | None, evidence: list[str], by: str) -> bool:
        """Take an approved task's merge over when integration checks apply: merges go one at a time, each
        checked on the run's branch before the task counts as approved. False: merge and approve now."""
        if not self.workspaces.active:
            return False
        changed = [p for c in task.changed_files for p in (c.path, c.old_path) if p]
        names = [n for n in self.run.contract.gates.integration  # a flood's unrecorded files may match any filter
                 if n in self.run.contract.checks and (task.changed_more or applies(self.run.contract.checks[n], changed))]
        queued = any(g.stage == "integration" for g in self.run.gates.values())
        if not names and not queued:
            return False
        if any(g.stage == "integration" and g.task == task.id for g in self.run.gates.values()):
            return True  # approved twice (a person and the reviewer): one merge, checked once
        gate = PendingGate(id=self.ledger.next_id("gate"), stage="integration", task=task.id, checks=names,
                           approved_commit=at, evidence=list(evidence), approved_by=by)
        # with no check of its own it still waits its turn: a merge under a checked one would make that one's
        # undo impossible and move the view its checks read
        self.ledger.open_gate(gate, f"approved by {by}: merged into the run's branch, then checked there" if names
                              else f"approved by {by}: merged after the integration checks before it")
        return True

    # ------------------------------------------------------------------ the loop's side
    def busy(self) -> bool:
        """A gate is pending or one of its checks is running."""
        return bool(self.run.gates)

    def recover(self) -> None:
        """After a crash: a check that was running runs again (its result was never recorded)."""
        for gate in self.run.gates.values():
            if gate.started:
                self.ledger.check_interrupted(gate, "engine restarted")

    def start_ready(self, now: float) -> None:
        """Start the next check of every gate that is not running one and whose back-off is over."""
        if self.run.paused:
            return
        first_integration = next((g.id for g in self.run.gates.values() if g.stage == "integration"), None)
        for gate in list(self.run.gates.values()):
            if gate.id in self.flights or gate.not_before > now:
                continue
            task = self.run.tasks.get(gate.task or "")
            if gate.stage == "submission" and (task is None or task.state != TaskState.SUBMITTED):
                self._drop(gate, f"{gate.task} is {task.state if task else 'gone'}: its submission checks are moot")
                continue
            if gate.stage == "integration":
                if gate.id != first_integration:
                    continue  # merges are checked one at a time: a red one can then be undone alone
                if task is None or task.state != TaskState.REVIEWING:
                    self._drop(gate, f"{gate.task} is {task.state if task else 'gone'}: its merge is moot")
                    continue
                if gate.merged is None and not self._merge(gate, task):
                    continue
            if not gate.checks:
                self._decided(gate)
                continue
            self.ledger.check_started(gate)
            self.flights[gate.id] = asyncio.ensure_future(asyncio.to_thread(self._fly, gate.model_copy(deep=True)))

    def cancel(self, task_id: str | None = None) -> None:
        """Stop the running checks (of one task): their process groups are killed, their results ignored."""
        for gate_id, flight in list(self.flights.items()):
            gate = self.run.gates.get(gate_id)
            if task_id is None or gate is None or gate.task == task_id:
                flight.cancel()
                pid = self.pids.pop(gate_id, None)
                if pid is not None:
                    kill_tree(pid)

    def collect(self) -> None:
        """Carry out what every finished check decided."""
        for gate_id, flight in list(self.flights.items()):
            if not flight.done():
                continue
            del self.flights[gate_id]
            self.pids.pop(gate_id, None)
            if flight.cancelled():
                continue
            flown = flight.result()
            gate = self.run.gates.get(gate_id)
            if gate is not None:
                self._landed(gate, flown)

    # ------------------------------------------------------------------ one check (a worker thread)
    def _fly(self, gate: PendingGate) -> Flown:
        name = gate.checks[0]
        check = self.run.contract.checks[name]
        try:
            tree, views, hidden, (base, over, git_env) = self._tree(gate)
        except _Stale as exc:
            return Flown(gate.id, name, gate.commit, None, stale=str(exc))
        except AgentboxError as exc:
            return Flown(gate.id, name, gate.commit, CheckOutcome("error", None, 0.0, self._log(gate, name), exc.message,
                                                                  "sandbox"))
        def spawned(pid: int) -> None:
            self.pids[gate.id] = pid

        outcome = run_check(name, check, root=self.root, tree=tree, views=views, view_hidden=hidden,
                            log_path=self._log(gate, name), on_spawn=spawned, base=base, over=over, git_env=git_env)
        if outcome.status != "failed":
            return Flown(gate.id, name, gate.commit, outcome)
        again = run_check(name, check, root=self.root, tree=tree, views=views, view_hidden=hidden,
                          log_path=self._log(gate, name, rerun=True), on_spawn=spawned, attempt=2, base=base,
                          over=over, git_env=git_env)
        if again.status == "passed":
            return Flown(gate.id, name, gate.commit, again if check.flaky == "allow" else outcome, flaky=True)
        return Flown(gate.id, name, gate.commit, outcome)

    def _tree(self, gate: PendingGate) -> tuple[Path, tuple[tuple[Path, Path], ...], tuple[Path, ...], _Layer]:
        """The tree a gate's checks judge and the git view it needs (the task's worktree at the gate's commit)."""
        if not self.workspaces.active or (gate.task is None and gate.stage != "run_end"):
            return self.root, (), (), (None, (), {})
        if gate.stage != "submission" or gate.task is None:  # the run's view at the head the gate judges
            mount = self.workspaces.view(self.run.contract.workspace_setup.copy_)
            head = rev(self.root, f"refs/heads/{git.integration_branch(self.run.id)}")
            if head != gate.commit:
                raise _Stale(f"the run's branch moved from {str(gate.commit)[:10]} to {str(head)[:10]}")
            return mount.path, mount.views, mount.hidden, (mount.base, mount.over, mount.env)
        path, views, hidden, layer = self._task_tree(gate.task)
        head = git.task_heads(self.root, self.run.id, gate.task).head
        if head != gate.commit:
            raise _Stale(f"{gate.task}'s branch moved from {str(gate.commit)[:10]} to {str(head)[:10]}")
        return path, views, hidden, layer

    def _task_tree(self, task_id: str) -> tuple[Path, tuple[tuple[Path, Path], ...], tuple[Path, ...], _Layer]:
        """The task's worktree and its git view: the one its work turn left (no git call but the first's), else
        made again."""
        if self._common is None:
            self._common = common_dir(self.root)
        path = task_worktree_path(self._common, self.run.id, task_id)
        try:
            view = git.sandbox_git_view(self.root, path, common=self._common)
        except AgentboxError:
            mount = self.workspaces.mount(task_id, self.run.contract.workspace_setup.copy_)
            return mount.path, mount.views, mount.hidden, (mount.base, mount.over, mount.env)
        return path, tuple(view.binds), tuple(view.hide), (view.base, view.over, view.env)

    def _log(self, gate: PendingGate, name: str, *, rerun: bool = False) -> Path:
        who = gate.task or "run"
        suffix = "-rerun" if rerun else ""
        return self.store.dir(self.run.id) / "checks" / f"{gate.stage}-{who}-{name}-{gate.id}-{gate.attempt}{suffix}.log"

    # ------------------------------------------------------------------ deciding (in the loop)
    def _landed(self, gate: PendingGate, flown: Flown) -> None:
        task = self.run.tasks.get(gate.task or "")
        if flown.stale is not None or flown.outcome is None:
            self._drop(gate, flown.stale or "nothing ran")
            return
        if gate.stage == "submission" and (task is None or task.state != TaskState.SUBMITTED
                                           or (self.run.in_worktrees and task.head != gate.commit)):
            self._drop(gate, f"{gate.task} moved on while its check ran: the result is not recorded")
            return
        if gate.stage == "integration" and (task is None or task.state != TaskState.REVIEWING):
            self._drop(gate, f"{gate.task} was decided while its integration check ran")
            return
        outcome = flown.outcome
        check = self.run.contract.checks[flown.name]
        passed = outcome.status == "passed"
        result = CheckResult(name=flown.name, stage=gate.stage, commit=gate.commit, passed=passed,
                             status=outcome.status, flaky=flown.flaky, exit_status=outcome.exit_status,
                             duration_s=outcome.duration_s, log=str(outcome.log_path), command=check.run,
                             cannot_run=outcome.cannot_run, tail=outcome.tail, at=self.ledger.clock(), task=gate.task)
        self.ledger.record_check(gate, result)
        if flown.flaky:
            self.ledger.event("check.flaky", f"check {flown.name} of {gate.task or 'the run'} was red, then green",
                              "it passes as flaky (crew.yaml `flaky: allow`)" if passed
                              else "a flaky check stays red unless crew.yaml says `flaky: allow` for it",
                              task=gate.task, check=flown.name, commit=gate.commit)
        if outcome.status == "error":
            self._could_not_run(gate, result)
        elif not passed:
            self._red(gate, result)
        elif not gate.checks:
            self._decided(gate)

    def _job(self, gate: PendingGate) -> Job:
        """The turn a gate's failure is routed as: the work turn that submitted."""
        turn = gate.turn
        task = self.run.tasks.get(gate.task or "")
        if turn is None:
            assignee = task.assignee if task is not None else "agentbox"
            turn = EscalatedTurn(kind="work", role=assignee, task=gate.task,
                                 session_id=task.session_id if task else None, prompt="")
        return Job(id=gate.id, kind=turn.kind, role=turn.role, task=turn.task, session_id=turn.session_id,
                   prompt=turn.prompt, attempt=gate.attempt, data=turn.data)

    def _red(self, gate: PendingGate, result: CheckResult) -> None:
        self.ledger.close_gate(gate)
        task = self.run.tasks[gate.task or ""]
        if gate.stage == "integration":
            since = self._merged_since(task)
            if not self._undo(gate, task, f"integration check {result.name} is red"):
                return
            if since:  # each passed its own checks and review: which one gives way is the person's call
                self._between_approved(gate, task, result, since)
                return
        self.ledger.event("gate.blocked", f"{task.id}: {gate.stage} check {result.name} is red; back to {task.assignee}",
                          f"`{result.command[:200]}` exited {result.exit_status}" + (" (flaky)" if result.flaky else ""),
                          task=task.id, check=result.name, commit=gate.commit, human_required=False)
        signature, files = failure_signature(result.tail)
        message = f"check {result.name} failed: {signature}"
        self.router.fail(self._job(gate), FailureKind.IMPLEMENTATION_DEFECT, message, files)

    def _between_approved(self, gate: PendingGate, task: Task, result: CheckResult, since: list[str]) -> None:
        """An integration check is red only with the task on top of others approved since its base: ask."""
        names = ", ".join(since)
        self.ledger.event("gate.blocked", f"{task.id}: integration check {result.name} is red on top of {names}",
                          f"`{result.command[:200]}` exited {result.exit_status}; {task.id} and {names} each passed "
                          "their own checks and review", task=task.id, check=result.name, commit=gate.commit,
                          human_required=True)
        signature, _ = failure_signature(result.tail)
        question = (f"Integration check {result.name} failed after {task.id} was merged on top of {names} (approved "
                    f"since {task.id}'s base); each passed its own checks and review, so they clash. The merge was "
                    f"undone: the run's branch holds {names} without {task.id}. Failure: {signature}; log: "
                    f"{result.log}. Answer retry: {task.id} is reworked with the check's output (the run's branch is "
                    f"already in its worktree); or cancel: the run goes on without {task.id}")
        job = self._job(gate)
        fp = fingerprint(FailureKind.IMPLEMENTATION_DEFECT, f"integration check {result.name} failed: {signature}")
        self.router.escalate(job, fp, question, job.original_prompt, job.data)

    def _could_not_run(self, gate: PendingGate, result: CheckResult) -> None:
        """Not the work's fault: the same check again after a back-off, then a person is asked."""
        kind = FailureKind.ENVIRONMENT_FAILURE
        message = f"check {result.name} could not run ({result.cannot_run}): {result.tail[-300:]}"
        fp = fingerprint(kind, f"check {result.name} could not run ({result.cannot_run})")
        job = self._job(gate)
        self.ledger.event("failure", f"{kind.value} in check {result.name} of {gate.task or 'the run'}", message[:500],
                          task=gate.task, fingerprint=fp, check=result.name)
        delays = self.router.backoff(self.run.contract.limits.retry_max_s)
        retry = gate.attempt <= min(ENV_RETRIES, len(delays)) and self.retryable(result.cannot_run)
        delay = delays[gate.attempt - 1] if retry else 0.0
        spent = retry and not self.router.environment_wait(gate.task, delay)
        if retry and not spent:
            self.ledger.check_backoff(gate, self.ledger.clock() + delay)
            self.ledger.event("retry", f"check {result.name} runs again in {delay:.1f} s "
                              f"(retry {gate.attempt - 1}/{ENV_RETRIES})",
                              "a check that could not run says nothing about the work: not counted against the task",
                              task=gate.task, fingerprint=fp, check=result.name)
            return
        self.ledger.close_gate(gate)
        task = self.run.tasks.get(gate.task or "")
        if gate.stage == "integration" and task is not None and not self._undo(gate, task,
                                                                               f"check {result.name} could not run"):
            return
        question = (f"check {result.name} could not run {gate.attempt} times ({result.cannot_run}); "
                    + (f"task {gate.task} has waited out the environment for its budget "
                       f"({self.run.contract.limits.retry_max_s:.0f} s in all); " if spent else "")
                    + f"its log: {result.log}. Answering retry runs the work turn and its checks again")
        self.router.escalate(job, fp, question, job.original_prompt, job.data)

    def _decided(self, gate: PendingGate) -> None:
        """Every check of the gate passed."""
        self.ledger.close_gate(gate)
        task = self.run.tasks.get(gate.task or "")
        self.ledger.event("gate.passed", f"{gate.stage} checks of {gate.task or 'the run'} passed", None,
                          task=gate.task, gate=gate.id, commit=gate.commit)
        if gate.stage == "submission" and task is not None:
            self.passed(task)
        elif gate.stage == "integration" and task is not None:
            self.ledger.transition(task, TaskEvent.APPROVE, f"approved by {gate.approved_by}; its integration "
                                   f"checks passed on {str(gate.commit)[:10]}", evidence=gate.evidence or ["approved"])
            self.approved(task)

    # ------------------------------------------------------------------ integration: merge and undo (in the loop)
    def _merge(self, gate: PendingGate, task: Task) -> bool:
        """Merge the gate's task into the run's branch (its checks then judge the merge); False when it did not."""
        branch = f"refs/heads/{git.integration_branch(self.run.id)}"
        before = rev(self.root, branch)
        try:
            conflicts = self.workspaces.integrate(task, gate.approved_commit)
        except StaleApproval as exc:
            self.ledger.close_gate(gate)
            self.ledger.event("approval.stale", f"{task.id}: the approval by {gate.approved_by} is stale", exc.message,
                              task=task.id, commit=gate.approved_commit, head=exc.head)
            self.router.fail(self._job(gate), FailureKind.IMPLEMENTATION_DEFECT, exc.message, tuple(task.writes))
            return False
        if conflicts:
            self.ledger.close_gate(gate)
            self.router.fail(self._job(gate), FailureKind.IMPLEMENTATION_DEFECT, merge_conflict_note(conflicts),
                             tuple(conflicts))
            return False
        merged = task.merged or rev(self.root, branch)
        assert merged is not None
        undo_to = before if before != merged else rev(self.root, f"{merged}^1")  # merged before a crash: its parent
        self.ledger.gate_merged(gate, merged, undo_to)
        return True

    def _take_back(self, gate: PendingGate, task_id: str) -> str | None:
        """Move the run's branch back from the gate's merge to where it was (compare-and-swap: only from the
        merge it judged); None when done, else where the branch is."""
        branch = f"refs/heads/{git.integration_branch(self.run.id)}"
        if gate.undo_to is None or gate.merged is None:
            return rev(self.root, branch) or "nowhere"
        try:
            update_refs(self.root, [f"update {branch} {gate.undo_to} {gate.merged}"],
                        message=f"agentbox: undo the merge of {task_id}")
        except GitError:
            return rev(self.root, branch) or "nowhere"
        return None

    def _undo(self, gate: PendingGate, task: Task, why: str) -> bool:
        """Take the gate's merge back off the run's branch and leave the worker what it needs for the rework;
        False when it cannot be undone, after asking the person."""
        moved = self._take_back(gate, task.id)
        if moved is not None:
            job = self._job(gate)
            question = (f"{why} after {task.id} was merged into {git.integration_branch(self.run.id)}, and the merge "
                        f"cannot be undone: the branch is at {moved[:10]}, not the merge {str(gate.merged)[:10]}. "
                        "Set the branch right by hand, then answer retry (the task is reworked), or cancel")
            self.router.escalate(job, fingerprint(FailureKind.IMPLEMENTATION_DEFECT, why), question,
                                 job.original_prompt, job.data)
            return False
        self.ledger.undo_merge(task)
        since = self._merged_since(task)
        self.ledger.event("merge.undone", f"{task.id}'s merge was undone: {git.integration_branch(self.run.id)} is back "
                          f"at {str(gate.undo_to)[:10]}", why, task=task.id, commit=gate.merged, head=gate.undo_to,
                          human_required=False)
        note = ("Tasks merged into the run's branch since your work's base: " + ", ".join(since) + "." if since
                else "No other task was merged since your work's base.")
        try:
            synced = git.sync_task(self.root, self.run.id, task.id)
            note += " The run's branch was brought into yours" + (
                f", with conflict markers in {', '.join(synced.conflicts[:20])} to resolve." if synced.conflicts else ".")
            turn = self.workspaces.heads(task.id)
            self.ledger.record_git(task, branch=turn.branch, base=turn.base, head=turn.head, changed=turn.changed)
        except AgentboxError as exc:
            self.ledger.event("workspace", f"{task.id}'s branch was not brought up to date", exc.message, task=task.id)
        self.ledger.leave_note(task, note, by="agentbox")
        return True

    def _merged_since(self, task: Task) -> list[str]:
        """The approved tasks whose merge the task's work did not start from."""
        found = []
        for other in self.run.tasks.values():
            if other.id == task.id or other.merged is None or task.base is None:
                continue
            if not is_ancestor(self.root, other.merged, task.base):
                found.append(other.id)
        return found

    # ------------------------------------------------------------------ the run's end
    async def run_end(self) -> tuple[bool, str] | None:
        """Run the run_end checks on the done run's final branch (each once per commit); (green, what to tell the
        person), or None when there is nothing to check."""
        run = self.run
        names = [n for n in run.contract.gates.run_end if n in run.contract.checks]
        if not names or not self.workspaces.active or run.git is None or run.git.delivered:
            return None
        head = rev(self.root, f"refs/heads/{git.integration_branch(run.id)}")
        lines = []
        for name in names:
            result = next((c for c in run.checks if c.name == name and c.commit == head), None)
            if result is None:
                gate = PendingGate(id=self.ledger.next_id("gate"), stage="run_end", commit=head, checks=[name])
                flown = await asyncio.to_thread(self._fly, gate)
                if flown.outcome is None:
                    return False, f"the run's final checks did not run: {flown.stale}"
                outcome, check = flown.outcome, run.contract.checks[name]
                result = CheckResult(name=name, stage="run_end", commit=head, passed=outcome.status == "passed",
                                     status=outcome.status, flaky=flown.flaky, exit_status=outcome.exit_status,
                                     duration_s=outcome.duration_s, log=str(outcome.log_path), command=check.run,
                                     cannot_run=outcome.cannot_run, tail=outcome.tail, at=self.ledger.clock())
                self.ledger.record_check(gate, result)
            word = "passed" if result.passed else ("could not run" if result.status == "error" else "FAILED")
            lines.append(f"- {name}: {word} (exit status {result.exit_status}; log: {result.log})")
            if not result.passed:
                self.ledger.event("gate.blocked", f"run_end check {name} is red on {str(head)[:10]}",
                                  "the delivery question says so", check=name, commit=head, human_required=True)
                return False, (f"The run's final checks FAILED on {str(head)[:10]}: merging brings work that fails "
                               "them.\n" + "\n".join(lines))
        return True, f"The run's final checks passed on {str(head)[:10]}:\n" + "\n".join(lines)

    def _drop(self, gate: PendingGate, why: str) -> None:
        task = self.run.tasks.get(gate.task or "")
        merged_unapproved = (gate.stage == "integration" and gate.merged is not None and task is not None
                             and task.state != TaskState.APPROVED)
        if merged_unapproved and task is not None and self._take_back(gate, task.id) is None:
            # a task decided otherwise (cancelled, sent back) keeps nothing on the run's branch
            self.ledger.undo_merge(task)
            self.ledger.event("merge.undone", f"{task.id}'s merge was undone", why, task=task.id,
                              commit=gate.merged, head=gate.undo_to)
        self.ledger.close_gate(gate)
        self.ledger.event("gate.dropped", f"{gate.stage} checks of {gate.task or 'the run'} were dropped", why,
                          task=gate.task, gate=gate.id)


class _Stale(Exception):
    """The work moved on from the commit a gate judges."""
