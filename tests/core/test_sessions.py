"""Session history: records written before the process starts, one line per turn, honest
totals, resume by agentbox id, and the refusals (another role's session, a busy session).

Turns are real: the scripted agent runs through invoke() in the sandbox.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agentbox.core.agents import resolve as services
from agentbox.core.agents.invoke import Agent, invoke
from agentbox.core.agents.sessions import SessionRecord, SessionStore, Totals
from agentbox.core.errors import NotFoundError, UsageError
from agentbox.core.paths import ProjectPaths
from agentbox.core.runtimes.base import Usage

SCENARIO = {
    "defaults": {"usage": {"input_tokens": 100, "cached_input_tokens": 20, "output_tokens": 30},
                 "cost_usd": 0.01},
    "rules": [
        {"id": "peek", "when": {"prompt_regex": "^peek$"},
         "do": {"read": "{cwd}/.agent-box/sessions/{role}/{session_id}.json", "reply": "{reads}"}},
        {"id": "unknown", "when": {"prompt_regex": "^no usage$"},
         "do": {"usage": "unknown", "cost_usd": None, "reply": "usage unknown"}},
        {"id": "slow", "when": {"prompt_regex": "^slow$"}, "do": {"delay_s": 1.0, "reply": "slow turn {turn}"}},
        {"id": "crash", "when": {"prompt_regex": "^crash$"}, "do": {"fail": "crash"}},
        {"id": "system", "when": {"prompt_regex": "^system$"}, "do": {"reply": "{system}"}},
    ],
    "fallback": {"reply": "turn {turn}: {prompt}"},
}

pytestmark = pytest.mark.bwrap


def make_profile(home: Path, name: str) -> None:
    """A user profile in AGENT_BOX_HOME running SCENARIO (JSON is valid YAML)."""
    directory = home / "profiles" / name
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "scenario.json").write_text(json.dumps(SCENARIO))
    profile = {"name": name, "runtime": {"tool": "scripted", "scenario": "scenario.json"},
               "sandbox": {"network": False}}
    (directory / "profile.yaml").write_text(json.dumps(profile))


@pytest.fixture
def proj(project: Path, agent_box_home: Path) -> ProjectPaths:
    """The example project with builder and tester on the `diary` profile."""
    make_profile(agent_box_home, "diary")
    crew = {"mode": "sequential", "roles": {
        "builder": {"profile": "diary", "instructions": "roles/builder.md", "writes": ["src/**"]},
        "tester": {"profile": "diary", "writes": ["tests/**"]},
    }}
    (project / ".agent-box" / "crew.yaml").write_text(json.dumps(crew))
    return ProjectPaths(project)


@pytest.fixture
def builder(proj: ProjectPaths) -> Agent:
    return services.role_agent(proj, "builder")


def record_file(proj: ProjectPaths, role: str, session_id: str) -> Path:
    return proj.sessions_dir / role / f"{session_id}.json"


async def test_record_is_on_disk_before_the_process_starts(proj: ProjectPaths, builder: Agent) -> None:
    seen_at_spawn: list[dict[str, Any]] = []

    def on_spawn(record: SessionRecord, pid: int) -> None:
        data = json.loads(record_file(proj, "builder", record.id).read_text())
        seen_at_spawn.append({**data, "spawned_pid": pid})

    result = await invoke(builder, "peek", on_spawn=on_spawn)
    assert result.ok, result
    # the session records are hidden from the agent (an agent could flock or plant them)
    from_inside = json.loads(result.text)[str(record_file(proj, "builder", result.session_id))]
    assert '"running"' not in from_inside, from_inside
    [spawn] = seen_at_spawn
    assert spawn["status"] == "running" and spawn["running"]["turn"] == 1
    assert spawn["running"]["log"] == result.log_path
    # the pid is written once the turn has run a moment (next test); this turn was shorter
    after = json.loads(record_file(proj, "builder", result.session_id).read_text())
    assert (after["status"], after["running"], after["turns"], after["last_status"]) == ("idle", None, 1, "ok")


async def test_record_shows_running_with_pid_while_the_agent_works(proj: ProjectPaths, builder: Agent) -> None:
    session_id = "0f0f0f0f-1111-4222-8333-444455556666"
    task = asyncio.create_task(invoke(builder, "slow", new_session_id=session_id))
    path = record_file(proj, "builder", session_id)
    running: dict[str, Any] = {}
    for _ in range(100):
        if path.exists():
            data = json.loads(path.read_text())
            if data["status"] == "running" and data["running"]["pid"]:
                running = data
                break
        await asyncio.sleep(0.02)
    assert running, "never saw the running record"
    assert running["running"]["turn"] == 1 and running["running"]["create_time"] > 0
    result = await task
    assert result.ok and result.session_id == session_id and result.text == "slow turn 1"


async def test_one_turn_line_per_turn(proj: ProjectPaths, builder: Agent) -> None:
    first = await invoke(builder, "hello")
    second = await invoke(builder, "crash", first.session_id)
    third = await invoke(builder, "again", first.session_id)
    store = builder.sessions
    record = store.find(first.session_id)
    turns = store.turns(record)
    assert [t["turn"] for t in turns] == [1, 2, 3] and record.turns == 3
    assert [t["prompt"] for t in turns] == ["hello", "crash", "again"]
    assert [t["status"] for t in turns] == ["ok", "error", "ok"]
    assert [t["error_kind"] for t in turns] == [None, "nonzero_exit", None]
    assert turns[0]["text"] == "turn 1: hello" and turns[0]["error"] is None
    assert "scripted crash" in turns[1]["error"]
    assert turns[2]["text"] == third.text == "turn 2: again"  # the crash was not a turn of the agent
    for turn in turns:
        assert {"started", "finished", "usage", "duration_s", "exit_code", "native_id", "log_path"} <= set(turn)
        assert turn["finished"] >= turn["started"] and turn["duration_s"] >= 0
        assert Path(turn["log_path"]).is_file()
    assert turns[0]["usage"] == Usage(100, 20, None, 30, None, 0.01, "tool").as_dict()
    assert turns[1]["exit_code"] == 2 and second.error_kind == "nonzero_exit"
    assert (record.last_status, record.last_error_kind) == ("ok", None)


async def test_totals_keep_unknown_usage_unknown(builder: Agent) -> None:
    first = await invoke(builder, "hello")
    unknown = await invoke(builder, "no usage", first.session_id)
    assert unknown.ok and unknown.usage.known is False and unknown.usage.total_tokens is None
    record = builder.sessions.find(first.session_id)
    turn = builder.sessions.turns(record)[-1]
    assert all(value is None for value in turn["usage"].values()), turn["usage"]
    totals = record.totals
    assert (totals.input_tokens, totals.cached_input_tokens, totals.output_tokens) == (100, 20, 30)
    assert totals.unknown_usage_turns == 1 and totals.tokens == 150
    assert totals.cost_usd == pytest.approx(0.01)
    on_disk = json.loads(record_file(ProjectPaths(builder.cwd), "builder", record.id).read_text())
    assert on_disk["totals"]["unknown_usage_turns"] == 1 and on_disk["totals"]["tokens"] == 150


def test_totals_arithmetic() -> None:
    totals = Totals()
    totals.add(Usage())
    assert (totals.tokens, totals.unknown_usage_turns, totals.cost_usd) == (0, 1, None)
    totals.add(Usage(input_tokens=5, output_tokens=None))
    totals.add(Usage(output_tokens=7, reasoning_tokens=3, cost_usd=0.5))
    assert (totals.input_tokens, totals.output_tokens, totals.reasoning_tokens) == (5, 7, 3)
    assert (totals.tokens, totals.unknown_usage_turns, totals.cost_usd) == (15, 1, 0.5)


async def test_resume_by_agentbox_id_resumes_the_native_session(builder: Agent) -> None:
    first = await invoke(builder, "remember 42")
    assert first.ok and first.turn == 1 and first.native_id
    second = await invoke(builder, "what was it?", first.session_id)
    assert second.ok, second
    assert (second.session_id, second.native_id, second.turn) == (first.session_id, first.native_id, 2)
    assert second.text == "turn 2: what was it?"  # the agent itself counts the resumed turn
    native = builder.profile.config_dir / "sessions" / f"{first.native_id}.json"
    assert [t["prompt"] for t in json.loads(native.read_text())["turns"]] == ["remember 42", "what was it?"]
    fresh = await invoke(builder, "new one")
    assert fresh.session_id != first.session_id and fresh.text == "turn 1: new one"


async def test_role_instructions_and_knowledge_reach_the_first_turn(builder: Agent) -> None:
    result = await invoke(builder, "system")
    assert "# Your role: builder" in result.text
    assert "# Shared project knowledge" in result.text


async def test_session_of_another_role_is_refused(proj: ProjectPaths, builder: Agent) -> None:
    mine = await invoke(builder, "hello")
    tester = services.role_agent(proj, "tester")
    with pytest.raises(UsageError, match="belongs to builder"):
        await invoke(tester, "let me in", mine.session_id)
    assert builder.sessions.find(mine.session_id).turns == 1


async def test_unknown_session_is_refused(builder: Agent) -> None:
    with pytest.raises(NotFoundError, match="no session"):
        await invoke(builder, "hello", "00000000-0000-4000-8000-000000000000")


async def test_busy_session_is_refused_with_a_clear_error(builder: Agent) -> None:
    first = await invoke(builder, "hello")
    spawned = asyncio.Event()
    slow = asyncio.create_task(invoke(builder, "slow", first.session_id, on_spawn=lambda *_: spawned.set()))
    await asyncio.wait_for(spawned.wait(), 10)
    with pytest.raises(UsageError, match="busy") as caught:
        await invoke(builder, "me too", first.session_id)
    assert caught.value.hint and "wait" in caught.value.hint
    done = await slow
    assert done.ok and done.turn == 2
    record = builder.sessions.find(first.session_id)
    assert record.turns == 2 and [t["prompt"] for t in builder.sessions.turns(record)] == ["hello", "slow"]
    assert (await invoke(builder, "now", first.session_id)).turn == 3  # free again


async def test_profile_sessions_live_in_agent_box_home(agent_box_home: Path, tmp_path: Path) -> None:
    make_profile(agent_box_home, "diary")
    agent = services.profile_agent("diary", tmp_path, None)
    result = await invoke(agent, "hello")
    assert result.ok and result.role is None
    assert (agent_box_home / "sessions" / "profile@diary" / f"{result.session_id}.json").is_file()
    assert services.session_store_for("profile:diary", None).find(result.session_id).owner == "profile:diary"


async def test_store_lists_newest_first_and_knows_the_latest(builder: Agent, proj: ProjectPaths) -> None:
    a = await invoke(builder, "one")
    b = await invoke(builder, "two")
    await invoke(builder, "three", a.session_id)  # a is now the most recently used
    t = await invoke(services.role_agent(proj, "tester"), "hi")
    store = SessionStore(proj.sessions_dir)
    assert [r.id for r in store.list("builder")] == [a.session_id, b.session_id]
    assert store.latest("builder").id == a.session_id  # type: ignore[union-attr]
    assert {r.id for r in store.list()} == {a.session_id, b.session_id, t.session_id}
    assert store.latest("nobody") is None


def test_record_round_trips_through_json() -> None:
    record = SessionRecord(id="x", owner="builder", role="builder", profile="p", tool="scripted",
                           cwd="/w", created=1.0, updated=2.0, native_id="n", turns=2,
                           adapter_state={"k": [1]}, totals=Totals(input_tokens=3, unknown_usage_turns=1))
    data = json.loads(json.dumps(record.as_dict()))
    assert data["totals"]["tokens"] == 3
    assert SessionRecord.from_dict({**data, "some_future_key": 1}) == record


# ----------------------------------------------------------------------------- hostile records


def _record(session_id: str = "5b0e1c1e-0000-4000-8000-000000000001", owner: str = "builder") -> SessionRecord:
    return SessionRecord(id=session_id, owner=owner, role=owner, profile="p", tool="scripted", cwd="/x",
                         created=1.0, updated=2.0)


@pytest.mark.parametrize("bad_id", ["*", "../x", "a/b", "[ab]*", "", ".."])
def test_session_ids_are_never_globbed_or_made_into_paths(tmp_path: Path, bad_id: str) -> None:
    sessions = SessionStore(tmp_path)
    sessions.save(_record())
    with pytest.raises(UsageError, match="invalid session id"):
        sessions.find(bad_id)


@pytest.mark.parametrize("damage", ["garbage", "wrong-type", "list", "fifo", "dev-zero", "directory"])
def test_a_damaged_session_record_is_a_located_error_and_the_others_list(tmp_path: Path, damage: str) -> None:
    import os

    from agentbox.core.errors import StateError

    sessions = SessionStore(tmp_path)
    good, bad = _record(), _record("5b0e1c1e-0000-4000-8000-000000000002")
    sessions.save(good)
    sessions.save(bad)
    path = tmp_path / "builder" / f"{bad.id}.json"
    path.unlink()
    if damage == "garbage":
        path.write_bytes(b"\xff\x00{{")
    elif damage == "wrong-type":
        path.write_text(json.dumps({**bad.as_dict(), "turns": "many", "totals": {"input_tokens": []}}))
    elif damage == "list":
        path.write_text("[]")
    elif damage == "fifo":
        os.mkfifo(path)
    elif damage == "dev-zero":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()
    with pytest.raises(StateError, match=str(path)):
        sessions.find(bad.id)
    damaged: list[StateError] = []
    assert [r.id for r in sessions.list(damaged=damaged)] == [good.id]
    assert len(damaged) == 1 and str(path) in damaged[0].message


def test_sessions_show_refuses_a_glob_through_the_cli(project: Path) -> None:
    from tests.conftest import run_cli

    for bad in ("*", "../../etc/passwd", "?"):
        result = run_cli("sessions", "show", bad, cwd=project, timeout=30)
        assert result.code == 2 and "invalid session id" in result.err and "Traceback" not in result.err


def test_a_pid_note_that_cannot_be_written_prints_no_traceback(tmp_path: Path) -> None:
    """The pid note runs as an event-loop callback mid-turn: a record it cannot write (a full
    disk, here a directory that cannot be made) must not surface as asyncio's "Exception in
    callback" traceback; the turn's end writes the record and reports what is wrong."""
    from agentbox.core.agents.invoke import _note_pid

    (tmp_path / "file").write_text("not a directory")
    record = _record()
    record.running = {"turn": 1, "pid": None, "started": 1.0, "log": None}
    failures: list[dict[str, Any]] = []

    async def note() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: failures.append(context))
        loop.call_soon(_note_pid, SessionStore(tmp_path / "file" / "sessions"), record)
        await asyncio.sleep(0.05)

    asyncio.run(note())
    assert failures == []
