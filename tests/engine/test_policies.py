"""Engine policies at the decision level: no process, no disk."""

from __future__ import annotations

import pytest

from agentbox.core.config.models import Budget, Limits
from agentbox.core.engine import budgets, commands, recovery, routing
from agentbox.core.engine.failures import FailureKind
from agentbox.core.engine.models import Checkpoint, Contract, Failure, Job, Run, Task
from agentbox.core.errors import UsageError
from agentbox.core.tasks import TaskState


@pytest.mark.parametrize(("raw", "kind"), [
    ({"action": "answer", "checkpoint": "cp-1", "text": "yes", "id": "cmd-1"}, commands.Answer),
    ({"action": "approve", "task": "t1", "note": "checked"}, commands.Approve),
    ({"action": "rework", "task": "t1", "note": "fix it"}, commands.Rework),
    ({"action": "cancel_task", "task": "t1"}, commands.CancelTask),
    ({"action": "cancel_run"}, commands.CancelRun),
    ({"action": "pause", "at": 12.5}, commands.Pause),
    ({"action": "resume", "extra": "ignored"}, commands.Resume),
])
def test_a_command_is_read_as_the_model_of_its_action(raw: dict[str, object], kind: type) -> None:
    command = commands.parse(raw)
    assert type(command) is kind and command.action == raw["action"]
    assert kind in commands.HANDLERS


@pytest.mark.parametrize(("raw", "message"), [
    ({"task": "t1"}, "malformed command: command without a string `action`"),
    ({"action": "explode"}, "unknown command 'explode'"),
    ({"action": "answer", "text": 3}, "malformed command: command field 'text' is not a string"),
    ({"action": "pause", "at": "noon"}, "malformed command: at:"),
])
def test_a_malformed_command_is_a_clean_refusal(raw: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError) as refused:
        commands.parse(raw)
    assert refused.value.message.startswith(message)


# ----------------------------------------------------------------------------- a run in memory
def a_run(*tasks: Task, jobs: tuple[Job, ...] = (), per_task: int | None = 100, total: int | None = None,
          max_auto_retries: int = 2, retries: dict[str, int] | None = None,
          checkpoints: tuple[Checkpoint, ...] = ()) -> Run:
    limits = Limits(max_auto_retries=max_auto_retries, budget=Budget(tokens_per_task=per_task, tokens_total=total))
    return Run(id="run-1", contract=Contract(goal="g", mode="hierarchical", limits=limits),
               tasks={t.id: t for t in tasks}, jobs={j.id: j for j in jobs}, retries=retries or {},
               checkpoints={c.id: c for c in checkpoints})


def a_task(state: TaskState = TaskState.QUEUED, **fields: object) -> Task:
    return Task(id="t1", assignee="builder", brief="b", state=state, **fields)  # type: ignore[arg-type]


def a_job(kind: str = "work", **fields: object) -> Job:
    return Job(id="job-1", kind=kind, role="builder", task="t1", **fields)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- budgets
@pytest.mark.parametrize(("tokens", "kind", "paused"), [
    (120, "work", False), (121, "work", True), (121, "node", True), (500, "review", False),
])
def test_work_over_its_budget_pauses_for_a_human_and_reviews_still_run(tokens: int, kind: str, paused: bool) -> None:
    run = a_run(a_task(tokens=tokens))
    decision = budgets.check_work(run, a_job(kind))
    assert (decision is not None) is paused
    if decision is not None:
        assert decision == budgets.PauseForBudget("t1", f"{tokens} tokens > 120% of its budget", decision.question)
        assert "'continue'" in decision.question and not decision.before_review


def test_a_paused_or_unlimited_task_is_not_paused_again() -> None:
    assert budgets.check_work(a_run(a_task(TaskState.PAUSED_FOR_BUDGET, tokens=999)), a_job()) is None
    assert budgets.check_work(a_run(a_task(tokens=999), per_task=None), a_job()) is None
    assert budgets.check_work(a_run(a_task(tokens=121, budget_extra=100)), a_job()) is None


def test_submitted_work_over_budget_waits_before_its_review() -> None:
    decision = budgets.check_review(a_run(a_task(TaskState.SUBMITTED, tokens=300)), a_task(TaskState.SUBMITTED, tokens=300))
    assert decision is not None and decision.before_review and "send the work to review" in decision.question
    assert budgets.check_review(a_run(a_task(tokens=50)), a_task(tokens=50)) is None


def test_a_spent_run_budget_is_asked_about_once() -> None:
    assert budgets.check_run(a_run()) == budgets.AskForRunBudget()
    waiting = Checkpoint(id="cp-1", kind="run_budget", question="more?")
    assert budgets.check_run(a_run(checkpoints=(waiting,))) is None


# ----------------------------------------------------------------------------- failure routing
DELAYS = [1.0, 4.0, 16.0]


@pytest.mark.parametrize(("attempt", "decision"), [
    (1, routing.RetryAfter(delay_s=1.0, attempt=2)),
    (3, routing.RetryAfter(delay_s=16.0, attempt=4)),
])
def test_an_environment_failure_is_retried_after_its_back_off(attempt: int, decision: routing.RetryAfter) -> None:
    run = a_run(a_task(TaskState.EXECUTING))
    assert routing.route_failure(run, a_job(attempt=attempt), FailureKind.ENVIRONMENT_FAILURE, "crash", "fp",
                                 DELAYS) == decision


def test_an_environment_failure_escalates_when_the_back_off_is_used_up() -> None:
    run = a_run(a_task(TaskState.EXECUTING))
    decision = routing.route_failure(run, a_job(attempt=4), FailureKind.ENVIRONMENT_FAILURE, "crash", "fp", DELAYS)
    assert isinstance(decision, routing.Escalate) and "kept failing (crash)" in decision.question
    short = routing.route_failure(run, a_job(attempt=2), FailureKind.ENVIRONMENT_FAILURE, "crash", "fp", [1.0])
    assert isinstance(short, routing.Escalate), "a back-off cut short by retry_max_s has fewer retries"


@pytest.mark.parametrize(("seen", "decision"), [
    (0, routing.AutoRetry(count=1, max_retries=2)),
    (1, routing.AutoRetry(count=2, max_retries=2)),
    (2, routing.Escalate("the same failure happened 3 times: bad")),
])
def test_a_counted_failure_is_retried_per_fingerprint_then_escalated(seen: int, decision: object) -> None:
    run = a_run(a_task(TaskState.EXECUTING), retries={"fp": seen} if seen else {})
    assert routing.route_failure(run, a_job(), FailureKind.IMPLEMENTATION_DEFECT, "bad", "fp", DELAYS) == decision


# ----------------------------------------------------------------------------- recovery
def test_an_interrupted_turn_is_resumed_in_its_session_and_its_task_requeued() -> None:
    running = a_job(started=5.0, session_id="s1", prompt="do t1", data={"original_prompt": "do t1"})
    review = Job(id="job-2", kind="review", role="reviewer", task="t1", started=5.0, prompt="review t1")
    pending = Job(id="job-3", kind="work", role="builder", task="t9")
    run = a_run(a_task(TaskState.EXECUTING), jobs=(running, review, pending))
    first, second = recovery.interrupted_turns(run)
    assert (first.job_id, first.requeue_task) == ("job-1", True) and "do t1" in first.prompt
    assert (second.job_id, second.requeue_task) == ("job-2", False)
    assert recovery.interrupted_turns(a_run(a_task())) == []


# ----------------------------------------------------------------------------- human answers
def escalation(task: str | None = "t1", fingerprint: str = "fp") -> Checkpoint:
    return Checkpoint(id="cp-1", kind="retry_escalation", question="?", task=task, data={"fingerprint": fingerprint})


@pytest.mark.parametrize(("state", "text", "decision"), [
    (TaskState.BLOCKED, "retry", commands.RetryEscalated("fp", None, "unblock")),
    (TaskState.BLOCKED, "retry but use the cache", commands.RetryEscalated("fp", "retry but use the cache", "unblock")),
    (TaskState.REVIEWING, "retry", commands.RetryEscalated("fp", None, "rerun")),
    (TaskState.BLOCKED, "cancel", commands.CancelTaskAt()),
])
def test_an_answer_to_a_retry_escalation(state: TaskState, text: str, decision: object) -> None:
    assert commands.decide_answer(a_run(a_task(state)), escalation(), text) == decision


def test_retry_of_a_rejected_review_reworks_the_task() -> None:
    rejected = Failure(kind="implementation_defect", fingerprint="fp", message="review rejected", at=1.0)
    run = a_run(a_task(TaskState.REVIEWING, failures=[rejected]))
    assert commands.decide_answer(run, escalation(), "retry") == commands.RetryEscalated("fp", None, "rework")


def test_answers_to_budgets_questions_and_mode_checkpoints() -> None:
    paused = a_run(a_task(TaskState.PAUSED_FOR_BUDGET, tokens=130), total=1000)
    budget = Checkpoint(id="cp-2", kind="budget", question="?", task="t1")
    assert commands.decide_answer(paused, budget, "continue") == commands.RaiseTaskBudget(130)
    assert commands.decide_answer(paused, budget, "add 5,000") == commands.RaiseTaskBudget(5000)
    assert commands.decide_answer(paused, budget, "cancel") == commands.CancelTaskAt()
    run_budget = Checkpoint(id="cp-3", kind="run_budget", question="?")
    assert commands.decide_answer(paused, run_budget, "raise 500") == commands.RaiseRunBudget(500)
    assert commands.decide_answer(paused, run_budget, "raise") == commands.RaiseRunBudget(1000)
    assert commands.decide_answer(paused, run_budget, "stop") == commands.CancelRunAt()
    question = Checkpoint(id="cp-4", kind="question", question="Which colour?", task="t1")
    blocked = a_run(a_task(TaskState.BLOCKED))
    assert commands.decide_answer(blocked, question, "blue") == commands.PassAnswer(
        "You asked: Which colour?\nThe human answered: blue", unblock=True)
    plan = Checkpoint(id="cp-5", kind="plan_approval", question="?")
    assert commands.decide_answer(blocked, plan, "approve") == commands.ModeAnswer()
