"""`agentbox shell TASK`: a shell in the task's worktree, in its role's sandbox (real bwrap, git, engine)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.engine.support import review_rule, setup_crew, task, work_rule
from tests.engine.test_worktree_runs import git, make_repo

pytestmark = pytest.mark.bwrap


def test_shell_opens_in_the_tasks_worktree_within_its_scopes(project: Path) -> None:
    make_repo(project)
    worker = [work_rule(task_id="t1", rule_id="w1", write={"src/t1/code.py": "VALUE = 1\n"})]
    reviewer = [review_rule("approve", task_id="t1", rule_id="slow", delay=120)]  # t1 stays open meanwhile
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
        worktree = Path(git(project, "rev-parse", "--git-common-dir").strip())
        worktree = (project / worktree if not worktree.is_absolute() else worktree) / "agentbox" / "worktrees" / run_id / "t1"
        assert worktree.is_dir()

        # the task's running turn (the review) can be watched by the task's id
        watched = run_cli("tail", "t1", cwd=project)
        assert watched.code == 0, watched.err
        assert "[task t1 (reviewer) · session " in watched.err and "· running]" in watched.err, watched.err

        # cleaning while the run goes on keeps the open task's worktree
        assert run_cli("clean", cwd=project).code == 0
        assert (worktree / "src" / "t1" / "code.py").is_file()

        # the task's files, seen at the project's own path, in the sandbox; none of it in the person's tree
        shown = run_cli("shell", "t1", "-c", "pwd; cat src/t1/code.py", cwd=project)
        assert shown.code == 0, shown.err
        assert shown.out.splitlines() == [str(project), "VALUE = 1"]
        assert f"[shell in builder's sandbox · task t1's worktree (branch agentbox/{run_id}@t1)" in shown.err
        assert not (project / "src" / "t1").exists()

        # commands on stdin work too; a write inside the task's scope lands in its worktree, others fail
        piped = run_cli("shell", "t1", cwd=project, stdin=(
            "echo mine > src/extra.py && echo in_rc=0\n"
            "echo x > README.md; echo out_rc=$?\n"
            "echo x >> .agent-box/crew.yaml; echo box_rc=$?\n"
            "echo x > /etc/agentbox-shell-test; echo etc_rc=$?\n"
            "ls -A ~; echo home_done\n"))
        assert piped.code == 0, piped.err
        assert "in_rc=0" in piped.out and (worktree / "src" / "extra.py").read_text() == "mine\n"
        for name in ("out", "box", "etc"):
            assert f"{name}_rc=0" not in piped.out, piped.out
        assert "Read-only file system" in piped.err
        assert not Path("/etc/agentbox-shell-test").exists()
        home_listing = piped.out.split("etc_rc=")[1].split("home_done")[0].split()[1:]
        assert not any(name.startswith((".claude", ".codex", ".scripted")) for name in home_listing), home_listing
        assert "README.md" not in git(project, "status", "--porcelain")

        # the exit status is the command's
        assert run_cli("shell", "t1", "-c", "exit 3", cwd=project).code == 3

        # a network profile's shell goes out through the egress proxy, as its turns do; a prefix names the task
        profile = Path(os.environ["AGENT_BOX_HOME"]) / "profiles" / "t-worker" / "profile.yaml"
        profile.write_text(profile.read_text().replace('"network": false', '"network": true'))
        networked = run_cli("shell", "t", "-c", 'pwd; echo "proxy=$HTTPS_PROXY"', cwd=project)
        assert networked.code == 0, networked.err
        assert networked.out.splitlines()[0] == str(project) and "proxy=http://127.0.0.1:" in networked.out

        # --host: the person's own shell on the host, in the worktree's real directory
        host = run_cli("shell", "t1", "--host", "-c", "pwd", cwd=project)
        assert host.code == 0, host.err
        assert Path(host.out.strip()).resolve() == worktree.resolve()
        assert "NOT sandboxed" in host.err

        missing = run_cli("shell", "nosuch", cwd=project)
        assert missing.code == 2 and "Traceback" not in missing.err, missing.err
    finally:
        run_cli("cancel", run_id, cwd=project)


def test_a_task_without_a_worktree_opens_in_the_runs_view_read_only(project: Path) -> None:
    from tests.cli.test_worktree_cli import finished_run

    run_id = finished_run(project)  # its tasks are approved: their worktrees are gone
    shown = run_cli("shell", "t1", "-c", "cat src/t1/code.py; echo x > src/t1/code.py; echo rc=$?", cwd=project)
    assert shown.code == 0, shown.err
    assert shown.out.splitlines()[0] == "VALUE = 1" and "rc=0" not in shown.out
    assert f"run {run_id}'s view, read-only" in shown.err and "· read-only ·" in shown.err
    assert git(project, "show", f"agentbox/{run_id}:src/t1/code.py") == "VALUE = 1\n"
