"""The in-process runner answers as the scripted agent under bwrap does: one run, both runners, one result.

The engine-loop tests that run their turns in-process (tests/engine/inprocess.py) are
only as good as this parity: the same hierarchical run (a plan, two dependent tasks that
write files in their worktrees, reviews, a synthesis) is driven once by the local runner
(real processes under bwrap) and once in-process, and must end with the same task
states, the same decision log (event types and what they are about, in order) and the
same committed trees.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from agentbox.core.engine.runners.admission import Room
from agentbox.core.engine.runners.local import LocalRunner
from agentbox.core.paths import ProjectPaths
from tests.conftest import REPO
from tests.engine.inprocess import InProcessRunner
from tests.engine.support import create, drive, events, setup_crew, task, work_rule
from tests.engine.test_worktree_runs import make_repo

STABLE = ("type", "task", "role", "kind", "state", "to", "from", "verdict")
"""The fields of an event that say what happened, not when or by which process."""


def a_project(root: Path) -> ProjectPaths:
    root.mkdir(parents=True)
    shutil.copytree(REPO / ".agent-box.example", root / ".agent-box")
    make_repo(root)
    worker = [work_rule(write={"src/{task}/out.txt": "made by {role} for {task}\n",
                               "{handoff}result.txt": "result of {task}\n"})]
    return setup_crew(root, worker=worker, tasks=[task("t1"), task("t2", "tester", deps=["t1"])],
                      limits={"max_workers": 1})


def tree(root: Path, commit: str | None) -> str:
    assert commit is not None
    return subprocess.run(["git", "-C", str(root), "rev-parse", f"{commit}^{{tree}}"], check=True,
                          capture_output=True, text=True).stdout.strip()


def outcome(paths: ProjectPaths, run_id: str, run: Any) -> dict[str, Any]:
    log = events(paths, run_id)
    return {"status": run.status,
            "tasks": {t.id: (t.state, t.attempts, t.tokens, t.cost_usd, tree(paths.root, t.head))
                      for t in run.tasks.values()},
            "totals": run.totals,
            "log": [{k: e[k] for k in STABLE if k in e} for e in log]}


@pytest.mark.bwrap
async def test_the_in_process_runner_drives_a_run_as_the_local_runner_does(tmp_path: Path,
                                                                           agent_box_home: Path) -> None:
    local_paths = a_project(tmp_path / "local" / "repo")
    local_id = create(local_paths)
    local_run = await drive(local_paths, local_id, runner=LocalRunner(
        reading=lambda: Room(available_mb=16384, total_mb=16384, load=0.0, cpus=2)), timeout=120)
    assert local_run.status == "done", local_run.status_reason
    inproc_paths = a_project(tmp_path / "inproc" / "repo")
    inproc_id = create(inproc_paths)
    runner = InProcessRunner(tmp_path / "scripted-state")
    inproc_run = await drive(inproc_paths, inproc_id, runner=runner)
    assert outcome(inproc_paths, inproc_id, inproc_run) == outcome(local_paths, local_id, local_run)
    assert {t.task_id for t in runner.turns if t.workspace is not None} == {"t1", "t2"}
    assert (tmp_path / "inproc" / "repo").joinpath("src", "t1").exists() is False  # work stays on the branches
    assert [line for line in subprocess.run(
        ["git", "-C", str(inproc_paths.root), "show", f"{inproc_run.tasks['t2'].head}:src/t2/out.txt"],
        check=True, capture_output=True, text=True).stdout.splitlines()] == ["made by tester for t2"]


async def test_an_action_that_needs_a_process_is_refused_not_faked(agent_box_home: Path, tmp_path: Path) -> None:
    from agentbox.core.agents import resolve as services
    from agentbox.core.agents.invoke import new_session_id
    from agentbox.core.engine.runners.base import Turn
    from tests.engine.support import write_profile

    write_profile("t-shell", [{"id": "shell", "when": {"prompt_contains": "go"}, "do": {"run": "true", "reply": "ran"}},
                              {"id": "plain", "when": {"prompt_contains": "say"}, "do": {"reply": "said {role}"}}])
    work = tmp_path / "work"
    work.mkdir()
    agent = services.profile_agent("t-shell", work, None)
    runner = InProcessRunner()

    def turn(prompt: str) -> Turn:
        return Turn(job_id=prompt, run_id="r", task_id=None, agent=agent, prompt=prompt, session_id=new_session_id(),
                    resume=False, timeout_s=60)

    refused = await runner.run(turn("go"))
    assert refused.result.error_kind == "spawn_failed" and "cannot play the run of rule 'shell'" in (refused.result.error or "")
    said = await runner.run(turn("say"))
    assert said.result.ok and said.result.text == "said " and said.git is None
    assert said.result.usage.input_tokens == 100 and said.result.native_id == said.result.session_id
    assert [t.prompt for t in runner.turns] == ["go", "say"]
