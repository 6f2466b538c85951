"""OpenTelemetry traces of a run, received by a local OTLP/HTTP collector (tests/fakes/otlp_receiver.py).

A scripted crew in a git project, real bwrap: the lead's plan waits at a plan-approval
checkpoint, the worker's first turn crashes (an environment failure, retried), its first
submission fails the submission check (a rework), the second passes, the reviewer approves
and the work is merged. The collector gets one trace whose tree is run → plan → task → turns,
checks, merge, checkpoint wait, with the attributes of each; an engine killed mid-turn and
resumed goes on in the same trace.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentbox.core.engine.run_store import RunStore
from agentbox.core.telemetry.model import trace_id_for
from tests.engine.support import answering, create, drive, kill_engine_mid_work, work_rule
from tests.engine.test_gates import GOOD, crew
from tests.fakes.otlp_receiver import OtlpReceiver, ReceivedSpan, dumps

pytestmark = pytest.mark.bwrap


@pytest.fixture
def collector(monkeypatch: pytest.MonkeyPatch) -> Iterator[OtlpReceiver]:
    """A local collector, named by the standard variable (the engine and its children see it)."""
    with OtlpReceiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        yield receiver


def _worker_model(project: Path) -> None:
    """The worker's profile names a model (the scripted tool echoes it in its result)."""
    path = Path(__import__("os").environ["AGENT_BOX_HOME"]) / "profiles" / "t-worker" / "profile.yaml"
    profile = json.loads(path.read_text())
    profile["runtime"]["model"] = "scripted-large"
    path.write_text(json.dumps(profile))


def _by_name(spans: list[ReceivedSpan]) -> dict[str, list[ReceivedSpan]]:
    found: dict[str, list[ReceivedSpan]] = {}
    for span in sorted(spans, key=lambda s: s.start_ns):
        found.setdefault(span.name, []).append(span)
    return found


@pytest.mark.local_runner("a worker's process crashes")
async def test_a_run_is_one_trace_of_its_plan_tasks_turns_checks_and_waits(project: Path,
                                                                           collector: OtlpReceiver) -> None:
    worker = [
        work_rule(task_id="t1", rule_id="crash", times=1, fail="crash"),
        work_rule(task_id="t1", rule_id="first", times=1, write={"src/t1/bad.txt": "bad\n"}),
        work_rule(task_id="t1", rule_id="again", write={"src/t1/good.txt": "good\n"}, cost_usd=0.0125),
    ]
    paths = crew(project, checks={"smoke": {"run": GOOD, "timeout_s": 60}}, submission=["smoke"], worker=worker,
                 hierarchical={"plan_approval": True})
    _worker_model(project)
    crew_file = project / ".agent-box" / "crew.yaml"
    crew_file.write_text(crew_file.read_text().replace('"submission": [', '"run_end": ["smoke"], "submission": ['))
    run_id = create(paths)
    final = await drive(paths, run_id, answering(("plan_approval", "approve")), timeout=120, backoff=[0.1, 0.1])
    assert final.status == "done", final.status_reason
    t1 = final.tasks["t1"]

    spans = collector.received()
    shown = dumps(spans)
    assert {s.trace_id for s in spans} == {trace_id_for(run_id)}, shown
    ids = Counter(s.span_id for s in spans)
    assert max(ids.values()) == 1, shown  # each span sent once
    by_id = {s.span_id: s for s in spans}
    named = _by_name(spans)
    (run,) = named["run"]
    (plan,) = named["plan"]
    (task,) = named["task t1"]
    (wait,) = named["checkpoint wait plan_approval"]
    assert run.parent_id == "" and plan.parent_id == run.span_id
    assert task.parent_id == plan.span_id and wait.parent_id == plan.span_id
    assert all(s.parent_id in by_id for s in spans if s is not run), shown  # the tree is whole
    assert [s.parent_id for s in named["plan lead"]] == [plan.span_id]
    assert run.attributes["agentbox.outcome"] == "done" and run.attributes["agentbox.run.mode"] == "hierarchical"
    assert run.resource["service.name"] == "agentbox" and run.resource["agentbox.run.id"] == run_id
    assert wait.attributes["agentbox.checkpoint.kind"] == "plan_approval"
    assert wait.attributes["agentbox.outcome"] == "answered"

    # three work turns: crashed (an environment failure), red, green; all under the task
    crashed, red_turn, green_turn = named["work builder"]
    assert {s.parent_id for s in named["work builder"]} == {task.span_id}
    for turn in (crashed, red_turn, green_turn):
        attrs = turn.attributes
        assert attrs["agentbox.role"] == "builder" and attrs["gen_ai.agent.name"] == "builder"
        assert attrs["agentbox.profile"] == "t-worker" and attrs["agentbox.tool"] == "scripted"
        assert attrs["agentbox.session.id"] == t1.session_id and attrs["agentbox.task.id"] == "t1"
        assert attrs["agentbox.run.id"] == run_id
    assert crashed.attributes["agentbox.outcome"] == "error" and crashed.status_code == 2  # ERROR
    assert crashed.attributes["error.type"] == "nonzero_exit"
    assert crashed.attributes["agentbox.failure.kind"] == "environment_failure"
    assert crashed.attributes["agentbox.failure.fingerprint"]
    green = green_turn.attributes
    assert green["agentbox.outcome"] == "ok" and green_turn.status_code == 0
    assert green["agentbox.native_session.id"] == green["gen_ai.conversation.id"] != ""
    assert green["gen_ai.request.model"] == "scripted-large"
    assert green["gen_ai.usage.input_tokens"] == 100 and green["gen_ai.usage.output_tokens"] == 20
    assert green["agentbox.tokens"] == 120 and green["agentbox.cost_usd"] == pytest.approx(0.0125)
    assert green["agentbox.attempt"] >= 1 and "agentbox.cost_usd" not in red_turn.attributes

    # the checks: red (its failure on the span), then green; the rework is counted on the task
    red_check, green_check, final_check = named["check smoke"]
    # the run_end check, after the run's end, hangs under the run
    assert final_check.attributes["agentbox.check.stage"] == "run_end" and final_check.parent_id == run.span_id
    assert final_check.attributes["agentbox.commit"] == final.checks[0].commit
    assert red_check.parent_id == green_check.parent_id == task.span_id
    assert red_check.attributes["agentbox.check.status"] == "failed" and red_check.status_code == 2
    assert red_check.attributes["agentbox.commit"] == t1.checks[0].commit
    assert green_check.attributes["agentbox.check.status"] == "passed" and green_check.status_code == 0
    assert red_turn.end_ns <= red_check.start_ns + 10**7 and red_check.end_ns <= green_turn.end_ns
    (review,) = named["review reviewer"]
    (merge,) = named["merge"]
    assert review.parent_id == merge.parent_id == task.span_id
    assert merge.attributes["agentbox.commit"] == t1.merged
    assert task.attributes["agentbox.outcome"] == "approved"
    assert task.attributes["agentbox.task.reworks"] >= 1
    assert task.attributes["agentbox.attempt"] == 3 == t1.attempts
    assert red_check.attributes["agentbox.failure.kind"] == "implementation_defect"
    assert task.attributes["agentbox.failure.fingerprint"] == red_check.attributes["agentbox.failure.fingerprint"]
    assert red_check.attributes["agentbox.failure.fingerprint"] != crashed.attributes["agentbox.failure.fingerprint"]
    assert task.attributes["agentbox.tokens"] == t1.tokens
    # every child lies inside its parent's time, give or take the clock's rounding
    for span in spans:
        if span.parent_id:
            parent = by_id[span.parent_id]
            assert parent.start_ns <= span.start_ns + 10**6, (span.name, parent.name)
    # the spans name the decision-log line that ended them, and the collector took them all
    saved = json.loads((RunStore(paths).dir(run_id) / "traced.json").read_text())
    log = RunStore(paths).events(run_id)[0]
    assert run.attributes["agentbox.event.seq"] == next(e["seq"] for e in log if e["type"] == "run.finished")
    assert saved["seq"] == max(s.attributes["agentbox.event.seq"] for s in spans) == final_check.attributes[
        "agentbox.event.seq"]


@pytest.mark.local_runner('kill -9 of the engine mid-turn and a resume')
async def test_an_engine_killed_mid_turn_and_resumed_goes_on_in_the_same_trace(project: Path,
                                                                              collector: OtlpReceiver) -> None:
    worker = [work_rule(task_id="t1", rule_id="slow", times=1, delay=30, write={"src/t1/good.txt": "good\n"}),
              work_rule(task_id="t1", rule_id="again", write={"src/t1/good.txt": "good\n"})]
    paths = crew(project, checks={"smoke": {"run": GOOD, "timeout_s": 60}}, submission=["smoke"], worker=worker)
    run_id = create(paths)
    kill_engine_mid_work(paths, run_id)
    final = await drive(paths, run_id, timeout=120)
    assert final.status == "done", final.status_reason

    spans = collector.received()
    shown = dumps(spans)
    assert {s.trace_id for s in spans} == {trace_id_for(run_id)}, shown
    by_id = {s.span_id: s for s in spans}
    assert all(s.parent_id in by_id for s in spans if s.parent_id), shown  # nothing points at a lost span
    named = _by_name(spans)
    assert len(named["run"]) == 1 and len(named["task t1"]) == 1
    interrupted, resumed = named["work builder"]
    assert interrupted.attributes["agentbox.outcome"] == "interrupted" and interrupted.status_code == 2
    assert resumed.attributes["agentbox.outcome"] == "ok"
    assert interrupted.span_id != resumed.span_id
    assert interrupted.parent_id == resumed.parent_id == named["task t1"][0].span_id
