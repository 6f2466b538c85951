"""A run whose engine is gone, seen and resumed through MCP (real engine processes, bwrap)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engine.lifecycle_support import dead_engine_run, engines_stopped
from tests.mcp.support import connected

pytestmark = pytest.mark.bwrap


async def test_run_status_says_the_engine_is_gone_and_resume_run_starts_it(project: Path) -> None:
    run_id = dead_engine_run(project)
    with engines_stopped(project):
        async with connected(project) as client:
            status = await client.ok("run_status", run=run_id)
            assert status["engine"] == "stopped" and not status["engine_running"]
            assert "engine not running" in status["engine_note"] and "resume_run" in status["engine_note"]
            (plan,) = status["open_checkpoints"]
            await client.ok("answer_checkpoint", checkpoint=plan["checkpoint"], text="approve", run=run_id)
            resumed = await client.ok("resume_run", run=run_id, wait_s=60)
            assert resumed["engine_pid"] > 1 and resumed["status"] == "done", resumed
            again = await client.error("resume_run", run=run_id)
            assert "has ended" in again


async def test_discard_run_says_what_it_removes_then_removes_it(project: Path) -> None:
    run_id = dead_engine_run(project)
    state = project / ".agent-box" / "runs" / run_id
    async with connected(project) as client:
        asked = await client.ok("discard_run", run=run_id[:-2])
        assert asked["discarded"] is False and asked["run"] == run_id
        assert any(line.startswith("state") and str(state) in line for line in asked["would_remove"])
        assert state.exists()
        removed = await client.ok("discard_run", run=run_id, confirm=True)
        assert removed["discarded"] is True and not state.exists()
        listed = await client.read("agentbox://runs")
        assert run_id not in [r["run"] for r in listed]
