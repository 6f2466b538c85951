"""invoke() against misbehaving agents: every failure is a result, none is an exception.

The agent is the scripted runtime (a real process) in the real sandbox; a user profile in
the test's AGENT_BOX_HOME points it at a scenario whose prompts pick a failure mode.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import psutil
import pytest

from agentbox.core.agents import resolve as services
from agentbox.core.agents.invoke import Agent, InvokeResult, invoke
from agentbox.core.agents.sessions import SessionRecord

pytestmark = pytest.mark.bwrap

FLOOD_BYTES = 50 * 1024 * 1024

SCENARIO = {
    "defaults": {"usage": {"input_tokens": 10, "output_tokens": 5}},
    "rules": [
        {"id": "crash", "when": {"prompt_regex": "^crash$"}, "do": {"fail": "crash", "reply": "boom"}},
        {"id": "hang", "when": {"prompt_regex": "^hang$"}, "do": {"fail": "hang"}},
        {"id": "flood", "when": {"prompt_regex": "^flood$"},
         "do": {"fail": "flood", "flood_bytes": FLOOD_BYTES, "reply": "survived the flood"}},
        {"id": "garbage", "when": {"prompt_regex": "^garbage$"}, "do": {"fail": "garbage", "reply": "junk"}},
        {"id": "error_exit0", "when": {"prompt_regex": "^error_exit0$"},
         "do": {"fail": "error_exit0", "reply": "the tool reports a failure"}},
        {"id": "kill_self", "when": {"prompt_regex": "^kill_self$"}, "do": {"fail": "kill_self"}},
        {"id": "exit3", "when": {"prompt_regex": "^exit3$"}, "do": {"fail": "exit", "exit_code": 3, "reply": "half"}},
    ],
    "fallback": {"reply": "ok: {prompt} (turn {turn})"},
}


def make_profile(home: Path, name: str, **runtime: Any) -> Path:
    """A user profile in AGENT_BOX_HOME running SCENARIO (JSON is valid YAML)."""
    directory = home / "profiles" / name
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "scenario.json").write_text(json.dumps(SCENARIO))
    sandbox = runtime.pop("sandbox", {"network": False})
    profile = {"name": name, "runtime": {"tool": "scripted", "scenario": "scenario.json", **runtime},
               "sandbox": sandbox}
    (directory / "profile.yaml").write_text(json.dumps(profile))
    return directory


@pytest.fixture
def agent(agent_box_home: Path, tmp_path: Path) -> Agent:
    """The failure-prone scripted agent, used as `profile:flaky` in a scratch directory."""
    make_profile(agent_box_home, "flaky")
    workdir = tmp_path / "work"
    workdir.mkdir()
    return services.profile_agent("flaky", workdir, None)


def recorded_turn(agent: Agent, result: InvokeResult) -> dict[str, Any]:
    """The last turn line of the result's session."""
    record = agent.sessions.find(result.session_id)
    return agent.sessions.turns(record)[-1]


@pytest.mark.parametrize(("prompt", "error_kind"), [
    ("crash", "nonzero_exit"),
    ("garbage", "parse_error"),
    ("error_exit0", "tool_error"),
    ("kill_self", "killed"),
    ("exit3", "nonzero_exit"),
])
async def test_failures_come_back_as_results(agent: Agent, prompt: str, error_kind: str) -> None:
    result = await invoke(agent, prompt)
    assert (result.status, result.error_kind) == ("error", error_kind), result
    assert result.error and not result.ok
    assert result.sandboxed and result.turn == 1
    assert result.log_path and Path(result.log_path).is_file()
    turn = recorded_turn(agent, result)
    assert (turn["status"], turn["error_kind"], turn["prompt"]) == ("error", error_kind, prompt)
    record = agent.sessions.find(result.session_id)
    assert (record.status, record.last_status, record.last_error_kind) == ("idle", "error", error_kind)


async def test_failure_details(agent: Agent) -> None:
    crash = await invoke(agent, "crash")
    assert crash.exit_code == 2 and "RuntimeError: scripted crash" in (crash.error or "")
    tool = await invoke(agent, "error_exit0")
    assert tool.exit_code == 0 and tool.error == "the tool reports a failure"
    assert tool.usage.input_tokens == 10  # usage of a failed turn is still reported
    garbage = await invoke(agent, "garbage")
    assert "garbage: this is not JSON" in garbage.text and "unreadable scripted output" in (garbage.error or "")
    exit3 = await invoke(agent, "exit3")
    assert exit3.exit_code == 3 and exit3.text == "half"


def agent_processes(session_id: str) -> list[psutil.Process]:
    """Every process on the host whose environment carries this agentbox session id."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("AGENTBOX_SESSION_ID") == session_id:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize("sandboxed", [True, False], ids=["bwrap", "none"])
async def test_hang_times_out_and_leaves_no_process(agent: Agent, agent_box_home: Path, sandboxed: bool) -> None:
    if not sandboxed:
        make_profile(agent_box_home, "bare", sandbox="none")
        agent = services.profile_agent("bare", agent.cwd, None)
    spawned: list[int] = []
    task = asyncio.create_task(invoke(agent, "hang", timeout_s=1.5, on_spawn=lambda _r, pid: spawned.append(pid)))
    seen: dict[int, psutil.Process] = {}
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not task.done():
        if spawned:
            try:
                for child in [psutil.Process(spawned[0]), *psutil.Process(spawned[0]).children(recursive=True)]:
                    seen.setdefault(child.pid, child)
            except psutil.NoSuchProcess:
                pass
            if any(p.name() == "sleep" for p in seen.values()):
                break
        await asyncio.sleep(0.05)
    names = sorted(p.name() for p in seen.values())
    assert "sleep" in names, names  # the grandchild of the hang exists
    assert ("bwrap" in names) is sandboxed
    result = await task
    assert (result.status, result.error_kind) == ("error", "timeout"), result
    assert 1.4 < result.duration_s < 8, result.duration_s
    assert "1.5 s" in (result.error or "")
    left = [p for p in seen.values() if alive(p)]
    assert not left, [(p.pid, p.name()) for p in left]
    assert agent_processes(result.session_id) == []
    record = agent.sessions.find(result.session_id)
    assert record.status == "idle" and record.running is None and record.last_error_kind == "timeout"


async def test_agent_timeout_comes_from_the_agent_when_not_given(agent: Agent) -> None:
    from dataclasses import replace

    result = await invoke(replace(agent, timeout_s=0.5), "hang")
    assert result.error_kind == "timeout"
    assert agent_processes(result.session_id) == []


async def test_cancelled_invoke_kills_the_agent(agent: Agent) -> None:
    spawned: list[SessionRecord] = []
    task = asyncio.create_task(invoke(agent, "hang", on_spawn=lambda record, _pid: spawned.append(record)))
    for _ in range(200):
        if spawned and agent_processes(spawned[0].id):
            break
        await asyncio.sleep(0.05)
    assert spawned and agent_processes(spawned[0].id)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(100):
        if not [p for p in agent_processes(spawned[0].id) if alive(p)]:
            break
        await asyncio.sleep(0.05)
    assert not [p for p in agent_processes(spawned[0].id) if alive(p)]
    record = agent.sessions.find(spawned[0].id)  # the turn is recorded, not left "running"
    assert (record.status, record.running, record.last_error_kind, record.turns) == ("idle", None, "killed", 1)
    assert "cancelled" in agent.sessions.turns(record)[-1]["error"]


async def test_flood_keeps_memory_bounded_and_capture_capped(agent: Agent) -> None:
    assert (await invoke(agent, "warm up")).ok  # first-use imports are not the flood's cost
    process = psutil.Process()
    samples = [process.memory_info().rss]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append(process.memory_info().rss)
            time.sleep(0.002)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        result = await invoke(agent, "flood")
    finally:
        stop.set()
        sampler.join()
    growth = max(samples) - samples[0]
    assert growth < 20 * 1024 * 1024, f"RSS grew by {growth / 2**20:.1f} MiB during a 50 MiB flood"
    assert result.ok, result  # the result line came last, in the kept tail
    assert result.text == "survived the flood"
    assert result.truncated is True
    log = Path(result.log_path or "")
    assert log.stat().st_size >= FLOOD_BYTES  # the log keeps everything (under its cap)
    with log.open("rb") as handle:
        handle.seek(-4096, 2)
        assert b"survived the flood" in handle.read()
    turn = recorded_turn(agent, result)
    assert turn["text"] == "survived the flood" and turn["status"] == "ok"

    # Python's own accounting agrees: what stays in memory is the 1 MiB head + 4 MiB tail,
    # their text and the parser's copy of it (about 15 MiB whatever the flood's size)
    tracemalloc.start()
    try:
        again = await invoke(agent, "flood")
        _, traced_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert again.ok and again.truncated
    assert traced_peak < 20 * 1024 * 1024, f"allocations peaked at {traced_peak / 2**20:.1f} MiB"


async def test_missing_binary_is_spawn_failed(agent_box_home: Path, tmp_path: Path) -> None:
    make_profile(agent_box_home, "ghost", command=str(tmp_path / "no" / "such" / "python"))
    make_profile(agent_box_home, "bare-ghost", command=str(tmp_path / "no" / "such" / "python"), sandbox="none")
    for name, sandboxed in (("ghost", True), ("bare-ghost", False)):
        agent = services.profile_agent(name, tmp_path, None)
        result = await invoke(agent, "hello")
        assert (result.status, result.error_kind, result.sandboxed) == ("error", "spawn_failed", sandboxed), result
        assert "No such file" in (result.error or ""), result.error
        assert recorded_turn(agent, result)["error_kind"] == "spawn_failed"


async def test_many_invokes_run_concurrently_with_distinct_sessions(agent: Agent) -> None:
    prompts = [f"job {i}" for i in range(10)]
    started = time.monotonic()
    results = await asyncio.gather(*(invoke(agent, p) for p in prompts))
    elapsed = time.monotonic() - started
    assert all(r.ok for r in results), [r.error for r in results if not r.ok]
    assert [r.text for r in results] == [f"ok: {p} (turn 1)" for p in prompts]
    assert len({r.session_id for r in results}) == 10
    assert all(r.native_id == r.session_id for r in results)  # scripted takes the caller's id
    assert len(agent.sessions.list(agent.label)) == 10
    assert elapsed < 30


async def test_retry_after_a_failed_first_turn_resumes_the_half_made_session(agent: Agent) -> None:
    failed = await invoke(agent, "crash")
    assert failed.error_kind == "nonzero_exit"
    retried = await invoke(agent, "again", failed.session_id)
    assert retried.ok, retried
    assert retried.turn == 2 and retried.native_id == failed.session_id
