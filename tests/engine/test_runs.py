"""Runs end to end in-process (`runs.execute` / the Engine), with scripted agents under bwrap.

Each test writes its crew's scenarios, drives the engine in the test's event loop, plays
the human through `runs.send_command` (the real inbox) and reads the decision log.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from agentbox.core import runs
from agentbox.core.engine.engine import Engine
from agentbox.core.engine.run_store import RunStore
from agentbox.core.paths import ProjectPaths
from tests.engine.support import (
    agent_processes,
    answering,
    assert_log_consistent,
    create,
    drive,
    of_type,
    open_checkpoint,
    plan_rule,
    prompts_of,
    review_rule,
    send,
    session_processes,
    setup_crew,
    task,
    until,
    wait_gone,
    work_rule,
)

pytestmark = pytest.mark.bwrap


@pytest.fixture
def short_backoff() -> list[float]:
    """Environment retries wait 0.2 s, 0.4 s, 0.8 s instead of 1 s, 4 s, 16 s (pass them to `drive`)."""
    return [0.2, 0.4, 0.8]


def approvals(log: list[dict], task_id: str) -> int:
    return len(of_type(log, "task.approve", task_id))


async def test_hierarchical_run_in_process(project: Path) -> None:
    tasks = [task("t1", "builder"), task("t2", "tester", writes=["tests/**"]), task("t3", "builder", deps=["t1"])]
    paths = setup_crew(project, tasks=tasks)
    run_id = create(paths)
    run = await runs.execute(paths, run_id)
    assert run.status == "done", run.status_reason
    log = assert_log_consistent(paths, run_id)
    assert {t.id: t.state for t in run.tasks.values()} == {"t1": "approved", "t2": "approved", "t3": "approved"}
    assert all(approvals(log, t) == 1 for t in run.tasks)
    first_t1_approval = of_type(log, "task.approve", "t1")[0]["seq"]
    t3_dispatch = of_type(log, "task.dispatch", "t3")[0]["seq"]
    assert t3_dispatch > first_t1_approval, "t3 depends on t1: it waits for t1's approval"
    t3_prompt = prompts_of(paths, run.tasks["t3"].session_id)[0]
    assert "Upstream work" in t3_prompt and "t1 (builder): did t1" in t3_prompt
    assert "artifacts/t1/result.txt" in t3_prompt
    manifest = RunStore(paths).manifest(run_id)
    assert {e["task"] for e in manifest if e["task"]} == {"t1", "t2", "t3"}
    assert all(e["role"] in ("builder", "tester", "lead") for e in manifest)
    synthesis = Path(run.result.artifact)
    assert synthesis.read_text().startswith("# Synthesis")
    assert run.totals.turns == 1 + 3 + 3 + 1 and run.totals.tokens == 8 * 120
    assert run.engine is None and not RunStore(paths).engine_running(run_id)


async def test_sequential_run_in_process(project: Path) -> None:
    paths = setup_crew(project, mode="sequential", sequential={"steps": ["builder", "tester", "builder"]})
    run_id = create(paths, mode="sequential")
    run = await runs.execute(paths, run_id)
    assert run.status == "done", run.status_reason
    assert list(run.tasks) == ["step1-builder", "step2-tester", "step3-builder"]
    assert all(t.state == "approved" and t.verdicts[-1].by == "reviewer" for t in run.tasks.values())
    prompt = prompts_of(paths, run.tasks["step2-tester"].session_id)[0]
    assert "step1-builder (builder): did step1-builder" in prompt
    assert run.result.summary == "did step3-builder"
    assert_log_consistent(paths, run_id)


async def test_rework_loop_in_the_same_worker_session(project: Path) -> None:
    paths = setup_crew(project, reviewer=[review_rule("reject", task_id="t1", times=1)])
    run_id = create(paths)
    run = await drive(paths, run_id)
    assert run.status == "done"
    log = assert_log_consistent(paths, run_id)
    t1 = run.tasks["t1"]
    assert [v.verdict for v in t1.verdicts] == ["reject", "approve"]
    assert t1.attempts == 2 and approvals(log, "t1") == 1
    assert [e["session"] for e in of_type(log, "dispatch", "t1") if "work" in e["what"]] == [t1.session_id] * 2
    prompts = prompts_of(paths, t1.session_id)
    assert prompts[1].startswith("[agentbox:rework task=t1")
    assert "not good enough" in prompts[1]
    (failure,) = of_type(log, "failure", "t1")
    assert failure["what"].startswith("implementation_defect")
    # the failure ladder's L0: the first counted failure only registers its fingerprint
    assert t1.ladder.level == "L0" and t1.ladder.mode == "normal" and t1.ladder.counted_failures == 1
    assert t1.ladder.last_fingerprint == failure["fingerprint"] and not run.retries


async def test_retry_then_escalation_after_max_auto_retries(project: Path) -> None:
    """`ladder: false`: a reviewer that always rejects with the same issue: N reworks, then the human decides."""
    paths = setup_crew(project, reviewer=[review_rule("reject", task_id="t1")], limits={"max_auto_retries": 2},
                       ladder=False)
    run_id = create(paths)

    def rejections(engine: Engine) -> list[object]:
        return [v for v in engine.run.tasks["t1"].verdicts if v.verdict == "reject"]

    async def human(engine: Engine) -> None:
        await until(engine, lambda e: open_checkpoint(e, "retry_escalation") is not None)
        t1 = engine.run.tasks["t1"]
        assert t1.state == "reviewing" and len(rejections(engine)) == 3, "two reworks, then the human"
        cp = open_checkpoint(engine, "retry_escalation")
        ok, message = await send(engine.project, engine.run.id, action="answer", checkpoint=cp.id,
                                 text="retry use the other greeting")
        assert ok, message
        await until(engine, lambda e: len([c for c in e.run.checkpoints.values() if c.kind == "retry_escalation"]) == 2
                    and open_checkpoint(e, "retry_escalation") is not None)
        cp = open_checkpoint(engine, "retry_escalation")
        ok, message = await send(engine.project, engine.run.id, action="answer", checkpoint=cp.id, text="cancel")
        assert ok, message

    run = await drive(paths, run_id, human)
    assert run.status == "done", run.status_reason
    log = assert_log_consistent(paths, run_id)
    t1 = run.tasks["t1"]
    assert t1.state == "cancelled" and run.tasks["t2"].state == "approved"
    fingerprints = {e["fingerprint"] for e in of_type(log, "failure", "t1")}
    assert len(fingerprints) == 1, "the same root cause every time"
    assert len(of_type(log, "escalation", "t1")) == 2
    assert len(of_type(log, "task.reject", "t1")) == 2 + 1 + 2
    work_prompts = prompts_of(paths, t1.session_id)
    assert len(work_prompts) == 1 + 2 + 1 + 2
    assert "Note from the human: retry use the other greeting" in work_prompts[3]
    assert of_type(log, "ladder", "t1") == [] and t1.ladder.counted_failures == 0  # the ladder is off


@pytest.mark.local_runner("a worker's process crashes")
async def test_environment_failure_is_retried_with_backoff(project: Path, short_backoff: list[float]) -> None:
    paths = setup_crew(project, worker=[work_rule(task_id="t1", times=1, fail="crash", rule_id="crash-once")])
    run_id = create(paths)
    run = await drive(paths, run_id, backoff=short_backoff)
    assert run.status == "done"
    log = assert_log_consistent(paths, run_id)
    (failure,) = of_type(log, "failure", "t1")
    assert failure["what"] == "environment_failure in work turn of builder"
    (retry,) = of_type(log, "retry", "t1")
    assert "retry 1/3" in retry["what"]
    dispatches = [e for e in of_type(log, "dispatch", "t1") if "work" in e["what"]]
    assert len(dispatches) == 2 and dispatches[1]["attempt"] == 2
    assert dispatches[1]["at"] - failure["at"] >= short_backoff[0] - 0.01
    assert run.retries == {}, "environment failures are not counted against the task"
    t1 = run.tasks["t1"]
    assert [f.kind for f in t1.failures] == ["environment_failure"]
    assert len({e["session"] for e in dispatches}) == 1


@pytest.mark.local_runner("a worker's process crashes")
async def test_environment_failure_escalates_when_retries_run_out(project: Path, short_backoff: list[float]) -> None:
    paths = setup_crew(project, worker=[work_rule(task_id="t1", fail="crash", rule_id="always-crash")])
    run_id = create(paths)
    run = await drive(paths, run_id, answering(("retry_escalation", "cancel")), backoff=short_backoff)
    assert run.status == "done"
    log = assert_log_consistent(paths, run_id)
    assert len(of_type(log, "failure", "t1")) == 4
    assert len(of_type(log, "retry", "t1")) == 3
    (escalation,) = of_type(log, "escalation", "t1")
    assert escalation["human_required"]
    assert run.tasks["t1"].state == "cancelled"


@pytest.mark.local_runner('a hung agent process is killed at the timeout')
async def test_hung_agent_is_killed_at_the_task_timeout(project: Path, short_backoff: list[float]) -> None:
    paths = setup_crew(project, worker=[work_rule(task_id="t1", times=1, fail="hang", rule_id="hang-once")],
                       limits={"task_timeout_s": 1.5})
    run_id = create(paths)
    started = time.monotonic()
    run = await drive(paths, run_id, backoff=short_backoff)
    assert run.status == "done"
    assert time.monotonic() - started < 15
    log = assert_log_consistent(paths, run_id)
    (turn,) = [e for e in of_type(log, "turn", "t1") if "error" in e["what"]]
    assert "(timeout)" in turn["what"]
    (failure,) = of_type(log, "failure", "t1")
    assert failure["what"].startswith("environment_failure")
    assert run.tasks["t1"].state == "approved"
    sessions = [s for t in run.tasks.values() for s in (t.session_id, t.review_session_id)]
    assert wait_gone(lambda: session_processes(sessions)) == [], "the hung agent and its child are gone"


async def test_invalid_reply_gets_one_corrective_reprompt_then_is_a_contract_defect(project: Path) -> None:
    garbage = [
        {"id": "garbage-t1", "when": {"prompt_contains": "[agentbox:work task=t1"},
         "do": {"delay_s": 0.05, "reply": "Done! Trust me, no JSON needed."}},
        {"id": "garbage-fix", "when": {"prompt_contains": "[agentbox:correction model=Submission"},
         "do": {"reply": "Still no JSON, sorry."}},
    ]
    paths = setup_crew(project, worker=garbage, limits={"max_auto_retries": 1})
    run_id = create(paths)
    run = await drive(paths, run_id, answering(("retry_escalation", "cancel")))
    assert run.status == "done"
    log = assert_log_consistent(paths, run_id)
    t1 = run.tasks["t1"]
    invalid = of_type(log, "reply.invalid", "t1")
    assert len(invalid) == 2 and "no JSON object found" in invalid[0]["why"]
    failures = of_type(log, "failure", "t1")
    assert [f["what"] for f in failures] == ["contract_defect in work turn of builder"] * 2
    assert failures[0]["fingerprint"] == failures[1]["fingerprint"]
    assert len(of_type(log, "escalation", "t1")) == 1
    prompts = prompts_of(paths, t1.session_id)
    assert [p.split("]")[0] + "]" for p in prompts] == [
        "[agentbox:work task=t1 attempt=1]", "[agentbox:correction model=Submission]",
        "[agentbox:work task=t1 attempt=2]", "[agentbox:correction model=Submission]"]
    assert "no JSON object found" in prompts[1]
    assert "Note from agentbox: Your previous reply could not be used" in prompts[2]
    assert "Note from the human" not in prompts[2]  # agentbox's words are never passed off as a person's
    assert {e["session"] for e in of_type(log, "dispatch", "t1")} == {t1.session_id}
    assert t1.state == "cancelled"


async def test_invalid_plan_goes_back_to_the_planner_with_the_reasons(project: Path) -> None:
    bad = [task("t1", "ghost", deps=["t2"]), task("t2", "builder", deps=["t1"])]
    paths = setup_crew(project, lead=[plan_rule(bad, times=1)])
    run_id = create(paths)
    run = await drive(paths, run_id)
    assert run.status == "done"
    log = assert_log_consistent(paths, run_id)
    (invalid,) = of_type(log, "reply.invalid")
    assert "unknown assignee 'ghost'" in invalid["why"] and "dependency cycle" in invalid["why"]
    lead_session = run.sessions["lead"]
    prompts = prompts_of(paths, lead_session)
    assert prompts[1].startswith("[agentbox:correction model=Plan]")
    assert "unknown assignee 'ghost'" in prompts[1] and "dependency cycle: t1 -> t2 -> t1" in prompts[1]
    assert len(of_type(log, "plan")) == 1 and set(run.tasks) == {"t1", "t2"}


async def test_a_plan_that_stays_invalid_escalates_and_cancel_fails_the_run(project: Path) -> None:
    bad = [task("t1", "ghost")]
    paths = setup_crew(project, lead=[plan_rule(bad), plan_rule(bad, marker="[agentbox:correction model=Plan")],
                       limits={"max_auto_retries": 0})
    run_id = create(paths)
    run = await drive(paths, run_id, answering(("retry_escalation", "cancel")))
    assert run.status == "failed" and "plan turn was cancelled" in str(run.status_reason)
    log = assert_log_consistent(paths, run_id)
    assert [f["what"] for f in of_type(log, "failure")] == ["contract_defect in plan turn of lead"]
    assert run.tasks == {}


async def test_plan_approval_checkpoint(project: Path) -> None:
    paths = setup_crew(project, hierarchical={"plan_approval": True})
    run_id = create(paths)
    run = await drive(paths, run_id, answering(("plan_approval", "split t1 in two"), ("plan_approval", "approve")))
    assert run.status == "done"
    log = assert_log_consistent(paths, run_id)
    answered = of_type(log, "checkpoint.answered")
    assert len(answered) == 2
    created = of_type(log, "task.created")
    assert created and min(e["seq"] for e in created) > answered[1]["seq"], "no task before the plan is approved"
    prompts = prompts_of(paths, run.sessions["lead"])
    assert "The human's feedback: split t1 in two" in prompts[1]
    assert len(of_type(log, "plan")) == 2


async def test_budget_pause_and_continue(project: Path) -> None:
    """tokens_per_task 100, 120 tokens a turn: the rework turn (240 > 120) waits for the human."""
    paths = setup_crew(project, reviewer=[review_rule("reject", task_id="t1", times=1)],
                       limits={"budget": {"tokens_per_task": 100}})
    run_id = create(paths)
    run = await drive(paths, run_id, answering(("budget", "continue")))
    assert run.status == "done", run.status_reason
    log = assert_log_consistent(paths, run_id)
    (pause,) = of_type(log, "task.pause_budget")
    assert pause["task"] == "t1"
    (resume,) = of_type(log, "task.resume")
    assert resume["seq"] > pause["seq"]
    after = [e for e in of_type(log, "dispatch", "t1") if e["seq"] > resume["seq"]]
    assert after and "work turn" in after[0]["what"]
    t1 = run.tasks["t1"]
    assert t1.state == "approved" and t1.tokens == 4 * 120
    assert prompts_of(paths, t1.session_id)[1].startswith("[agentbox:rework task=t1")
    assert run.tasks["t2"].state == "approved" and run.tasks["t2"].tokens == 240, "t2 was never paused"


async def test_run_budget_breaks_the_circuit_and_raise_resumes(project: Path) -> None:
    """tokens_total 130: the plan fits, both work turns finish, no review starts until more budget."""
    paths = setup_crew(project, limits={"budget": {"tokens_total": 130}})
    run_id = create(paths)
    seen: list[str] = []

    async def human(engine: Engine) -> None:
        await until(engine, lambda e: e.run.status == "circuit_broken")
        seen.append(engine.run.status)
        assert {t.state for t in engine.run.tasks.values()} == {"submitted"}
        cp = open_checkpoint(engine, "run_budget")
        ok, message = await send(engine.project, engine.run.id, action="answer", checkpoint=cp.id, text="raise 10000")
        assert ok, message

    run = await drive(paths, run_id, human)
    assert seen == ["circuit_broken"]
    assert run.status == "done"
    log = assert_log_consistent(paths, run_id)
    broken = next(e for e in of_type(log, "run.status") if e["what"] == "run is circuit_broken")
    answered = of_type(log, "checkpoint.answered")[0]
    assert [e for e in of_type(log, "dispatch") if broken["seq"] < e["seq"] < answered["seq"]] == []
    assert len([e for e in of_type(log, "turn") if e["seq"] < broken["seq"]]) == 3


async def test_run_budget_cancel_ends_the_run(project: Path) -> None:
    paths = setup_crew(project, limits={"budget": {"tokens_total": 50}})
    run_id = create(paths)
    run = await drive(paths, run_id, answering(("run_budget", "cancel")))
    assert run.status == "cancelled"
    assert run.tasks == {} or all(t.state == "cancelled" for t in run.tasks.values())


@pytest.mark.local_runner("the cancelled turn's process is stopped")
async def test_cancel_a_running_task_blocks_its_dependents_then_cancel_the_run(project: Path) -> None:
    tasks = [task("t1", "builder"), task("t2", "tester", deps=["t1"], writes=["tests/**"])]
    paths = setup_crew(project, tasks=tasks, worker=[work_rule(delay=30, task_id="t1", rule_id="slow-t1")])
    run_id = create(paths)
    marker = str(Path(paths.root).parent)

    async def human(engine: Engine) -> None:
        await until(engine, lambda e: "t1" in e.run.tasks and e.run.tasks["t1"].state == "executing"
                    and any(j.pid for j in e.in_flight()))
        ok, message = await send(engine.project, engine.run.id, action="cancel_task", task="t1")
        assert ok, message
        await until(engine, lambda e: e.run.status == "blocked", timeout=10)
        assert engine.run.tasks["t2"].state == "blocked"
        assert engine.in_flight() == [], "the cancelled task's turn is stopped, not waited for"
        ok, message = await send(engine.project, engine.run.id, action="cancel_run", note="enough")
        assert ok, message

    started = time.monotonic()
    run = await drive(paths, run_id, human)
    assert time.monotonic() - started < 20
    assert run.status == "cancelled" and run.status_reason == "enough"
    assert {t.state for t in run.tasks.values()} == {"cancelled"}
    assert_log_consistent(paths, run_id)
    assert wait_gone(lambda: agent_processes(marker)) == []


async def test_pause_and_resume(project: Path) -> None:
    tasks = [task("t1", "builder"), task("t2", "builder", deps=["t1"])]
    paths = setup_crew(project, tasks=tasks, worker=[work_rule(delay=0.8, task_id="t1", rule_id="slowish")])
    run_id = create(paths)

    async def human(engine: Engine) -> None:
        await until(engine, lambda e: "t1" in e.run.tasks and e.run.tasks["t1"].state == "executing")
        ok, message = await send(engine.project, engine.run.id, action="pause")
        assert ok, message
        await until(engine, lambda e: e.run.status == "paused" and not e.in_flight())
        dispatched = len(of_type_now(engine, "dispatch"))
        await asyncio.sleep(1.0)
        assert len(of_type_now(engine, "dispatch")) == dispatched, "nothing starts while paused"
        assert engine.run.tasks["t1"].state == "submitted"
        ok, message = await send(engine.project, engine.run.id, action="resume")
        assert ok, message

    def of_type_now(engine: Engine, type_: str) -> list[dict]:
        return of_type(RunStore(engine.project).events(engine.run.id)[0], type_)

    run = await drive(paths, run_id, human)
    assert run.status == "done"
    log = assert_log_consistent(paths, run_id)
    assert [e["what"] for e in of_type(log, "run.status")].count("run is paused") == 1


async def test_an_answer_sent_while_no_engine_runs_is_applied_on_resume(project: Path) -> None:
    """The person answers a question of a stopped run: the direct path; the next engine carries on."""
    ask = [{"id": "ask", "when": {"prompt_contains": "[agentbox:work task=t1", "times": 1},
            "do": {"reply_json": {"summary": "need input", "question": "Which colour?"}}}]
    paths = setup_crew(project, worker=ask)
    run_id = create(paths)

    async def stop_at_question(engine: Engine) -> None:
        await until(engine, lambda e: open_checkpoint(e, "question") is not None and not e.in_flight())
        ok, _ = await send(engine.project, engine.run.id, action="pause")
        assert ok

    first = Engine.open(paths, run_id)
    flight = asyncio.ensure_future(first.execute())
    await stop_at_question(first)
    flight.cancel()
    with pytest.raises(asyncio.CancelledError):
        await flight
    assert not RunStore(paths).engine_running(run_id)
    cp = open_checkpoint(first, "question")
    ok, message = runs.send_command(paths, run_id, {"action": "answer", "checkpoint": cp.id, "text": "blue"})
    assert ok and "answer passed to builder" in message
    ok, _ = runs.send_command(paths, run_id, {"action": "resume"})
    assert ok
    run = await drive(paths, run_id)
    assert run.status == "done"
    log = assert_log_consistent(paths, run_id)
    assert "The human answered: blue" in prompts_of(paths, run.tasks["t1"].session_id)[-1]
    assert len(of_type(log, "engine.started")) == 2


def test_the_run_state_is_valid_json_for_readers(project: Path) -> None:
    paths = setup_crew(project)
    run_id = create(paths)
    state = RunStore(paths).load(run_id)
    assert state.status == "planning" and state.contract.limits.max_workers == 2
    assert ProjectPaths(project).run_dir(run_id).is_dir()


@pytest.mark.local_runner('the sandbox (bwrap) cannot be built')
async def test_a_sandbox_that_cannot_be_built_is_an_environment_failure_not_a_crash(
        project: Path, short_backoff: list[float], monkeypatch: pytest.MonkeyPatch) -> None:
    from agentbox.core.errors import SandboxError
    from agentbox.core.sandbox import bwrap as sandbox

    def missing() -> str:
        raise SandboxError("bubblewrap (bwrap) is not installed; agentbox runs every agent inside it")

    monkeypatch.setattr(sandbox, "require_bwrap", missing)
    paths = setup_crew(project)
    run_id = create(paths)
    run = await drive(paths, run_id, answering(("retry_escalation", "cancel")), backoff=short_backoff)
    assert run.status == "failed"
    log = assert_log_consistent(paths, run_id)
    failures = of_type(log, "failure")
    assert len(failures) == 4 and all("spawn_failed: bubblewrap (bwrap) is not installed" in f["why"] for f in failures)
    (escalation,) = of_type(log, "escalation")
    assert "bubblewrap" in escalation["why"]
