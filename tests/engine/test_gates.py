"""The submission gate end to end: real git, real bwrap, scripted agents, crew.yaml checks.

A writer's submission is checked by the code layer before any review; red goes back to the
worker with the check's output, a check that cannot run is retried and not counted, a
flaky check passes only when the crew allows it, and an engine killed during a check runs
it again without recording it twice.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from agentbox.core.engine.gates import failure_signature
from agentbox.core.engine.run_store import RunStore
from tests.conftest import run_cli
from tests.engine.support import (
    answering,
    assert_log_consistent,
    create,
    drive,
    events,
    of_type,
    open_checkpoint,
    prompts_of,
    review_rule,
    send,
    setup_crew,
    start_engine,
    stop,
    task,
    until,
    work_rule,
)
from tests.engine.test_worktree_runs import git, make_repo

pytestmark = pytest.mark.bwrap

GOOD = "test -f src/t1/good.txt || { echo 'FAILED tests/test_t1.py::test_good - AssertionError: no good.txt'; exit 1; }"


def crew(project: Path, *, checks: dict[str, Any], submission: list[str], worker: list[dict[str, Any]] | None = None,
         **extra: Any) -> Any:
    """One builder task t1 whose first turn writes bad.txt and whose later turns write good.txt."""
    make_repo(project)
    worker = worker if worker is not None else [
        work_rule(task_id="t1", rule_id="first", times=1, write={"src/t1/bad.txt": "bad\n"}),
        work_rule(task_id="t1", rule_id="again", write={"src/t1/good.txt": "good\n"}),
    ]
    return setup_crew(project, tasks=[task("t1", "builder", writes=["src/t1/**"])], worker=worker,
                      checks=checks, gates={"submission": submission}, **extra)


async def test_red_then_green_the_reviewer_sees_green_work_only(project: Path) -> None:
    paths = crew(project, checks={"smoke": {"run": GOOD, "timeout_s": 60}}, submission=["smoke"])
    run_id = create(paths)
    final = await drive(paths, run_id, timeout=120)
    assert final.status == "done", final.status_reason
    t1 = final.tasks["t1"]
    assert [(c.name, c.stage, c.passed) for c in t1.checks] == [("smoke", "submission", False),
                                                                ("smoke", "submission", True)]
    red, green = t1.checks
    assert red.commit and green.commit == t1.head and red.commit != green.commit and red.exit_status == 1
    assert git(project, "merge-base", "--is-ancestor", green.commit, final.git.integration_branch) == ""  # type: ignore[union-attr]
    # the rework prompt carries the check's name, command, exit status and output
    work_prompts = prompts_of(paths, t1.session_id or "")
    assert len(work_prompts) == 2 and work_prompts[1].startswith("[agentbox:rework task=t1")
    assert "The check `smoke` failed on your submission" in work_prompts[1]
    assert "Exit status: 1" in work_prompts[1] and GOOD in work_prompts[1]
    assert "FAILED tests/test_t1.py::test_good - AssertionError: no good.txt" in work_prompts[1]
    # the reviewer was called once, on the green commit, and told of the checks
    review_prompts = prompts_of(paths, t1.review_session_id or "")
    assert len(review_prompts) == 1
    assert f"Checks agentbox ran on this submission (commit {green.commit[:10]})" in review_prompts[0]
    assert f"- smoke: passed in {green.duration_s:.1f} s, exit status 0" in review_prompts[0]
    assert green.log in review_prompts[0] and Path(green.log).is_file()
    log = events(paths, run_id)
    assert len(of_type(log, "check", "t1")) == 2 and len(of_type(log, "gate.blocked", "t1")) == 1
    failure = [f for f in t1.failures if f.kind == "implementation_defect"]
    assert len(failure) == 1 and "tests/test_t1.py::test_good" in failure[0].message
    assert of_type(log, "verdict", "t1")[0]["seq"] > of_type(log, "gate.passed", "t1")[0]["seq"]
    # where people see it: `agentbox checks`, `status --json`
    listed = run_cli("--project", str(project), "checks", run_id, "--json")
    assert listed.code == 0, listed.err
    data = json.loads(listed.out)
    assert data["gates"]["submission"] == ["smoke"]
    assert [(c["name"], c["stage"], c["commit"], c["passed"], c["exit_status"], c["flaky"]) for c in data["checks"]] == [
        ("smoke", "submission", red.commit, False, 1, False), ("smoke", "submission", green.commit, True, 0, False)]
    assert all(Path(c["log"]).is_file() and c["duration_s"] >= 0 for c in data["checks"])
    text = run_cli("--project", str(project), "checks", run_id, "t1")
    assert text.code == 0 and "failed" in text.out and "passed" in text.out and red.commit[:10] in text.out
    status = json.loads(run_cli("--project", str(project), "status", run_id, "--json").out)
    assert [(c["name"], c["stage"], c["commit"], c["passed"]) for c in status["tasks"]["t1"]["checks"]] == [
        ("smoke", "submission", red.commit, False), ("smoke", "submission", green.commit, True)]
    missing = run_cli("--project", str(project), "checks", run_id, "t9")
    assert missing.code == 2 and "no task 't9'" in missing.err and "Traceback" not in missing.err


async def test_paths_filter_skips_a_check_the_changes_do_not_touch(project: Path) -> None:
    checks = {"smoke": {"run": GOOD}, "docs": {"run": "exit 9", "paths": ["docs/**"]}}
    paths = crew(project, checks=checks, submission=["docs", "smoke"])
    final = await drive(paths, create(paths), timeout=120)
    assert final.status == "done", final.status_reason
    assert {c.name for c in final.tasks["t1"].checks} == {"smoke"}


async def test_a_check_running_git_in_a_sparse_worktree_reads_its_index_cleanly(project: Path) -> None:
    """A task's new worktree is on git's sparse index; git inside a check's sandbox reads it as git in
    the turn's sandbox does (its own object dir over read-only alternates), with no write error."""
    probe = ('out=$(git status --porcelain 2>&1; git diff --stat HEAD~1 2>&1); echo "$out"; '
             'case "$out" in *"unable to"*|*"fatal"*|*"error"*) exit 1;; esac; ' + GOOD)
    paths = crew(project, checks={"git": {"run": probe, "timeout_s": 60}}, submission=["git"], worker=[
        work_rule(task_id="t1", write={"src/t1/good.txt": "good\n"})])
    final = await drive(paths, create(paths), timeout=120)
    assert final.status == "done", final.status_reason
    [check] = final.tasks["t1"].checks
    assert check.passed, check.tail
    assert "unable to create temporary file" not in check.tail


async def test_a_missing_command_is_an_environment_failure_not_counted(project: Path) -> None:
    """`ladder: false`: a check that could not run is backed off like any environment failure
    (on the ladder it is asked at once: test_ladder_runs)."""
    paths = crew(project, checks={"smoke": {"run": "no-such-runner -q"}}, submission=["smoke"],
                 limits={"max_auto_retries": 0}, ladder=False)
    run_id = create(paths)

    async def person(engine: Any) -> None:
        await until(engine, lambda e: open_checkpoint(e, "retry_escalation") is not None, timeout=60)
        cp = open_checkpoint(engine, "retry_escalation")
        assert "could not run" in cp.question and "not_found" in cp.question
        t1 = engine.run.tasks["t1"]
        assert t1.state == "blocked" and [f.kind for f in t1.failures] == []  # nothing counted against the work
        assert [c.cannot_run for c in t1.checks] == ["not_found"] * 4  # the first run and three retries
        assert not engine.run.retries
        ok, message = await send(engine.project, engine.run.id, action="cancel_run")
        assert ok, message

    final = await drive(paths, run_id, person, timeout=120, backoff=[0.05, 0.05, 0.05])
    assert final.status == "cancelled"
    assert len(of_type(events(paths, run_id), "retry")) == 3
    assert prompts_of(paths, final.tasks["t1"].review_session_id or "none") == []


FLAKY = ('[ "$AGENTBOX_CHECK_ATTEMPT" = 2 ] || grep -q second src/t1/good.txt || { echo "FAILED '
         'tests/test_x.py::test_race (attempt $AGENTBOX_CHECK_ATTEMPT)"; exit 1; }')
"""On the first submission red, then green on the engine's rerun of it (what a flaky check looks
like); green at once on the worker's second version."""


@pytest.mark.parametrize("flaky", ["allow", "deny"])
async def test_a_flaky_check_passes_only_when_the_crew_allows_it(project: Path, flaky: str) -> None:
    paths = crew(project, checks={"net": {"run": FLAKY, "flaky": flaky}}, submission=["net"],
                 worker=[work_rule(task_id="t1", rule_id="first", times=1, write={"src/t1/good.txt": "first\n"}),
                         work_rule(task_id="t1", rule_id="again", write={"src/t1/good.txt": "second\n"})])
    run_id = create(paths)
    final = await drive(paths, run_id, timeout=120)
    assert final.status == "done", final.status_reason
    checks = [(c.passed, c.flaky) for c in final.tasks["t1"].checks]
    log = events(paths, run_id)
    assert len(of_type(log, "check.flaky", "t1")) == 1, [(c.status, c.flaky, c.tail) for c in final.tasks["t1"].checks]
    if flaky == "allow":
        assert checks == [(True, True)] and final.tasks["t1"].attempts == 1
    else:
        assert checks == [(False, True), (True, False)] and final.tasks["t1"].attempts == 2
        assert "it is flaky" in prompts_of(paths, final.tasks["t1"].session_id or "")[1]


@pytest.mark.local_runner('kill -9 of the engine and a resume: end to end under bwrap')
async def test_kill_9_during_a_check_runs_it_again_and_never_records_it_twice(project: Path) -> None:
    slow = "sleep 3; " + GOOD
    paths = crew(project, checks={"smoke": {"run": slow, "timeout_s": 60}}, submission=["smoke"],
                 worker=[work_rule(task_id="t1", write={"src/t1/good.txt": "good\n"})])
    run_id = create(paths)
    store = RunStore(paths)
    proc = start_engine(paths, run_id)
    try:
        deadline = time.monotonic() + 60
        while not any(g.started for g in store.load(run_id).gates.values()):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        stop(proc)
    killed = store.load(run_id)
    assert killed.tasks["t1"].checks == [] and killed.tasks["t1"].state == "submitted"
    final = await drive(paths, run_id, timeout=120)
    assert final.status == "done", final.status_reason
    assert [(c.name, c.passed) for c in final.tasks["t1"].checks] == [("smoke", True)]
    log = assert_log_consistent(paths, run_id)
    assert len(of_type(log, "check", "t1")) == 1
    assert any("check smoke of t1 was interrupted" in e["what"] for e in of_type(log, "recover"))


def test_the_fingerprint_of_a_red_check_comes_from_its_output() -> None:
    first = ("tests/test_app.py::test_a PASSED\nFAILED tests/test_app.py::test_b - AssertionError: 1 != 2\n"
             "/tmp/run-1/src/app.py:12: AssertionError\n== 1 failed in 0.53s ==")
    second = ("FAILED tests/test_app.py::test_b - AssertionError: 1 != 2\n"
              "/tmp/other/src/app.py:48: AssertionError\n== 1 failed in 2.10s ==")
    assert failure_signature(first) == failure_signature(second)
    assert failure_signature(first)[0] == "tests/test_app.py::test_b; AssertionError"
    assert "tests/test_app.py" in failure_signature(first)[1]
    other = failure_signature("FAILED tests/test_app.py::test_c - KeyError: 'x'")
    assert other != failure_signature(first)
    assert failure_signature("make: *** [all] Error 2\nbuild broke at step 3")[0].endswith("build broke at step 3")


@pytest.mark.local_runner("waits for the review turn's process (its pid) to move the branch under it")
async def test_an_approval_is_bound_to_the_commit_it_judged(project: Path) -> None:
    from agentbox.core.workspace.layout import common_dir, task_worktree_path

    paths = crew(project, checks={"smoke": {"run": GOOD}}, submission=["smoke"],
                 worker=[work_rule(task_id="t1", write={"src/t1/good.txt": "good\n"})],
                 reviewer=[review_rule("approve", delay=60)])
    run_id = create(paths)
    moved: dict[str, str] = {}

    async def person(engine: Any) -> None:
        await until(engine, lambda e: any(j.kind == "review" and j.pid for j in e.run.jobs.values()), timeout=60)
        judged = engine.run.tasks["t1"].head
        tree = task_worktree_path(common_dir(project), run_id, "t1")
        (tree / "src" / "t1" / "later.txt").write_text("committed by hand during the review\n")
        git(tree, "add", "-A")
        git(tree, "-c", "user.name=P", "-c", "user.email=p@example.invalid", "commit", "-q", "-m", "by hand")
        moved["head"] = git(tree, "rev-parse", "HEAD").strip()
        ok, message = await send(paths, run_id, action="approve", task="t1", note="looked at it")
        assert not ok and "stale" in message and judged[:10] in message and moved["head"][:10] in message
        ok, message = await send(paths, run_id, action="approve", task="t1", note="looked again", commit=judged[:12])
        assert not ok and "stale" in message
        ok, message = await send(paths, run_id, action="approve", task="t1", note="looked again",
                                 commit=moved["head"][:12])
        assert ok, message

    final = await drive(paths, run_id, person, timeout=120)
    assert final.status == "done", final.status_reason
    t1 = final.tasks["t1"]
    assert t1.verdicts[-1].by == "human" and t1.verdicts[-1].commit == moved["head"] == t1.head
    tree = git(project, "ls-tree", "-r", "--name-only", final.git.integration_branch)  # type: ignore[union-attr]
    assert "src/t1/later.txt" in tree
    assert [c.commit for c in t1.checks] != [t1.head]  # the checks judged the submitted commit, named as such


CLASH = ("if [ -e src/t1/a.txt ] && [ -e src/t2/clash.txt ]; then "
         "echo 'FAILED tests/test_combo.py::test_both - RuntimeError: t1 and t2 clash'; exit 1; fi")


@pytest.mark.local_runner('a worker runs a shell command in its worktree')
async def test_a_red_integration_check_between_two_approved_tasks_undoes_the_merge_and_asks(project: Path) -> None:
    make_repo(project)
    worker = [
        work_rule(task_id="t1", rule_id="w1", write={"src/t1/a.txt": "a\n"}),
        work_rule(task_id="t2", rule_id="w2a", times=1, write={"src/t2/clash.txt": "clash\n"}),
        work_rule(task_id="t2", rule_id="w2b", write={"src/t2/b.txt": "b\n"}, run="rm -f src/t2/clash.txt"),
    ]
    reviewer = [review_rule("approve", task_id="t2", delay=2.0)]  # t1 is merged first, after t2 started
    paths = setup_crew(project, worker=worker, reviewer=reviewer,
                       tasks=[task("t1", "builder", writes=["src/t1/**"]), task("t2", "tester", writes=["src/t2/**"])],
                       checks={"combo": {"run": CLASH}}, gates={"integration": ["combo"]}, deliver="manual")
    run_id = create(paths)
    final = await drive(paths, run_id, answering(("retry_escalation", "retry")), timeout=180)
    assert final.status == "done", final.status_reason
    t1, t2 = final.tasks["t1"], final.tasks["t2"]
    assert t1.state == t2.state == "approved" and t1.merged and t2.merged
    (asked,) = [c for c in final.checkpoints.values() if c.kind == "retry_escalation"]
    assert asked.task == "t2" and asked.answer == "retry"
    assert "after t2 was merged on top of t1" in asked.question and "they clash" in asked.question
    assert "RuntimeError" in asked.question and "the run's branch holds t1 without t2" in asked.question
    assert [(c.stage, c.passed) for c in t2.checks] == [("integration", False), ("integration", True)]
    red = t2.checks[0]
    log = events(paths, run_id)
    (undone,) = of_type(log, "merge.undone", "t2")
    assert undone["commit"] == red.commit
    branch = final.git.integration_branch  # type: ignore[union-attr]
    ancestors = git(project, "rev-list", branch).split()
    assert red.commit not in ancestors and t1.merged in ancestors  # the red merge is gone, t1's stays
    tree = git(project, "ls-tree", "-r", "--name-only", branch).split()
    assert "src/t2/clash.txt" not in tree and {"src/t1/a.txt", "src/t2/b.txt"} <= set(tree)
    rework = prompts_of(paths, t2.session_id or "")[1]
    assert rework.startswith("[agentbox:rework task=t2") and "The check `combo` failed on the run's branch" in rework
    assert "Tasks merged into the run's branch since your work's base: t1." in rework
    assert "RuntimeError: t1 and t2 clash" in rework
    approvals = of_type(log, "task.approve", "t2")
    assert len(approvals) == 1 and "integration checks passed" in approvals[0]["why"]


async def test_an_approval_no_check_applies_to_waits_for_the_integration_check_before_it(project: Path) -> None:
    make_repo(project)
    worker = [work_rule(task_id="t1", rule_id="w1", write={"src/t1/a.txt": "a\n"}),
              work_rule(task_id="t2", rule_id="w2", write={"src/t2/b.txt": "b\n"})]
    reviewer = [review_rule("approve", task_id="t2", delay=1.0)]  # approved while t1's check still runs
    paths = setup_crew(project, worker=worker, reviewer=reviewer,
                       tasks=[task("t1", "builder", writes=["src/t1/**"]), task("t2", "tester", writes=["src/t2/**"])],
                       checks={"slow": {"run": "sleep 4", "paths": ["src/t1/**"]}}, gates={"integration": ["slow"]},
                       deliver="manual")
    run_id = create(paths)
    final = await drive(paths, run_id, timeout=180)
    assert final.status == "done", final.status_reason
    t1, t2 = final.tasks["t1"], final.tasks["t2"]
    assert t1.merged and t2.merged and [c.stage for c in t1.checks] == ["integration"] and t2.checks == []
    # t2 was merged on top of t1's checked merge, never under it while its check ran
    assert t1.merged in git(project, "rev-list", t2.merged).split()
    (queued,) = [e for e in of_type(events(paths, run_id), "gate.opened", "t2")]
    assert "merged after the integration checks before it" in str(queued.get("why"))


async def test_a_red_run_end_check_is_never_merged_without_saying_so(project: Path) -> None:
    paths = crew(project, checks={"smoke": {"run": GOOD}, "final": {"run": "echo 'FAILED final suite'; exit 2"}},
                 submission=["smoke"], worker=[work_rule(task_id="t1", write={"src/t1/good.txt": "good\n"})],
                 deliver="merge")
    (project / ".agent-box" / "crew.yaml").write_text(
        (project / ".agent-box" / "crew.yaml").read_text().replace('"submission": [', '"run_end": ["final"], "submission": ['))
    run_id = create(paths)
    final = await drive(paths, run_id, timeout=120)
    assert final.status == "done" and final.git is not None and final.git.delivered is None
    assert [(c.name, c.stage, c.passed, c.exit_status) for c in final.checks] == [("final", "run_end", False, 2)]
    (cp,) = [c for c in final.checkpoints.values() if c.kind == "deliver"]
    assert "although its final checks failed" in cp.question and "final: FAILED (exit status 2" in cp.question
    assert final.checks[0].commit == git(project, "rev-parse", final.git.integration_branch).strip()


@pytest.mark.local_runner("waits for the review turn's process (its pid) to move the branch under it")
async def test_a_reviewers_approval_of_a_moved_branch_is_stale(project: Path) -> None:
    from agentbox.core.workspace.layout import common_dir, task_worktree_path

    paths = crew(project, checks={"smoke": {"run": GOOD}}, submission=["smoke"],
                 worker=[work_rule(task_id="t1", write={"src/t1/good.txt": "good\n"})],
                 reviewer=[review_rule("approve", delay=3, times=1)])
    run_id = create(paths)

    async def person(engine: Any) -> None:
        await until(engine, lambda e: any(j.kind == "review" and j.pid for j in e.run.jobs.values()), timeout=60)
        tree = task_worktree_path(common_dir(project), run_id, "t1")
        (tree / "src" / "t1" / "later.txt").write_text("committed by hand during the review\n")
        git(tree, "add", "-A")
        git(tree, "-c", "user.name=P", "-c", "user.email=p@example.invalid", "commit", "-q", "-m", "by hand")

    final = await drive(paths, run_id, person, timeout=120)
    assert final.status == "done", final.status_reason
    t1 = final.tasks["t1"]
    log = events(paths, run_id)
    (stale,) = of_type(log, "approval.stale", "t1")
    assert stale["commit"] != stale["head"] and t1.verdicts[0].commit == stale["commit"]
    assert t1.verdicts[-1].commit == t1.head and t1.checks[-1].commit == t1.head  # judged again, checked again
    assert len(t1.checks) == 2 and t1.attempts == 2


@pytest.mark.local_runner('kill -9 of the engine and a resume: end to end under bwrap')
async def test_kill_9_during_an_integration_check_merges_once_and_checks_again(project: Path) -> None:
    make_repo(project)
    paths = setup_crew(project, worker=[work_rule(task_id="t1", write={"src/t1/good.txt": "good\n"})],
                       tasks=[task("t1", "builder", writes=["src/t1/**"])], deliver="manual",
                       checks={"slow": {"run": "sleep 3; " + GOOD}}, gates={"integration": ["slow"]})
    run_id = create(paths)
    store = RunStore(paths)
    proc = start_engine(paths, run_id)
    try:
        deadline = time.monotonic() + 60
        while not any(g.started and g.merged for g in store.load(run_id).gates.values()):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        stop(proc)
    killed = store.load(run_id)
    assert killed.tasks["t1"].state == "reviewing" and killed.tasks["t1"].checks == []
    final = await drive(paths, run_id, timeout=120)
    assert final.status == "done", final.status_reason
    t1 = final.tasks["t1"]
    assert t1.state == "approved" and [(c.stage, c.passed) for c in t1.checks] == [("integration", True)]
    merges = [line for line in git(project, "log", "--format=%s", final.git.integration_branch).splitlines()  # type: ignore[union-attr]
              if "merge task t1" in line]
    assert len(merges) == 1 and t1.checks[0].commit == t1.merged
    log = assert_log_consistent(paths, run_id)
    assert len(of_type(log, "check", "t1")) == 1 and len(of_type(log, "task.approve", "t1")) == 1
