"""Ids on the command line: any unique prefix names a run, session, task or checkpoint, as git
takes a commit; a prefix of several lists them (exit 2)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from agentbox.core import runs
from agentbox.core.agents.sessions import SessionRecord, SessionStore
from agentbox.core.errors import UsageError
from agentbox.core.ids import by_prefix
from tests.conftest import run_cli
from tests.tui.builders import RUN_ID, build_run, copy_example


def test_by_prefix_takes_the_id_a_unique_prefix_and_lists_an_ambiguous_one() -> None:
    known = ["cp-1", "cp-12", "cp-2"]
    assert by_prefix("checkpoint", "cp-1", known) == "cp-1"  # the id itself, though it begins another
    assert by_prefix("checkpoint", "cp-2", known) == "cp-2"
    assert by_prefix("checkpoint", "cp-9", known) is None
    with pytest.raises(UsageError, match=r"'cp-' is the start of 3 checkpoint ids: cp-1, cp-12, cp-2"):
        by_prefix("checkpoint", "cp-", known)


def _record(session_id: str, owner: str = "builder") -> SessionRecord:
    now = time.time()
    return SessionRecord(id=session_id, owner=owner, role=owner, profile="demo-worker", tool="scripted", cwd="/",
                         created=now, updated=now)


def test_runs_sessions_tasks_and_checkpoints_by_prefix(tmp_path: Path) -> None:
    project = copy_example(tmp_path / "repo")
    build_run(project, "waiting")
    root = project.root
    # a run: by a prefix of its id
    shown = run_cli("status", RUN_ID[:-2], "--json", cwd=root)
    assert shown.code == 0 and json.loads(shown.out)["id"] == RUN_ID, shown.err
    # a second run makes "run-" name two: both are listed
    other = runs.create_run(project, "another goal").id
    both = run_cli("status", "run-", cwd=root)
    assert both.code == 2 and "Traceback" not in both.err
    assert f"'run-' is the start of 2 run ids: {RUN_ID}, {other}" in both.err
    # a session: by the 8 characters the dashboard shows, and the table says its run and task
    listed = run_cli("sessions", "builder", cwd=root)
    assert listed.code == 0 and "RUN" in listed.out.splitlines()[0] and "TASK" in listed.out.splitlines()[0]
    row = next(line.split() for line in listed.out.splitlines()[1:] if RUN_ID in line)
    session = row[1]
    assert row[3:5] == [RUN_ID, "greet"] or row[3:5] == [RUN_ID, "docs"], row
    one = run_cli("sessions", "show", session[:8], "--json", cwd=root)
    assert one.code == 0 and json.loads(one.out)["session"]["id"] == session, one.err
    store = SessionStore(project.sessions_dir)
    for suffix in ("1", "2"):
        store.save(_record(f"abcdef00-0000-4000-8000-00000000000{suffix}"))
    several = run_cli("sessions", "show", "abcdef00", cwd=root)
    assert several.code == 2 and "'abcdef00' is the start of 2 session ids" in several.err
    assert "abcdef00-0000-4000-8000-000000000001" in several.err
    # a checkpoint: by its number; a task: by a prefix, in a run named by a prefix
    (cp,) = [c for c in runs.load(project, RUN_ID).open_checkpoints()]
    answered = run_cli("answer", RUN_ID[:-2], cp.id.removeprefix("cp-"), "English, please", cwd=root)
    assert answered.code == 0, answered.err
    assert runs.load(project, RUN_ID).checkpoints[cp.id].status == "answered"
    cancelled = run_cli("cancel", "do", "--run", RUN_ID[:-2], cwd=root)
    assert cancelled.code == 0, cancelled.err
    assert runs.load(project, RUN_ID).tasks["docs"].state == "cancelled"
    unknown = run_cli("cancel", "nosuch", "--run", RUN_ID, cwd=root)
    assert unknown.code == 2 and "Traceback" not in unknown.err
