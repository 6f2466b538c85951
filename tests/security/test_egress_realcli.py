"""A real CLI through the egress proxy, as root and (through the unprivileged pass) as a normal user.

tests/realcli/test_new_and_resume.py runs all four CLIs through the proxy as root; this
one runs claude (a new turn, then a resume) in both passes, so the proxy's listeners
made in the sandbox's namespace and the allowlisted loopback port are proven for an unprivileged user with a real
tool too — while the model server's neighbour on the host's loopback stays unreachable.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from tests.conftest import TOOLS_BIN, run_cli
from tests.fakes.model_server import FakeModelServer
from tests.realcli.conftest import write_tool_config

pytestmark = [pytest.mark.realcli, pytest.mark.bwrap]


def test_claude_new_and_resumed_turns_go_through_the_proxy(tmp_path: Path, agent_box_home: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    env = {"HOME": str(home), "PATH": f"{TOOLS_BIN}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"}
    neighbour = socket.create_server(("127.0.0.1", 0))  # a local service next to the model server
    with FakeModelServer(tmp_path / "requests.jsonl") as server, neighbour:
        assert run_cli("profile", "add", "rc-claude", "--from", "claude", env=env).code == 0
        write_tool_config("claude", "rc-claude", str(server.base_url))
        neighbour_port = neighbour.getsockname()[1]
        turns = []
        for flags in ((), ("--continue",)):
            cli = run_cli("invoke", "profile:rc-claude", f"hello {len(turns)}", *flags, "--json", "--timeout", "120",
                          cwd=work, env=env, timeout=200)
            assert cli.code == 0, cli.err[-3000:]
            turns.append(json.loads(cli.out))
        neighbour.settimeout(0.1)
        with pytest.raises(TimeoutError):
            neighbour.accept()  # nothing of the turns knocked there
    first, second = turns
    assert first["text"] == "echo: hello 0" and second["text"] == "echo: hello 1"
    assert second["session_id"] == first["session_id"] and second["turn"] == 2
    for turn in turns:
        network = turn["network"]
        assert network["mode"] == "proxy" and network["connections"] >= 1, network
        assert network["allowed"] == [f"127.0.0.1:{server.port}"], network
        assert f"127.0.0.1:{neighbour_port}" not in json.dumps(network)
    resumed = [r for r in server.requests() if r.get("protocol") == "anthropic" and "hello 1" in json.dumps(r["body"])]
    assert resumed and "echo: hello 0" in json.dumps(resumed[-1]["body"])  # the history came back on resume
