"""`agentbox demo`: the example crew in a throw-away project, run end to end."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentbox.core import paths
from agentbox.core.engine.models import TERMINAL_RUN_STATES, Run
from agentbox.core.paths import ProjectPaths
from agentbox.core.runs import create_run

DEMO_GOAL = "Add a greeting function with tests and usage docs"
DEMO_ANSWER = "English, please"


def make_demo_project(parent: Path | None = None) -> ProjectPaths:
    """Copy the example project into a fresh temp directory."""
    root = Path(tempfile.mkdtemp(prefix="agentbox-demo-", dir=parent))
    shutil.copytree(paths.example_project_dir(), root / paths.PROJECT_DIR_NAME,
                    ignore=shutil.ignore_patterns("runs", "sessions"))
    (root / "README.md").write_text("# demo project\n\nA throw-away repository for `agentbox demo`.\n")
    return ProjectPaths(root)


async def run_demo(project: ProjectPaths, on_event: Callable[[dict[str, Any]], None] | None = None,
                   answer_after_s: float = 2.0) -> Run:
    """Run the demo crew; checkpoints are answered as a person would, after a pause."""
    from agentbox.core.engine.engine import Engine

    run = create_run(project, DEMO_GOAL)
    engine = Engine.open(project, run.id, on_event=on_event)

    retries = 0

    async def human() -> None:
        nonlocal retries
        while engine.run.status not in TERMINAL_RUN_STATES:
            await asyncio.sleep(0.2)
            for cp in engine.run.open_checkpoints():
                await asyncio.sleep(answer_after_s)
                if cp.status == "open":
                    if cp.kind == "question":
                        answer = DEMO_ANSWER
                    else:  # a stand-in human retries once, then gives up rather than looping
                        retries += 1
                        answer = "retry" if retries <= 1 else "cancel"
                    engine.apply_command({"action": "answer", "checkpoint": cp.id, "text": answer,
                                          "note": "answered by the demo's stand-in human"})

    helper = asyncio.ensure_future(human())
    try:
        return await engine.execute()
    finally:
        helper.cancel()
