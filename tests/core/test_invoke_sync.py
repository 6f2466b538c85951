"""invoke_sync(), the blocking turn the CLI runs: the same contract as invoke() without an event loop.

Same failure-prone scripted agent as test_invoke.py, in the real sandbox: every failure is
a result, a timeout or an interrupted caller leaves no process behind, a flood is capped,
and a running turn's record shows its pid.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest

from agentbox.core.agents import resolve as services
from agentbox.core.agents.invoke import Agent, invoke_sync
from agentbox.core.agents.sessions import SessionRecord
from tests.core.test_invoke import FLOOD_BYTES, agent_processes, alive, make_profile, recorded_turn

pytestmark = pytest.mark.bwrap


@pytest.fixture
def agent(agent_box_home: Path, tmp_path: Path) -> Agent:
    """The failure-prone scripted agent, used as `profile:flaky` in a scratch directory."""
    make_profile(agent_box_home, "flaky")
    workdir = tmp_path / "work"
    workdir.mkdir()
    return services.profile_agent("flaky", workdir, None)


def test_an_answer_and_its_resumed_turn(agent: Agent) -> None:
    first = invoke_sync(agent, "hello")
    assert first.ok and first.text == "ok: hello (turn 1)" and first.sandboxed, first
    second = invoke_sync(agent, "again", first.session_id)
    assert second.ok and second.text == "ok: again (turn 2)" and second.turn == 2
    record = agent.sessions.find(first.session_id)
    assert (record.status, record.turns, record.running) == ("idle", 2, None)
    assert [t["prompt"] for t in agent.sessions.turns(record)] == ["hello", "again"]


@pytest.mark.parametrize(("prompt", "error_kind"), [
    ("crash", "nonzero_exit"),
    ("garbage", "parse_error"),
    ("error_exit0", "tool_error"),
    ("kill_self", "killed"),
    ("exit3", "nonzero_exit"),
])
def test_failures_come_back_as_results(agent: Agent, prompt: str, error_kind: str) -> None:
    result = invoke_sync(agent, prompt)
    assert (result.status, result.error_kind) == ("error", error_kind), result
    assert recorded_turn(agent, result)["error_kind"] == error_kind
    record = agent.sessions.find(result.session_id)
    assert (record.status, record.last_status, record.last_error_kind) == ("idle", "error", error_kind)


@pytest.mark.parametrize("sandboxed", [True, False], ids=["bwrap", "none"])
def test_hang_times_out_and_leaves_no_process(agent: Agent, agent_box_home: Path, sandboxed: bool) -> None:
    if not sandboxed:
        make_profile(agent_box_home, "bare", sandbox="none")
        agent = services.profile_agent("bare", agent.cwd, None)
    spawned: list[SessionRecord] = []
    result = invoke_sync(agent, "hang", timeout_s=1.5, on_spawn=lambda record, _pid: spawned.append(record))
    assert (result.status, result.error_kind) == ("error", "timeout"), result
    assert 1.4 < result.duration_s < 8, result.duration_s
    assert spawned and spawned[0].running is None  # the record was finished after the spawn
    assert agent_processes(result.session_id) == []
    record = agent.sessions.find(result.session_id)
    assert record.status == "idle" and record.last_error_kind == "timeout"


def test_the_running_record_shows_the_pid_while_the_agent_works(agent: Agent) -> None:
    session_ids: list[str] = []
    seen: dict[str, object] = {}

    def watch() -> None:
        for _ in range(200):
            if session_ids:
                paths = list(agent.sessions.root.glob(f"*/{session_ids[0]}.json"))
                data = json.loads(paths[0].read_text()) if paths else {}
                if (data.get("running") or {}).get("pid"):
                    seen.update(data["running"])
                    return
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    result = invoke_sync(agent, "hang", timeout_s=2, on_spawn=lambda record, _pid: session_ids.append(record.id))
    watcher.join()
    assert result.error_kind == "timeout"
    assert seen.get("turn") == 1 and isinstance(seen.get("create_time"), float), seen


def test_ctrl_c_kills_the_agent_and_records_the_turn(agent: Agent) -> None:
    spawned: list[tuple[SessionRecord, int]] = []
    children: dict[psutil.Process, str] = {}

    def press_ctrl_c() -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if spawned:
                with contextlib.suppress(psutil.Error):
                    for child in psutil.Process(spawned[0][1]).children(recursive=True):
                        children.setdefault(child, child.name())
                if "sleep" in children.values():  # the agent is at work, the caller waits
                    signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
                    return
            time.sleep(0.05)

    presser = threading.Thread(target=press_ctrl_c)
    presser.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            invoke_sync(agent, "hang", timeout_s=30, on_spawn=lambda record, pid: spawned.append((record, pid)))
    finally:
        presser.join()
    record = spawned[0][0]
    assert "sleep" in children.values(), children
    deadline = time.monotonic() + 10  # SIGKILL is delivered at once; a loaded machine reaps a moment later
    while [p for p in children if alive(p)] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in children if alive(p)]
    assert agent_processes(record.id) == []
    stored = agent.sessions.find(record.id)
    assert (stored.status, stored.running, stored.last_error_kind, stored.turns) == ("idle", None, "killed", 1)
    assert "interrupted" in agent.sessions.turns(stored)[-1]["error"]


def test_flood_is_capped(agent: Agent) -> None:
    result = invoke_sync(agent, "flood")
    assert result.ok and result.text == "survived the flood" and result.truncated, result
    assert Path(result.log_path or "").stat().st_size >= FLOOD_BYTES


def test_missing_binary_is_spawn_failed(agent_box_home: Path, tmp_path: Path) -> None:
    make_profile(agent_box_home, "bare-ghost", command=str(tmp_path / "no" / "such" / "python"), sandbox="none")
    agent = services.profile_agent("bare-ghost", tmp_path, None)
    result = invoke_sync(agent, "hello")
    assert (result.status, result.error_kind) == ("error", "spawn_failed"), result
    assert recorded_turn(agent, result)["error_kind"] == "spawn_failed"
