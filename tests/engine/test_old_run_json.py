"""A run.json written before the run contract was typed still loads, as the typed models.

`old_runs/*.json` are finished runs written by the engine when `mode_state` was an
untyped dict (with the run-level `started` and `budget_extra` inside it), a verdict's
issues and checklist, a submission, the work graph, the result and the engine holder plain
dicts (only their temporary project path was replaced by `/project`). The mid-run states
below are the shapes that engine wrote while a run waited or was cut short.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentbox.core.engine.mode_state import (
    STATE_BY_MODE,
    GraphState,
    GroupChatState,
    HandoffState,
    HierarchicalState,
    SequentialState,
)
from agentbox.core.engine.models import EngineHolder, Run, RunResult
from agentbox.core.engine.replies import BlockingIssue, ChecklistItem, NodeResult, Plan, Submission
from agentbox.core.engine.run_store import DamagedRunError, RunStore
from agentbox.core.graph.model import Graph
from agentbox.core.paths import ProjectPaths

OLD_RUNS = Path(__file__).with_name("old_runs")


def old_run(name: str) -> dict[str, Any]:
    return json.loads((OLD_RUNS / f"{name}.json").read_text())


def load(project: Path, data: dict[str, Any]) -> Run:
    """The run as the store reads run.json's bytes."""
    return RunStore(ProjectPaths(project)).parse(data["id"], json.dumps(data).encode())


def reloaded(project: Path, run: Run) -> Run:
    """`run` saved in today's shape and read again."""
    return RunStore(ProjectPaths(project)).parse(run.id, run.model_dump_json().encode())


@pytest.mark.parametrize("name", ["hierarchical", "hierarchical-budget", "sequential", "group_chat", "handoff", "graph"])
def test_an_old_finished_run_loads_typed_and_saves_in_the_new_shape(project: Path, name: str) -> None:
    data = old_run(name)
    old_state = data["mode_state"]
    assert old_state["started"] is True  # the old shape: run-level keys inside the mode's dict
    run = load(project, data)
    assert type(run.mode_state) is STATE_BY_MODE[run.contract.mode] and run.mode_state.mode == run.contract.mode
    assert run.mode_started and run.mode_state.phase == old_state["phase"]
    assert run.budget_extra == old_state.get("budget_extra", 0)
    assert isinstance(run.result, RunResult) and run.result.summary == data["result"]["summary"]
    assert run.result.artifact == data["result"]["artifact"]
    for task in run.tasks.values():
        assert isinstance(task.submission, NodeResult if run.contract.mode == "graph" else Submission)
        assert task.submitted_summary == data["tasks"][task.id]["submission"]["summary"]
        for verdict in task.verdicts:
            assert all(isinstance(i, BlockingIssue) for i in verdict.blocking_issues)
            assert all(isinstance(c, ChecklistItem) for c in verdict.checklist)
    again = reloaded(project, run)
    assert again == run
    saved = json.loads(run.model_dump_json())
    assert "started" not in saved["mode_state"] and "budget_extra" not in saved["mode_state"]
    for task_id, task in saved["tasks"].items():  # the checklist keeps the reviewer's `pass` key
        assert [v["checklist"] for v in task["verdicts"]] == [v["checklist"] for v in data["tasks"][task_id]["verdicts"]]


def test_an_old_hierarchical_run_keeps_its_verdicts_and_budget(project: Path) -> None:
    rework = load(project, old_run("hierarchical"))
    rejected = rework.tasks["t1"].verdicts[0]
    assert rejected.verdict == "reject" and rejected.blocking_issues[0].detail == "not good enough"
    assert not rejected.checklist[0].pass_ and rejected.checklist[0].acceptance_id == "a1"
    budget = load(project, old_run("hierarchical-budget"))
    assert budget.budget_extra == 10000
    assert budget.token_budget == budget.contract.limits.budget.tokens_total + 10000  # type: ignore[operator]


def test_an_old_handoff_run_reads_its_hops(project: Path) -> None:
    data = old_run("handoff")
    run = load(project, data)
    state = run.mode_state
    assert isinstance(state, HandoffState)
    assert [(h.source, h.to, h.hop) for h in state.trail] == [(h["from"], h["to"], h["hop"]) for h in data["mode_state"]["trail"]]
    assert state.trail[-1].note == "settle it" and state.hop == 3
    assert state.ended is not None and state.ended.final is not None and state.ended.final.role == "b"
    assert run.result is not None and run.result.answered_by == "b" and run.result.handoffs == 3
    held = next(cp for cp in run.checkpoints.values() if cp.kind == "ping_pong").data.hop
    assert held is not None and (held.source, held.to, held.hop) == ("a", "b", 3)


def test_an_old_graph_run_reads_its_graph_and_deliveries(project: Path) -> None:
    data = old_run("graph")
    run = load(project, data)
    state = run.mode_state
    assert isinstance(state, GraphState) and isinstance(run.contract.graph, Graph)
    assert state.activations == data["mode_state"]["activations"]
    for task_id, deliveries in data["mode_state"]["inputs"].items():
        assert [(d.source, d.condition, d.kind) for d in state.inputs[task_id]] == [
            (d["from"], d["condition"], d["kind"]) for d in deliveries]
    assert any(d.kind == "backward" for ds in state.inputs.values() for d in ds)
    assert json.loads(run.model_dump_json())["contract"]["graph"] == data["contract"]["graph"]  # the file's keys
    assert run.result is not None and run.result.nodes == data["result"]["nodes"]


def test_an_old_group_chat_run_reads_its_messages(project: Path) -> None:
    data = old_run("group_chat")
    run = load(project, data)
    state = run.mode_state
    assert isinstance(state, GroupChatState)
    assert state.speakers == ["lead", "bob", "carol"] and state.lead == "lead" and state.seen == data["mode_state"]["seen"]
    assert state.ended is not None and state.ended.final.n == 4 and state.ended.final.message == "Settled: ship it."
    assert run.result is not None and run.result.terminated_by == "done_signal" and run.result.final_by == "lead"


def test_an_old_sequential_run_reads_its_reviewer(project: Path) -> None:
    run = load(project, old_run("sequential"))
    assert isinstance(run.mode_state, SequentialState) and run.mode_state.reviewer == "reviewer"


PLAN = {"tasks": [{"id": "t1", "assignee": "builder", "brief": "build it", "acceptance": [{"id": "a1", "criterion": "built"}],
                   "writes": ["src/**"], "depends_on": []}], "notes": None}
HOP = {"from": "a", "to": "b", "message": "your call", "hop": 3}
DELIVERY = {"from": "docs", "task": "docs", "condition": "success", "reason": None, "kind": "forward", "job": "job-4"}
MESSAGE = {"n": 2, "role": "bob", "round": 1, "message": "agreed", "next_speaker": None, "done": False, "at": 5.0,
           "session": "s-1"}


@pytest.mark.parametrize(("mode", "old_state", "check"), [
    ("hierarchical", {"started": True, "phase": "plan_approval", "proposed_plan": PLAN, "budget_extra": 500},
     lambda s: isinstance(s, HierarchicalState) and s.proposed_plan == Plan.model_validate(PLAN)),
    ("sequential", {"started": True},
     lambda s: isinstance(s, SequentialState) and s.phase == "new" and s.reviewer is None),
    ("group_chat", {"started": True, "speakers": ["lead", "bob"], "selection": "round_robin", "lead": None,
                    "done_role": None, "max_rounds": 2, "count": 3, "round": 2, "seen": {"lead": 3, "bob": 2},
                    "chat_outbox": [MESSAGE], "phase": "chatting"},
     lambda s: isinstance(s, GroupChatState) and s.chat_outbox[0].model_dump() == MESSAGE and s.count == 3),
    ("handoff", {"started": True, "phase": "active", "hop": 2, "active": "a", "ping_pong": 2,
                 "trail": [{**HOP, "hop": 1}, {"from": "b", "to": "a", "message": "no, yours", "hop": 2}], "held": HOP},
     lambda s: isinstance(s, HandoffState) and s.held is not None and (s.held.source, s.held.to) == ("a", "b")),
    ("graph", {"started": True, "phase": "running", "activations": {"docs": ["docs"], "check": ["check"]},
               "pending": {"check": [DELIVERY]}, "inputs": {"docs": [{**DELIVERY, "from": None, "task": None,
                                                                       "condition": "entry", "job": None}]}},
     lambda s: isinstance(s, GraphState) and s.pending["check"][0].source == "docs" and s.inputs["docs"][0].source is None),
])
def test_an_old_run_cut_short_loads_its_mode_state(project: Path, mode: str, old_state: dict[str, Any], check: Any) -> None:
    data = old_run("hierarchical")
    data["contract"]["mode"] = mode
    data["contract"]["settings"] = {}
    data["contract"]["graph"] = old_run("graph")["contract"]["graph"] if mode == "graph" else None
    data.update(mode_state=old_state, engine={"pid": 4242, "started": 1.5}, result=None, status="running", finished=None)
    run = load(project, data)
    assert check(run.mode_state) and run.mode_started
    assert run.budget_extra == old_state.get("budget_extra", 0)
    assert run.engine == EngineHolder(pid=4242, started=1.5)
    assert reloaded(project, run) == run


def test_old_turn_extras_and_an_escalated_turn_load_typed(project: Path) -> None:
    data = old_run("handoff")
    data["jobs"] = {"job-9": {"id": "job-9", "kind": "handoff", "role": "b", "prompt": "p", "data": {
        "not_before": 12.5, "session_key": "handoff:b", "original_prompt": "p0", "hop": 2, "writes": ["src/**"]}}}
    data["checkpoints"]["cp-9"] = {"id": "cp-9", "kind": "retry_escalation", "question": "?", "task": None, "data": {
        "fingerprint": "fp-1", "job": {"kind": "handoff", "role": "b", "task": None, "session_id": "s-1", "prompt": "p0",
                                       "data": {"session_key": "handoff:b", "hop": 2, "writes": ["src/**"]}}}}
    run = load(project, data)
    job = run.jobs["job-9"]
    assert (job.data.not_before, job.data.session_key, job.data.hop, job.data.writes) == (12.5, "handoff:b", 2, ["src/**"])
    assert job.original_prompt == "p0"
    escalated = run.checkpoints["cp-9"].data
    assert escalated.fingerprint == "fp-1" and escalated.job is not None
    assert (escalated.job.kind, escalated.job.prompt, escalated.job.data.hop) == ("handoff", "p0", 2)
    assert reloaded(project, run) == run


def test_a_mode_state_of_another_mode_is_damage(project: Path) -> None:
    data = old_run("sequential")
    data["mode_state"] = {"mode": "graph", "phase": "running"}
    with pytest.raises(DamagedRunError, match="mode_state is for graph in a sequential run"):
        load(project, data)


def test_an_old_hierarchical_run_keeps_the_plain_retry_it_was_started_with(project: Path) -> None:
    """The failure ladder is crew.yaml's default now; a run.json from before has no `ladder` field and
    goes on with the per-fingerprint retry it began with."""
    data = old_run("hierarchical")
    assert "ladder" not in data["contract"]
    run = load(project, data)
    assert run.contract.ladder is False
    assert all(task.ladder.counted_failures == 0 and not task.ladder.history for task in run.tasks.values())
