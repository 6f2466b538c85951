"""Group chat mode end to end: scripted speakers in bwrap, the pool, both ways to end,
invalid turns, budgets and a kill -9 in the middle of a chat."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentbox.core.engine.engine import Engine
from agentbox.core.engine.run_store import RunStore
from agentbox.core.paths import ProjectPaths
from tests.conftest import run_cli
from tests.engine.modes_support import (
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

READ_ONLY: dict[str, object] = {"writes": []}


def pool(project: ProjectPaths, run_id: str) -> list[dict[str, object]]:
    lines = (RunStore(project).dir(run_id) / "chat.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def chat_crew(project: Path, profile: str, speakers: list[str], **settings: object) -> ProjectPaths:
    roles = {name: {"profile": profile, **READ_ONLY} for name in speakers}
    return write_crew(project, "group_chat", roles, group_chat={"speakers": speakers, **settings})


def test_example_crew_chats_until_the_host_is_done(project: Path) -> None:
    result = run_cli("run", "Agree on the greeting", "--mode", "group_chat", cwd=project)
    assert result.code == 0, result.err + result.out
    paths = ProjectPaths(project)
    run = RunStore(paths).load(RunStore(paths).latest_id())
    assert run.status == "done" and run.result is not None
    assert run.result.terminated_by == "done_signal" and run.result.final_by == "host"
    messages = pool(paths, run.id)
    assert [m["n"] for m in messages] == [0, 1, 2, 3, 4]
    assert [m["role"] for m in messages] == ["host", "architect", "host", "skeptic", "host"]
    artifacts = RunStore(paths).artifacts_dir(run.id)
    assert "Agreed answer" in (artifacts / "final.md").read_text()
    transcript = (artifacts / "transcript.md").read_text()
    assert all(str(m["message"]).strip().splitlines()[0] in transcript for m in messages)
    manifest = {Path(e["path"]).name for e in RunStore(paths).manifest(run.id)}
    assert {"final.md", "transcript.md"} <= manifest


def test_round_robin_ends_at_max_rounds_and_sends_only_unseen_messages(project: Path) -> None:
    write_profile("talker", [
        rule("[agentbox:speech role=b round=1 ", {"message": "b thinks we are done", "done": True}),
        {"when": {"prompt_regex": r"\[agentbox:speech role=(?P<r>\w+) round=(?P<k>\d) n=(?P<n>\d+)\]"},
         "do": {"reply_json": {"message": "{r} says message {n}"}}},
    ])
    paths = chat_crew(project, "talker", ["a", "b", "c"], selection="round_robin", max_rounds=2)
    run = drive(paths, create(paths, "discuss", "group_chat"))
    assert run.status == "done", run.status_reason
    assert run.result is not None and run.result.terminated_by == "max_rounds"
    messages = pool(paths, run.id)
    assert [m["role"] for m in messages] == ["a", "b", "c", "a", "b", "c"]
    assert messages[1]["done"] is True  # b is not the done role: recorded, ignored
    log = events(paths, run.id)
    assert [e["n"] for e in of_type(log, "speech")] == list(range(6))
    assert "done signal ignored" in of_type(log, "speech")[1]["what"]
    for role in ("a", "b", "c"):
        assert len(sessions_of(paths, role)) == 1  # every turn resumed the role's own session
    first, second = turn_prompts(paths, "a")
    assert "No messages yet" in first and "group chat about this goal" in first
    assert "[1] b: b thinks we are done" in second and "[2] c: c says message 2" in second
    assert "[0] a:" not in second and "group chat about this goal" not in second
    third_of_c = turn_prompts(paths, "c")[1]
    assert "[3] a:" in third_of_c and "[4] b:" in third_of_c and "[2] c:" not in third_of_c


def test_lead_selects_speakers_and_its_done_signal_ends_the_chat(project: Path) -> None:
    write_profile("panel", [
        rule("[agentbox:speech role=lead round=1 ", {"message": "who knows?", "next_speaker": "nobody"}, times=1),
        rule("[agentbox:correction model=ChatTurn]", {"message": "Carol first.", "next_speaker": "carol"}),
        rule("[agentbox:speech role=lead round=2 ", {"message": "Now Bob.", "next_speaker": "bob"}),
        rule("[agentbox:speech role=lead round=3 ", {"message": "Settled: ship it.", "done": True}),
        rule("[agentbox:speech role=bob ", {"message": "bob here", "done": True}),
        rule("[agentbox:speech role=carol ", {"message": "carol here"}),
    ])
    paths = chat_crew(project, "panel", ["lead", "bob", "carol"], selection="lead_selects", lead="lead",
                      done_role="lead", max_rounds=5)
    run = drive(paths, create(paths, "decide", "group_chat"))
    assert run.status == "done", run.status_reason
    assert run.result is not None and run.result.terminated_by == "done_signal"
    assert run.result.rounds == 3 and run.result.summary == "Settled: ship it."
    messages = pool(paths, run.id)
    assert [m["role"] for m in messages] == ["lead", "carol", "lead", "bob", "lead"]
    log = events(paths, run.id)
    assert len(of_type(log, "reply.invalid")) == 1  # next_speaker "nobody": one corrective re-prompt
    assert not of_type(log, "failure")
    final = (RunStore(paths).artifacts_dir(run.id) / "final.md").read_text()
    assert "Settled: ship it." in final


def test_lead_selects_ends_at_max_rounds_without_done(project: Path) -> None:
    write_profile("panel", [
        rule("[agentbox:speech role=lead ", {"message": "Bob again.", "next_speaker": "bob"}),
        rule("[agentbox:speech role=bob ", {"message": "bob here"}),
    ])
    paths = chat_crew(project, "panel", ["lead", "bob"], selection="lead_selects", lead="lead", max_rounds=2)
    run = drive(paths, create(paths, "decide", "group_chat"))
    assert run.status == "done" and run.result is not None
    assert run.result.terminated_by == "max_rounds" and run.result.messages == 4


def test_a_tiny_run_budget_breaks_the_circuit(project: Path) -> None:
    write_profile("talker", [], fallback={"reply_json": {"message": "hello"}},
                  usage={"input_tokens": 5000, "output_tokens": 100})
    roles = {"a": {"profile": "talker", "writes": []}, "b": {"profile": "talker", "writes": []}}
    paths = write_crew(project, "group_chat", roles, limits={"budget": {"tokens_total": 1000}},
                       group_chat={"speakers": ["a", "b"], "max_rounds": 5})
    run_id = create(paths, "talk", "group_chat")
    seen: list[str] = []

    async def human(engine: Engine) -> None:
        await until(engine, lambda e: e.run.status == "circuit_broken")
        seen.append(engine.run.status)
        cp = next(c for c in engine.run.open_checkpoints() if c.kind == "run_budget")
        engine.apply_command({"action": "answer", "checkpoint": cp.id, "text": "cancel"})

    run = drive(paths, run_id, human)
    assert seen == ["circuit_broken"]
    assert run.status == "cancelled"
    assert len(of_type(events(paths, run_id), "speech")) == 1  # nothing new was dispatched
    assert run.totals.tokens == 5100


def test_kill_9_mid_chat_then_resume_loses_and_repeats_nothing(project: Path) -> None:
    write_profile("slow", [
        {"when": {"prompt_regex": r"\[agentbox:speech role=(?P<r>\w+) round=\d n=(?P<n>\d+)\]"},
         "do": {"delay_s": 0.4, "reply_json": {"message": "{r} #{n}"}}},
    ])
    paths = chat_crew(project, "slow", ["a", "b"], selection="round_robin", max_rounds=3)
    run_id = create(paths, "talk slowly", "group_chat")
    proc = start_engine(paths, run_id)
    kill_when(paths, run_id, proc, lambda log: len(of_type(log, "speech")) >= 2
              and of_type(log, "dispatch")[-1]["seq"] > of_type(log, "speech")[-1]["seq"])
    run = finish_engine(paths, run_id)
    assert run.status == "done", run.status_reason
    log = events(paths, run_id)
    assert [e["n"] for e in of_type(log, "speech")] == list(range(6))
    assert [e["seq"] for e in log] == list(range(1, len(log) + 1))
    assert of_type(log, "recover"), "the resumed engine re-ran the interrupted speech"
    messages = pool(paths, run_id)
    assert [m["n"] for m in messages] == list(range(6))
    assert [m["message"] for m in messages] == [f"{'ab'[i % 2]} #{i}" for i in range(6)]
