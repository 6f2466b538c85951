"""A run's life after its engine: answers to a done run, a dead engine, discarding (real git, bwrap, CLI)."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

import psutil
import pytest

from tests.cli.test_worktree_cli import finished_run
from tests.conftest import run_cli
from tests.engine.lifecycle_support import dead_engine_run
from tests.engine.support import setup_crew
from tests.engine.test_worktree_runs import git, make_repo

pytestmark = pytest.mark.bwrap


def _status(project: Path, run_id: str) -> dict:
    return json.loads(run_cli("status", run_id, "--json", cwd=project).out)


def test_an_answer_the_deliver_checkpoint_does_not_know_is_refused(project: Path) -> None:
    run_id = finished_run(project, deliver="checkpoint")
    (cp,) = [c for c in _status(project, run_id)["checkpoints"].values() if c["status"] == "open"]
    refused = run_cli("answer", run_id, cp["id"], "discard", cwd=project)
    assert refused.code == 2 and "Traceback" not in refused.err, (refused.out, refused.err)
    assert "'merge', 'squash' (one commit) or 'later'" in refused.err and "'discard'" in refused.err
    assert _status(project, run_id)["checkpoints"][cp["id"]]["status"] == "open"  # not taken as "later"
    later = run_cli("answer", run_id, cp["id"], "later", cwd=project)
    assert later.code == 0, later.err
    assert _status(project, run_id)["checkpoints"][cp["id"]]["status"] == "answered"


def test_status_says_the_engine_is_gone_and_an_answer_given_meanwhile_is_not_shown_as_waiting(project: Path) -> None:
    run_id = dead_engine_run(project)
    shown = run_cli("status", run_id, cwd=project)
    headline = shown.out.splitlines()[0]
    assert headline == f"{run_id}  engine not running — it stopped while waiting_user (1 checkpoint(s) wait for the human)"
    assert f"the engine is not running: `agentbox run --resume {run_id}` continues it" in shown.out
    assert _status(project, run_id)["engine_state"] == "stopped"
    (cp,) = [c for c in _status(project, run_id)["checkpoints"].values() if c["status"] == "open"]
    answered = run_cli("answer", run_id, cp["id"], "approve", cwd=project)
    assert answered.code == 0, answered.err
    after = run_cli("status", run_id, cwd=project).out
    assert "checkpoint(s) wait" not in after and "waiting for you" not in after, after
    assert after.splitlines()[0] == f"{run_id}  engine not running — it stopped while running"
    resumed = run_cli("run", "--resume", run_id, "--quiet", cwd=project, timeout=180)
    assert resumed.code == 0, resumed.err
    done = _status(project, run_id)
    assert done["status"] == "done" and done["engine_state"] == "ended"


def _left_of(project: Path, run_id: str) -> dict[str, object]:
    """Everything of a run that could remain: git branches and refs, worktrees, state, rows, session links."""
    sessions = [json.loads(p.read_text()) for p in (project / ".agent-box" / "sessions").glob("*/*.json")]
    return {
        "branches": git(project, "for-each-ref", "--format=%(refname)", f"refs/heads/agentbox/{run_id}",
                        f"refs/heads/agentbox/{run_id}@*").split(),
        "refs": git(project, "for-each-ref", "--format=%(refname)", f"refs/agentbox/{run_id}/").split(),
        "worktrees": [line for line in git(project, "worktree", "list", "--porcelain").splitlines()
                      if line.startswith("worktree ") and run_id in line],
        "state": (project / ".agent-box" / "runs" / run_id).exists(),
        "rows": [r["id"] for r in json.loads(run_cli("runs", "--json", cwd=project).out) if r["id"] == run_id],
        "session_links": [s["id"] for s in sessions if s.get("run_id") == run_id],
    }


NOTHING = {"branches": [], "refs": [], "worktrees": [], "state": False, "rows": [], "session_links": []}


def test_discard_removes_every_trace_of_an_unmerged_run_and_says_what(project: Path) -> None:
    run_id = finished_run(project)
    before = _left_of(project, run_id)
    assert before["branches"] and before["state"] and before["rows"] and before["session_links"], before
    # no terminal to ask and no --yes: refused, nothing removed
    refused = run_cli("discard", run_id[:-3], cwd=project)
    assert refused.code == 2 and "--yes" in refused.err and "Traceback" not in refused.err, refused.err
    assert _left_of(project, run_id) == before
    done = run_cli("discard", run_id[:-3], "--yes", cwd=project)
    assert done.code == 0, done.err
    assert done.out.startswith(f"discarded run {run_id} (done); removed:")
    for branch in before["branches"]:  # type: ignore[union-attr]
        assert f"branch      {branch.removeprefix('refs/heads/')}" in done.out
    assert f"state       {project / '.agent-box' / 'runs' / run_id}" in done.out
    assert _left_of(project, run_id) == NOTHING
    assert git(project, "status", "--porcelain") == ""  # the person's tree untouched
    gone = run_cli("discard", run_id, "--yes", cwd=project)
    assert gone.code == 2 and f"no run {run_id!r}" in gone.err


def test_discard_stops_a_live_run_first(project: Path) -> None:
    make_repo(project)
    setup_crew(project, hierarchical={"plan_approval": True})
    git(project, "-c", "user.name=P", "-c", "user.email=p@example.invalid", "commit", "-qam", "crew")
    started = run_cli("run", "build it", "--detach", cwd=project)
    assert started.code == 0, started.err
    run_id = started.out.strip()
    deadline = time.monotonic() + 60
    while _status(project, run_id)["status"] != "waiting_user":
        assert time.monotonic() < deadline, "the run never waited for its plan"
        time.sleep(0.2)
    pid = _status(project, run_id)["engine"]["pid"]
    done = run_cli("discard", run_id, "--yes", cwd=project)
    assert done.code == 0, done.err
    assert "engine      stopped first" in done.out
    with contextlib.suppress(psutil.NoSuchProcess):  # it let the run go; now it only has to exit
        engine = psutil.Process(pid)
        _, alive = psutil.wait_procs([engine], timeout=30)
        assert not alive or engine.status() == psutil.STATUS_ZOMBIE
    assert _left_of(project, run_id) == NOTHING
