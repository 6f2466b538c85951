"""A turn cut short by an engine crash is run again under the same number: both logs stay."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentbox.core.agents.sessions import SessionStore
from agentbox.core.engine.run_store import RunStore
from tests.engine.support import (
    create,
    kill_engine_mid_work,
    session_processes,
    setup_crew,
    start_engine,
    stop,
    task,
    wait_gone,
    work_rule,
)

pytestmark = [pytest.mark.bwrap]


def test_a_turn_rerun_after_kill_9_keeps_the_interrupted_attempts_log(project: Path) -> None:
    paths = setup_crew(project, tasks=[task("t1")],
                       worker=[work_rule(delay=60, task_id="t1", times=1, rule_id="stuck")])
    run_id = create(paths)
    rs = RunStore(paths)
    job = kill_engine_mid_work(paths, run_id)
    assert wait_gone(lambda: session_processes([job.session_id])) == []
    store = SessionStore(paths.sessions_dir)
    record = store.find(job.session_id)
    interrupted_turn = record.running["turn"] if record.running else record.turns + 1
    logs = store.logs_dir(record)
    first_log = logs / f"turn-{interrupted_turn}.log"
    assert first_log.exists()
    first_log.write_bytes(first_log.read_bytes() + b"FIRST-ATTEMPT\n")  # tell the two attempts apart

    resumed = start_engine(paths, run_id)
    try:
        assert resumed.wait(timeout=60) == 0, resumed.stderr.read().decode() if resumed.stderr else ""
    finally:
        stop(resumed)
    assert rs.load(run_id).tasks["t1"].state == "approved"

    kept = logs / f"turn-{interrupted_turn}.interrupted-1.log"
    assert kept.exists() and b"FIRST-ATTEMPT" in kept.read_bytes()
    rerun = logs / f"turn-{interrupted_turn}.log"
    assert rerun.exists() and b"FIRST-ATTEMPT" not in rerun.read_bytes()
    turns = [json.loads(line) for line in store.turns_path(record).read_text().splitlines()]
    same_number = [t for t in turns if t["turn"] == interrupted_turn]
    assert [t["status"] for t in same_number] == ["interrupted", "ok"], turns
    assert same_number[0]["log_path"] == str(kept) and kept.name in same_number[0]["error"]
    assert same_number[1]["log_path"] == str(rerun)
