"""Recorded runs for the stats tests, written by the real engine with scripted crews (real bwrap).

`record_history` makes three runs of one project, one after another, changing the models
of the crew's roles in crew.yaml between them, as a person moving a role to a cheaper model
would:

- run A: builder and tester on `m-big`; 4 builder tasks and 2 tester tasks, all approved at
  the first review;
- run B: both roles on `m-small`; 30 builder tasks, of which 12 are rejected once, and 2
  tester tasks, one of them rejected once;
- run C: builder on `m-small`; one task rejected three times with the same issue, which
  escalates to the person after the automatic retries, who answers `retry`.

What the figures must then be is worked out by hand in `EXPECTED`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.engine.support import (
    answering,
    create,
    drive,
    plan_rule,
    review_rule,
    setup_crew,
    synthesis_rule,
    task,
    work_rule,
    write_profile,
)

BUILDER_A, TESTER_A = [f"a{i}" for i in range(1, 5)], ["a5", "a6"]
BUILDER_B, TESTER_B = [f"b{i}" for i in range(1, 31)], ["b31", "b32"]
REJECTED_B = [*BUILDER_B[:12], "b31"]
"""Tasks of run B whose first review rejects them (once)."""
ESCALATED = "c1"
"""The task of run C rejected three times (twice retried automatically, then the person's retry)."""


def _roles(builder_model: str, tester_model: str) -> dict[str, dict[str, Any]]:
    return {
        "lead": {"profile": "t-lead", "writes": [], "instructions": "roles/lead.md"},
        "builder": {"profile": "t-worker", "writes": ["src/**"], "instructions": "roles/builder.md",
                    "model": builder_model},
        "tester": {"profile": "t-worker", "writes": ["src/**"], "instructions": "roles/tester.md",
                   "model": tester_model},
        "reviewer": {"profile": "t-reviewer", "writes": [], "instructions": "roles/reviewer.md"},
    }


def _run(project: Path, tasks: list[dict[str, Any]], models: tuple[str, str],
         reviewer: list[dict[str, Any]], human: Any = None) -> str:
    """One run of the crew with these tasks, role models and reviewer rules, driven to its end."""
    paths = setup_crew(project, tasks=tasks, roles=_roles(*models), reviewer=reviewer,
                       limits={"max_workers": 6, "max_auto_retries": 2}, sequential={"steps": ["builder"]},
                       ladder=False)  # the plain retry: c1's escalation; the ladder's figures are tested pure
    write_profile("t-lead", [plan_rule(tasks, delay=0), synthesis_rule(delay=0)])
    write_profile("t-worker", [work_rule(delay=0)])
    write_profile("t-reviewer", [*reviewer, review_rule(delay=0)])
    run_id = create(paths)
    run = asyncio.run(drive(paths, run_id, human, timeout=240))
    assert run.status == "done", (run_id, run.status, run.status_reason)
    return run_id


def record_history(project: Path) -> list[str]:
    """Runs A, B and C of `project`, oldest first; returns their ids."""
    run_a = _run(project, [task(t, "builder") for t in BUILDER_A] + [task(t, "tester") for t in TESTER_A],
                 ("m-big", "m-big"), [])
    rejects = [review_rule("reject", task_id=t, times=1, delay=0, rule_id=f"reject-{t}") for t in REJECTED_B]
    run_b = _run(project, [task(t, "builder") for t in BUILDER_B] + [task(t, "tester") for t in TESTER_B],
                 ("m-small", "m-small"), rejects)
    run_c = _run(project, [task(ESCALATED, "builder")], ("m-small", "m-small"),
                 [review_rule("reject", task_id=ESCALATED, times=3, delay=0, rule_id="reject-c1")],
                 answering(("retry_escalation", "retry")))
    return [run_a, run_b, run_c]


EXPECTED: dict[tuple[str, str], dict[str, Any]] = {
    # (role, model): tasks, first-pass rate, mean repair rounds, escalation rate
    ("builder", "m-big"): {"tasks": 4, "first_pass_rate": 1.0, "mean_repair_rounds": 0.0, "escalation_rate": 0.0},
    ("builder", "m-small"): {"tasks": 31, "first_pass_rate": 18 / 31, "mean_repair_rounds": (12 + 3) / 31,
                             "escalation_rate": 1 / 31},
    ("tester", "m-big"): {"tasks": 2, "first_pass_rate": 1.0, "mean_repair_rounds": 0.0, "escalation_rate": 0.0},
    ("tester", "m-small"): {"tasks": 2, "first_pass_rate": 0.5, "mean_repair_rounds": 0.5, "escalation_rate": 0.0},
}
"""Worked out by hand from the runs above."""
