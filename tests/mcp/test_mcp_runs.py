"""Runs driven through MCP: started, followed with progress, answered, approved, sent back, cancelled.

The engine runs detached (as `start_run` starts it), the crew is scripted under bwrap.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import httpx2
import psutil
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from agentbox.core import runs
from agentbox.core.engine.models import Run
from agentbox.core.paths import ProjectPaths
from tests.conftest import run_cli
from tests.engine.support import review_rule, setup_crew, task
from tests.mcp.support import Progress, connected

pytestmark = pytest.mark.bwrap

ASK = [{"id": "ask", "when": {"prompt_contains": "[agentbox:work task=t1", "times": 1},
        "do": {"delay_s": 0.1, "reply_json": {"summary": "need a decision", "question": "English or French?"}}}]


@pytest.fixture(autouse=True)
def _stop_engines(project: Path) -> Iterator[None]:
    """Kill any engine a failing test left running (engines are detached: their own sessions)."""
    yield
    paths = ProjectPaths(project)
    for run in runs.list_runs(paths):
        if isinstance(run, Run) and run.engine is not None and runs.engine_alive(paths, run.id):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(run.engine.pid, signal.SIGKILL)


async def test_a_run_started_and_driven_to_done_through_mcp(project: Path) -> None:
    setup_crew(project, worker=ASK, tasks=[task("t1"), task("t2", "tester", writes=["tests/**"])],
               hierarchical={"plan_approval": True})
    async with connected(project) as client:
        progress = Progress()
        started = await client.ok("start_run", progress, goal="build the thing", wait_s=60)
        run_id = started["run"]
        assert started["status"] == "waiting_user" and started["engine_pid"] > 1
        (plan,) = started["open_checkpoints"]
        assert plan["kind"] == "plan_approval" and 'text="approve"' in plan["how_to_answer"]
        assert progress.messages[0].startswith(f"run {run_id} started")
        assert any(m.startswith("checkpoint: ") for m in progress.messages)  # each decision, as it came
        listed = await client.ok("list_checkpoints")
        assert [c["checkpoint"] for c in listed["checkpoints"]] == [plan["checkpoint"]]
        answered = await client.ok("answer_checkpoint", checkpoint=plan["checkpoint"], text="approve")
        assert answered["ok"] and "applied" in answered["message"]
        followed = Progress()
        state = await client.ok("run_status", followed, run=run_id, wait_s=60)
        (question,) = state["open_checkpoints"]
        assert question["kind"] == "question" and question["question"] == "English or French?"
        assert followed.seen
        await client.ok("answer_checkpoint", checkpoint=question["checkpoint"], text="English, please", run=run_id)
        state = await client.ok("run_status", run=run_id, wait_s=60)
        assert state["status"] == "done", state
        assert {t["task"]: t["state"] for t in state["tasks"]} == {"t1": "approved", "t2": "approved"}
        assert state["result"]["summary"]
        assert (await client.ok("list_checkpoints", run=run_id))["checkpoints"] == []
        assert (await client.read("agentbox://runs"))[0]["status"] == "done"
        assert (await client.read(f"agentbox://runs/{run_id}"))["status"] == "done"
        events = await client.read(f"agentbox://runs/{run_id}/events")
        assert '"type": "run.finished"' in events and '"type": "checkpoint.answered"' in events
        artifacts = await client.read(f"agentbox://runs/{run_id}/artifacts")
        synthesis = next(a for a in artifacts if a["path"].endswith("synthesis.md"))
        assert "all done" in await client.read(synthesis["uri"])
        newest = (await client.read("agentbox://sessions"))[0]
        assert newest["run"] == run_id
        assert (await client.read(f"agentbox://sessions/{newest['session']}"))["turns"]
    deadline = time.monotonic() + 10
    while runs.engine_alive(ProjectPaths(project), run_id):
        assert time.monotonic() < deadline
        time.sleep(0.05)


async def test_approve_rework_and_cancel_through_mcp(project: Path) -> None:
    slow = [review_rule(task_id="t1", delay=60, times=1, rule_id="slow-t1"),
            review_rule(task_id="t2", delay=60, times=1, rule_id="slow-t2")]
    paths = setup_crew(project, reviewer=slow)
    async with connected(project) as client:
        run_id = (await client.ok("start_run", goal="build the thing"))["run"]
        deadline = time.monotonic() + 30
        while {t.state for t in runs.load(paths, run_id).tasks.values()} != {"reviewing"}:
            assert time.monotonic() < deadline, runs.load(paths, run_id).status
            time.sleep(0.1)
        approved = await client.ok("approve_task", task="t1", note="checked it myself: works")
        assert approved["ok"]
        refused = await client.error("approve_task", task="t1")
        assert "refused" in refused
        sent_back = await client.ok("rework_task", task="t2", note="also handle the empty name", run=run_id)
        assert sent_back["ok"]
        state = await client.ok("run_status", run=run_id)
        assert {t["task"]: t["state"] for t in state["tasks"]}["t1"] == "approved"
        cancelled = await client.ok("cancel", run=run_id)
        assert cancelled["ok"]
        assert (await client.ok("run_status", run=run_id))["status"] == "cancelled"
        assert "refused" in await client.error("cancel", run=run_id)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_http_transport_listens_on_loopback_only_and_needs_the_token(project: Path, agent_box_home: Path) -> None:
    setup_crew(project)
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "agentbox", "--project", str(project), "mcp", "--http", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        listening: list[str] = []
        while not listening:
            assert server.poll() is None, server.stderr.read() if server.stderr else ""
            assert time.monotonic() < deadline, "the HTTP server did not start"
            time.sleep(0.1)
            with contextlib.suppress(psutil.Error):
                listening = [c.laddr.ip for c in psutil.Process(server.pid).net_connections("inet")
                             if c.status == psutil.CONN_LISTEN]
        assert listening == ["127.0.0.1"]
        token_file = agent_box_home / "mcp-token"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        token = token_file.read_text().strip()
        registration = json.loads(run_cli("mcp", "--print-config", "claude", "--http", str(port), cwd=project).out)
        assert registration["mcpServers"]["agentbox"] == {
            "type": "http", "url": f"http://127.0.0.1:{port}/mcp", "headers": {"Authorization": f"Bearer {token}"}}

        initialize = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}).encode()
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Bearer {token}x"},
                        {"Authorization": token}, {"Authorization": f"Basic {token}"}):
            request = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", data=initialize, method="POST", headers={
                "Content-Type": "application/json", "Accept": "application/json, text/event-stream", **headers})
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=10)
            assert refused.value.code == 401, headers
            assert refused.value.headers["WWW-Authenticate"].startswith("Bearer")
        bare = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", method="GET")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(bare, timeout=10)
        assert refused.value.code == 401

        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http, \
                streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            names = {tool.name for tool in (await session.list_tools()).tools}
            assert "invoke_role" in names
            roles = await session.call_tool("list_roles", {})
            assert not roles.is_error and roles.structured_content["project"] == str(project)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)


def test_a_bad_port_is_refused(project: Path) -> None:
    assert run_cli("mcp", "--http", "70000", cwd=project).code == 2
