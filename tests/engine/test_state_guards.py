"""Pids and locks from run state: nothing recorded in a file makes agentbox kill a stranger or hang.

Real processes throughout: an unrelated `sleep` whose pid a run.json names, a process
holding `flock` on the run's lock files (a read-only descriptor is enough) while a whole
scripted run goes through the engine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from agentbox.core import store
from agentbox.core.engine.models import Job
from agentbox.core.engine.recovery import kill_orphan
from agentbox.core.engine.run_store import RunStore
from agentbox.core.errors import StateError
from tests.engine.support import assert_log_consistent, create, drive, setup_crew

HOLDER = """
import fcntl, os, sys, time
fds = []
for path in sys.argv[1:]:
    fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    fds.append(fd)
print("held", flush=True)
time.sleep(120)
"""


def sleeper(env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            env={**os.environ, **(env or {})})


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test starts; each is killed (by its own pid) at the end."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def hold_locks(processes: list[subprocess.Popen[bytes]], *paths: Path) -> None:
    """Start a process that holds an exclusive flock on each path (made if missing)."""
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, *map(str, paths)], stdout=subprocess.PIPE)
    processes.append(proc)
    assert proc.stdout is not None and proc.stdout.readline() == b"held\n"


# ----------------------------------------------------------------------------- pids


def test_a_recorded_pid_without_a_start_time_is_never_killed(processes: list[subprocess.Popen[bytes]]) -> None:
    stranger = sleeper()
    processes.append(stranger)
    kill_orphan(Job(id="job-1", kind="work", role="builder", session_id=str(uuid.uuid4()), pid=stranger.pid))
    time.sleep(0.2)
    assert stranger.poll() is None, "an unrelated process named by run.json was killed"


def test_a_pid_with_the_right_start_time_but_another_session_is_never_killed(
        processes: list[subprocess.Popen[bytes]]) -> None:
    stranger = sleeper({"AGENTBOX_SESSION_ID": "someone-else"})
    processes.append(stranger)
    created = psutil.Process(stranger.pid).create_time()
    kill_orphan(Job(id="job-1", kind="work", role="builder", session_id=str(uuid.uuid4()), pid=stranger.pid,
                    pid_create_time=created))
    time.sleep(0.2)
    assert stranger.poll() is None


def test_a_pid_with_another_start_time_is_never_killed(processes: list[subprocess.Popen[bytes]]) -> None:
    session = str(uuid.uuid4())
    stranger = sleeper()
    processes.append(stranger)
    kill_orphan(Job(id="job-1", kind="work", role="builder", session_id=session, pid=stranger.pid,
                    pid_create_time=psutil.Process(stranger.pid).create_time() - 100))
    time.sleep(0.2)
    assert stranger.poll() is None


def test_the_turn_agentbox_started_is_still_killed(processes: list[subprocess.Popen[bytes]]) -> None:
    session = str(uuid.uuid4())
    orphan = sleeper({"AGENTBOX_SESSION_ID": session})
    processes.append(orphan)
    deadline = time.monotonic() + 10  # a loaded machine: let the child finish starting before it is judged
    while psutil.Process(orphan.pid).environ().get("AGENTBOX_SESSION_ID") != session:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    kill_orphan(Job(id="job-1", kind="work", role="builder", session_id=session, pid=orphan.pid,
                    pid_create_time=psutil.Process(orphan.pid).create_time()))
    assert orphan.wait(timeout=5) != 0


# ----------------------------------------------------------------------------- locks


def test_a_held_lock_is_a_state_error_within_the_timeout(tmp_path: Path,
                                                          processes: list[subprocess.Popen[bytes]]) -> None:
    target = tmp_path / "inbox.jsonl"
    hold_locks(processes, tmp_path / "inbox.jsonl.lock")
    started = time.monotonic()
    with pytest.raises(StateError, match="stays locked"), store.locked(target, timeout=0.5):
        pass
    assert time.monotonic() - started < 3


@pytest.mark.bwrap
async def test_the_engine_runs_a_whole_run_while_its_lock_files_are_held(
        project: Path, processes: list[subprocess.Popen[bytes]]) -> None:
    """Before: the engine's loop blocked forever in flock() on events.jsonl.lock."""
    paths = setup_crew(project)
    run_id = create(paths)
    run_dir = RunStore(paths).dir(run_id)
    hold_locks(processes, run_dir / "events.jsonl.lock", run_dir / "artifacts" / "manifest.jsonl.lock",
               run_dir / "run.json.lock")
    run = await drive(paths, run_id, timeout=60)
    assert run.status == "done", run.status_reason
    log = assert_log_consistent(paths, run_id)
    assert any(e["type"] == "run.finished" for e in log)
    assert RunStore(paths).manifest(run_id), "artifacts were recorded"


def test_a_command_whose_inbox_lock_is_held_fails_cleanly(project: Path,
                                                          processes: list[subprocess.Popen[bytes]]) -> None:
    """With an engine holding the run, `agentbox pause` posts to the inbox: a held inbox lock is a clean error."""
    paths = setup_crew(project)
    run_id = create(paths)
    run_dir = RunStore(paths).dir(run_id)
    hold_locks(processes, run_dir / "inbox.jsonl.lock", run_dir / "engine.lock")
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "agentbox", "--project", str(paths.root), "pause", run_id],
                            capture_output=True, text=True, timeout=60, cwd=paths.root)
    assert time.monotonic() - started < store.LOCK_TIMEOUT_S + 10
    assert "Traceback" not in result.stderr
    assert result.returncode == 1 and "stays locked" in result.stderr, result.stderr
    assert json.loads((run_dir / "run.json").read_text())["paused"] is False
