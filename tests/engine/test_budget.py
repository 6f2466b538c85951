"""Budgets: usage accounting, the 120% task pause and the run budget, then the same with real agents."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from agentbox.core import runs
from agentbox.core.agents.invoke import InvokeResult
from agentbox.core.config.models import Budget, Limits
from agentbox.core.engine import budgets
from agentbox.core.engine.engine import BUDGET_PAUSE_RATIO, Engine
from agentbox.core.engine.models import Job, Task
from agentbox.core.engine.run_store import RunStore
from agentbox.core.paths import ProjectPaths
from agentbox.core.runtimes.base import Usage
from agentbox.tui.model import budget_line, count
from tests.conftest import run_cli
from tests.engine.support import (
    answering,
    create,
    drive,
    events,
    of_type,
    open_checkpoint,
    send,
    setup_crew,
    until,
    work_rule,
)
from tests.engine.support import task as planned


def engine_for(project: Path, *, per_task: int | None = 100, total: int | None = 1000) -> Engine:
    """An engine over a fresh run of the example crew with these budgets (never executed)."""
    paths = ProjectPaths(project)
    run = runs.create_run(paths, "count tokens")
    run.contract.limits = Limits(budget=Budget(tokens_per_task=per_task, tokens_total=total))
    return Engine(paths, run)


def account(engine: Engine, job: Job, finished: InvokeResult) -> None:
    """Record what a finished turn of `job` cost, as the engine does when a turn ends."""
    engine.ledger.account(engine.run.tasks.get(job.task or ""), finished.usage)


def result(usage: Usage, ok: bool = True) -> InvokeResult:
    return InvokeResult(status="ok" if ok else "error", session_id="s", usage=usage,
                        error_kind=None if ok else "timeout")


def add_task(engine: Engine, task_id: str = "t1", **fields: object) -> Task:
    task = Task(id=task_id, assignee="builder", brief="b", **fields)  # type: ignore[arg-type]
    engine.run.tasks[task.id] = task
    return task


def test_usage_is_added_to_the_task_and_the_run(project: Path) -> None:
    engine = engine_for(project)
    task = add_task(engine)
    job = Job(id="j", kind="work", role="builder", task="t1")
    account(engine, job, result(Usage(input_tokens=100, cached_input_tokens=30, output_tokens=20, cost_usd=0.5)))
    account(engine, job, result(Usage(input_tokens=10, output_tokens=5, cost_usd=0.25)))
    totals = engine.run.totals
    assert (totals.tokens, totals.input_tokens, totals.cached_input_tokens, totals.output_tokens) == (165, 110, 30, 25)
    assert totals.cost_usd == pytest.approx(0.75)
    assert (totals.turns, totals.unknown_usage_turns) == (2, 0)
    assert (task.tokens, task.unknown_usage_turns, task.cost_usd) == (165, 0, pytest.approx(0.75))


def test_unknown_usage_is_counted_as_unknown_not_zero(project: Path) -> None:
    engine = engine_for(project)
    task = add_task(engine)
    job = Job(id="j", kind="work", role="builder", task="t1")
    account(engine, job, result(Usage()))
    account(engine, job, result(Usage(), ok=False))
    totals = engine.run.totals
    assert (totals.tokens, totals.turns, totals.unknown_usage_turns) == (0, 2, 2)
    assert totals.cost_usd is None
    assert (task.tokens, task.unknown_usage_turns, task.cost_usd) == (0, 2, None)
    account(engine, job, result(Usage(output_tokens=7)))
    assert (totals.tokens, totals.unknown_usage_turns, task.tokens, task.unknown_usage_turns) == (7, 2, 7, 2)


def test_turns_without_a_task_count_for_the_run_only(project: Path) -> None:
    engine = engine_for(project)
    account(engine, Job(id="p", kind="plan", role="lead"), result(Usage(input_tokens=50, output_tokens=50)))
    assert engine.run.totals.tokens == 100 and engine.run.tasks == {}


@pytest.mark.parametrize(("tokens", "extra", "over"), [
    (0, 0, False), (100, 0, False), (120, 0, False), (121, 0, True), (500, 0, True),
    (121, 1, False), (240, 100, False), (241, 100, True),
])
def test_task_pauses_over_120_percent_of_its_budget(project: Path, tokens: int, extra: int, over: bool) -> None:
    engine = engine_for(project, per_task=100)
    task = add_task(engine, tokens=tokens, budget_extra=extra)
    assert BUDGET_PAUSE_RATIO == 1.2
    assert engine.run.task_budget(task) == 100 + extra
    assert budgets.over_budget(engine.run, task) is over


def test_no_task_budget_never_pauses(project: Path) -> None:
    engine = engine_for(project, per_task=None)
    task = add_task(engine, tokens=10**9)
    assert engine.run.task_budget(task) is None and not budgets.over_budget(engine.run, task)


@pytest.mark.parametrize(("spent", "extra", "left"), [
    (0, 0, True), (999, 0, True), (1000, 0, False), (5000, 0, False), (1000, 1, True), (1500, 600, True),
])
def test_run_budget_left(project: Path, spent: int, extra: int, left: bool) -> None:
    engine = engine_for(project, total=1000)
    engine.run.totals.tokens = spent
    engine.run.budget_extra = extra
    assert engine.run.run_budget_left() is left


def test_unlimited_run_budget(project: Path) -> None:
    engine = engine_for(project, total=None)
    engine.run.totals.tokens = 10**12
    assert engine.run.run_budget_left()


def test_dispatch_pauses_an_over_budget_task_instead_of_starting_its_work(project: Path) -> None:
    engine = engine_for(project, per_task=100)
    task = add_task(engine, state="rework", tokens=130)
    engine.ledger.enqueue("work", "builder", "do it again", task="t1")
    engine._dispatch()
    assert task.state == "paused_for_budget"
    assert engine.pending() == [] and engine.in_flight() == []
    (cp,) = engine.run.open_checkpoints()
    assert (cp.kind, cp.task) == ("budget", "t1")
    assert "130 tokens" in cp.question


def test_dispatch_stops_when_the_run_budget_is_spent(project: Path) -> None:
    engine = engine_for(project, total=1000)
    add_task(engine)
    job = engine.ledger.enqueue("work", "builder", "go", task="t1")
    engine.run.totals.tokens = 1000
    engine._dispatch()
    assert not job.started and engine.run.tasks["t1"].state == "queued"


def test_run_budget_spent_while_turns_run_keeps_running_then_breaks_the_circuit(project: Path) -> None:
    engine = engine_for(project, total=1000)
    add_task(engine, state="executing")
    job = engine.ledger.enqueue("work", "builder", "go", task="t1")
    job.started = 1.0
    engine.run.status = "running"
    engine.run.totals.tokens = 1200
    engine._update_status()
    assert engine.run.status == "running" and engine.run.open_checkpoints() == []
    del engine.run.jobs[job.id]
    engine._update_status()
    assert engine.run.status == "circuit_broken"
    (cp,) = engine.run.open_checkpoints()
    assert cp.kind == "run_budget"
    engine._update_status()
    assert len(engine.run.open_checkpoints()) == 1


def test_answering_raise_lifts_the_circuit_breaker(project: Path) -> None:
    engine = engine_for(project, total=1000)
    engine.run.status = "running"
    engine.run.totals.tokens = 1000
    engine._update_status()
    cp = engine.run.open_checkpoints()[0]
    ok, message = engine.apply_command({"action": "answer", "checkpoint": cp.id, "text": "raise 500"})
    assert ok, message
    assert engine.run.run_budget_left()
    engine.run.totals.tokens = 1500
    assert not engine.run.run_budget_left()


@pytest.mark.parametrize(("answer", "budget_after"), [("continue", 230), ("continue 1000", 1100)])
def test_answering_continue_gives_the_task_room_for_another_budget(project: Path, answer: str,
                                                                    budget_after: int) -> None:
    """'continue' lets the task spend one more budget from what it used, so it is not paused again at once."""
    engine = engine_for(project, per_task=100)
    task = add_task(engine, state="rework", tokens=130)
    engine.ledger.enqueue("work", "builder", "again", task="t1")
    engine._dispatch()
    cp = engine.run.open_checkpoints()[0]
    ok, message = engine.apply_command({"action": "answer", "checkpoint": cp.id, "text": answer})
    assert ok, message
    assert task.state == "queued"
    assert engine.run.task_budget(task) == budget_after
    assert not budgets.over_budget(engine.run, task)


def test_review_of_submitted_work_still_runs_when_the_task_is_over_budget(project: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The tokens are spent already: pausing before the review would only make the worker redo it."""
    engine = engine_for(project, per_task=100)
    task = add_task(engine, state="submitted", tokens=500)
    review = engine.ledger.enqueue("review", "reviewer", "review it", task="t1")
    started: list[Job] = []
    monkeypatch.setattr(engine, "_start", started.append)
    engine._dispatch()
    assert started == [review]
    assert task.state == "submitted" and engine.run.open_checkpoints() == []


# ----------------------------------------------------------------------------- with real agents


def test_a_single_turn_over_budget_pauses_the_task_before_review(project: Path) -> None:
    """One work turn of 300 tokens against a budget of 200: no review until a person raises the budget.

    After 'continue' the same submission goes to review (the worker does not redo it) and is approved.
    """
    big_turn = {"input_tokens": 250, "output_tokens": 50}
    paths = setup_crew(project, tasks=[planned("t1")], worker=[work_rule(usage=big_turn)],
                       limits={"budget": {"tokens_per_task": 200, "tokens_total": 100000}})
    run_id = create(paths)
    seen: dict[str, object] = {}

    async def person(engine: Engine) -> None:
        await until(engine, lambda e: open_checkpoint(e, "budget") is not None)
        t1 = engine.run.tasks["t1"]
        seen.update(state=t1.state, tokens=t1.tokens, submitted=t1.submission is not None,
                    verdicts=len(t1.verdicts), reviews=[j for j in engine.run.jobs.values() if j.kind == "review"])
        cp = open_checkpoint(engine, "budget")
        ok, message = await send(paths, run_id, action="answer", checkpoint=cp.id, text="continue")
        assert ok, message

    run = asyncio.run(drive(paths, run_id, person))
    assert seen == {"state": "paused_for_budget", "tokens": 300, "submitted": True, "verdicts": 0, "reviews": []}
    assert run.status == "done", run.status_reason
    t1 = run.tasks["t1"]
    assert t1.state == "approved" and [v.by for v in t1.verdicts] == ["reviewer"]
    assert t1.attempts == 1 and t1.budget_extra > 0 and not t1.review_pending
    log = events(paths, run_id)
    order = [e["type"] for e in log if e.get("task") == "t1" and e["type"] in
             ("task.submit", "task.pause_budget", "checkpoint", "task.resume", "task.approve")]
    assert order == ["task.submit", "task.pause_budget", "checkpoint", "task.resume", "task.submit", "task.approve"]
    reviews = [e for e in of_type(log, "dispatch", "t1") if e["what"].startswith("review")]
    assert len(reviews) == 1 and reviews[0]["seq"] > next(e["seq"] for e in log if e["type"] == "task.resume")


def test_a_raised_run_budget_shows_in_status_and_the_tui(project: Path) -> None:
    """The run's budget is spent after the plan and one task; the person raises it by 1000 and the run ends.

    `agentbox status --json` (the real CLI) and the dashboard's budget line show 1,240, not crew.yaml's 240.
    """
    paths = setup_crew(project, tasks=[planned("t1"), planned("t2", deps=["t1"])],
                       limits={"budget": {"tokens_per_task": 1000, "tokens_total": 240}})
    run_id = create(paths)
    run = asyncio.run(drive(paths, run_id, answering(("run_budget", "raise 1000"))))
    assert run.status == "done", run.status_reason
    assert run.totals.tokens > 240 and run.token_budget == 1240
    cli = run_cli("status", run_id, "--json", cwd=project)
    assert cli.code == 0, cli.err
    state = json.loads(cli.out)
    assert state["token_budget"] == 1240
    assert state["contract"]["limits"]["budget"]["tokens_total"] == 240
    line = budget_line(RunStore(paths).load(run_id))
    assert f"/ {count(1240)} " in line and f"/ {count(240)} " not in line
    text = run_cli("status", run_id, cwd=project)
    assert text.code == 0 and " / 1,240" in text.out and " / 240" not in text.out, text.out
