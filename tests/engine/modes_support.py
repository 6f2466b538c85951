"""Shared helpers of the group chat, handoff and graph mode tests.

A test writes the scripted profiles it needs into the isolated AGENT_BOX_HOME (a user
profile shadows a bundled one), writes the crew, and runs the engine in-process (`drive`;
its turns played in-process too unless the test is marked `local_runner`, see
tests/engine/conftest.py) or as the CLI's background process (`start_engine`, real
scripted agents under bubblewrap), which a test may SIGKILL and resume.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentbox.core import runs
from agentbox.core.engine.engine import Engine
from agentbox.core.engine.models import Run
from agentbox.core.engine.runners.base import TurnRunner
from agentbox.core.paths import ProjectPaths
from tests.engine.support import Human, events, start_engine, until


def write_profile(name: str, rules: list[dict[str, Any]], fallback: dict[str, Any] | None = None,
                  usage: dict[str, Any] | None = None) -> None:
    """A scripted user profile `name` in AGENT_BOX_HOME with a JSON scenario."""
    directory = Path(os.environ["AGENT_BOX_HOME"]) / "profiles" / name
    directory.mkdir(parents=True, exist_ok=True)
    scenario: dict[str, Any] = {"defaults": {"usage": usage or {"input_tokens": 100, "output_tokens": 20}},
                                "rules": rules}
    if fallback is not None:
        scenario["fallback"] = fallback
    (directory / "scenario.json").write_text(json.dumps(scenario))
    profile = {"name": name, "runtime": {"tool": "scripted", "scenario": "scenario.json"},
               "sandbox": {"network": False}}
    (directory / "profile.yaml").write_text(json.dumps(profile))


def write_crew(project: Path, mode: str, roles: dict[str, dict[str, Any]], *,
               limits: dict[str, Any] | None = None, **settings: Any) -> ProjectPaths:
    """Replace the project's crew.yaml (JSON is YAML) with this mode, roles, limits and settings."""
    crew: dict[str, Any] = {"mode": mode, "roles": roles, "limits": {"max_workers": 2, "task_timeout_s": 60,
                                                       "max_auto_retries": 2, **(limits or {})}}
    crew.update(settings)
    (project / ".agent-box" / "crew.yaml").write_text(json.dumps(crew, indent=1))
    return ProjectPaths(project)


def rule(marker: str, reply: dict[str, Any], *, times: int | None = None, delay: float = 0.0,
         **extra: Any) -> dict[str, Any]:
    """A scenario rule answering prompts that contain `marker` with `reply` as JSON."""
    when: dict[str, Any] = {"prompt_contains": marker}
    if times is not None:
        when["times"] = times
    action: dict[str, Any] = {"reply_json": reply, **extra}
    if delay:
        action["delay_s"] = delay
    return {"when": when, "do": action}


def drive(project: ProjectPaths, run_id: str, human: Human | None = None, timeout: float = 30,
          runner: TurnRunner | None = None) -> Run:
    """Run the engine in this process until the run ends; `human` plays the person meanwhile.

    `runner`: who runs the turns (default: the engine's; in these tests the in-process runner unless the test
    is marked `local_runner`, see tests/engine/conftest.py).
    """

    async def main() -> Run:
        engine = Engine.open(project, run_id) if runner is None else Engine.open(project, run_id, runner=runner)
        helper = asyncio.ensure_future(human(engine)) if human is not None else None
        try:
            return await asyncio.wait_for(engine.execute(), timeout)
        finally:
            if helper is not None:
                helper.cancel()

    return asyncio.run(main())


def answer_when_open(kind: str, text: str) -> Human:
    """A person who answers the first open checkpoint of `kind` with `text`."""

    async def human(engine: Engine) -> None:
        await until(engine, lambda e: any(c.kind == kind for c in e.run.open_checkpoints()))
        cp = next(c for c in engine.run.open_checkpoints() if c.kind == kind)
        ok, message = engine.apply_command({"action": "answer", "checkpoint": cp.id, "text": text})
        assert ok, message

    return human


def turn_prompts(project: ProjectPaths, role: str) -> list[str]:
    """Every prompt a role was sent in this project, oldest first (per session, sessions by start)."""
    folder = project.sessions_dir / role
    prompts: list[tuple[float, str]] = []
    for path in folder.glob("*.turns.jsonl"):
        for line in path.read_text().splitlines():
            turn = json.loads(line)
            prompts.append((float(turn.get("started") or turn.get("at") or 0), str(turn.get("prompt", ""))))
    return [p for _, p in sorted(prompts, key=lambda item: item[0])]


def sessions_of(project: ProjectPaths, role: str) -> list[Path]:
    """The agentbox sessions a role had in this project."""
    return sorted((project.sessions_dir / role).glob("*.json"))


def kill_when(project: ProjectPaths, run_id: str, proc: subprocess.Popen[bytes],
              predicate: Callable[[list[dict[str, Any]]], bool], timeout: float = 30) -> None:
    """SIGKILL the engine process once the decision log satisfies `predicate`."""
    deadline = time.monotonic() + timeout
    while not predicate(events(project, run_id)):
        assert proc.poll() is None, f"engine exited early: {proc.stderr.read() if proc.stderr else ''!r}"
        assert time.monotonic() < deadline, "the run did not get far enough"
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def finish_engine(project: ProjectPaths, run_id: str, timeout: float = 60) -> Run:
    """Resume the run in a fresh engine process and wait for it to end."""
    proc = start_engine(project, run_id)
    try:
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return runs.load(project, run_id)

