"""The real `claude` CLI as an MCP client of `agentbox mcp`.

claude (pinned in .tools/bin) is started by hand, with the registration `agentbox mcp
--print-config claude` prints as its `--mcp-config`, against the fake model server. The
fake answers the first request with a call of the `invoke_role` tool for a scripted role;
claude calls agentbox's server, which runs the role's turn (a real scripted agent under
bwrap); the role's answer must come back to the fake as the tool result.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TOOLS_BIN, run_cli
from tests.engine.support import write_profile
from tests.realcli.conftest import FakeView, write_project

pytestmark = [pytest.mark.realcli, pytest.mark.bwrap]

TOOL = "mcp__agentbox__invoke_role"
"""How claude names a tool of the MCP server registered as `agentbox`."""


def _tool_results(fake: FakeView, mark: int) -> list[str]:
    """The text of every tool_result block claude sent after `mark`."""
    texts = []
    for request in fake.since(mark, "anthropic"):
        messages = (request.get("body") or {}).get("messages") or []
        content = messages[-1].get("content") if messages else None
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                inner = block.get("content")
                if isinstance(inner, list):
                    inner = "\n".join(str(b.get("text", "")) for b in inner if isinstance(b, dict))
                texts.append(str(inner))
    return texts


def test_claude_calls_invoke_role_and_gets_the_scripted_roles_answer(
        tmp_path: Path, fake: FakeView, realcli_env: dict[str, str], host_home: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    write_profile("t-helper", [{"id": "hello", "when": {"prompt_contains": f"hello {tag}"},
                                "do": {"reply": f"scripted helper says hi {tag}"}}])
    root = write_project(tmp_path / "proj", {"helper": {"profile": "t-helper", "writes": []}})
    registration = run_cli("mcp", "--print-config", "claude", cwd=root)
    assert registration.code == 0, registration.err
    mcp_config = tmp_path / "mcp.json"
    mcp_config.write_text(registration.out)
    assert json.loads(registration.out)["mcpServers"]["agentbox"]["args"][-1] == "mcp"

    mark = fake.mark()
    fake.enqueue({"tool_use": {"name": TOOL, "input": {"role": "helper", "prompt": f"hello {tag}"}},
                  "match": {"protocol": "anthropic", "contains": TOOL}})
    config_dir = tmp_path / "claude-config"
    config_dir.mkdir()
    env: dict[str, Any] = {
        **os.environ, **realcli_env, "CLAUDE_CONFIG_DIR": str(config_dir),
        "ANTHROPIC_BASE_URL": str(fake.base_url), "ANTHROPIC_API_KEY": "fake-key",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1", "MCP_TIMEOUT": "60000",
    }
    proc = subprocess.run(
        [str(TOOLS_BIN / "claude"), "-p", f"ask the helper role to say hello {tag}", "--output-format", "json",
         "--mcp-config", str(mcp_config), "--strict-mcp-config", "--allowedTools", TOOL],
        cwd=root, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, f"claude exit {proc.returncode}\nstdout: {proc.stdout[-3000:]}\nstderr: {proc.stderr[-3000:]}"
    result = json.loads(proc.stdout)

    requests = fake.since(mark, "anthropic")
    declared = [tool.get("name") for tool in (requests[0].get("body") or {}).get("tools") or []]
    assert TOOL in declared, declared  # claude offered agentbox's tool to the model
    (tool_result,) = _tool_results(fake, mark)
    assert f"scripted helper says hi {tag}" in tool_result, tool_result  # the role's answer, through MCP
    answer = json.loads(tool_result)
    assert answer["role"] == "helper" and answer["turn"] == 1 and answer["sandboxed"] is True
    assert f"scripted helper says hi {tag}" in result["result"]  # the fake echoed the tool result back
    sessions = run_cli("sessions", "helper", "--json", cwd=root)
    assert [s["id"] for s in json.loads(sessions.out)] == [answer["session_id"]]
