"""A sandboxed agent cannot reach the dashboard `agentbox serve` gives a browser.

The person serves the project's dashboard on loopback; a scripted agent under real bwrap
(network on, as every real agent has it) tries the page with no token and a guessed one,
and reads the token file from AGENT_BOX_HOME. The port is not reachable from the sandbox
(its network goes only through the egress proxy to its allowlist), and the token file is
not there to read.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.engine.support import setup_crew, write_profile
from tests.web.conftest import start_server, stop_server

pytestmark = pytest.mark.bwrap

PROBE = '''
import json, sys, urllib.error, urllib.request
base, token_path = sys.argv[1], sys.argv[2]
seen = {}
try:
    seen["token_file"] = "read " + open(token_path).read()[:4]
except OSError as exc:
    seen["token_file"] = f"refused: {exc.strerror}"
for name, path in (("none", "/"), ("guess", "/?token=guess"), ("socket", "/ws")):
    try:
        with urllib.request.urlopen(base + path, timeout=5) as answer:
            seen[name] = answer.status
    except urllib.error.HTTPError as exc:
        seen[name] = exc.code
    except OSError:
        seen[name] = "unreachable"
print(json.dumps(seen))
'''


def test_a_sandboxed_agent_cannot_reach_the_browser_dashboard(project: Path, agent_box_home: Path,
                                                              tmp_path: Path) -> None:
    paths = setup_crew(project)
    (project / "probe.py").write_text(PROBE)
    server = start_server(paths, tmp_path)
    try:
        token_path = agent_box_home / "serve-token"
        assert token_path.is_file()
        import sys

        command = f"{sys.executable} -I probe.py {server.base} {token_path}"
        write_profile("t-attacker", [], fallback={"run": command, "reply": "{run_output}"})
        profile = agent_box_home / "profiles" / "t-attacker" / "profile.yaml"
        profile.write_text(json.dumps({**json.loads(profile.read_text()), "sandbox": {"network": True}}))
        turn = run_cli("invoke", "profile:t-attacker", "try the dashboard", "--json", cwd=project)
        assert turn.code == 0, turn.err
        seen = json.loads(json.loads(turn.out)["text"])
        assert server.get("/")[0] == 401, "the server is up (and wants the token) on the host"
    finally:
        stop_server(server.process)
    assert seen["none"] == seen["guess"] == seen["socket"] == "unreachable", seen
    assert seen["token_file"].startswith("refused"), seen
