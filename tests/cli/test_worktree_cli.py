"""`agentbox diff`, `merge`, `clean`, `status --json` and `doctor` on a real worktree run (real git, bwrap, CLI)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.engine.support import review_rule, setup_crew, task, work_rule
from tests.engine.test_worktree_runs import git, make_repo

pytestmark = pytest.mark.bwrap


def finished_run(project: Path, deliver: str = "manual") -> str:
    make_repo(project)
    worker = [work_rule(task_id="t1", rule_id="w1", write={"src/t1/code.py": "VALUE = 1\n", "src/app.py": "print(1)\n"}),
              work_rule(task_id="t2", rule_id="w2", write={"tests/test_x.py": "assert True\n"})]
    setup_crew(project, worker=worker, deliver=deliver,
               tasks=[task("t1", "builder", writes=["src/**"]), task("t2", "tester", writes=["tests/**"])])
    git(project, "-c", "user.name=P", "-c", "user.email=p@example.invalid", "commit", "-qam", "crew")
    time.sleep(1.1)
    os.utime(project / "README.md")  # an editor saved it unchanged: the index's stat data is stale now
    done = run_cli("run", "build it", "--quiet", cwd=project, timeout=180)
    assert done.code == 0, done.err
    return json.loads(run_cli("status", "--json", cwd=project).out)["id"]


def test_diff_status_merge_and_clean(project: Path) -> None:
    run_id = finished_run(project)
    status = json.loads(run_cli("status", run_id, "--json", cwd=project).out)
    assert status["git"]["integration_branch"] == f"agentbox/{run_id}" and status["git"]["base"]
    t1 = status["tasks"]["t1"]
    assert t1["branch"] == f"agentbox/{run_id}@t1" and t1["base"] and t1["head"] and t1["merged"]
    assert sorted(c["path"] for c in t1["changed_files"]) == ["src/app.py", "src/t1/code.py"]

    shown = run_cli("status", run_id, cwd=project).out
    assert f"workspace: worktree · agentbox/{run_id}" in shown and f"agentbox merge {run_id}" in shown
    assert "2 merged" in shown  # t1 changed two files, merged
    assert f"`agentbox merge {run_id}` brings it into main" in shown
    stat = run_cli("diff", run_id, "--stat", cwd=project)
    assert stat.code == 0 and "src/t1/code.py" in stat.out and "tests/test_x.py" in stat.out and "@@" not in stat.out
    one = json.loads(run_cli("diff", run_id, "t2", "--json", cwd=project).out)
    assert [f["path"] for f in one["files"]] == ["tests/test_x.py"] and "+assert True" in one["patch"]
    assert "no task 'nope'" in run_cli("diff", run_id, "nope", cwd=project).err

    # the person changed a file the run changes: merge refuses, with a hint, and changes nothing
    head = git(project, "rev-parse", "HEAD")
    (project / "src" / "app.py").write_text("print('mine')\n")
    refused = run_cli("merge", run_id, cwd=project)
    assert refused.code == 2
    assert refused.err == (f"error: bringing run {run_id} into main would overwrite your uncommitted changes to "
                           f"src/app.py in {project}\n"
                           "hint: commit or stash your changes (git stash), then run `agentbox merge` again\n")
    assert git(project, "rev-parse", "HEAD") == head and (project / "src" / "app.py").read_text() == "print('mine')\n"
    git(project, "checkout", "--", "src/app.py")

    # nothing is cleaned while the run's work is unmerged; --dry-run changes nothing
    branches = git(project, "branch", "--list", "agentbox/*")
    dry = json.loads(run_cli("clean", "--dry-run", "--json", cwd=project).out)
    assert dry["dry_run"] and git(project, "branch", "--list", "agentbox/*") == branches
    assert f"agentbox/{run_id}" not in dry["branches"]

    merged = run_cli("merge", run_id, cwd=project)
    assert merged.code == 0, merged.err
    assert (project / "src" / "t1" / "code.py").read_text() == "VALUE = 1\n"
    assert git(project, "log", "-1", "--format=%P", "HEAD").split()[0] == head.strip()  # history kept, one merge
    again = run_cli("merge", run_id, cwd=project)
    assert again.code == 0 and "already" in again.out

    cleaned = run_cli("clean", cwd=project)
    assert cleaned.code == 0, cleaned.err
    assert git(project, "branch", "--list", "agentbox/*") == ""


def test_a_shared_run_has_no_diff_and_doctor_lists_what_runs_left(project: Path) -> None:
    make_repo(project)
    setup_crew(project, workspace="shared")
    assert run_cli("run", "build it", "--quiet", cwd=project, timeout=180).code == 0
    shared = run_cli("diff", cwd=project)
    assert shared.code == 2 and "shared workspace" in shared.err and "Traceback" not in shared.err
    assert "`git diff` shows what your tree holds now" in shared.err  # a git repository: git diff helps
    # a branch of a run agentbox has no record of is listed by doctor
    git(project, "branch", "agentbox/run-20200101-000000-dead", "HEAD")
    report = json.loads(run_cli("doctor", "--json", cwd=project).out)
    (check,) = [c for c in report["checks"] if c["name"] == "worktrees"]
    assert check["status"] == "warn" and "run-20200101-000000-dead" in check["detail"]
    assert subprocess.run(["git", "-C", str(project), "worktree", "list"], capture_output=True).returncode == 0
    subprocess.run(["rm", "-rf", str(project / ".git")], check=True)  # no git at all: `git diff` would not help
    outside = run_cli("diff", cwd=project)
    assert outside.code == 2 and "git diff" not in outside.err and "agentbox status" in outside.err


def test_a_done_run_asks_to_merge_and_the_answer_merges(project: Path) -> None:
    run_id = finished_run(project, deliver="checkpoint")
    status = json.loads(run_cli("status", run_id, "--json", cwd=project).out)
    (cp,) = [c for c in status["checkpoints"].values() if c["status"] == "open"]
    assert cp["kind"] == "deliver" and "src/t1/code.py" in cp["question"]
    squashed = run_cli("answer", run_id, cp["id"], "squash", cwd=project)
    assert squashed.code == 0, squashed.err
    assert len(git(project, "log", "-1", "--format=%P", "HEAD").split()) == 1  # one commit, no merge
    assert git(project, "log", "-1", "--format=%s", "HEAD").strip() == "build it"  # titled by the goal
    assert (project / "tests" / "test_x.py").exists()



def test_a_person_approving_from_the_cli_sees_the_tasks_changes_first(project: Path) -> None:
    make_repo(project)
    worker = [work_rule(task_id="t1", rule_id="w1", write={"src/t1/code.py": "VALUE = 1\n"})]
    reviewer = [review_rule("approve", task_id="t1", rule_id="slow", delay=60)]  # the person decides first
    setup_crew(project, worker=worker, reviewer=reviewer, tasks=[task("t1", "builder", writes=["src/**"])])
    started = run_cli("run", "build it", "--detach", cwd=project)
    assert started.code == 0, started.err
    run_id = json.loads(run_cli("status", "--json", cwd=project).out)["id"]
    try:
        deadline = time.monotonic() + 90
        while json.loads(run_cli("status", run_id, "--json", cwd=project).out)["tasks"].get("t1", {}).get(
                "state") != "reviewing":
            assert time.monotonic() < deadline, "t1 never reached review"
            time.sleep(0.3)
        approved = run_cli("approve", "t1", "--run", run_id, "--note", "looked at the diff", cwd=project)
        assert approved.code == 0, approved.err
        assert f"t1 changes (its branch agentbox/{run_id}@t1, from git)" in approved.out
        assert "src/t1/code.py | 1 +" in approved.out and f"agentbox diff {run_id} t1" in approved.out
        assert "approved" in approved.out
        deadline = time.monotonic() + 90
        while json.loads(run_cli("status", run_id, "--json", cwd=project).out)["status"] != "done":
            assert time.monotonic() < deadline
            time.sleep(0.3)
        assert git(project, "show", f"agentbox/{run_id}:src/t1/code.py") == "VALUE = 1\n"
    finally:
        run_cli("cancel", run_id, cwd=project)


def _wait_done(project: Path, run_id: str, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        status = json.loads(run_cli("status", run_id, "--json", cwd=project).out)
        if status["status"] in ("done", "failed", "cancelled"):
            return status
        assert time.monotonic() < deadline, status["status"]
        time.sleep(0.3)


def test_two_worktree_runs_at_once_keep_apart_and_a_second_shared_writer_is_refused(project: Path) -> None:
    make_repo(project)
    worker = [work_rule(task_id="t1", rule_id="w1", delay=2, write={"src/app.py": "print('{task} of this run')\n"})]
    setup_crew(project, worker=worker, tasks=[task("t1", "builder", writes=["src/**"])])
    git(project, "-c", "user.name=P", "-c", "user.email=p@example.invalid", "commit", "-qam", "crew")
    before = git(project, "status", "--porcelain"), git(project, "rev-parse", "HEAD")
    first = run_cli("run", "one", "--detach", cwd=project)
    second = run_cli("run", "two", "--detach", cwd=project)
    assert first.code == 0 and second.code == 0, (first.err, second.err)
    ids = [r["id"] for r in json.loads(run_cli("runs", "--json", cwd=project).out)]
    assert len(ids) == 2
    for run_id in ids:  # both wrote src/app.py at the same time, each on its own branches
        assert _wait_done(project, run_id)["status"] == "done"
        assert git(project, "show", f"agentbox/{run_id}:src/app.py") == "print('t1 of this run')\n"
    assert (git(project, "status", "--porcelain"), git(project, "rev-parse", "HEAD")) == before
    assert (project / "src" / "app.py").read_text() == "print('app')\n"

    # the live tree takes one writing run at a time
    setup_crew(project, worker=worker, tasks=[task("t1", "builder", writes=["src/**"])], workspace="shared")
    live = run_cli("run", "three", "--detach", cwd=project)
    assert live.code == 0, live.err
    run_id = json.loads(run_cli("status", "--json", cwd=project).out)["id"]
    try:
        refused = run_cli("run", "four", "--detach", cwd=project)
        assert refused.code == 2 and f"run {run_id} is writing this project's live tree" in refused.err
        assert "workspace: worktree" in refused.err and "Traceback" not in refused.err
    finally:
        _wait_done(project, run_id)


def test_a_run_starts_from_another_base_and_an_unknown_one_is_refused(project: Path) -> None:
    make_repo(project)
    setup_crew(project, tasks=[task("t1", "builder", writes=["src/**"])], deliver="checkpoint")
    git(project, "-c", "user.name=P", "-c", "user.email=p@example.invalid", "commit", "-qam", "crew")
    git(project, "branch", "release")
    older = git(project, "rev-parse", "HEAD").strip()
    (project / "src" / "later.py").write_text("later\n")
    git(project, "add", "-A")
    git(project, "-c", "user.name=P", "-c", "user.email=p@example.invalid", "commit", "-qm", "later")
    unknown = run_cli("run", "build it", "--base", "nosuch", cwd=project)
    assert unknown.code == 2 and "Traceback" not in unknown.err
    assert unknown.err.startswith("error: --base nosuch: there is no branch, tag or commit nosuch in this repository")
    assert run_cli("runs", "--json", cwd=project).out.strip() in ("[]", "")  # no run was made
    done = run_cli("run", "build it", "--base", "release", "--quiet", cwd=project, timeout=180)
    assert done.code == 0, done.err
    status = json.loads(run_cli("status", "--json", cwd=project).out)
    assert status["git"]["base"] == older and status["git"]["branch"] == "release"
    branch = status["git"]["integration_branch"]
    assert "later.py" not in git(project, "ls-tree", "-r", "--name-only", branch)  # the run saw release, not HEAD
    (cp,) = [c for c in status["checkpoints"].values() if c["status"] == "open"]
    assert "into release?" in cp["question"]
    by_commit = run_cli("run", "again", "--base", older[:10], "--quiet", cwd=project, timeout=180)
    assert by_commit.code == 0, by_commit.err
    second = json.loads(run_cli("status", "--json", cwd=project).out)
    assert second["git"]["base"] == older and second["git"]["branch"] is None
    assert not [c for c in second["checkpoints"].values() if c["status"] == "open"]  # no branch to ask about
    shown = run_cli("status", second["id"], cwd=project).out
    assert f"`agentbox merge {second['id']} --into BRANCH` brings it into a branch of yours" in shown
    refused = run_cli("merge", second["id"], cwd=project)
    assert refused.code == 2 and "--into BRANCH" in refused.err
    assert run_cli("merge", second["id"], "--into", "release", cwd=project).code == 0


def test_a_shared_run_is_refused_at_start_when_config_yaml_names_a_ray_cluster(project: Path,
                                                                               agent_box_home: Path) -> None:
    from agentbox.core import runs
    from agentbox.core.paths import ProjectPaths

    make_repo(project)
    setup_crew(project, workspace="shared")
    earlier = runs.create_run(ProjectPaths(project), "build it").id  # made while the runner was local
    (agent_box_home / "config.yaml").write_text("runner:\n  kind: ray\n  address: 127.0.0.1:9\n")
    refused = run_cli("run", "build it", "--quiet", cwd=project, timeout=60)
    assert refused.code == 2 and "Traceback" not in refused.err, refused.err
    assert refused.err.count("error:") == 1 and "shared workspace" in refused.err and "Ray cluster" in refused.err
    assert "workspace: worktree" in refused.err  # the way out
    assert [r.id for r in runs.list_runs(ProjectPaths(project))] == [earlier]  # nothing was made
    resumed = run_cli("run", "--resume", earlier, "--quiet", cwd=project, timeout=60)
    assert resumed.code == 2 and "Traceback" not in resumed.err and f"run {earlier} works" in resumed.err
    setup_crew(project, workspace="worktree")  # a worktree run takes its branches to the nodes: not refused here
    assert runs.create_run(ProjectPaths(project), "build it").contract.workspace == "worktree"
