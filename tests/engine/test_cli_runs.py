"""Runs through the real CLI: foreground runs, a detached engine steered by other processes.

`agentbox run GOAL --detach` starts the engine in the background; the test then acts as
the person in another terminal: it polls `agentbox status --json` and answers, approves,
sends back and cancels with the CLI while the engine runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from agentbox.core.engine.run_store import RunStore
from agentbox.core.paths import ProjectPaths
from tests.conftest import run_cli
from tests.engine.support import (
    agent_processes,
    assert_log_consistent,
    events,
    of_type,
    prompts_of,
    review_rule,
    setup_crew,
    task,
    wait_gone,
    work_rule,
)

pytestmark = pytest.mark.bwrap


def status(project: Path, run_id: str) -> dict[str, Any]:
    result = run_cli("status", run_id, "--json", cwd=project)
    assert result.code == 0, result.err
    return json.loads(result.out)


def poll(project: Path, run_id: str, predicate: Callable[[dict[str, Any]], bool], timeout: float = 30) -> dict[str, Any]:
    """Poll `agentbox status RUN --json` until `predicate` holds; the last state."""
    deadline = time.monotonic() + timeout
    while True:
        state = status(project, run_id)
        if predicate(state):
            return state
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out: run is {state['status']} ({state['status_reason']}); "
                                 f"tasks {[(t['id'], t['state']) for t in state['tasks'].values()]}")
        time.sleep(0.2)


def tasks_in(*states: str) -> Callable[[dict[str, Any]], bool]:
    return lambda s: bool(s["tasks"]) and all(t["state"] in states for t in s["tasks"].values())


@pytest.fixture
def detached(project: Path) -> Iterator[Callable[..., str]]:
    """`agentbox run GOAL --detach`; the engine is killed at teardown if the test left it running."""
    pids: list[int] = []

    def start(goal: str = "build the thing", *args: str) -> str:
        result = run_cli("run", goal, "--detach", *args, cwd=project)
        assert result.code == 0, result.err
        match = re.search(r"pid (\d+)", result.err)
        assert match, result.err
        pids.append(int(match.group(1)))
        return result.out.strip().splitlines()[-1]

    yield start
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                os.killpg(pid, signal.SIGKILL)


def wait_engine_exit(project: Path, run_id: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while RunStore(ProjectPaths(project)).engine_running(run_id):
        assert time.monotonic() < deadline, "the engine did not exit after the run ended"
        time.sleep(0.05)


def test_hierarchical_run_through_the_cli(project: Path) -> None:
    setup_crew(project, tasks=[task("t1"), task("t2", "tester", writes=["tests/**"], deps=["t1"])])
    result = run_cli("run", "build the thing", cwd=project)
    assert result.code == 0, result.err + result.out
    assert re.search(r"run run-\S+: done", result.out)
    assert "result: " in result.out and "synthesis.md" in result.out
    assert "task.approve" in result.out and "dispatch" in result.out
    listing = json.loads(run_cli("runs", "--json", cwd=project).out)
    (entry,) = listing
    assert entry["status"] == "done" and entry["tasks"] == 2 and entry["mode"] == "hierarchical"
    state = status(project, entry["id"])
    assert {t["state"] for t in state["tasks"].values()} == {"approved"}
    assert state["engine_running"] is False and "outbox" not in state
    assert_log_consistent(ProjectPaths(project), entry["id"])
    text = run_cli("status", cwd=project)
    assert text.code == 0 and "done" in text.out and "t2" in text.out


def test_sequential_run_through_the_cli(project: Path) -> None:
    setup_crew(project)
    result = run_cli("run", "pipe it", "--mode", "sequential", "--quiet", cwd=project)
    assert result.code == 0, result.err + result.out
    state = status(project, "latest")
    assert state["contract"]["mode"] == "sequential" and state["status"] == "done"
    assert list(state["tasks"]) == ["step1-builder", "step2-tester"]
    assert state["result"]["summary"] == "did step2-tester"


def test_a_failed_run_exits_non_zero(project: Path) -> None:
    setup_crew(project, limits={"max_auto_retries": 0},
               lead=[{"id": "nonsense", "when": {"prompt_contains": "[agentbox:"}, "do": {"reply": "no plan"}}])
    run_id = json.loads(run_cli("runs", "--json", cwd=project).out or "[]")
    assert run_id == []
    result = run_cli("run", "fail please", "--detach", cwd=project)
    rid = result.out.strip()
    poll(project, rid, lambda s: s["status"] == "waiting_user")
    (cp,) = [c for c in status(project, rid)["checkpoints"].values() if c["status"] == "open"]
    answered = run_cli("answer", rid, cp["id"], "cancel", cwd=project)
    assert answered.code == 0, answered.err
    poll(project, rid, lambda s: s["status"] == "failed")
    wait_engine_exit(project, rid)
    resumed = run_cli("run", "--resume", rid, "--quiet", cwd=project)
    assert resumed.code == 1


def test_checkpoint_answered_through_the_cli_while_the_engine_runs(project: Path, detached: Callable[..., str]) -> None:
    ask = [{"id": "ask", "when": {"prompt_contains": "[agentbox:work task=t1", "times": 1},
            "do": {"delay_s": 0.1, "reply_json": {"summary": "need a decision", "question": "English or French?"}}}]
    paths = setup_crew(project, worker=ask, tasks=[task("t1")])
    run_id = detached()
    state = poll(project, run_id, lambda s: s["status"] == "waiting_user")
    assert state["engine_running"] is True
    (cp,) = [c for c in state["checkpoints"].values() if c["status"] == "open"]
    assert cp["kind"] == "question" and cp["task"] == "t1" and cp["question"] == "English or French?"
    assert state["tasks"]["t1"]["state"] == "blocked"
    text = run_cli("status", run_id, cwd=project)
    assert f'agentbox answer {run_id} {cp["id"]}' in text.out
    result = run_cli("answer", run_id, cp["id"], "English, please", cwd=project)
    assert result.code == 0, result.err
    assert result.out.startswith("answer applied"), result.out
    again = run_cli("answer", run_id, cp["id"], "French", cwd=project)
    assert again.code == 2 and "already answered" in again.err
    state = poll(project, run_id, lambda s: s["status"] == "done")
    wait_engine_exit(project, run_id)
    assert "The human answered: English, please" in prompts_of(paths, state["tasks"]["t1"]["session_id"])[-1]
    log = assert_log_consistent(paths, run_id)
    acks = of_type(log, "command")
    assert [a["ok"] for a in acks] == [True, False]


def test_approve_and_rework_through_the_cli_while_the_reviewer_is_slow(project: Path,
                                                                       detached: Callable[..., str]) -> None:
    slow = [review_rule(task_id="t1", delay=60, times=1, rule_id="slow-t1"),
            review_rule(task_id="t2", delay=60, times=1, rule_id="slow-t2")]
    paths = setup_crew(project, reviewer=slow)
    run_id = detached()
    poll(project, run_id, tasks_in("reviewing"))
    time.sleep(0.3)
    refused = run_cli("rework", "t1", cwd=project)
    assert refused.code == 2 and "--note" in refused.err
    started = time.monotonic()
    result = run_cli("approve", "t1", "--note", "checked it myself: works", cwd=project)
    assert result.code == 0 and result.out.startswith("approve applied"), result.out + result.err
    result = run_cli("rework", "t2", "--note", "also handle the empty name", "--run", run_id, cwd=project)
    assert result.code == 0 and result.out.startswith("rework applied"), result.out + result.err
    state = poll(project, run_id, lambda s: s["status"] == "done")
    assert time.monotonic() - started < 20, "the human's decision does not wait for the slow review"
    wait_engine_exit(project, run_id)
    t1, t2 = state["tasks"]["t1"], state["tasks"]["t2"]
    assert [(v["verdict"], v["by"]) for v in t1["verdicts"]] == [("approve", "human")]
    assert t1["verdicts"][0]["evidence"] == ["checked it myself: works"]
    assert [(v["verdict"], v["by"]) for v in t2["verdicts"]] == [("reject", "human"), ("approve", "reviewer")]
    rework_prompt = prompts_of(paths, t2["session_id"])[1]
    assert rework_prompt.startswith("[agentbox:rework task=t2") and "also handle the empty name" in rework_prompt
    log = assert_log_consistent(paths, run_id)
    assert len(of_type(log, "turn.aborted")) == 2
    assert all(len(of_type(log, "task.approve", t)) == 1 for t in ("t1", "t2"))
    assert wait_gone(lambda: agent_processes(str(project))) == []


REWRITE = {"brief": "do t1, better", "acceptance": [{"id": "a1", "criterion": "t1 meets a1"}], "writes": ["src/t1/**"],
           "root_cause": "the reviewer's issue b1 on a1 says the work is not good enough", "evidence": ["b1"]}
"""The lead's reply to a rewrite prompt: the plan entry again, with a root cause citing the verdict."""


def test_ladder_checkpoints_answered_rewrite_then_cancel_through_the_cli(project: Path,
                                                                         detached: Callable[..., str]) -> None:
    """A reviewer that always rejects with the same issue: the ladder's second rewrite and its L3
    exits are asked through `agentbox answer`, which allows the rewrite and then cancels the task."""
    lead = [{"id": "rewrite", "when": {"prompt_contains": "[agentbox:rewrite task=t1", "times": 1},
             "do": {"delay_s": 0.05, "reply_json": REWRITE}},
            {"id": "rewrite-again", "when": {"prompt_contains": "[agentbox:rewrite task=t1"},
             "do": {"delay_s": 0.05, "reply_json": {**REWRITE, "brief": "do t1, better still"}}}]
    paths = setup_crew(project, lead=lead, reviewer=[review_rule("reject", task_id="t1")])
    run_id = detached()

    def asked(state: dict[str, Any]) -> list[dict[str, Any]]:
        return [c for c in state["checkpoints"].values() if c["kind"] == "ladder"]

    state = poll(project, run_id, lambda s: s["status"] == "waiting_user")
    (cp,) = asked(state)
    assert cp["status"] == "open" and cp["task"] == "t1" and cp["options"] == ["rewrite", "cancel"]
    assert state["tasks"]["t1"]["ladder"]["waiting_on"] == "second_rewrite"
    assert state["tasks"]["t1"]["ladder"]["rewrites_auto"] == 1
    result = run_cli("answer", run_id, cp["id"], "rewrite", cwd=project)
    assert result.code == 0, result.err
    state = poll(project, run_id, lambda s: s["status"] == "waiting_user" and len(asked(s)) == 2)
    second = next(c for c in asked(state) if c["status"] == "open")
    assert state["tasks"]["t1"]["ladder"]["level"] == "L3" and state["tasks"]["t1"]["ladder"]["waiting_on"] == "exit"
    result = run_cli("answer", "latest", second["id"], "cancel", cwd=project)
    assert result.code == 0, result.err
    state = poll(project, run_id, lambda s: s["status"] == "done")
    wait_engine_exit(project, run_id)
    assert state["tasks"]["t1"]["state"] == "cancelled" and state["tasks"]["t2"]["state"] == "approved"
    assert state["tasks"]["t1"]["brief"] == "do t1, better still" and state["tasks"]["t1"]["ladder"]["rewrites_total"] == 2
    log = assert_log_consistent(paths, run_id)
    verdicts = [v["verdict"] for v in state["tasks"]["t1"]["verdicts"]]
    assert verdicts == ["reject"] * 4  # L0, the automatic rewrite, the rewrite asked for, L3
    failures = of_type(log, "failure", "t1")
    assert len(failures) == 4 and len({f["fingerprint"] for f in failures}) == 1
    assert [(e["from_level"], e["to_level"]) for e in of_type(log, "ladder", "t1")] == [
        ("L0", "L0"), ("L0", "L1"), ("L1", "L1"), ("L1", "L3"), ("L3", "L3")]  # registered … L3, then cancelled
    assert of_type(log, "escalation", "t1") == [] and not state["retries"]  # the old retry never ran


def test_cancel_a_task_then_the_run_through_the_cli(project: Path, detached: Callable[..., str]) -> None:
    paths = setup_crew(project, worker=[work_rule(delay=60, task_id="t1", rule_id="slow")],
                       tasks=[task("t1"), task("t2", "tester", writes=["tests/**"], deps=["t1"])])
    run_id = detached()
    poll(project, run_id, lambda s: "t1" in s["tasks"] and s["tasks"]["t1"]["state"] == "executing"
         and any(j["pid"] for j in s["jobs"].values()))
    refused = run_cli("approve", "t1", cwd=project)
    assert refused.code == 2 and "cannot approve" in refused.err
    result = run_cli("cancel", "t1", cwd=project)
    assert result.code == 0 and "cancel_task applied" in result.out, result.out + result.err
    state = poll(project, run_id, lambda s: s["status"] == "blocked")
    assert state["tasks"]["t2"]["state"] == "blocked" and state["jobs"] == {}
    result = run_cli("cancel", run_id, cwd=project)
    assert result.code == 0, result.err
    state = poll(project, run_id, lambda s: s["status"] == "cancelled")
    wait_engine_exit(project, run_id)
    assert wait_gone(lambda: agent_processes(str(project))) == []
    log = assert_log_consistent(paths, run_id)
    assert of_type(log, "run.finished")[0]["what"] == "run cancelled"
    late = run_cli("pause", run_id, cwd=project)
    assert late.code == 2 and "is cancelled" in late.err
    assert events(paths, run_id)[-1]["type"] == "command"
