"""The failure ladder in real runs: scripted crews, real bwrap and git, checks from the submission gate.

Each run walks several transitions; `test_ladder.py` holds the pure (state, event) -> decision rules.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from agentbox.core.engine.run_store import RunStore
from tests.conftest import run_cli
from tests.engine.support import (
    assert_log_consistent,
    create,
    drive,
    events,
    of_type,
    open_checkpoint,
    prompts_of,
    send,
    setup_crew,
    start_engine,
    stop,
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
                check: str = GOOD, check_timeout_s: float = 60, **extra: Any) -> Any:
    make_repo(project)
    return setup_crew(project, tasks=[task("t1", "builder", writes=["src/t1/**"])], worker=worker, lead=lead or [],
                      checks={"smoke": {"run": check, "timeout_s": check_timeout_s}}, gates={"submission": ["smoke"]},
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
        # where people see it while it waits: `agentbox status`, MCP's run_status
        shown = await asyncio.to_thread(run_cli, "--project", str(project), "status", engine.run.id)
        assert shown.code == 0 and "ladder" in shown.out and "L3 waiting for an exit" in shown.out
        assert "controlled_rewrite | advisor_again | bypass | abandon | cancel" in shown.out
        from agentbox.mcp.views import run_status

        view = run_status(engine.project, engine.run)
        assert view["tasks"][0]["ladder"]["level"] == "L3" and view["tasks"][0]["ladder"]["waiting_on"] == "exit"
        assert "'abandon'" in view["open_checkpoints"][0]["how_to_answer"]
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


def kill_when(project: Any, run_id: str, ready: Any, proc: Any) -> None:
    """SIGKILL the engine process once `ready(run)` holds for the saved run."""
    store = RunStore(project)
    deadline = time.monotonic() + 60
    while not ready(store.load(run_id)):
        assert time.monotonic() < deadline and proc.poll() is None, "the engine ended before the point to kill it"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


@pytest.mark.local_runner('kill -9 of the engine and a resume: end to end under bwrap')
async def test_kill_9_between_two_transitions_and_resume(project: Path) -> None:
    worker = [
        work_rule(task_id="t1", rule_id="fixed", write={"src/t1/good.txt": "good\n"}),
        work_rule(task_id="t1", rule_id="first", times=1, write={"src/t1/bad.txt": "bad\n"}),
        work_rule(task_id="t1", rule_id="slow", times=1, delay=3, write={"src/t1/bad.txt": "bad again\n"}),
        work_rule(task_id="t1", rule_id="bad", write={"src/t1/bad.txt": "bad\n"}),
    ]
    worker[0]["when"]["prompt_contains"] = "The lead rewrote your task's brief"
    lead = [{"id": "rewrite", "when": {"prompt_contains": "[agentbox:rewrite task=t1"},
             "do": {"delay_s": 3, "reply_json": entry("do t1: write src/t1/good.txt", A1, root_cause=EVIDENT,
                                                      evidence=["smoke"])}}]
    paths = ladder_crew(project, lead=lead, worker=worker)
    run_id = create(paths)

    def working(kind: str, level: str) -> Any:
        return lambda run: (run.tasks.get("t1") is not None and run.tasks["t1"].ladder.level == level
                            and run.tasks["t1"].ladder.counted_failures >= 1
                            and any(j.pid and j.kind == kind for j in run.jobs.values()))

    for kind, level in (("work", "L0"), ("rewrite", "L1")):  # after the first move, then after the second
        proc = start_engine(paths, run_id)
        try:
            kill_when(paths, run_id, working(kind, level), proc)
        finally:
            stop(proc)
        saved = RunStore(paths).load(run_id).tasks["t1"].ladder
        assert len(saved.history) == (1 if level == "L0" else 2) and saved.level == level
    final = await drive(paths, run_id, timeout=120)
    assert final.status == "done", final.status_reason
    t1 = final.tasks["t1"]
    assert t1.state == "approved" and t1.brief == "do t1: write src/t1/good.txt"
    assert t1.ladder.counted_failures == 2 and t1.ladder.rewrites_total == 1 and len(t1.ladder.history) == 2
    log = assert_log_consistent(paths, run_id)
    assert transitions(log) == [("L0", "normal", "L0", "normal"), ("L0", "normal", "L1", "normal")]
    assert len(of_type(log, "recover")) == 2 and len(of_type(log, "ladder.brief", "t1")) == 1
    assert [c.passed for c in t1.checks] == [False, False, True]


def drift_check(where: str, name: str) -> str:
    """Red until `where`/fixed.txt exists, naming a different test for each `which` the worker wrote (drift)."""
    return (f"test -f {where}/fixed.txt || {{ echo \"FAILED tests/test_{name}.py::test_$(cat {where}/which)\"; "
            "exit 1; }")


def patch_creating(path: str, line: str) -> str:
    return (f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n"
            f"+{line}\n")


def which_rule(task_id: str, where: str, rule_id: str, which: str, **extra: Any) -> dict[str, Any]:
    return work_rule(task_id=task_id, rule_id=rule_id, times=1, write={f"{where}/which": which + "\n"}, **extra)


def marked(rule: dict[str, Any], marker: str) -> dict[str, Any]:
    rule["when"]["prompt_contains"] = marker
    return rule


@pytest.mark.local_runner("a worker's process crashes")
async def test_drift_compromise_debt_and_no_compromise_advisor_apply(project: Path) -> None:
    patch = patch_creating("auth/fixed.txt", "fixed by the advisor's patch")
    worker = [
        # t1: drift → compromise; the first compromise forgets the tag (refused), the second carries it
        marked(work_rule(task_id="t1", rule_id="c-untagged", times=1, write={"src/t1/fixed.txt": "stub\n"}),
               "mode=compromise"),
        marked(work_rule(task_id="t1", rule_id="c-tagged", times=1,
                         write={"src/t1/fixed.txt": "stub\nreturn 42  # FIXME: Tech Debt: hard-coded answer\n"}),
               "mode=compromise"),
        work_rule(task_id="t1", rule_id="t1-crash", times=1, fail="crash"),  # an environment failure
        which_rule("t1", "src/t1", "t1-alpha", "alpha"),
        which_rule("t1", "src/t1", "t1-beta", "beta"),
        # t2 (auth/**, no_compromise): drift → advisor; its write attempt fails, it hands in a guide and a patch
        marked(work_rule(task_id="t2", rule_id="advisor", times=1,
                         write={"{handoff}guide.md": "create auth/fixed.txt\n", "{handoff}patch.diff": patch},
                         run="echo tried > auth/fixed.txt 2>&1; echo status=$?",
                         reply_json={"summary": "advisor: {run_output}", "artifacts": ["{handoff}patch.diff"],
                                     "evidence": ["wrote {handoff}patch.diff"]}), "mode=advisor"),
        which_rule("t2", "auth", "t2-alpha", "alpha"),
        which_rule("t2", "auth", "t2-beta", "beta"),
    ]
    make_repo(project)
    checks = {"t1": {"run": drift_check("src/t1", "t1"), "paths": ["src/t1/**"]},
              "t2": {"run": drift_check("auth", "auth"), "paths": ["auth/**"]}}
    roles = {
        "lead": {"profile": "t-lead", "writes": [], "instructions": "roles/lead.md"},
        "builder": {"profile": "t-worker", "writes": ["src/**", "auth/**"], "instructions": "roles/builder.md"},
        "reviewer": {"profile": "t-reviewer", "writes": [], "instructions": "roles/reviewer.md"},
    }
    paths = setup_crew(project, tasks=[task("t1", "builder", writes=["src/t1/**"]),
                                       task("t2", "builder", writes=["auth/**"])],
                       worker=worker, roles=roles, checks=checks, gates={"submission": ["t1", "t2"]},
                       ladder=True, no_compromise=["auth/**"], sequential={"steps": ["builder"]})
    run_id = create(paths)

    async def person(engine: Any) -> None:
        await until(engine, lambda e: open_checkpoint(e, "ladder") is not None, timeout=120)
        cp = open_checkpoint(engine, "ladder")
        t2 = engine.run.tasks["t2"]
        assert cp.task == "t2" and t2.ladder.mode == "advisor" and t2.ladder.waiting_on == "apply_patch"
        assert "t2 at L2 advisor" in cp.question and "- apply: `agentbox apply TASK` applies the patch" in cp.question
        assert "status=1" in t2.submitted_summary or "status=2" in t2.submitted_summary  # read-only sandbox
        assert not (project / "auth" / "fixed.txt").exists()
        applied = await asyncio.to_thread(run_cli, "--project", str(project), "apply", "t2")
        assert applied.code == 0, applied.err
        assert "resubmitted" in applied.out

    final = await drive(paths, run_id, person, timeout=90, backoff=[0.05, 0.05, 0.05])
    assert final.status == "done", final.status_reason
    t1, t2 = final.tasks["t1"], final.tasks["t2"]
    assert t1.state == t2.state == "approved"
    log = assert_log_consistent(paths, run_id)
    assert transitions(log) == [("L0", "normal", "L0", "normal"), ("L0", "normal", "L2", "compromise")]
    assert [(e["from_level"], e["to_level"], e["to_mode"]) for e in of_type(log, "ladder", "t2")] == [
        ("L0", "L0", "normal"), ("L0", "L2", "advisor")]
    assert "no_compromise" in of_type(log, "ladder", "t2")[1]["why"]
    # the crash was retried and never counted
    assert t1.ladder.counted_failures == 2 and len(of_type(log, "retry", "t1")) == 1
    # the untagged compromise was refused (not counted), the tagged one recorded as debt
    refused = of_type(log, "ladder.refused", "t1")
    assert len(refused) == 1 and "FIXME: Tech Debt" in refused[0]["why"]
    compromise = [p for p in prompts_of(paths, t1.session_id or "") if "mode=compromise" in p]
    assert len(compromise) == 2 and compromise[0].startswith("[agentbox:rework task=t1 mode=compromise")
    debt_text = (project / ".agent-box" / "debt.yaml").read_text()
    assert "file: src/t1/fixed.txt" in debt_text and "line: 2" in debt_text and "owner_role: builder" in debt_text
    assert f"run: {run_id}" in debt_text and "task: t1" in debt_text and "due:" in debt_text
    listed = run_cli("--project", str(project), "debt", "--json")
    assert listed.code == 0 and '"src/t1/fixed.txt"' in listed.out
    # the advisor's patch is the commit the checks passed on
    assert [c.passed for c in t2.checks] == [False, False, True]
    assert of_type(log, "advisor.applied", "t2") and t2.changed_files
    advisor_prompt = [p for p in prompts_of(paths, t2.session_id or "") if "mode=advisor" in p]
    assert len(advisor_prompt) == 1 and advisor_prompt[0].startswith("[agentbox:rework task=t2 mode=advisor")
    assert "You may write: (read-only" in advisor_prompt[0]


ROT_T1 = "check t1 fails because src/t1/fixed.txt is never created"
ROT_T2 = "check t2 fails because lib/fixed.txt is never created"
CLOSE_D1 = "close D-1"


def advisor_rule(task_id: str, where: str) -> dict[str, Any]:
    """Each advisor round of `task_id` hands in a guide and a patch that applies but does not fix the check."""
    patch = patch_creating(f"{where}/advice{{counter}}.txt", "advice")
    return marked(work_rule(task_id=task_id, rule_id=f"advisor-{task_id}", write={
        "{handoff}guide.md": "guide\n", "{handoff}patch.diff": patch}), "mode=advisor")


async def test_compromise_fails_advisor_fails_l3_exits_and_the_next_plan_reads_the_rot(project: Path) -> None:
    make_repo(project)
    from datetime import date

    from agentbox.core.config import zones

    box = project / ".agent-box"
    zones.record_debts(box, [zones.TaggedLine("src/t1/old.py", 3, "x = 1  # FIXME: Tech Debt")], owner_role="builder",
                       task="t0", run="run-before", due=date(2020, 1, 1))  # overdue: blocks a controlled rewrite
    worker = [
        marked(work_rule(task_id="t1-rewrite", rule_id="rewritten", write={"src/t1/fixed.txt": "rewritten\n"}),
               "Controlled rewrite of src/t1"),
        marked(work_rule(task_id="t2-bypass", rule_id="bypassed", write={"lib_bypass/fixed.txt": "beside\n"}),
               "Bypass of lib"),
        marked(work_rule(task_id="t1", rule_id="c-t1", times=1,
                         write={"src/t1/which": "gamma\n", "src/t1/shim.py": "x = 2  # FIXME: Tech Debt: shim\n"}),
               "mode=compromise"),
        advisor_rule("t1", "src/t1"),
        advisor_rule("t2", "lib"),
        which_rule("t1", "src/t1", "t1-alpha", "alpha"),
        which_rule("t1", "src/t1", "t1-beta", "beta"),
        which_rule("t2", "lib", "t2-alpha", "alpha"),
        which_rule("t2", "lib", "t2-beta", "beta"),
    ]
    roles = {
        "lead": {"profile": "t-lead", "writes": [], "instructions": "roles/lead.md"},
        "builder": {"profile": "t-worker", "writes": ["src/**", "lib/**", "lib_bypass/**"],
                    "instructions": "roles/builder.md"},
        "reviewer": {"profile": "t-reviewer", "writes": [], "instructions": "roles/reviewer.md"},
    }
    checks = {"t1": {"run": drift_check("src/t1", "t1"), "paths": ["src/t1/**"]},
              "t2": {"run": drift_check("lib", "lib"), "paths": ["lib/**"]}}
    paths = setup_crew(project, tasks=[task("t1", "builder", writes=["src/t1/**"]),
                                       task("t2", "builder", writes=["lib/**"])],
                       worker=worker, roles=roles, checks=checks, gates={"submission": ["t1", "t2"]},
                       ladder=True, no_compromise=["lib/**"], sequential={"steps": ["builder"]})
    run_id = create(paths)
    answers = {
        "t1": [("apply", True), ("advisor_again", False), (f"controlled_rewrite {ROT_T1}", False), CLOSE_D1,
               (f"controlled_rewrite {ROT_T1}", True)],
        "t2": [("apply", True), ("advisor_again the patch must create lib/fixed.txt, not a stub", True),
               ("apply", True), ("bypass the module is simply beyond repair", False),
               (f"bypass {ROT_T2}", True)],
    }
    said: dict[str, list[tuple[str, str]]] = {"t1": [], "t2": []}

    async def person(engine: Any) -> None:
        while any(answers.values()):
            await asyncio.sleep(0.05)
            for cp in [c for c in engine.run.open_checkpoints() if c.kind == "ladder" and answers.get(c.task or "")]:
                planned = answers[cp.task].pop(0)
                if planned == CLOSE_D1:
                    closed = await asyncio.to_thread(run_cli, "--project", str(project), "debt", "--close", "D-1")
                    assert closed.code == 0, closed.err
                    planned = answers[cp.task].pop(0)
                text, accepted = planned
                said[cp.task].append((engine.run.tasks[cp.task].ladder.label, text.split()[0]))
                ok, message = await send(engine.project, engine.run.id, action="answer", checkpoint=cp.id, text=text)
                assert ok == accepted, (text, message)
                if not ok:
                    said[cp.task].append(("refused", message))

    final = await drive(paths, run_id, person, timeout=120, backoff=[0.05, 0.05, 0.05])
    assert final.status == "done", final.status_reason
    log = assert_log_consistent(paths, run_id)
    assert transitions(log) == [("L0", "normal", "L0", "normal"), ("L0", "normal", "L2", "compromise"),
                                ("L2", "compromise", "L2", "advisor"), ("L2", "advisor", "L3", "high_rot"),
                                ("L3", "high_rot", "L3", "closed")]
    assert [(e["to_level"], e["to_mode"]) for e in of_type(log, "ladder", "t2")] == [
        ("L0", "normal"), ("L2", "advisor"), ("L3", "high_rot"), ("L3", "advisor"), ("L3", "high_rot"),
        ("L3", "closed")]
    t1_said = said["t1"]
    assert t1_said[0] == ("L2 advisor", "apply") and t1_said[1] == ("L3 waiting for an exit", "advisor_again")
    assert "advisor again needs new information" in t1_said[2][1]
    assert "D-1" in t1_said[4][1] and "overdue tech debt" in t1_said[4][1]
    assert "root cause" in said["t2"][4][1] or "evidence" in said["t2"][4][1]
    tasks = final.tasks
    assert tasks["t1"].state == tasks["t2"].state == "cancelled"
    assert tasks["t1-rewrite"].state == tasks["t2-bypass"].state == "approved"
    assert tasks["t1-rewrite"].writes == ["src/t1/**"] and ROT_T1 in tasks["t1-rewrite"].brief
    assert tasks["t2-bypass"].writes == ["lib_bypass/**"]  # the old module's files are out of its reach
    # the compromise's tagged line is a debt; both modules are high-rot zones with the exit taken
    debts = zones.load_debts(box)
    assert debts["D-1"].status == "closed" and debts["D-2"].file == "src/t1/shim.py" and debts["D-2"].task == "t1"
    found = {z.module_path: z for z in zones.load_zones(box).values()}
    assert found["src/t1"].resolution == "controlled_rewrite" and found["lib"].resolution == "bypass"
    assert found["lib"].fail_count == 2 and found["lib"].suggested_bypass == "lib_bypass/**"
    assert "compromise" in found["src/t1"].escape_hatches_used and "advisor" in found["src/t1"].escape_hatches_used
    # the next run's plan prompt gets the zones and debts near its goal
    next_run = create(paths, "rework src/t1 and lib/ again")

    async def reads_the_plan(engine: Any) -> None:
        await until(engine, lambda e: any(j.kind == "plan" for j in e.run.jobs.values()))
        prompt = next(j.prompt for j in engine.run.jobs.values() if j.kind == "plan")
        assert "Where this code base has rotted before" in prompt
        assert re.search(r"zone Z-\d+ src/t1: 1 failure", prompt) and re.search(r"zone Z-\d+ lib: 2 failure", prompt)
        assert "debt D-2 src/t1/shim.py:1" in prompt
        assert "debt D-1" not in prompt  # closed
        ok, message = await send(engine.project, engine.run.id, action="cancel_run")
        assert ok, message

    assert (await drive(paths, next_run, reads_the_plan, timeout=60)).status == "cancelled"


async def test_a_coverage_gap_goes_back_to_the_lead_and_is_not_counted(project: Path) -> None:
    def item(a: str, ok: bool) -> dict[str, Any]:
        return {"item": f"criterion {a}", "acceptance_id": a, "pass": ok, "evidence": "read src/t1/result.txt"}

    gap_verdict = {"verdict": "reject", "confidence": 0.8, "checklist": [item("a1", True), item("a3", False)],
                   "blocking_issues": [{"id": "b1", "acceptance_id": "a3", "severity": "major",
                                        "detail": "the goal asks for a changelog entry"}]}
    approve = {"verdict": "approve", "confidence": 0.9, "blocking_issues": [],
               "checklist": [item("a1", True), item("a3", True)]}
    reviewer = [{"id": "gap", "when": {"prompt_contains": "[agentbox:review task=t1", "times": 1},
                 "do": {"delay_s": 0.05, "reply_json": gap_verdict}},
                {"id": "ok", "when": {"prompt_contains": "[agentbox:review task=t1"},
                 "do": {"delay_s": 0.05, "reply_json": approve}}]
    filled = entry("do t1", A1, {"id": "a3", "criterion": "a changelog entry says what t1 changed"})
    lead = [rewrite_rule("fill", filled, marker="[agentbox:rewrite task=t1 fill=a3]")]
    make_repo(project)
    paths = setup_crew(project, tasks=[task("t1", "builder", writes=["src/t1/**"])], lead=lead, reviewer=reviewer,
                       ladder=True)
    run_id = create(paths)
    final = await drive(paths, run_id, timeout=90)
    assert final.status == "done", final.status_reason
    t1 = final.tasks["t1"]
    assert [a.id for a in t1.acceptance] == ["a1", "a3"] and t1.state == "approved"
    assert t1.ladder.counted_failures == 0 and t1.ladder.history == [] and t1.ladder.rewrites_total == 0
    log = assert_log_consistent(paths, run_id)
    assert of_type(log, "ladder", "t1") == [] and not of_type(log, "reply.invalid")
    assert [e["acceptance"] for e in of_type(log, "ladder.coverage", "t1")] == [["a3"]]
    assert [b["counted"] for b in of_type(log, "ladder.brief", "t1")] == [False]
    work = prompts_of(paths, t1.session_id or "")
    assert len(work) == 2 and "[a3] a changelog entry says what t1 changed" in work[1]


async def test_a_failure_in_the_upstream_output_blocks_the_task_uncounted(project: Path) -> None:
    check = ("grep -q v2 src/t1/api.json || { echo 'FAILED tests/test_t2.py::test_api - AssertionError: "
             "src/t1/api.json has no v2'; exit 1; }")
    worker = [work_rule(task_id="t1", rule_id="api", write={"src/t1/api.json": "{\"v\": 1}\n"}),
              work_rule(task_id="t2", rule_id="client", write={"src/t2/client.json": "{}\n"})]
    make_repo(project)
    paths = setup_crew(project, tasks=[task("t1", "builder", writes=["src/t1/**"]),
                                       task("t2", "builder", writes=["src/t2/**"], deps=["t1"])], worker=worker,
                       checks={"api": {"run": check, "paths": ["src/t2/**"]}}, gates={"submission": ["api"]},
                       ladder=True)
    run_id = create(paths)

    async def person(engine: Any) -> None:
        await until(engine, lambda e: open_checkpoint(e, "retry_escalation") is not None, timeout=60)
        cp = open_checkpoint(engine, "retry_escalation")
        t2 = engine.run.tasks["t2"]
        assert cp.task == "t2" and t2.state == "blocked" and "its upstream t1" in cp.question
        assert t2.ladder.counted_failures == 0 and t2.ladder.history == []
        ok, message = await send(engine.project, engine.run.id, action="answer", checkpoint=cp.id, text="cancel")
        assert ok, message

    final = await drive(paths, run_id, person, timeout=90)
    assert final.status == "done", final.status_reason
    assert final.tasks["t1"].state == "approved" and final.tasks["t2"].state == "cancelled"
    log = assert_log_consistent(paths, run_id)
    assert [e["upstream"] for e in of_type(log, "ladder.upstream", "t2")] == ["t1"]
    assert of_type(log, "ladder", "t2") == [] and not final.retries


async def test_on_the_ladder_a_check_that_cannot_be_found_is_asked_at_once(project: Path) -> None:
    paths = ladder_crew(project, worker=[work_rule(task_id="t1", write={"src/t1/x.txt": "x\n"})],
                        check="no-such-runner -q")
    run_id = create(paths)

    async def person(engine: Any) -> None:
        await until(engine, lambda e: open_checkpoint(e, "retry_escalation") is not None, timeout=60)
        t1 = engine.run.tasks["t1"]
        assert [c.cannot_run for c in t1.checks] == ["not_found"]  # no back-off: waiting does not find it
        assert t1.ladder.counted_failures == 0 and not t1.failures
        ok, message = await send(engine.project, engine.run.id, action="cancel_run")
        assert ok, message

    final = await drive(paths, run_id, person, timeout=60)
    assert final.status == "cancelled" and of_type(events(paths, run_id), "retry") == []


@pytest.mark.local_runner("a worker's process crashes")
async def test_the_environment_budget_is_per_task_across_its_turns(project: Path) -> None:
    """On the ladder the waits of a task's environment back-offs add up across its turns: the work
    turn's one crash and the rework's first use 0.8 s of a 1 s budget, so the rework's second crash
    asks the person at once (the rework's own per-turn allowance would have retried it)."""
    worker = [work_rule(task_id="t1", times=1, fail="crash", rule_id="crash-work"),
              work_rule(task_id="t1", times=1, write={"src/t1/bad.txt": "bad\n"}, rule_id="bad"),
              work_rule(task_id="t1", times=2, fail="crash", rule_id="crash-rework"),
              work_rule(task_id="t1", write={"src/t1/good.txt": "good\n"}, rule_id="good")]
    paths = ladder_crew(project, worker=worker, limits={"retry_max_s": 1})
    run_id = create(paths)

    async def person(engine: Any) -> None:
        await until(engine, lambda e: open_checkpoint(e, "retry_escalation") is not None, timeout=60)
        cp = open_checkpoint(engine, "retry_escalation")
        t1 = engine.run.tasks["t1"]
        assert "1 s in all, its budget" in cp.question, cp.question
        assert t1.ladder.environment_waited_s == pytest.approx(0.8) and t1.ladder.counted_failures == 1
        assert len(of_type(events(paths, run_id), "retry", "t1")) == 2  # one per turn, neither counted
        ok, message = await send(engine.project, engine.run.id, action="answer", checkpoint=cp.id, text="retry")
        assert ok, message

    final = await drive(paths, run_id, person, timeout=120, backoff=[0.4, 0.4, 0.4])
    assert final.status == "done", final.status_reason
    t1 = final.tasks["t1"]
    assert t1.state == "approved" and t1.ladder.environment_waited_s == 0.0  # the person's retry: a fresh budget
    assert t1.ladder.counted_failures == 1 and [f.kind for f in t1.failures].count("environment_failure") == 3
    asked = [c for c in final.checkpoints.values() if c.kind == "retry_escalation"]
    assert [(c.task, c.answer) for c in asked] == [("t1", "retry")], "the budget, not the turn's allowance, asked"


@pytest.mark.local_runner("a worker's process crashes")
async def test_a_check_that_keeps_timing_out_spends_the_same_budget(project: Path) -> None:
    """The work turn's crash waited 0.4 s and the check's first time-out 0.4 s more: its second
    time-out would pass the task's 1 s, so the person is asked then (not after three reruns)."""
    worker = [work_rule(task_id="t1", times=1, fail="crash", rule_id="crash-work"),
              work_rule(task_id="t1", write={"src/t1/x.txt": "x\n"}, rule_id="write")]
    paths = ladder_crew(project, worker=worker, check="sleep 30", check_timeout_s=1, limits={"retry_max_s": 1})
    run_id = create(paths)

    async def person(engine: Any) -> None:
        await until(engine, lambda e: open_checkpoint(e, "retry_escalation") is not None, timeout=60)
        t1 = engine.run.tasks["t1"]
        assert "has waited out the environment for its budget" in open_checkpoint(engine, "retry_escalation").question
        assert [c.cannot_run for c in t1.checks] == ["timeout", "timeout"]
        assert t1.ladder.environment_waited_s == pytest.approx(0.8) and t1.ladder.counted_failures == 0
        ok, message = await send(engine.project, engine.run.id, action="cancel_run")
        assert ok, message

    final = await drive(paths, run_id, person, timeout=120, backoff=[0.4, 0.4, 0.4])
    assert final.status == "cancelled"
    assert [c.kind for c in final.checkpoints.values()] == ["retry_escalation"]
