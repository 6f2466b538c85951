"""The runner seam and the local runner's admission: a turn starts only when the machine has room.

The engine hands every turn to a `TurnRunner`; here a runner of the test's own (the local
runner, recording what it is handed) and the local runner with a fake reading of the
machine. The agents are real scripted processes under bwrap.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import psutil
import pytest

from agentbox.core.agents import resolve as services
from agentbox.core.agents.invoke import new_session_id
from agentbox.core.config.user_config import load_user_config
from agentbox.core.engine.engine import Engine
from agentbox.core.engine.run_store import RunStore
from agentbox.core.engine.runners import configured_runner
from agentbox.core.engine.runners.admission import AdmissionLimits, PeakStore, Room, decide, need_mb
from agentbox.core.engine.runners.base import Turn, TurnDone
from agentbox.core.engine.runners.local import LocalRunner
from agentbox.core.errors import ConfigError
from agentbox.tui.widgets.queue import label, queue_rows
from tests.conftest import run_cli
from tests.engine.support import create, events, of_type, setup_crew, task, until
from tests.engine.test_worktree_runs import make_repo

GB = 1024.0


def room(available_mb: float, *, load: float = 0.0, cpus: int = 2, total_mb: float = 8 * GB) -> Room:
    return Room(available_mb=available_mb, total_mb=total_mb, load=load, cpus=cpus)


# ----------------------------------------------------------------------------- the pure rules


@pytest.mark.parametrize(("need", "reading", "reserved", "expected"), [
    (256, room(4 * GB), 0, None),
    (256, room(700), 0, "waiting for memory: the turn needs 256 MB, 188 MB is free"),
    (256, room(1400), 700, "waiting for memory: the turn needs 256 MB, 188 MB is free"),
    (256, room(1400), 0, None),
    (9 * GB, room(8 * GB), 0, "more than this machine's"),
    (256, room(4 * GB, load=18.0), 0, "waiting for CPU: load 18.0 on 2 core(s), the limit is 8 per core"),
    (256, room(4 * GB, load=15.9), 0, None),
])
def test_admission_needs_memory_and_cpu(need: float, reading: Room, reserved: float, expected: str | None) -> None:
    held = decide(need, reading, reserved, AdmissionLimits(reserve_mb=512))
    if expected is None:
        assert held is None
    else:
        assert held is not None and expected in held


def test_a_load_limit_of_none_never_holds_a_turn() -> None:
    assert decide(256, room(4 * GB, load=500.0), 0, AdmissionLimits(max_load_per_cpu=None)) is None


def test_the_need_is_the_profile_s_else_the_tool_s_peak_else_the_default() -> None:
    assert need_mb(900, 300.0) == 900
    assert need_mb(None, 300.0) == 300
    assert need_mb(None, None) == 256


def test_peaks_are_kept_per_tool_bounded_and_survive_a_damaged_file(tmp_path: Path) -> None:
    store = PeakStore(tmp_path / "runner" / "peaks.json")
    assert store.peak("claude") is None
    for value in range(1, 30):
        store.add("claude", float(value))
    store.add("codex", 5.0)
    assert store.peak("claude") == 29.0 and store.peak("codex") == 5.0
    assert len(json.loads(store.path.read_text())["claude"]) == 20
    store.path.write_text("{not json")
    assert store.peak("claude") is None  # a damaged file means "never measured", not a crash
    store.add("claude", 7.0)
    assert store.peak("claude") == 7.0


def test_user_config_names_the_runner_limits(agent_box_home: Path) -> None:
    (agent_box_home / "config.yaml").write_text("runner:\n  reserve_mb: 2048\n  max_load_per_cpu: null\n")
    runner = configured_runner()
    assert isinstance(runner, LocalRunner)
    assert runner.limits == AdmissionLimits(reserve_mb=2048, max_load_per_cpu=None)
    (agent_box_home / "config.yaml").write_text("runner:\n  kind: local\n  reserve: 3\n")
    with pytest.raises(ConfigError) as caught:
        load_user_config()
    assert "config.yaml" in caught.value.message and "reserve" in caught.value.message


def test_user_config_names_the_ray_cluster_s_certificates(agent_box_home: Path, tmp_path: Path) -> None:
    from agentbox.core.engine.runners.ray_runner import RayRunner

    for name in ("ca.crt", "node.crt", "node.key"):
        (tmp_path / name).write_text("pem\n")
    tls = f"  tls:\n    ca_cert: {tmp_path}/ca.crt\n    server_cert: {tmp_path}/node.crt\n    server_key: {tmp_path}/node.key\n"
    (agent_box_home / "config.yaml").write_text("runner:\n  kind: ray\n  address: 127.0.0.1:6379\n" + tls)
    runner = configured_runner()
    assert isinstance(runner, RayRunner) and runner.tls_env == {
        "RAY_USE_TLS": "1", "RAY_TLS_CA_CERT": f"{tmp_path}/ca.crt", "RAY_TLS_SERVER_CERT": f"{tmp_path}/node.crt",
        "RAY_TLS_SERVER_KEY": f"{tmp_path}/node.key"}
    (agent_box_home / "config.yaml").write_text("runner:\n  kind: ray\n  address: 127.0.0.1:6379\n"
                                                + tls.replace("node.key", "missing.key"))
    with pytest.raises(ConfigError) as caught:
        load_user_config()
    assert "config.yaml:7" in caught.value.message and "runner.tls.server_key" in caught.value.message
    assert "not a readable file" in caught.value.message
    (agent_box_home / "config.yaml").write_text("runner:\n  kind: local\n" + tls)
    with pytest.raises(ConfigError) as caught:
        load_user_config()
    assert "tls: is for kind: ray" in caught.value.message


def test_a_cluster_key_named_in_the_environment_is_masked_in_every_sandbox(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentbox.core.sandbox import bwrap as sandbox

    key = tmp_path / "node.key"  # a node's key, e.g. /etc/ray/node.key, under the sandbox's view of /
    key.write_text("PRIVATE KEY\n")
    monkeypatch.setenv("RAY_TLS_SERVER_KEY", str(key))
    sandbox.host_layout.cache_clear()
    try:
        layout = sandbox.host_layout()
        assert key in layout["masked"]
        spec = sandbox.SandboxSpec(project_root=tmp_path / "p", writable=(), protected=(), hidden=(), extra_rw=(),
                                   homes=(), ro_binds=(),
                                   env={}, **layout)
        argv = sandbox.bwrap_argv(spec, ["true"], "/usr/bin/bwrap")
        at = argv.index(str(key))
        assert argv[at - 2:at + 1] == ["--ro-bind", "/dev/null", str(key)] and argv.index("/") < at
    finally:
        monkeypatch.delenv("RAY_TLS_SERVER_KEY")
        sandbox.host_layout.cache_clear()


def test_a_profile_memory_limit_is_validated(agent_box_home: Path) -> None:
    from agentbox.core.config import profiles

    directory = agent_box_home / "profiles" / "tiny"
    directory.mkdir(parents=True)
    (directory / "profile.yaml").write_text("name: tiny\nruntime: {tool: scripted}\nresources:\n  memory_mb: 3\n")
    with pytest.raises(ConfigError) as caught:
        profiles.resolve("tiny")
    assert "memory_mb" in caught.value.message and "profile.yaml" in caught.value.message


# ----------------------------------------------------------------------------- through the engine


class RecordingRunner(LocalRunner):
    """The local runner, keeping every turn it is handed (what the seam carries)."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.turns: list[Turn] = []

    async def run(self, turn: Turn) -> TurnDone:
        self.turns.append(turn)
        return await super().run(turn)


class Machine:
    """A fake reading of the machine that the test changes while the run goes."""

    def __init__(self, available_mb: float) -> None:
        self.available_mb = available_mb
        self.reads = 0

    def __call__(self) -> Room:
        self.reads += 1
        return room(self.available_mb)


async def drive_with(project: Any, run_id: str, runner: LocalRunner, human: Any = None, timeout: float = 90) -> Any:
    engine = Engine.open(project, run_id, runner=runner)
    flight = asyncio.ensure_future(engine.execute())
    try:
        if human is not None:
            await asyncio.wait_for(human(engine), timeout)
        return await asyncio.wait_for(flight, timeout)
    finally:
        if not flight.done():
            flight.cancel()


@pytest.mark.bwrap
async def test_the_engine_hands_each_turn_to_its_runner(project: Path) -> None:
    make_repo(project)
    paths = setup_crew(project)
    run_id = create(paths)
    runner = RecordingRunner(reading=lambda: room(16 * GB))
    run = await drive_with(paths, run_id, runner)
    assert run.status == "done", run.status_reason
    work = [t for t in runner.turns if t.workspace is not None]
    assert {t.task_id for t in work} == {"t1", "t2"}
    for turn in work:  # a work turn carries its worktree and writes only its role's scope
        assert turn.workspace is not None and turn.workspace.key == turn.task_id
        assert turn.agent.worktree == turn.workspace.path and turn.agent.writes
        assert turn.run_id == run_id and turn.timeout_s == 60
    reviews = [t for t in runner.turns if t.prompt.startswith("[agentbox:review")]
    assert reviews and all(t.workspace is None and t.agent.writes == () for t in reviews)
    sessions = {t.session_id for t in runner.turns}
    assert {t.session_id for t in runner.turns if t.resume} <= sessions
    assert {t.id: t.head for t in run.tasks.values()} == {
        c["task"]: c["head"] for c in of_type(events(paths, run_id), "commit")}


@pytest.mark.bwrap
async def test_a_turn_waits_for_memory_and_starts_when_there_is_room(project: Path, agent_box_home: Path) -> None:
    paths = setup_crew(project, tasks=[task("t1")])
    worker = agent_box_home / "profiles" / "t-worker" / "profile.yaml"
    worker.write_text(json.dumps({**json.loads(worker.read_text()), "resources": {"memory_mb": 4000}}))
    run_id = create(paths)
    machine = Machine(available_mb=3000)  # room for the lead's small turns, not for the worker's 4000 MB
    runner = LocalRunner(reading=machine, limits=AdmissionLimits(reserve_mb=512))
    seen: dict[str, Any] = {}

    async def human(engine: Engine) -> None:
        await until(engine, lambda e: any(j.data.held for j in e.pending()) and not e.in_flight())
        await until(engine, lambda e: not e.ledger.dirty and not e.run.outbox)  # what the faces read is saved
        seen["status"] = await asyncio.to_thread(run_cli, "status", run_id, cwd=project)
        seen["queue"] = [str(label(row.look)) for row in queue_rows(RunStore(paths).load(run_id), set())]
        seen["reason"] = engine.run.status_reason
        machine.available_mb = 16 * GB

    run = await drive_with(paths, run_id, runner, human)
    assert run.status == "done", run.status_reason
    assert seen["reason"] == "waiting for memory: the turn needs 4000 MB, 2488 MB is free"
    assert "waiting for memory: the turn needs 4000 MB" in seen["status"].out
    assert "queued (waiting for memory)" in seen["status"].out
    assert any(line.startswith("t1") and "⏸ waiting for memory" in line for line in seen["queue"])
    log = of_type(events(paths, run_id), "admission")
    assert [e["what"].split(":")[0] for e in log] == ["work turn of builder waits", "work turn of builder admitted"]
    assert "waiting for" not in (run.status_reason or "")


@pytest.mark.bwrap
async def test_a_turn_over_its_memory_limit_is_stopped_and_its_peak_kept(agent_box_home: Path,
                                                                         tmp_path: Path) -> None:
    directory = agent_box_home / "profiles" / "hog"
    directory.mkdir(parents=True)
    grow = "python3 -c 'import time; b = b\"x\" * (600 << 20); time.sleep(60)'"
    (directory / "scenario.json").write_text(json.dumps({"rules": [
        {"id": "grow", "when": {"prompt_contains": "grow"}, "do": {"run": grow, "reply": "grew"}},
        {"id": "small", "when": {"prompt_contains": "small"}, "do": {"reply": "small"}}]}))
    (directory / "profile.yaml").write_text(json.dumps({
        "name": "hog", "runtime": {"tool": "scripted", "scenario": "scenario.json"},
        "sandbox": {"network": False}, "resources": {"memory_mb": 200}}))
    work = tmp_path / "work"
    work.mkdir()
    agent = services.profile_agent("hog", work, None)
    peaks = PeakStore(tmp_path / "peaks.json")
    runner = LocalRunner(reading=lambda: room(16 * GB), peaks=peaks)
    pids: list[int] = []

    def turn(prompt: str) -> Turn:
        return Turn(job_id=prompt, run_id="r", task_id=None, agent=agent, prompt=prompt, session_id=new_session_id(),
                    resume=False, timeout_s=120, on_spawn=lambda _record, pid: pids.append(pid))

    done = await runner.run(turn("grow"))
    assert done.result.error_kind == "killed", done.result
    assert "over the profile's resources.memory_mb limit of 200 MB" in (done.result.error or "")
    assert done.peak_rss_mb is not None and done.peak_rss_mb > 200
    assert not psutil.pid_exists(pids[0]) or psutil.Process(pids[0]).status() == psutil.STATUS_ZOMBIE
    assert peaks.peak("scripted") == pytest.approx(done.peak_rss_mb, abs=0.1)
    small = await runner.run(turn("small"))
    assert small.result.ok and small.peak_rss_mb is not None and small.peak_rss_mb < 200
    assert os.environ["AGENT_BOX_HOME"] == str(agent_box_home)
