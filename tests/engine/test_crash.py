"""Crash recovery: kill -9 the engine process at 20 random points of hierarchical runs.

The engine runs as `python -m agentbox --project P run --resume RUN --quiet`. Once it has
taken the run, it is SIGKILLed after a random delay (seeded), then resumed, over and
over; after each kill run.json must parse, the decision log must be a gap-free prefix of
the state's events and no agent process may be left. Then the run is resumed to the end:
every task approved exactly once, the log's seqs 1..N with no gap or duplicate.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from agentbox.core.engine.run_store import RunStore
from agentbox.core.paths import ProjectPaths
from tests.engine.support import (
    agent_processes,
    assert_log_consistent,
    create,
    kill_engine_mid_work,
    of_type,
    prompts_of,
    review_rule,
    session_processes,
    setup_crew,
    start_engine,
    stop,
    task,
    wait_gone,
    work_rule,
)

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]

KILLS = 20
SEED = 20261129
ROLES = {
    "lead": {"profile": "t-lead", "writes": []},
    "builder": {"profile": "t-worker", "writes": ["src/**"]},
    "tester": {"profile": "t-worker", "writes": ["tests/**"]},
    "writer": {"profile": "t-worker", "writes": ["docs/**"]},
    "reviewer": {"profile": "t-reviewer", "writes": []},
}
TASKS = [
    task("a", "builder", writes=["src/a/**"]),
    task("b", "tester", writes=["tests/b/**"]),
    task("c", "writer", writes=["docs/c/**"]),
    task("d", "builder", writes=["src/d/**"], deps=["a"]),
    task("e", "tester", writes=["tests/e/**"], deps=["a", "b"]),
    task("f", "writer", writes=["docs/f/**"], deps=["c"]),
    task("g", "builder", writes=["src/g/**"], deps=["d"]),
    task("h", "writer", writes=["docs/h/**"], deps=["e", "f"]),
    task("i", "tester", writes=["tests/i/**"], deps=["e"]),
    task("j", "builder", writes=["src/j/**"], deps=["g", "h"]),
    task("k", "writer", writes=["docs/k/**"], deps=["h"]),
    task("l", "tester", writes=["tests/l/**"], deps=["i", "j"]),
]


def check_after_kill(paths: ProjectPaths, run_id: str) -> None:
    """run.json parses; events.jsonl is seqs 1..k; the state's outbox holds the rest."""
    rs = RunStore(paths)
    state = rs.load(run_id)
    lines = rs.events_path(run_id).read_bytes().splitlines() if rs.events_path(run_id).exists() else []
    log = [json.loads(line) for line in lines]
    assert [e["seq"] for e in log] == list(range(1, len(log) + 1))
    assert len(log) <= state.seq
    missing = set(range(len(log) + 1, state.seq + 1))
    assert missing <= {e["seq"] for e in state.outbox}, "an event of the saved state is lost"


def wait_taken(paths: ProjectPaths, run_id: str, proc: object, timeout: float = 20) -> bool:
    """Wait until the engine process has taken the run (its pid in run.json); False if the run ended."""
    rs = RunStore(paths)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = rs.load(run_id)
        if state.status in ("done", "failed", "cancelled"):
            return False
        if state.engine and state.engine.pid == proc.pid:
            return True
        assert proc.poll() is None, proc.stderr.read().decode()  # type: ignore[attr-defined]
        time.sleep(0.01)
    raise AssertionError("the engine did not take the run")


def test_kill_9_at_random_points_and_resume(project: Path, agent_box_home: Path) -> None:
    rng = random.Random(SEED)
    paths = setup_crew(
        project, roles=ROLES, tasks=TASKS, limits={"max_workers": 3},
        worker=[work_rule(delay=0.3, task_id="[ace]", rule_id="slower"), work_rule(delay=0.15, rule_id="quick")],
        reviewer=[review_rule("reject", task_id="a", times=1, delay=0.1)],
    )
    marker = str(agent_box_home)
    run_ids: list[str] = []
    kills = 0
    kills_per_run: list[int] = []
    started = time.monotonic()
    while kills < KILLS:
        run_id = create(paths, f"crash test {len(run_ids) + 1}")
        run_ids.append(run_id)
        kills_per_run.append(0)
        while kills < KILLS:
            proc = start_engine(paths, run_id)
            try:
                if not wait_taken(paths, run_id, proc):
                    break
                time.sleep(rng.uniform(0.02, 0.5))
                if proc.poll() is not None:
                    break
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
                kills += 1
                kills_per_run[-1] += 1
            finally:
                stop(proc)
            check_after_kill(paths, run_id)
            assert wait_gone(lambda: agent_processes(marker)) == [], "an agent outlived the engine"
        assert time.monotonic() - started < 120, "the crash loop takes too long"
    for run_id in run_ids:
        proc = start_engine(paths, run_id)
        try:
            assert proc.wait(timeout=60) == 0, proc.stderr.read().decode() if proc.stderr else ""
        finally:
            stop(proc)
    assert wait_gone(lambda: agent_processes(marker)) == []
    assert len(run_ids) <= 2, "the run was too short for the kills"
    recovered = 0
    for run_id in run_ids:
        run = RunStore(paths).load(run_id)
        assert run.status == "done", (run.status, run.status_reason)
        log = assert_log_consistent(paths, run_id)
        assert set(run.tasks) == {t["id"] for t in TASKS}
        for task_id, state in run.tasks.items():
            assert state.state == "approved"
            assert len(of_type(log, "task.approve", task_id)) == 1, f"{task_id} approved twice"
            assert len(of_type(log, "task.created", task_id)) == 1
        assert len(of_type(log, "plan")) == 1
        assert len(of_type(log, "run.finished")) == 1
        assert run.jobs == {} and run.engine is None
        for event in of_type(log, "recover"):
            later = [e for e in of_type(log, "dispatch") if e["seq"] > event["seq"] and e["session"] == event["session"]]
            assert later, f"the interrupted turn {event['what']!r} was not resumed in its session"
        recovered += len(of_type(log, "recover"))
        resumed_prompts = [p for t in run.tasks.values() for p in prompts_of(paths, t.session_id or "")
                           if p.startswith("[agentbox:resume]")]
        assert resumed_prompts, "interrupted work turns are re-sent as resumes"
    print(f"kills per run {kills_per_run}; {recovered} interrupted turns resumed")
    assert recovered >= 5, "kills should land while turns run"


def test_an_orphan_left_by_a_killed_engine_is_found_and_killed_on_resume(project: Path) -> None:
    """An agent without bwrap (sandbox: none) survives its engine: the resumed engine kills it and redoes the turn."""
    paths = setup_crew(project, tasks=[task("t1")],
                       worker=[work_rule(delay=60, task_id="t1", times=1, rule_id="stuck")])
    worker = Path(os.environ["AGENT_BOX_HOME"]) / "profiles" / "t-worker" / "profile.yaml"
    worker.write_text(json.dumps({**json.loads(worker.read_text()), "sandbox": "none"}))
    run_id = create(paths)
    rs = RunStore(paths)
    job = kill_engine_mid_work(paths, run_id)
    orphans = session_processes([job.session_id])
    assert orphans, "without a sandbox the agent outlives the engine"
    resumed = start_engine(paths, run_id)
    try:
        assert resumed.wait(timeout=60) == 0, resumed.stderr.read().decode() if resumed.stderr else ""
    finally:
        stop(resumed)
    assert wait_gone(lambda: session_processes([job.session_id])) == []
    run = rs.load(run_id)
    assert run.status == "done" and run.tasks["t1"].state == "approved"
    log = assert_log_consistent(paths, run_id)
    (recover,) = of_type(log, "recover")
    assert recover["session"] == job.session_id


def test_kill_orphan_finds_a_process_of_the_session_without_its_pid(tmp_path: Path) -> None:
    from agentbox.core.engine.models import Job
    from agentbox.core.engine.recovery import kill_orphan

    session = "0f0f0f0f-1111-2222-3333-444444444444"
    sleeper = subprocess.Popen(["sleep", "60"], env={**os.environ, "AGENTBOX_SESSION_ID": session},
                               start_new_session=True)
    try:
        time.sleep(0.1)
        kill_orphan(Job(id="job-1", kind="work", role="builder", session_id=session, started=1.0))
        assert sleeper.wait(timeout=5) == -signal.SIGKILL
    finally:
        stop(sleeper)  # type: ignore[arg-type]
