"""`agentbox tail ROLE|TASK [--follow]` under real bwrap, with the scripted runtime streaming events."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentbox.core.agents import live
from agentbox.core.agents.sessions import SessionStore
from agentbox.core.paths import ProjectPaths
from tests.cli.test_agents_cli import make_profile
from tests.conftest import run_cli

pytestmark = pytest.mark.bwrap

GATE = "gate.txt"
STREAMING = {
    "rules": [],
    "fallback": {
        "stream": [
            {"text": "reading the tree"},
            {"tool": "Bash", "input": {"command": "ls src"}},
            {"tool_result": "main.py"},
            {"text": "now in \u001b[31mred\u001b[0m\u0007 and \u202eevil"},
        ],
        # the turn ends only once the test has seen the events (no clock involved)
        "run": f"while [ ! -e {GATE} ]; do sleep 0.05; done",
        "reply": "all done",
    },
}


def add_role(project: Path, home: Path, name: str, scenario: dict[str, object]) -> None:
    make_profile(home, name, scenario)
    added = run_cli("role", "add", name, "--profile", name, "--read-only", cwd=project)
    assert added.code == 0, added.err


def agentbox(*args: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "agentbox", *args], cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_running(project: Path, role: str, proc: subprocess.Popen[str]) -> None:
    """Until `role` has a turn in flight (its session record says so)."""
    store = SessionStore(ProjectPaths(project).sessions_dir)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        if any(r.status == "running" for r in store.list(role)):
            return
        time.sleep(0.05)
    raise AssertionError("the turn never started")


def test_follow_shows_events_as_they_happen_and_ends_with_the_turn(project: Path, agent_box_home: Path) -> None:
    add_role(project, agent_box_home, "streamer", STREAMING)
    turn = agentbox("invoke", "streamer", "look around", cwd=project)
    follower = None
    try:
        wait_running(project, "streamer", turn)
        follower = agentbox("tail", "streamer", "--follow", cwd=project)
        assert follower.stdout is not None
        seen = []
        while not any("and \\u202eevil" in line for line in seen):
            line = follower.stdout.readline()
            assert line, (seen, follower.stderr.read() if follower.stderr else "")
            seen.append(line.rstrip("\n"))
        assert turn.poll() is None  # all of it was shown while the turn still ran
        assert seen == ["reading the tree", "→ Bash: ls src", "  ← main.py",
                        "now in ␛[31mred␛[0m␇ and \\u202eevil"]
        (project / GATE).write_text("go")
        rest, err = follower.communicate(timeout=60)
        assert follower.returncode == 0, err
        assert "\x1b" not in rest and "\x07" not in rest
        assert rest.splitlines()[-1].startswith("— turn ended: ok · ")
        assert "[streamer · session " in err and "· running]" in err
        out, err = turn.communicate(timeout=60)
        assert turn.returncode == 0, err
    finally:
        for proc in (turn, follower):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()

    # afterwards, without --follow: the finished turn is shown whole, then the command ends
    again = run_cli("tail", "streamer", cwd=project)
    assert again.code == 0, again.err
    assert again.out.splitlines()[0] == "reading the tree"
    assert "· finished]" in again.err


def test_a_flood_keeps_the_live_view_bounded(project: Path, agent_box_home: Path) -> None:
    flood_bytes = 4 * live.KEEP_SEGMENTS * live.SEGMENT_BYTES
    add_role(project, agent_box_home, "flooder",
             {"rules": [], "fallback": {"fail": "flood", "flood_bytes": flood_bytes, "reply": "survived"}})
    done = run_cli("invoke", "flooder", "go", cwd=project)
    assert done.code == 0, done.err
    store = SessionStore(ProjectPaths(project).sessions_dir)
    (record,) = store.list("flooder")
    directory = store.logs_dir(record) / "turn-1.live"
    kept = sum(p.stat().st_size for p in directory.iterdir())
    assert kept <= (live.KEEP_SEGMENTS + 1) * live.SEGMENT_BYTES and kept * 3 < flood_bytes
    assert len(os.listdir(directory)) <= live.KEEP_SEGMENTS
    shown = run_cli("tail", "flooder", cwd=project)
    assert shown.code == 0, shown.err
    assert any(line.startswith("… ") for line in shown.out.splitlines())  # says that output went unshown
    assert shown.out.splitlines()[-1].startswith("— turn ended: ok")
    assert len(shown.out) <= (live.KEEP_SEGMENTS + 1) * live.SEGMENT_BYTES


def test_tail_of_a_task_and_of_nothing(project: Path, agent_box_home: Path) -> None:
    missing = run_cli("tail", "builder", cwd=project)
    assert missing.code == 2 and missing.err.startswith("error: builder has not run a turn yet"), missing.err
    unknown = run_cli("tail", "nosuch", cwd=project)
    assert unknown.code == 2 and "no run" in unknown.err and "Traceback" not in unknown.err, unknown.err

