"""Graph mode end to end: nodes as tasks run by scripted roles; parallel branches
and joins, fail reasons and fallbacks, backward-edge rework under the retry ledger,
blocked nodes, budgets, and a kill -9 in the middle of a graph.

The graph's policies run their turns in-process (tests/engine/inprocess.py); the example
project's run through the CLI and the kill -9 run scripted agents under bwrap.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentbox.core.engine.engine import Engine
from agentbox.core.engine.run_store import RunStore
from agentbox.core.paths import ProjectPaths
from tests.conftest import run_cli
from tests.engine.inprocess import InProcessRunner
from tests.engine.modes_support import (
    answer_when_open,
    drive,
    finish_engine,
    kill_when,
    rule,
    turn_prompts,
    write_crew,
    write_profile,
)
from tests.engine.support import create, events, of_type, start_engine, until

OK = {"summary": "done", "evidence": ["checked"]}


def ok(summary: str) -> dict[str, Any]:
    return {"summary": summary, "evidence": [f"{summary}: checked"]}


def failed(reason: str | None, remediation: str = "fix it") -> dict[str, Any]:
    reply: dict[str, Any] = {"summary": f"failed: {reason}", "outcome": "fail", "remediation": remediation}
    if reason:
        reply["fail_reason"] = reason
    return reply


def node(name: str, role: str) -> dict[str, str]:
    return {"name": name, "role": role, "brief": f"do {name}"}


def edge(source: str, target: str, condition: str = "success", **extra: str) -> dict[str, str]:
    return {"from": source, "to": target, "condition": condition, **extra}


def graph_project(project: Path, nodes: list[dict[str, str]], edges: list[dict[str, str]],
                  roles: dict[str, dict[str, Any]], limits: dict[str, Any] | None = None) -> ProjectPaths:
    (project / ".agent-box" / "graphs" / "g.yaml").write_text(json.dumps({"nodes": nodes, "edges": edges}))
    return write_crew(project, "graph", roles, limits=limits, graph={"file": "graphs/g.yaml"})


def marker(name: str, round_no: int | None = None) -> str:
    return f"[agentbox:node node={name} " + (f"task={name if round_no == 1 else f'{name}.{round_no}'} "
                                              f"round={round_no} " if round_no else "")


def states(run: Any) -> dict[str, str]:
    return {t.id: t.state for t in run.tasks.values()}


@pytest.mark.bwrap
def test_example_graph_runs_parallel_branches_and_a_backward_rework(project: Path) -> None:
    result = run_cli("run", "Add a greeting", "--mode", "graph", "--graph", "build", cwd=project)
    assert result.code == 0, result.err + result.out
    paths = ProjectPaths(project)
    store = RunStore(paths)
    run = store.load(store.latest_id())
    assert run.status == "done"
    assert list(run.tasks) == ["design", "implement", "tests", "docs", "check",
                               "implement.2", "tests.2", "docs.2", "check.2"]
    assert set(states(run).values()) == {"approved"}
    assert run.tasks["check"].verdicts[-1].verdict == "fail"
    assert run.tasks["implement.2"].round == 2 and run.tasks["implement.2"].node == "implement"
    log = events(paths, run.id)
    (failure,) = of_type(log, "node.failed")
    assert "impl_bug" in failure["what"] and "implement" in failure["what"]
    # tests and docs ran in parallel: both dispatched before either finished
    first = [e for e in log if e["type"] in ("dispatch", "node.succeeded") and e.get("task") in ("tests", "docs")]
    assert [e["type"] for e in first[:2]] == ["dispatch", "dispatch"]
    rework = next(p for p in turn_prompts(paths, "coder") if "task=implement.2 " in p)
    assert "Remediation: Add a module docstring" in rework and "Your previous run of this node" in rework
    assert '"""Greetings' in (project / "src" / "greet.py").read_text()
    assert "check.2" in (store.artifacts_dir(run.id) / "result.md").read_text()


def test_join_waits_for_activated_predecessors_only(project: Path) -> None:
    write_profile("worker", [
        rule(marker("split"), ok("split")),
        rule(marker("left"), ok("left half"), delay=0.6),
        rule(marker("right"), ok("right half")),
        rule(marker("join"), ok("joined")),
    ])
    roles = {r: {"profile": "worker", "writes": [f"{r}/**"]} for r in ("planner", "lefty", "righty", "joiner")}
    nodes = [node("split", "planner"), node("left", "lefty"), node("right", "righty"), node("fix", "planner"),
             node("join", "joiner")]
    edges = [edge("split", "left"), edge("split", "right"), edge("split", "fix", "fail"),
             edge("left", "join"), edge("right", "join"), edge("fix", "join")]
    paths = graph_project(project, nodes, edges, roles)
    run = drive(paths, create(paths, "split and join", "graph"), runner=InProcessRunner())
    assert run.status == "done", run.status_reason
    assert list(run.tasks) == ["split", "left", "right", "join"]  # fix never activated; join ran once
    log = events(paths, run.id)
    join_dispatch = next(e["seq"] for e in of_type(log, "dispatch") if e.get("task") == "join")
    done = {e["task"]: e["seq"] for e in of_type(log, "node.succeeded")}
    assert join_dispatch > done["left"] and join_dispatch > done["right"]
    (prompt,) = turn_prompts(paths, "joiner")
    assert "left half" in prompt and "right half" in prompt


def test_a_delivery_to_a_running_node_is_held_until_its_run_ends(project: Path) -> None:
    write_profile("worker", [
        rule(marker("c", 1), failed("flaky", "again")),
        rule(marker("b", 1), ok("b first"), delay=0.8),
        {"when": {"prompt_regex": r"\[agentbox:node node=\w+ task=(?P<t>[\w.]+) "},
         "do": {"reply_json": {"summary": "{t} done", "evidence": ["ok"]}}},
    ])
    roles = {r: {"profile": "worker", "writes": [f"{r}/**"]} for r in ("ra", "rb", "rc", "rd")}
    nodes = [node("a", "ra"), node("b", "rb"), node("c", "rc"), node("d", "rd")]
    edges = [edge("a", "b"), edge("a", "c"), edge("c", "a", "fail", kind="backward"),
             edge("b", "d"), edge("c", "d")]
    paths = graph_project(project, nodes, edges, roles)
    run = drive(paths, create(paths, "overlap", "graph"), runner=InProcessRunner())
    assert run.status == "done", run.status_reason
    assert sorted(run.tasks) == ["a", "a.2", "b", "b.2", "c", "c.2", "d"]
    assert run.tasks["d"].attempts == 1  # the join ran once, after the second pass
    (prompt,) = turn_prompts(paths, "rd")
    assert "b.2 done" in prompt and "c.2 done" in prompt


def test_fail_reason_takes_its_edge_else_the_fallback(project: Path) -> None:
    write_profile("worker", [
        rule(marker("review", 1), failed("input_underspecified", "say which greeting")),
        rule(marker("review", 2), failed("something_else", "try again")),
        rule(marker("review"), ok("reviewed")),
        rule("[agentbox:node node=", OK),
    ])
    roles = {r: {"profile": "worker", "writes": []} for r in ("lead", "builder", "reviewer")}
    nodes = [node("plan", "lead"), node("build", "builder"), node("review", "reviewer")]
    edges = [edge("plan", "build"), edge("build", "review"),
             edge("review", "plan", "fail", fail_reason="input_underspecified", kind="backward"),
             edge("review", "build", "fail", kind="backward")]
    paths = graph_project(project, nodes, edges, roles, limits={"max_auto_retries": 3})
    run = drive(paths, create(paths, "route failures", "graph"), runner=InProcessRunner())
    assert run.status == "done", run.status_reason
    assert list(run.tasks) == ["plan", "build", "review", "plan.2", "build.2", "review.2", "build.3", "review.3"]
    routes = [e["edge"] for e in of_type(events(paths, run.id), "node.failed")]
    assert routes == ["review -> plan (fail: input_underspecified, backward)", "review -> build (fail, backward)"]
    replan = next(p for p in turn_prompts(paths, "lead") if "task=plan.2 " in p)
    assert "failed (input_underspecified)" in replan and "Remediation: say which greeting" in replan


def test_backward_rework_is_bounded_by_the_retry_ledger(project: Path) -> None:
    write_profile("worker", [
        rule(marker("review"), failed("impl_bug", "still wrong")),
        rule("[agentbox:node node=", OK),
    ])
    roles = {r: {"profile": "worker", "writes": []} for r in ("builder", "reviewer")}
    nodes = [node("build", "builder"), node("review", "reviewer")]
    edges = [edge("build", "review"), edge("review", "build", "fail", kind="backward")]
    paths = graph_project(project, nodes, edges, roles, limits={"max_auto_retries": 1})
    run_id = create(paths, "never good enough", "graph")
    run = drive(paths, run_id, answer_when_open("retry_escalation", "cancel"), runner=InProcessRunner())
    assert run.status == "failed" and "build.3 cancelled" in str(run.status_reason)
    assert list(run.tasks) == ["build", "review", "build.2", "review.2", "build.3"]
    assert run.tasks["build.3"].attempts == 0  # escalated before it ran
    log = events(paths, run_id)
    assert len(of_type(log, "retry")) == 1 and len(of_type(log, "escalation")) == 1
    assert [e["task"] for e in of_type(log, "failure")] == ["build.2", "build.3"]


def test_a_forward_fail_edge_routes_to_a_later_node(project: Path) -> None:
    write_profile("worker", [rule(marker("deploy"), failed("timeout", "roll back")), rule("[agentbox:node node=", OK)])
    roles = {r: {"profile": "worker", "writes": []} for r in ("builder", "ops")}
    nodes = [node("build", "builder"), node("deploy", "ops"), node("rollback", "ops")]
    paths = graph_project(project, nodes, [edge("build", "deploy"), edge("deploy", "rollback", "fail")], roles)
    run = drive(paths, create(paths, "ship", "graph"), runner=InProcessRunner())
    assert run.status == "done", run.status_reason
    assert list(run.tasks) == ["build", "deploy", "rollback"]
    assert not of_type(events(paths, run.id), "retry")  # a forward route is no retry
    assert "Remediation: roll back" in turn_prompts(paths, "ops")[-1]
    (row,) = [line for line in run_cli("status", run.id, cwd=project).out.splitlines() if line.startswith("deploy ")]
    assert "failed (routed)" in row and "approved" not in row, row  # closed on its failure, not approved


def test_a_node_question_waits_for_the_human_answer(project: Path) -> None:
    write_profile("worker", [
        rule("The human answered: French", ok("written in French")),
        rule(marker("docs"), {"summary": "need a decision", "question": "English or French?"}),
    ])
    paths = graph_project(project, [node("docs", "writer")], [], {"writer": {"profile": "worker", "writes": []}})
    run = drive(paths, create(paths, "document", "graph"), answer_when_open("question", "French"), runner=InProcessRunner())
    assert run.status == "done" and run.result is not None
    assert run.result.summary == "written in French" and run.tasks["docs"].attempts == 2


def test_a_failure_with_no_edge_blocks_the_node_until_the_human_decides(project: Path) -> None:
    write_profile("worker", [
        rule(marker("deploy", 1), failed("disk_full", "free some space"), times=1),
        rule("Note from the human: space freed", ok("deployed")),
        rule("[agentbox:node node=", OK),
    ])
    roles = {r: {"profile": "worker", "writes": []} for r in ("builder", "ops")}
    paths = graph_project(project, [node("build", "builder"), node("deploy", "ops")], [edge("build", "deploy")], roles)
    run_id = create(paths, "ship", "graph")
    seen: dict[str, Any] = {}

    async def human(engine: Engine) -> None:
        await until(engine, lambda e: bool(e.run.open_checkpoints()))
        seen["task"] = engine.run.tasks["deploy"].state
        seen["status"] = engine.run.status
        (cp,) = engine.run.open_checkpoints()
        engine.apply_command({"action": "answer", "checkpoint": cp.id, "text": "retry space freed"})

    run = drive(paths, run_id, human, runner=InProcessRunner())
    assert seen == {"task": "blocked", "status": "waiting_user"}
    assert run.status == "done", run.status_reason
    assert list(run.tasks) == ["build", "deploy"] and run.tasks["deploy"].attempts == 2
    (blocked,) = of_type(events(paths, run_id), "node.blocked")
    assert "disk_full" in blocked["what"]


def test_a_blocked_node_cancelled_fails_the_run(project: Path) -> None:
    write_profile("worker", [rule(marker("deploy"), failed(None)), rule("[agentbox:node node=", OK)])
    roles = {r: {"profile": "worker", "writes": []} for r in ("builder", "ops")}
    paths = graph_project(project, [node("build", "builder"), node("deploy", "ops")], [edge("build", "deploy")], roles)
    run = drive(paths, create(paths, "ship", "graph"), answer_when_open("retry_escalation", "cancel"), runner=InProcessRunner())
    assert run.status == "failed" and states(run) == {"build": "approved", "deploy": "cancelled"}


def test_a_tiny_run_budget_breaks_the_circuit(project: Path) -> None:
    write_profile("worker", [], fallback={"reply_json": OK}, usage={"input_tokens": 3000, "output_tokens": 10})
    roles = {r: {"profile": "worker", "writes": []} for r in ("a", "b")}
    paths = graph_project(project, [node("one", "a"), node("two", "b")], [edge("one", "two")], roles,
                          limits={"budget": {"tokens_total": 1000}})
    run_id = create(paths, "spend", "graph")
    seen: list[dict[str, str]] = []

    async def human(engine: Engine) -> None:
        await until(engine, lambda e: e.run.status == "circuit_broken")
        seen.append(states(engine.run))
        engine.apply_command({"action": "cancel_run", "note": "enough"})

    run = drive(paths, run_id, human, runner=InProcessRunner())
    assert seen == [{"one": "approved", "two": "queued"}]  # two was never dispatched
    assert run.status == "cancelled"


@pytest.mark.bwrap
def test_kill_9_mid_graph_then_resume_loses_and_repeats_no_node(project: Path) -> None:
    write_profile("slow", [
        rule(marker("review", 1), failed("impl_bug"), delay=0.3),
        {"when": {"prompt_regex": r"\[agentbox:node node=(?P<n>\w+) task=(?P<t>[\w.]+) "},
         "do": {"delay_s": 0.4, "reply_json": {"summary": "{t} done", "evidence": ["ok"]}}},
    ])
    roles = {r: {"profile": "slow", "writes": [f"{r}/**"]} for r in ("lead", "left", "right", "reviewer")}
    nodes = [node("plan", "lead"), node("a", "left"), node("b", "right"), node("review", "reviewer")]
    edges = [edge("plan", "a"), edge("plan", "b"), edge("a", "review"), edge("b", "review"),
             edge("review", "plan", "fail", kind="backward")]
    paths = graph_project(project, nodes, edges, roles)
    run_id = create(paths, "survive a crash", "graph")
    proc = start_engine(paths, run_id)
    # kill while the two branches are both running
    kill_when(paths, run_id, proc, lambda log: {e.get("task") for e in of_type(log, "dispatch")} >= {"a", "b"})
    run = finish_engine(paths, run_id)
    assert run.status == "done", run.status_reason
    expected = ["plan", "a", "b", "review", "plan.2", "a.2", "b.2", "review.2"]
    assert list(run.tasks) == expected and set(states(run).values()) == {"approved"}
    log = events(paths, run_id)
    assert [e["seq"] for e in log] == list(range(1, len(log) + 1))
    assert sorted(e["task"] for e in of_type(log, "task.created")) == sorted(expected)
    assert sorted(e["task"] for e in of_type(log, "node.succeeded")) == sorted(t for t in expected if t != "review")
    assert len(of_type(log, "node.failed")) == 1
    assert len(of_type(log, "recover")) == 2  # both interrupted branch turns were re-run in their sessions
