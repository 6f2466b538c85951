"""Reviews and protected paths in real runs: scripted agents under bwrap, the real engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engine.support import (
    assert_log_consistent,
    create,
    drive,
    of_type,
    plan_rule,
    prompts_of,
    setup_crew,
    task,
)

pytestmark = pytest.mark.bwrap


async def test_a_plan_task_writing_a_protected_path_is_refused_at_plan_time(project: Path) -> None:
    bad = [task("t1", "builder", writes=["src/**"])]
    paths = setup_crew(project, lead=[plan_rule(bad, times=1)], tasks=[task("t1", "builder")],
                       protected=["src/contracts/**"])
    run_id = create(paths)
    run = await drive(paths, run_id)
    assert run.status == "done", run.status_reason
    log = assert_log_consistent(paths, run_id)
    (invalid,) = of_type(log, "reply.invalid")
    assert "task t1: writes 'src/**', which reaches the protected path 'src/contracts/**'" in invalid["why"]
    prompts = prompts_of(paths, run.sessions["lead"])
    assert "Protected paths" in prompts[0] and "src/contracts/**" in prompts[0]
    assert prompts[1].startswith("[agentbox:correction model=Plan]") and "protected path" in prompts[1]
    assert run.tasks["t1"].writes == ["src/t1/**"]
