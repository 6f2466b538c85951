"""Handoff mode end to end: scripted roles in bwrap answer or hand off; the handoff bound,
the ping-pong checkpoint (continue, re-route, stop), invalid targets, budgets and a
kill -9 in the middle of a handoff chain."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentbox.core.engine.engine import Engine
from agentbox.core.engine.run_store import RunStore
from agentbox.core.paths import ProjectPaths
from tests.conftest import run_cli
from tests.engine.modes_support import (
    answer_when_open,
    drive,
    finish_engine,
    kill_when,
    rule,
    sessions_of,
    turn_prompts,
    write_crew,
    write_profile,
)
from tests.engine.support import create, events, of_type, start_engine, until

pytestmark = pytest.mark.bwrap


def handoff_crew(project: Path, profile: str, roles: list[str], **settings: object) -> ProjectPaths:
    return write_crew(project, "handoff", {name: {"profile": profile, "writes": []} for name in roles},
                      handoff={"start": roles[0], **settings})


def handoff(to: str, message: str) -> dict[str, str]:
    return {"action": "handoff", "to": to, "message": message}


def test_example_crew_hands_over_and_answers(project: Path) -> None:
    result = run_cli("run", "How should the greeting behave?", "--mode", "handoff", cwd=project)
    assert result.code == 0, result.err + result.out
    paths = ProjectPaths(project)
    store = RunStore(paths)
    run = store.load(store.latest_id())
    assert run.status == "done" and run.result is not None
    assert run.result.answered_by == "frontdesk" and run.result.handoffs == 2
    assert [h.to for h in run.mode_state.trail] == ["specialist", "frontdesk"]
    assert (project / "docs" / "greeting-notes.md").is_file()  # the specialist's write scope
    assert "Hello!" in (store.artifacts_dir(run.id) / "final.md").read_text()
    assert "frontdesk → specialist" in (store.artifacts_dir(run.id) / "transcript.md").read_text()
    assert len(sessions_of(paths, "frontdesk")) == 1  # the front desk resumed its own session
    second = turn_prompts(paths, "frontdesk")[1]
    assert "specialist handed the conversation to you" in second


def test_max_handoffs_ends_the_run_failed(project: Path) -> None:
    write_profile("relay", [
        rule("[agentbox:handoff role=a ", handoff("b", "over to b")),
        rule("[agentbox:handoff role=b ", handoff("c", "over to c")),
        rule("[agentbox:handoff role=c ", handoff("a", "over to a")),
    ])
    paths = handoff_crew(project, "relay", ["a", "b", "c"], max_handoffs=4, max_ping_pong=5)
    run = drive(paths, create(paths, "pass it on", "handoff"))
    assert run.status == "failed" and run.result is not None
    assert run.result.terminated_by == "max_handoffs" and run.result.handoffs == 4
    log = events(paths, run.id)
    assert [e["to"] for e in of_type(log, "handoff")] == ["b", "c", "a", "b"]
    assert len(of_type(log, "handoff.refused")) == 1
    assert "No handoffs are left" in turn_prompts(paths, "b")[-1]
    transcript = (RunStore(paths).artifacts_dir(run.id) / "transcript.md").read_text()
    assert "not routed" in transcript and not (RunStore(paths).artifacts_dir(run.id) / "final.md").exists()


PING_PONG = [
    rule("Note from the human: settle it", {"action": "answer", "message": "settled by b"}),
    rule("[agentbox:handoff role=a ", handoff("b", "your call")),
    rule("[agentbox:handoff role=b ", handoff("a", "no, your call")),
    rule("[agentbox:handoff role=c ", {"action": "answer", "message": "c decides"}),
]


def test_ping_pong_becomes_a_checkpoint_and_continue_passes_the_note(project: Path) -> None:
    write_profile("ping", PING_PONG)
    paths = handoff_crew(project, "ping", ["a", "b", "c"], max_handoffs=10, max_ping_pong=2)
    run = drive(paths, create(paths, "decide", "handoff"), answer_when_open("ping_pong", "continue settle it"))
    assert run.status == "done", run.status_reason
    assert run.result is not None and run.result.summary == "settled by b"
    log = events(paths, run.id)
    checkpoints = [e for e in of_type(log, "checkpoint") if "ping_pong" in e["what"]]
    assert len(checkpoints) == 1
    assert [e["to"] for e in of_type(log, "handoff")] == ["b", "a", "b"]  # the third one was held, then routed
    assert run.mode_state.trail[-1].note == "settle it"


def test_ping_pong_answer_naming_a_role_reroutes(project: Path) -> None:
    write_profile("ping", PING_PONG)
    paths = handoff_crew(project, "ping", ["a", "b", "c"], max_handoffs=10, max_ping_pong=2)
    run = drive(paths, create(paths, "decide", "handoff"), answer_when_open("ping_pong", "c please decide"))
    assert run.status == "done" and run.result is not None
    assert run.result.answered_by == "c"
    assert "Note from the human: please decide" in turn_prompts(paths, "c")[0]


def test_ping_pong_stop_cancels_the_run(project: Path) -> None:
    write_profile("ping", PING_PONG)
    paths = handoff_crew(project, "ping", ["a", "b"], max_handoffs=10, max_ping_pong=1)
    run = drive(paths, create(paths, "decide", "handoff"), answer_when_open("ping_pong", "stop"))
    assert run.status == "cancelled" and run.result is not None
    assert run.result.terminated_by == "human" and run.mode_state.hop == 1


def test_unknown_target_gets_one_correction_then_counts_as_a_contract_defect(project: Path) -> None:
    write_profile("lost", [
        rule("[agentbox:handoff role=a ", handoff("nobody", "help")),
        rule("[agentbox:correction model=Handoff]", handoff("a", "to myself")),
    ])
    paths = handoff_crew(project, "lost", ["a", "b"])
    run_id = create(paths, "route it", "handoff")

    async def human(engine: Engine) -> None:
        await until(engine, lambda e: any(c.kind == "retry_escalation" for c in e.run.open_checkpoints()))
        cp = next(c for c in engine.run.open_checkpoints() if c.kind == "retry_escalation")
        engine.apply_command({"action": "answer", "checkpoint": cp.id, "text": "cancel"})

    run = drive(paths, run_id, human)
    log = events(paths, run_id)
    assert of_type(log, "reply.invalid")
    assert {e["what"].split(" in ")[0] for e in of_type(log, "failure")} == {"contract_defect"}
    assert run.status == "failed" and "cannot go on" in str(run.status_reason)


def test_a_tiny_run_budget_breaks_the_circuit(project: Path) -> None:
    write_profile("relay", [rule("[agentbox:handoff role=a ", handoff("b", "yours"))],
                  fallback={"reply_json": {"action": "answer", "message": "done"}},
                  usage={"input_tokens": 4000, "output_tokens": 100})
    paths = write_crew(project, "handoff", {"a": {"profile": "relay"}, "b": {"profile": "relay"}},
                       limits={"budget": {"tokens_total": 1000}}, handoff={"start": "a"})
    run_id = create(paths, "route it", "handoff")
    statuses: list[str] = []

    async def human(engine: Engine) -> None:
        await until(engine, lambda e: e.run.status == "circuit_broken")
        statuses.append(engine.run.status)
        cp = next(c for c in engine.run.open_checkpoints() if c.kind == "run_budget")
        engine.apply_command({"action": "answer", "checkpoint": cp.id, "text": "raise 100000"})

    run = drive(paths, run_id, human)
    assert statuses == ["circuit_broken"]
    assert run.status == "done" and run.result is not None and run.result.answered_by == "b"


def test_kill_9_mid_handoff_then_resume_loses_and_repeats_nothing(project: Path) -> None:
    """The engine dies while b holds the conversation; the resumed engine re-runs b's turn in
    b's own session and the chain a → b → c ends once, with every handoff logged once."""
    write_profile("relay", [
        rule("[agentbox:handoff role=a ", handoff("b", "over to b"), delay=0.4),
        rule("[agentbox:handoff role=b ", handoff("c", "over to c"), delay=0.4),
        rule("[agentbox:handoff role=c ", {"action": "answer", "message": "c answers"}, delay=0.4),
    ])
    paths = handoff_crew(project, "relay", ["a", "b", "c"], max_handoffs=5)
    run_id = create(paths, "pass it on", "handoff")
    proc = start_engine(paths, run_id)
    kill_when(paths, run_id, proc, lambda log: len(of_type(log, "handoff")) >= 1
              and of_type(log, "dispatch")[-1]["seq"] > of_type(log, "handoff")[-1]["seq"])
    run = finish_engine(paths, run_id)
    assert run.status == "done", run.status_reason
    assert run.result is not None and run.result.answered_by == "c" and run.result.handoffs == 2
    log = events(paths, run_id)
    assert [e["to"] for e in of_type(log, "handoff")] == ["b", "c"]
    assert [e["seq"] for e in log] == list(range(1, len(log) + 1))
    assert of_type(log, "recover"), "the resumed engine re-ran the interrupted turn"
    assert [len(sessions_of(paths, role)) for role in "abc"] == [1, 1, 1]  # b's turn resumed in its session
    assert [h.to for h in run.mode_state.trail] == ["b", "c"]
