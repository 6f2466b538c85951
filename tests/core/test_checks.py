"""crew.yaml's checks under real bwrap: read-only over the tree they judge, no network unless
asked, nothing of the person's, and bounded time and output (a hang or a flood is killed)."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from agentbox.core.agents.checks import applies, path_matches, run_check, safe_text
from agentbox.core.config.models import Check

pytestmark = pytest.mark.bwrap


def tree(tmp_path: Path) -> Path:
    """A project (with its .agent-box) whose tree a check judges."""
    root = tmp_path / "proj"
    (root / ".agent-box").mkdir(parents=True)
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("VALUE = 1\n")
    return root


def check(root: Path, tmp_path: Path, command: str, **options: object):  # noqa: ANN201
    return run_check("smoke", Check(run=command, **options), root=root, tree=root, views=(), view_hidden=(),  # type: ignore[arg-type]
                     log_path=tmp_path / "logs" / "smoke.log")


def test_green_and_red_with_exit_status_tail_and_log(tmp_path: Path) -> None:
    root = tree(tmp_path)
    green = check(root, tmp_path, "grep -q VALUE src/app.py && echo ok")
    assert green.status == "passed" and green.exit_status == 0 and green.tail == "ok\n"
    red = check(root, tmp_path, "echo 'FAILED tests/test_app.py::test_value - assert 1 == 2' >&2; exit 3")
    assert red.status == "failed" and red.exit_status == 3 and red.cannot_run is None
    assert "FAILED tests/test_app.py::test_value" in red.tail
    assert (tmp_path / "logs" / "smoke.log").read_text().startswith("FAILED")


def test_a_missing_command_could_not_run(tmp_path: Path) -> None:
    outcome = check(tree(tmp_path), tmp_path, "no-such-test-runner --all")
    assert outcome.status == "error" and outcome.cannot_run == "not_found" and outcome.exit_status == 127


def test_a_hang_is_killed_with_everything_it_started(tmp_path: Path) -> None:
    outcome = check(tree(tmp_path), tmp_path, "echo started; sleep 987 & sleep 988", timeout_s=1)
    assert outcome.status == "error" and outcome.cannot_run == "timeout"
    left = [p.info["cmdline"] for p in psutil.process_iter(["cmdline"])
            if p.info["cmdline"] and p.info["cmdline"][:1] == ["sleep"] and p.info["cmdline"][1:] in (["987"], ["988"])]
    assert not left, left


def test_a_flood_is_killed_at_its_output_limit(tmp_path: Path) -> None:
    outcome = check(tree(tmp_path), tmp_path, "yes flood-line-of-output", output_mb=1, timeout_s=60)
    assert outcome.status == "error" and outcome.cannot_run == "output_limit"
    assert (tmp_path / "logs" / "smoke.log").stat().st_size < 8 << 20
    assert len(outcome.tail) <= 4000


def test_memory_is_bounded(tmp_path: Path) -> None:
    outcome = check(tree(tmp_path), tmp_path, "python3 -c 'x = bytearray(512 << 20); print(len(x))'", memory_mb=128)
    assert outcome.status == "failed" and "MemoryError" in outcome.tail


@pytest.mark.parametrize(("path", "pattern", "matched"), [
    ("src/a/b.py", "src/**", True), ("src/a.py", "src", True), ("src/a.py", "src/", True),
    ("docs/a.md", "src/**", False), ("a.py", "*.py", True), ("srcs/a.py", "src", False),
])
def test_paths_filter(path: str, pattern: str, matched: bool) -> None:
    assert path_matches(path, pattern) is matched
    assert applies(Check(run="true", paths=[pattern]), [path]) is matched
    assert applies(Check(run="true"), [])


def test_output_cannot_steer_a_terminal() -> None:
    assert safe_text("ok\x1b[2J\x07\tx\n") == "ok\\x1b[2J\\x07\tx\n"




NETWORK_PROBE = """
import os, socket, sys
port = int(sys.argv[1])
try:
    socket.create_connection(("127.0.0.1", port), timeout=3).close()
    print("direct: reached")
except OSError:
    print("direct: unreachable")
proxy = os.environ.get("HTTPS_PROXY", "")
print("proxy:", proxy)
if proxy:
    host, _, proxy_port = proxy.removeprefix("http://").partition(":")
    with socket.create_connection((host, int(proxy_port)), timeout=5) as s:
        s.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\\r\\nHost: 127.0.0.1:{port}\\r\\n\\r\\n".encode())
        print("connect:", s.recv(200).split(b"\\r\\n")[0].decode())
"""


def test_a_network_check_goes_out_through_the_proxy_and_never_reaches_this_machines_loopback(tmp_path: Path) -> None:
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    reached: list[bool] = []
    server.settimeout(0.2)

    def accept() -> None:
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except OSError:
                continue
            reached.append(True)
            connection.close()

    stop = threading.Event()
    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    root = tree(tmp_path)
    (root / "probe.py").write_text(NETWORK_PROBE)
    try:
        outcome = check(root, tmp_path, f"python3 probe.py {port}", network=True, allow=["example.org"])
    finally:
        stop.set()
        thread.join()
        server.close()
    log = (tmp_path / "logs" / "smoke.log").read_text()
    assert outcome.status == "passed", log
    assert "direct: unreachable" in log and "proxy: http://127.0.0.1:" in log
    assert "connect: HTTP/1.1 403" in log, log
    assert reached == []


@pytest.mark.parametrize("entry", ["127.0.0.1:5432", "localhost:8080", "[::1]:6379"])
def test_crew_yaml_may_not_open_this_machines_loopback(entry: str) -> None:
    from pydantic import ValidationError

    from agentbox.core.config.models import WorkspaceSetup

    with pytest.raises(ValidationError, match="loopback"):
        Check(run="true", network=True, allow=[entry])
    with pytest.raises(ValidationError, match="loopback"):
        WorkspaceSetup(run="npm ci", allow=[entry])
