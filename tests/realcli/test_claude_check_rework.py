"""The real claude CLI as a worker under the submission gate: its first submission fails a
check, and its rework turn (claude resumed in its session) is given the check's output and
fixes the work; only the green commit is reviewed. Against the fake model server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentbox.core.paths import ProjectPaths
from tests.engine.support import (
    create,
    drive,
    plan_rule,
    review_rule,
    synthesis_rule,
    task,
    write_profile,
)
from tests.engine.test_worktree_runs import make_repo
from tests.realcli.conftest import FakeView, body_text

pytestmark = [pytest.mark.realcli, pytest.mark.bwrap]

CHECK = ("test -f src/t1/good.txt || { echo 'FAILED tests/test_t1.py::test_good - AssertionError: "
         "src/t1/good.txt is missing'; exit 1; }")


def _bash(command: str, contains: str) -> dict[str, Any]:
    return {"tool_use": {"name": "Bash", "input": {"command": command, "description": "agentbox realcli test"}},
            "match": {"protocol": "anthropic", "contains": contains, "has_tools": True}}


def _reply(summary: str, contains: str) -> dict[str, Any]:
    text = json.dumps({"summary": summary, "artifacts": [], "evidence": [summary]})
    return {"text": text, "match": {"protocol": "anthropic", "contains": contains, "has_tools": True}}


async def test_claude_reworks_from_a_red_checks_output(project: Path, fake: FakeView, make_profile,
                                                       realcli_env: dict[str, str]) -> None:
    make_repo(project)
    claude = make_profile("claude")
    write_profile("t-lead", [plan_rule([task("t1", "builder", writes=["src/t1/**"])]), synthesis_rule()])
    write_profile("t-reviewer", [review_rule()])
    crew = {"mode": "hierarchical",
            "roles": {"lead": {"profile": "t-lead", "writes": []},
                      "builder": {"profile": claude, "writes": ["src/t1/**"]},
                      "reviewer": {"profile": "t-reviewer", "writes": []}},
            "limits": {"max_workers": 1, "task_timeout_s": 120},
            "hierarchical": {"lead": "lead", "reviewer": "reviewer"},
            "checks": {"smoke": {"run": CHECK}}, "gates": {"submission": ["smoke"]}, "deliver": "manual"}
    (project / ".agent-box" / "crew.yaml").write_text(json.dumps(crew))
    first, rework = "[agentbox:work task=t1", "The check `smoke` failed on your submission"
    fake.enqueue(_bash("mkdir -p src/t1 && echo bad > src/t1/bad.txt", first), _reply("wrote bad.txt", first))
    fake.enqueue(_bash("echo good > src/t1/good.txt", rework), _reply("wrote good.txt as the check asks", rework))
    mark = fake.mark()
    paths = ProjectPaths(project)
    run_id = create(paths)
    final = await drive(paths, run_id, timeout=300)
    assert final.status == "done", final.status_reason
    t1 = final.tasks["t1"]
    assert [c.passed for c in t1.checks] == [False, True] and t1.checks[1].commit == t1.head
    asked = [body_text(r) for r in fake.since(mark, "anthropic")]
    reworked = [b for b in asked if rework in b]
    assert reworked, "claude's rework turn was never given the check's output"
    assert "src/t1/good.txt is missing" in reworked[0] and "Exit status: 1" in reworked[0]
    assert t1.verdicts[-1].verdict == "approve" and t1.verdicts[-1].commit == t1.head
