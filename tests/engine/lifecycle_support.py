"""Runs at points of their life for the lifecycle tests: one whose engine was killed while it waited."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

from agentbox.core import runs
from agentbox.core.engine.models import Run
from agentbox.core.engine.run_store import RunStore
from agentbox.core.paths import ProjectPaths
from tests.engine.support import create, setup_crew, start_engine, stop


def dead_engine_run(root: Path) -> str:
    """A run waiting for its plan's approval whose engine was then killed (`kill -9`); its id."""
    project = setup_crew(root, hierarchical={"plan_approval": True})
    run_id = create(project)
    proc = start_engine(project, run_id)
    try:
        store = RunStore(project)
        deadline = time.monotonic() + 60
        while not (store.engine_running(run_id) and store.load(run_id).status == "waiting_user"):
            assert time.monotonic() < deadline and proc.poll() is None, "the run never waited for its plan"
            time.sleep(0.05)
    finally:
        stop(proc)  # SIGKILL, as a crash or a reboot would
    assert not runs.engine_alive(project, run_id)
    return run_id


@contextlib.contextmanager
def engines_stopped(root: Path) -> Iterator[None]:
    """Kill, at the end, any engine a test started for a run of `root` (detached engines are their own sessions)."""
    try:
        yield
    finally:
        project = ProjectPaths(root)
        for run in runs.list_runs(project):
            if isinstance(run, Run) and run.engine is not None and runs.engine_alive(project, run.id):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(run.engine.pid, signal.SIGKILL)
