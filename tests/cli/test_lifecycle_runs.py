"""A run's life after its engine: answers to a done run, a dead engine, discarding (real git, bwrap, CLI)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.test_worktree_cli import finished_run
from tests.conftest import run_cli
from tests.engine.lifecycle_support import dead_engine_run

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
