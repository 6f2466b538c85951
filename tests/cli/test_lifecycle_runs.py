"""A run's life after its engine: answers to a done run, a dead engine, discarding (real git, bwrap, CLI)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.test_worktree_cli import finished_run
from tests.conftest import run_cli

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
