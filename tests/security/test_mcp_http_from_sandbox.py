"""A sandboxed agent with network cannot drive agentbox through `agentbox mcp --http`.

The person serves the project's MCP face on loopback; a scripted agent under real bwrap
(network on, as every real agent has it) tries it: without a token, with a guessed one,
and by reading the token file from AGENT_BOX_HOME. None of it gets a tool call through:
the server answers 401 (or is not reachable at all), and the token file is not there to
read from inside the sandbox.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.engine.support import setup_crew, write_profile

pytestmark = pytest.mark.bwrap

PROBE = '''
import json, sys, urllib.error, urllib.request
url, token_path = sys.argv[1], sys.argv[2]
seen = {}
try:
    seen["token_file"] = "read " + open(token_path).read()[:4]
except OSError as exc:
    seen["token_file"] = f"refused: {exc.strerror}"
body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                   "params": {"name": "list_roles", "arguments": {}}}).encode()
for name, extra in (("none", {}), ("guess", {"Authorization": "Bearer guess"})):
    request = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream", **extra})
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            seen[name] = answer.status
    except urllib.error.HTTPError as exc:
        seen[name] = exc.code
    except OSError:
        seen[name] = "unreachable"
print(json.dumps(seen))
'''


@contextlib.contextmanager
def mcp_server(project: Path) -> Iterator[int]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    server = subprocess.Popen([sys.executable, "-m", "agentbox", "--project", str(project), "mcp", "--http", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert server.poll() is None, server.stderr.read() if server.stderr else ""
            assert time.monotonic() < deadline, "the HTTP server did not start"
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            time.sleep(0.1)
        yield port
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)


def test_a_sandboxed_agent_cannot_call_the_mcp_http_face(project: Path, agent_box_home: Path) -> None:
    setup_crew(project)
    (project / "probe.py").write_text(PROBE)
    with mcp_server(project) as port:
        token_path = agent_box_home / "mcp-token"
        assert token_path.is_file()
        command = f"{sys.executable} -I probe.py http://127.0.0.1:{port}/mcp {token_path}"
        write_profile("t-attacker", [], fallback={"run": command, "reply": "{run_output}"})
        profile = agent_box_home / "profiles" / "t-attacker" / "profile.yaml"
        profile.write_text(json.dumps({**json.loads(profile.read_text()), "sandbox": {"network": True}}))
        turn = run_cli("invoke", "profile:t-attacker", "try the MCP port", "--json", cwd=project)
        assert turn.code == 0, turn.err
        seen = json.loads(json.loads(turn.out)["text"])
    assert seen["none"] in (401, "unreachable") and seen["guess"] in (401, "unreachable"), seen
    assert seen["token_file"].startswith("refused"), seen
