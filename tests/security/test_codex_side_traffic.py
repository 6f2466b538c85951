"""codex's side traffic in a sandbox with its own network, as root and (through the unprivileged pass) as a
normal user: the real CLI against the fake model server, through the egress proxy.

By default codex posts analytics at the end of each turn (ab.chatgpt.com) and its plugin system
syncs the curated marketplace (github.com, then api.github.com) and prefetches the remote
catalog (chatgpt.com) in each process. The codex adapter turns both off for a profile that
sets neither, so a plain profile's turns, new and resumed, are refused nothing; a profile that
turns them back on in its config.toml gets them, and every refusal is in its turn's record.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TOOLS_BIN, run_cli
from tests.fakes.model_server import FakeModelServer
from tests.realcli.conftest import write_tool_config

pytestmark = [pytest.mark.realcli, pytest.mark.bwrap]

SIDE_HOSTS = {"github.com:443", "api.github.com:443", "chatgpt.com:443", "ab.chatgpt.com:443"}


def _turns(name: str, work: Path, env: dict[str, str], count: int) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = []
    for index in range(count):
        flags = ("--continue",) if index else ()
        cli = run_cli("invoke", f"profile:{name}", f"hello {index}", *flags, "--json", "--timeout", "120",
                      cwd=work, env=env, timeout=200)
        assert cli.code == 0, cli.err[-3000:]
        turns.append(json.loads(cli.out))
    return turns


def test_codex_turns_open_no_side_connection_unless_the_profile_asks(tmp_path: Path, agent_box_home: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    env = {"HOME": str(home), "PATH": f"{TOOLS_BIN}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"}
    if shutil.which("codex", path=env["PATH"]) is None:
        pytest.fail(f"codex is not on {env['PATH']} (scripts/install-clis.sh)")
    with FakeModelServer(tmp_path / "requests.jsonl") as server:
        for name in ("rc-codex", "rc-codex-chatty"):
            assert run_cli("profile", "add", name, "--from", "codex", env=env).code == 0
            config = write_tool_config("codex", name, str(server.base_url))
        with (config / "config.toml").open("a") as chatty:  # the user's own settings win over agentbox's
            chatty.write("\n[analytics]\nenabled = true\n\n[features]\nplugins = true\n")
        quiet = _turns("rc-codex", work, env, 2)
        chatty_turn, = _turns("rc-codex-chatty", work, env, 1)
    assert [t["text"] for t in quiet] == ["echo: hello 0", "echo: hello 1"]
    assert quiet[1]["session_id"] == quiet[0]["session_id"] and quiet[1]["turn"] == 2
    for turn in quiet:
        network = turn["network"]
        assert network["mode"] == "proxy" and network["connections"] >= 1, network
        assert network["denied_total"] == 0 and network["denied"] == [], network
    network = chatty_turn["network"]
    assert chatty_turn["text"] == "echo: hello 0" and network["connections"] >= 1, network
    refused = {d["target"] for d in network["denied"]}
    assert {"github.com:443", "ab.chatgpt.com:443"} <= refused <= SIDE_HOSTS, network  # each refusal recorded
    assert network["denied_total"] == sum(d["count"] for d in network["denied"]) >= 2, network
