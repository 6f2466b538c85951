"""Reviews and protected paths in real runs: the real engine, its turns played by the scripted agents.

The review policies (two reviewers, disagreements, plans asking for reviews) run their turns
in-process (tests/engine/inprocess.py); what needs a worktree's real diff or a sandbox's
refusal runs scripted agents under bwrap.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from agentbox.core.engine.models import Task
from agentbox.core.paths import ProjectPaths
from tests.conftest import run_cli
from tests.engine.inprocess import InProcessRunner
from tests.engine.support import (
    REVIEW_RE,
    answering,
    assert_log_consistent,
    create,
    drive,
    of_type,
    plan_rule,
    prompts_of,
    setup_crew,
    task,
    when,
    work_rule,
    write_profile,
)


async def test_a_plan_task_writing_a_protected_path_is_refused_at_plan_time(project: Path) -> None:
    bad = [task("t1", "builder", writes=["src/**"])]
    paths = setup_crew(project, lead=[plan_rule(bad, times=1)], tasks=[task("t1", "builder")],
                       protected=["src/contracts/**"])
    run_id = create(paths)
    run = await drive(paths, run_id, runner=InProcessRunner())
    assert run.status == "done", run.status_reason
    log = assert_log_consistent(paths, run_id)
    (invalid,) = of_type(log, "reply.invalid")
    assert "task t1: writes 'src/**', which reaches the protected path 'src/contracts/**'" in invalid["why"]
    prompts = prompts_of(paths, run.sessions["lead"])
    assert "Protected paths" in prompts[0] and "src/contracts/**" in prompts[0]
    assert prompts[1].startswith("[agentbox:correction model=Plan]") and "protected path" in prompts[1]
    assert run.tasks["t1"].writes == ["src/t1/**"]


# ----------------------------------------------------------------------------- two reviewers

ROLES = {
    "lead": {"profile": "t-lead", "writes": []},
    "builder": {"profile": "t-worker", "writes": ["src/**"]},
    "reviewer": {"profile": "t-reviewer", "writes": []},
    "critic": {"profile": "t-critic", "writes": []},
}


def reply(issues: list[tuple[str, str]] = (), *, failing: bool = False) -> dict[str, Any]:  # type: ignore[assignment]
    """A verdict on t1's criterion a1: approve, or reject with `(id, severity)` issues."""
    blocking = [{"id": i, "acceptance_id": "a1", "severity": s, "detail": f"{i}: the {s} flaw only this review saw"}
                for i, s in issues]
    rejects = bool(blocking) or failing
    return {"verdict": "reject" if rejects else "approve", "blocking_issues": blocking, "confidence": 0.8,
            "checklist": [{"item": "criterion a1", "acceptance_id": "a1", "pass": not rejects,
                           "evidence": "read src/t1"}]}


def review(answer: dict[str, Any] | str, *, times: int | None = None) -> dict[str, Any]:
    do = {"delay_s": 0.1, **({"reply": answer} if isinstance(answer, str) else {"reply_json": answer})}
    return {"id": f"review-{id(answer)}-{times}", "when": when(regex=REVIEW_RE, times=times), "do": do}


def two_reviewers(project: Path, reviewer: list[dict[str, Any]], critic: list[dict[str, Any]]) -> ProjectPaths:
    write_profile("t-critic", [*critic, review(reply())])
    return setup_crew(project, reviewer=reviewer, tasks=[task("t1", "builder")], roles=ROLES,
                      hierarchical={"reviewers": ["reviewer", "critic"]}, sequential={"steps": ["builder"]})


def review_prompts(paths: ProjectPaths, task_: Task, role: str) -> list[str]:
    return prompts_of(paths, task_.review_sessions[role])


async def test_two_reviewers_who_both_approve_approve_in_separate_sessions(project: Path) -> None:
    paths = two_reviewers(project, [], [])
    run_id = create(paths)
    run = await drive(paths, run_id, runner=InProcessRunner())
    assert run.status == "done", run.status_reason
    t1 = run.tasks["t1"]
    assert t1.state == "approved" and t1.panel is not None and t1.panel.outcome == "approve"
    assert [(v.verdict, v.by) for v in t1.verdicts] == [("approve", "reviewer"), ("approve", "critic")] or \
        [(v.verdict, v.by) for v in t1.verdicts] == [("approve", "critic"), ("approve", "reviewer")]
    assert t1.review_sessions["reviewer"] != t1.review_sessions["critic"]
    log = assert_log_consistent(paths, run_id)
    (compared,) = of_type(log, "review.compared", "t1")
    assert compared["outcome"] == "approve" and compared["reviewers"] == ["reviewer", "critic"]
    status = json.loads(run_cli("status", run_id, "--json", cwd=project).out)
    panel = status["tasks"]["t1"]["panel"]
    assert panel["outcome"] == "approve" and set(panel["verdicts"]) == {"reviewer", "critic"}


async def test_agreeing_rejections_send_back_the_union_and_neither_sees_the_other(project: Path) -> None:
    paths = two_reviewers(project, [review(reply([("b1", "major"), ("b2", "major")]), times=1)],
                          [review(reply([("b1", "major")]), times=1)])
    run_id = create(paths)
    run = await drive(paths, run_id, runner=InProcessRunner())
    assert run.status == "done", run.status_reason
    t1 = run.tasks["t1"]
    combined = next(v for v in t1.verdicts if v.by == "reviewer + critic")
    assert {b.id for b in combined.blocking_issues} == {"b1", "b2"} and "to verify: b2[a1]" in (combined.note or "")
    rework = prompts_of(paths, t1.session_id)[1]
    assert rework.startswith("[agentbox:rework task=t1") and "b1: the major flaw" in rework and "b2: the major" in rework
    assert "to verify: b2[a1]" in rework
    for prompt in review_prompts(paths, t1, "critic"):  # the second round too: nothing of the other review
        assert "b2: the major flaw" not in prompt and "reviewer" not in prompt.split("\n", 1)[0]
    log = assert_log_consistent(paths, run_id)
    assert [e["outcome"] for e in of_type(log, "review.compared", "t1")] == ["rework", "approve"]
    assert t1.state == "approved" and t1.attempts == 2


async def test_disagreeing_reviews_ask_a_person_who_sends_back_both(project: Path) -> None:
    paths = two_reviewers(project, [review(reply([("b1", "major")]), times=1)],
                          [review(reply([("b3", "major")]), times=1)])
    run_id = create(paths)
    run = await drive(paths, run_id, answering(("review_disagreement", "rework and mind the tests")),
                    runner=InProcessRunner())
    assert run.status == "done", run.status_reason
    t1 = run.tasks["t1"]
    (cp,) = [c for c in run.checkpoints.values() if c.kind == "review_disagreement"]
    assert "only reviewer raised b1[a1]" in cp.question and "only critic raised b3[a1]" in cp.question
    rework = prompts_of(paths, t1.session_id)[1]
    assert "b1: the major flaw" in rework and "b3: the major flaw" in rework and "mind the tests" in rework
    assert t1.state == "approved"


async def test_a_blocker_only_one_review_raised_asks_a_person(project: Path) -> None:
    paths = two_reviewers(project, [], [review(reply([("b9", "blocker")]), times=1)])
    run_id = create(paths)
    run = await drive(paths, run_id, answering(("review_disagreement", "approve: I ran it myself")),
                    runner=InProcessRunner())
    assert run.status == "done", run.status_reason
    t1 = run.tasks["t1"]
    assert t1.panel is not None and t1.panel.outcome == "checkpoint" and "blocker b9[a1]" in str(t1.panel.reason)
    assert t1.verdicts[-1].by == "human" and t1.attempts == 1


async def test_an_empty_verdict_asks_a_person(project: Path) -> None:
    paths = two_reviewers(project, [], [review("Looks fine to me.", times=1)])
    run_id = create(paths)
    run = await drive(paths, run_id, answering(("review_disagreement", "cancel")),
                    runner=InProcessRunner())
    assert run.status == "failed" and run.tasks["t1"].state == "cancelled"
    t1 = run.tasks["t1"]
    invalid = t1.panel.verdicts["critic"] if t1.panel else None
    assert invalid is not None and invalid.verdict == "invalid" and "no JSON object" in str(invalid.note)
    log = assert_log_consistent(paths, run_id)
    assert not of_type(log, "reply.invalid"), "no corrective re-prompt: the comparison asks a person"


async def test_a_plan_asks_for_two_reviews_of_one_task(project: Path) -> None:
    roles = {name: role for name, role in ROLES.items() if name != "critic"}
    double = {**task("t1", "builder"), "review": "double"}
    paths = setup_crew(project, lead=[review(reply())], tasks=[double, task("t2", "builder", deps=["t1"])],
                       roles=roles, sequential={"steps": ["builder"]})
    run_id = create(paths)
    run = await drive(paths, run_id, runner=InProcessRunner())
    assert run.status == "done", run.status_reason
    t1, t2 = run.tasks["t1"], run.tasks["t2"]
    assert t1.review == "double" and t1.panel is not None and t1.panel.reviewers == ["reviewer", "lead"]
    assert {v.by for v in t1.verdicts} == {"reviewer", "lead"} and t1.panel.outcome == "approve"
    assert t2.panel is None and [v.by for v in t2.verdicts] == ["reviewer"]


async def test_a_double_review_with_one_reviewer_is_refused_at_plan_time(project: Path) -> None:
    roles = {"lead": ROLES["lead"], "builder": ROLES["builder"]}
    double = {**task("t1", "builder"), "review": "double"}
    paths = setup_crew(project, lead=[plan_rule([double], times=1), review(reply())], tasks=[task("t1", "builder")],
                       roles=roles, sequential={"steps": ["builder"]}, hierarchical={"reviewer": None})
    run_id = create(paths)
    run = await drive(paths, run_id, runner=InProcessRunner())
    assert run.status == "done", run.status_reason
    (invalid,) = of_type(assert_log_consistent(paths, run_id), "reply.invalid")
    assert "task t1: review: double needs two reviewers" in invalid["why"]
    assert run.tasks["t1"].review is None


# ----------------------------------------------------------------------------- a worktree run


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout


@pytest.mark.bwrap
async def test_both_reviewers_of_a_worktree_task_review_its_real_diff(project: Path) -> None:
    (project / "src").mkdir()
    (project / "src" / "app.py").write_text("print('app')\n")
    (project / ".gitignore").write_text(".agent-box/runs/\n.agent-box/sessions/\n")
    git(project, "init", "-q", "-b", "main")
    git(project, "-c", "user.name=P", "-c", "user.email=p@example.invalid", "add", "-A")
    git(project, "-c", "user.name=P", "-c", "user.email=p@example.invalid", "commit", "-q", "-m", "start")
    worker = [work_rule(task_id="t1", rule_id="w1", write={"src/t1/code.py": "VALUE = 1\n"})]
    write_profile("t-critic", [review(reply([("b1", "major")]), times=1), review(reply())])
    paths = setup_crew(project, worker=worker, reviewer=[review(reply([("b1", "major")]), times=1)],
                       tasks=[task("t1", "builder")], roles=ROLES,
                       hierarchical={"reviewers": ["reviewer", "critic"]}, sequential={"steps": ["builder"]})
    run_id = create(paths)
    run = await drive(paths, run_id, timeout=120)
    assert run.status == "done", run.status_reason
    t1 = run.tasks["t1"]
    assert t1.state == "approved" and t1.attempts == 2 and t1.merged
    for role in ("reviewer", "critic"):  # both rounds, each reviewer in the task's worktree, read-only
        prompts = review_prompts(paths, t1, role)
        assert len(prompts) == 2 and all("## The task's changes" in p and "+VALUE = 1" in p for p in prompts), role


@pytest.mark.local_runner("a worker's shell command meets the sandbox's protected paths")
@pytest.mark.bwrap
async def test_a_worktree_step_writing_src_cannot_change_a_protected_contract(project: Path) -> None:
    (project / "src" / "contracts").mkdir(parents=True)
    (project / "src" / "contracts" / "api.yaml").write_text("version: 1\n")
    (project / ".gitignore").write_text(".agent-box/runs/\n.agent-box/sessions/\n")
    git(project, "init", "-q", "-b", "main")
    git(project, "-c", "user.name=P", "-c", "user.email=p@example.invalid", "add", "-A")
    git(project, "-c", "user.name=P", "-c", "user.email=p@example.invalid", "commit", "-q", "-m", "start")
    attack = ("echo evil > src/contracts/api.yaml; echo evil > src/contracts/new.yaml; mv src src2; "
              "mkdir -p src/contracts && echo evil > src/contracts/api.yaml; true")
    worker = [work_rule(rule_id="w1", write={"src/code.py": "VALUE = 1\n"}, run=attack)]
    roles = {"builder": ROLES["builder"], "reviewer": ROLES["reviewer"], "lead": ROLES["lead"]}
    paths = setup_crew(project, worker=worker, mode="sequential", roles=roles, sequential={"steps": ["builder"]},
                       protected=["src/contracts/**"])
    run_id = create(paths)
    run = await drive(paths, run_id, timeout=120)
    assert run.status == "done", run.status_reason
    (step,) = run.tasks.values()
    assert step.writes == ["src/**"] and [c.path for c in step.changed_files] == ["src/code.py"]
    integration = run.git.integration_branch if run.git else ""
    assert git(project, "show", f"{integration}:src/contracts/api.yaml") == "version: 1\n"
    assert {f for f in git(project, "ls-tree", "-r", "--name-only", integration).split()
            if f.startswith("src")} == {"src/code.py", "src/contracts/api.yaml"}
