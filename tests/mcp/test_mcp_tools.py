"""`agentbox mcp` through the SDK's own client over stdio: every tool, bad arguments, resources.

The crew is scripted (real agent processes under bwrap); nothing of agentbox is mocked.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from agentbox.core.paths import ProjectPaths
from tests.conftest import run_cli
from tests.engine.support import setup_crew, write_profile
from tests.mcp.support import Progress, connected

pytestmark = pytest.mark.bwrap

TOOLS = {"list_roles", "invoke_role", "start_run", "run_status", "list_checkpoints", "answer_checkpoint",
         "approve_task", "rework_task", "cancel", "ask", "resume_run", "discard_run"}


def _helper_crew(project: Path) -> ProjectPaths:
    """The test crew plus `helper`, a scripted role that greets and counts its turns."""
    paths = setup_crew(project)
    write_profile("t-helper", [
        {"id": "hello", "when": {"prompt_contains": "hello"}, "do": {"delay_s": 1.5, "reply": "scripted hello back"}},
        {"id": "again", "when": {"prompt_contains": "again"}, "do": {"reply": "hello again"}},
    ])
    crew = json.loads(paths.crew_file.read_text())
    crew["roles"]["helper"] = {"profile": "t-helper", "writes": [], "description": "says hello"}
    paths.crew_file.write_text(json.dumps(crew))
    return paths


async def test_every_tool_is_listed_with_a_schema(project: Path) -> None:
    async with connected(_helper_crew(project)) as client:
        listed = {tool.name: tool for tool in (await client.session.list_tools()).tools}
        assert set(listed) == TOOLS
        assert all(tool.description for tool in listed.values())
        invoke = listed["invoke_role"].input_schema
        assert set(invoke["required"]) == {"role", "prompt"} and "session_id" in invoke["properties"]
        modes = listed["start_run"].input_schema["properties"]["mode"]
        assert "hierarchical" in json.dumps(modes) and "graph" in json.dumps(modes)


async def test_list_roles(project: Path) -> None:
    async with connected(_helper_crew(project)) as client:
        listed = await client.ok("list_roles")
    assert listed["project"] == str(project) and listed["mode"] == "hierarchical"
    roles = {role["role"]: role for role in listed["roles"]}
    assert roles["helper"] == {"role": "helper", "profile": "t-helper", "tool": "scripted",
                               "description": "says hello", "writes": "read-only"}
    assert roles["builder"]["writes"] == ["src/**", "docs/**"]


async def test_invoke_role_answers_reports_progress_and_continues_its_session(project: Path) -> None:
    async with connected(_helper_crew(project)) as client:
        progress = Progress()
        first = await client.ok("invoke_role", progress, role="helper", prompt="hello there")
        assert first["text"] == "scripted hello back" and first["turn"] == 1 and first["sandboxed"] is True
        assert progress.messages[0] == "helper starts"
        assert any("helper is working" in m for m in progress.messages)  # a 1.5 s turn
        second = await client.ok("invoke_role", role="helper", prompt="once again", session_id=first["session_id"])
        assert second["session_id"] == first["session_id"] and second["turn"] == 2
        assert second["text"] == "hello again"
        history = await client.read(f"agentbox://sessions/{first['session_id']}")
        assert [t["prompt"] for t in history["turns"]] == ["hello there", "once again"]
        sessions = await client.read("agentbox://sessions")
        assert [s["session"] for s in sessions] == [first["session_id"]]


@pytest.mark.parametrize(("tool", "arguments", "words"), [
    ("invoke_role", {"role": "nobody", "prompt": "hi"}, "no role 'nobody'"),
    ("invoke_role", {"role": "helper"}, "prompt"),
    ("invoke_role", {"role": 3, "prompt": "hi"}, "valid string"),
    ("invoke_role", {"role": "helper", "prompt": ""}, "at least 1 character"),
    ("invoke_role", {"role": "helper", "prompt": "x" * 300_000}, "at most 262144 characters"),
    ("invoke_role", {"role": "helper", "prompt": "hi", "session_id": "../../etc"}, "session"),
    ("invoke_role", {"role": "helper", "prompt": "hi", "session_id": "0b4c3b8e-1d7e-4d7a-9d1c-3a2b1c0d9e8f"},
     "no session"),
    ("invoke_role", {"role": "helper", "prompt": "hi", "timeout_s": -1}, "greater than 0"),
    ("start_run", {"goal": "  "}, "the goal is empty"),
    ("start_run", {"goal": "x", "mode": "anarchy"}, "anarchy"),
    ("start_run", {"goal": "x", "mode": "graph", "graph": "../../../etc/passwd"}, "graph"),
    ("start_run", {"goal": "x", "wait_s": -5}, "greater than or equal to 0"),
    ("run_status", {"run": "../escape"}, "run"),
    ("run_status", {"run": "run-19990101-000000-0000"}, "no run"),
    ("run_status", {}, "no runs yet"),
    ("list_checkpoints", {"run": "nope"}, "no run"),
    ("answer_checkpoint", {"checkpoint": "cp-1", "text": "yes"}, "no running run has an open checkpoint"),
    ("answer_checkpoint", {"checkpoint": "cp-1"}, "text"),
    ("approve_task", {"task": "t9"}, "no run has a task 't9'"),
    ("rework_task", {"task": "t1"}, "note"),
    ("cancel", {}, "no runs yet"),
    ("cancel", {"task": "../t1"}, "task"),
    ("no_such_tool", {}, "Unknown tool"),
])
async def test_bad_arguments_are_tool_errors_and_the_server_goes_on(project: Path, tool: str, arguments: dict,
                                                                    words: str) -> None:
    async with connected(_helper_crew(project)) as client:
        text = await client.error(tool, **arguments)
        assert words in text, text
        assert "Traceback" not in text
        assert (await client.ok("list_roles"))["roles"]  # still serving


async def test_bad_resources_are_protocol_errors(project: Path) -> None:
    from mcp import MCPError

    async with connected(_helper_crew(project)) as client:
        for uri in ("agentbox://runs/nope", "agentbox://runs/nope/events", "agentbox://sessions/not-a-uuid",
                    "agentbox://runs/../../etc/artifacts/0"):
            with pytest.raises(MCPError):
                await client.session.read_resource(uri)
        assert await client.read("agentbox://runs") == []


def test_print_config_for_each_client(project: Path) -> None:
    claude = run_cli("mcp", "--print-config", "claude", cwd=project)
    assert claude.code == 0, claude.err
    entry = json.loads(claude.out)["mcpServers"]["agentbox"]
    assert entry["type"] == "stdio" and entry["args"][-3:] == ["--project", str(project), "mcp"]
    assert entry["env"]["AGENT_BOX_HOME"] and ".mcp.json" in claude.err and "--mcp-config" in claude.err
    codex = run_cli("mcp", "--print-config", "codex", cwd=project)
    server = tomllib.loads(codex.out)["mcp_servers"]["agentbox"]
    assert server["command"] == entry["command"] and server["args"] == entry["args"]
    assert "config.toml" in codex.err
    opencode = run_cli("mcp", "--print-config", "opencode", cwd=project)
    local = json.loads(opencode.out)["mcp"]["agentbox"]
    assert local["type"] == "local" and local["command"] == [entry["command"], *entry["args"]]
    assert local["enabled"] is True and "opencode.json" in opencode.err
    elsewhere = run_cli("mcp", "--print-config", "claude", cwd=project.parent)
    assert "--project" not in json.loads(elsewhere.out)["mcpServers"]["agentbox"]["args"]
    wrong = run_cli("mcp", "--print-config", "vim", cwd=project)
    assert wrong.code == 2


def test_outside_a_project_the_server_does_not_start(tmp_path: Path) -> None:
    result = run_cli("mcp", cwd=tmp_path)
    assert result.code == 2 and "no .agent-box/" in result.err
