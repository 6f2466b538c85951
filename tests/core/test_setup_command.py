"""crew.yaml's setup command under real bwrap: a command that floods its output or hangs
costs bounded memory and time, and its whole output (capped) is kept in a log file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from agentbox.core.agents.setup_command import run_setup
from agentbox.core.process import LOG_CAP_BYTES

pytestmark = pytest.mark.bwrap

CHILD = """
import json, resource, sys
from pathlib import Path
from agentbox.core.agents.setup_command import run_setup
root, worktree, log, command, timeout = sys.argv[1:]
outcome = run_setup(Path(root), Path(worktree), (), (), command, float(timeout), Path(log))
peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"ok": outcome.ok, "detail": outcome.detail, "peak_mb": peak_mb}))
"""


def project(tmp_path: Path) -> tuple[Path, Path]:
    """A project (with its .agent-box) and a worktree of it."""
    root, worktree = tmp_path / "proj", tmp_path / "wt"
    (root / ".agent-box").mkdir(parents=True)
    (worktree / ".agent-box").mkdir(parents=True)
    return root, worktree


def run_in_child(tmp_path: Path, command: str, timeout_s: float) -> dict[str, object]:
    """run_setup in a Python process of its own, so its peak memory is its own."""
    root, worktree = project(tmp_path)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(root), str(worktree), str(tmp_path / "setup.log"),
                           command, str(timeout_s)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_a_flood_of_output_costs_bounded_memory_and_is_logged_capped(tmp_path: Path) -> None:
    flood = 300 << 20  # 300 MB: held whole, it alone would be a 300 MB peak
    outcome = run_in_child(tmp_path, f"head -c {flood} /dev/zero | tr '\\0' x; echo; echo the end; exit 4", 100)
    assert outcome["ok"] is False
    assert "exited 4" in str(outcome["detail"]) and str(outcome["detail"]).endswith("the end")
    assert (tmp_path / "setup.log").stat().st_size == LOG_CAP_BYTES
    # held whole the output alone is 300 MB; bounded, the peak is the interpreter and its imports (~150 MB)
    assert float(outcome["peak_mb"]) < 220, outcome["peak_mb"]  # type: ignore[arg-type]


def test_a_hanging_command_is_killed_with_everything_it_started(tmp_path: Path) -> None:
    outcome = run_in_child(tmp_path, "echo started; sleep 977 & sleep 978", 1)
    assert outcome["ok"] is False
    assert "did not finish in 1 s (killed)" in str(outcome["detail"]) and "setup.log" in str(outcome["detail"])
    assert (tmp_path / "setup.log").read_text() == "started\n"
    left = [p.info["cmdline"] for p in psutil.process_iter(["cmdline"])
            if p.info["cmdline"] and p.info["cmdline"][:1] == ["sleep"] and p.info["cmdline"][1:] in (["977"], ["978"])]
    assert not left, left


def test_a_command_that_succeeds_says_so_with_the_end_of_its_output(tmp_path: Path) -> None:
    root, worktree = project(tmp_path)
    outcome = run_setup(root, worktree, (), (), "echo to out; echo to err >&2; touch made",
                        30, tmp_path / "setup.log")
    assert outcome.ok and outcome.detail.endswith("exited 0: to out\nto err")
    assert (worktree / "made").exists()  # the worktree, seen at the project's path, is writable
    assert (tmp_path / "setup.log").read_text() == "to out\nto err\n"


def test_the_setup_command_goes_out_through_the_proxy_and_never_reaches_this_machines_loopback(
        tmp_path: Path) -> None:
    import socket

    from tests.core.test_checks import NETWORK_PROBE

    root, worktree = project(tmp_path)
    (worktree / "probe.py").write_text(NETWORK_PROBE)
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(0)
        port = server.getsockname()[1]
        outcome = run_setup(root, worktree, (), (), f"python3 probe.py {port}", 60, tmp_path / "setup.log",
                            allow=("example.org",))
        try:
            server.accept()
            reached = True
        except BlockingIOError:
            reached = False
    log = (tmp_path / "setup.log").read_text()
    assert outcome.ok, log
    assert "direct: unreachable" in log and "proxy: http://127.0.0.1:" in log
    assert "connect: HTTP/1.1 403" in log, log
    assert not reached
