"""The demo ships a check: its first greeting fails it, the builder reworks from the check's
output, and only the green module is reviewed (real bwrap, real git, the demo's scripted crew)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentbox.core.admin.demo import make_demo_project, run_demo
from tests.engine.support import events, of_type, prompts_of

pytestmark = [pytest.mark.bwrap, pytest.mark.local_runner('the demo end to end under bwrap')]


async def test_the_demo_reworks_from_a_red_check_before_any_review(tmp_path: Path) -> None:
    project = make_demo_project(tmp_path)
    final = await run_demo(project, answer_after_s=0.1)
    assert final.status == "done", final.status_reason
    greet = final.tasks["greet"]
    assert [(c.name, c.passed) for c in greet.checks] == [("docstring", False), ("docstring", True)]
    rework = prompts_of(project, greet.session_id or "")[1]
    assert rework.startswith("[agentbox:rework task=greet")
    assert "FAILED docstring: src/greet.py has no module docstring on line 1" in rework
    reviews = prompts_of(project, greet.review_session_id or "")
    assert len(reviews) == 1 and "Checks agentbox ran on this submission" in reviews[0]
    assert [v.verdict for v in greet.verdicts] == ["approve"] and greet.verdicts[0].commit == greet.checks[1].commit
    log = events(project, final.id)
    assert of_type(log, "gate.blocked", "greet") and not of_type(log, "gate.blocked", "tests")
