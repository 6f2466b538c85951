"""`agentbox demo`: the example crew in a throw-away project, run end to end."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentbox.core.config import project as project_mod
from agentbox.core.engine.models import TERMINAL_RUN_STATES, Run
from agentbox.core.paths import ProjectPaths
from agentbox.core.runs import create_run, send_command
from agentbox.core.workspace.gitcmd import git, ident_env

DEMO_GOAL = "Add a greeting function with tests and usage docs"
DEMO_ANSWER = "English, please"
DEMO_CHECKS = """
# The demo's checks (added by `agentbox demo`): the code layer runs them inside the sandbox on
# each submission before any review; the first greeting has no docstring, so its check is red,
# the builder gets the output, and only the reworked, green module is reviewed.
checks:
  docstring:
    run: "head -n 1 src/greet.py | grep -q '^\\"\\"\\"' || { echo 'FAILED docstring: src/greet.py has no module docstring on line 1'; exit 1; }"
    paths: ["src/**"]
    timeout_s: 30
gates:
  submission: [docstring]
"""
"""What `make_demo_project` adds to the example crew (whose own checks are commented examples)."""


def make_demo_project(parent: Path | None = None) -> ProjectPaths:
    """The example project in a fresh temp directory, as a git repository with one commit
    when git is installed: the demo then works as a real project does, each writer task on
    its own branch and worktree, reviewed on its diff, merged when the person says."""
    root = Path(tempfile.mkdtemp(prefix="agentbox-demo-", dir=parent))
    project_mod.init(root)
    crew = root / ".agent-box" / "crew.yaml"
    crew.write_text(crew.read_text() + DEMO_CHECKS)
    (root / "README.md").write_text("# demo project\n\nA throw-away repository for `agentbox demo`.\n")
    if shutil.which("git") is not None:
        ident = ident_env("agentbox demo", "demo@agentbox.invalid", committer=("agentbox demo", "demo@agentbox.invalid"))
        git(root, "init", "-q", "-b", "main")
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", "the demo project", env=ident)
    return ProjectPaths(root)


def deliver_demo(project: ProjectPaths, run: Run) -> str | None:
    """As the demo's stand-in human, merge a done worktree run into the demo's branch; what happened."""
    waiting = [cp for cp in run.open_checkpoints() if cp.kind == "deliver"]
    if not waiting:
        return None
    ok, message = send_command(project, run.id, {"action": "answer", "checkpoint": waiting[0].id, "text": "merge",
                                                 "note": "answered by the demo's stand-in human"})
    return message if ok else f"not merged: {message}"


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
