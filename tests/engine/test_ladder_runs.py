"""The failure ladder in real runs: scripted crews, real bwrap and git, checks from the submission gate.

Each run walks several transitions; `test_ladder.py` holds the pure (state, event) -> decision rules.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.engine.support import (
    assert_log_consistent,
    create,
    drive,
    of_type,
    open_checkpoint,
    prompts_of,
    send,
    setup_crew,
    task,
    until,
    work_rule,
)
from tests.engine.test_worktree_runs import make_repo

pytestmark = pytest.mark.bwrap

GOOD = ("test -f src/t1/good.txt || { echo 'FAILED tests/test_t1.py::test_good - AssertionError: no good.txt'; "
        "exit 1; }")
"""Red (always with the same output, so the same fingerprint) until src/t1/good.txt exists."""
A1 = {"id": "a1", "criterion": "t1 meets a1"}
A2 = {"id": "a2", "criterion": "t1 writes src/t1/good.txt"}
EVIDENT = "check smoke fails because src/t1/good.txt is never written"


def rewrite_rule(rule_id: str, reply: dict[str, Any], *, times: int | None = 1,
                 marker: str = "[agentbox:rewrite task=t1") -> dict[str, Any]:
    """The lead answers a rewrite prompt (or its correction) with a plan entry."""
    when: dict[str, Any] = {"prompt_contains": marker}
    if times is not None:
        when["times"] = times
    return {"id": rule_id, "when": when, "do": {"delay_s": 0.05, "reply_json": reply}}


def entry(brief: str, *acceptance: dict[str, str], root_cause: str = "", evidence: list[str] | None = None
          ) -> dict[str, Any]:
    return {"brief": brief, "acceptance": list(acceptance), "writes": ["src/t1/**"], "root_cause": root_cause,
            "evidence": evidence or []}


def ladder_crew(project: Path, *, worker: list[dict[str, Any]], lead: list[dict[str, Any]] | None = None,
                check: str = GOOD, **extra: Any) -> Any:
    make_repo(project)
    return setup_crew(project, tasks=[task("t1", "builder", writes=["src/t1/**"])], worker=worker, lead=lead or [],
                      checks={"smoke": {"run": check, "timeout_s": 60}}, gates={"submission": ["smoke"]},
                      ladder=True, **extra)


def transitions(log: list[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    return [(e["from_level"], e["from_mode"], e["to_level"], e["to_mode"]) for e in of_type(log, "ladder", "t1")]


async def test_same_failure_rewrite_fill_second_rewrite_then_interception(project: Path) -> None:
    lead = [
        rewrite_rule("fill", entry("do t1", A1, A2)),  # only adds an acceptance item: a coverage fill
        rewrite_rule("bare", entry("do t1 properly", A1, A2, root_cause="it was wrong somehow")),
        rewrite_rule("fixed", entry("do t1 properly", A1, A2, root_cause=EVIDENT, evidence=["smoke"]),
                     marker="[agentbox:correction model=RewriteReply"),
        rewrite_rule("again", entry("do t1 properly, write good.txt", A1, A2, root_cause=EVIDENT), times=None),
    ]
    paths = ladder_crew(project, lead=lead, worker=[work_rule(task_id="t1", write={"src/t1/bad.txt": "bad\n"})])
    run_id = create(paths)

    async def person(engine: Any) -> None:
        await until(engine, lambda e: open_checkpoint(e, "ladder") is not None, timeout=120)
        cp = open_checkpoint(engine, "ladder")
        t1 = engine.run.tasks["t1"]
        assert t1.state == "blocked" and t1.ladder.level == "L1" and t1.ladder.waiting_on == "second_rewrite"
        assert t1.ladder.rewrites_total == 1 and t1.ladder.rewrites_auto == 1  # the fill was not counted
        assert "t1 at L1 (rewrites 1)" in cp.question and "- rewrite: the lead rewrites the brief" in cp.question
        refused = await send(engine.project, engine.run.id, action="answer", checkpoint=cp.id, text="apply")
        assert not refused[0] and "does not answer the open question" in refused[1]
        ok, message = await send(engine.project, engine.run.id, action="answer", checkpoint=cp.id, text="rewrite")
        assert ok, message
        await until(engine, lambda e: open_checkpoint(e, "ladder") is not None, timeout=120)
        cp = open_checkpoint(engine, "ladder")
        t1 = engine.run.tasks["t1"]
        assert t1.ladder.level == "L3" and t1.ladder.waiting_on == "exit" and t1.ladder.rewrites_total == 2
        assert "L1 is exhausted" in cp.question
        assert cp.options == ["controlled_rewrite", "advisor_again", "bypass", "abandon"]
        ok, message = await send(engine.project, engine.run.id, action="answer", checkpoint=cp.id, text="abandon")
        assert ok, message

    final = await drive(paths, run_id, person, timeout=240)
    assert final.status == "failed" and "every task was cancelled" in (final.status_reason or "")
    t1 = final.tasks["t1"]
    assert t1.state == "cancelled" and t1.brief == "do t1 properly, write good.txt"
    assert [a.id for a in t1.acceptance] == ["a1", "a2"]
    assert t1.ladder.mode == "closed" and t1.ladder.escape_hatches_used == ["abandon"]
    log = assert_log_consistent(paths, run_id)
    assert transitions(log) == [("L0", "normal", "L0", "normal"), ("L0", "normal", "L1", "normal"),
                                ("L1", "normal", "L1", "normal"), ("L1", "normal", "L1", "normal"),
                                ("L1", "normal", "L3", "high_rot"), ("L3", "high_rot", "L3", "closed")]
    assert all(e["why"] for e in of_type(log, "ladder"))
    briefs = of_type(log, "ladder.brief", "t1")
    assert [b["counted"] for b in briefs] == [False, True, True]
    # the rewrite without evidence was refused as a contract defect, then corrected
    invalid = of_type(log, "reply.invalid")
    assert len(invalid) == 1 and "root cause" in invalid[0]["why"]
    lead_prompts = prompts_of(paths, final.sessions["lead"])
    rewrites = [p for p in lead_prompts if p.startswith("[agentbox:rewrite task=t1 fingerprint=")]
    assert len(rewrites) == 3  # two automatic (the fill did not use it up), one the human allowed
    # the module is a high-rot zone in zones.yaml, resolved by the exit taken
    zones_text = (project / ".agent-box" / "zones.yaml").read_text()
    assert "module_path: src/t1" in zones_text and "resolution: abandon" in zones_text
