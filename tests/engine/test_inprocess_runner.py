"""The in-process runner answers as the scripted agent under bwrap does: one run, both runners, one result.

The engine-loop tests that run their turns in-process (tests/engine/inprocess.py) are
only as good as this parity: the same hierarchical run (a plan, two dependent tasks that
write files in their worktrees, reviews, a synthesis) is driven once by the local runner
(real processes under bwrap) and once in-process, and must end with the same task
states, the same decision log (event types and what they are about, in order) and the
same committed trees.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from agentbox.core.engine.runners.admission import Room
from agentbox.core.engine.runners.local import LocalRunner
from agentbox.core.paths import ProjectPaths
from tests.conftest import REPO
from tests.engine.inprocess import InProcessRunner, NeedsAProcess
from tests.engine.modes_support import sessions_of
from tests.engine.support import (
    create,
    drive,
    events,
    prompts_of,
    review_rule,
    setup_crew,
    task,
    work_rule,
)
from tests.engine.test_worktree_runs import make_repo

STABLE = ("type", "task", "role", "kind", "state", "to", "from", "verdict")
"""The fields of an event that say what happened, not when or by which process."""


def a_project(root: Path, reviewer: list[dict[str, Any]] | None = None) -> ProjectPaths:
    root.mkdir(parents=True)
    shutil.copytree(REPO / ".agent-box.example", root / ".agent-box")
    make_repo(root)
    worker = [work_rule(write={"src/{task}/out.txt": "made by {role} for {task} in turn {turn}\n",
                               "{handoff}result.txt": "result of {task}\n"})]
    return setup_crew(root, worker=worker, reviewer=reviewer, tasks=[task("t1"), task("t2", "tester", deps=["t1"])],
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
        check=True, capture_output=True, text=True).stdout.splitlines()] == ["made by tester for t2 in turn 1"]


@pytest.mark.bwrap
async def test_a_rework_resumes_the_same_session_and_counters_in_process_as_under_bwrap(
        tmp_path: Path, agent_box_home: Path) -> None:
    """A rejected review sends t1 back: the worker's session is resumed (its second turn), the reviewer's
    `times: 1` rule is spent; both runners must agree on every event, tree and session."""
    reviewer = [review_rule("reject", task_id="t1", times=1, rule_id="reject-once")]
    local_paths = a_project(tmp_path / "local" / "repo", reviewer)
    local_id = create(local_paths)
    local_run = await drive(local_paths, local_id, runner=LocalRunner(
        reading=lambda: Room(available_mb=16384, total_mb=16384, load=0.0, cpus=2)), timeout=120)
    assert local_run.status == "done", local_run.status_reason
    inproc_paths = a_project(tmp_path / "inproc" / "repo", reviewer)
    inproc_id = create(inproc_paths)
    inproc_run = await drive(inproc_paths, inproc_id, runner=InProcessRunner(tmp_path / "scripted-state"))
    assert outcome(inproc_paths, inproc_id, inproc_run) == outcome(local_paths, local_id, local_run)
    assert inproc_run.tasks["t1"].attempts == 2

    def sessions(paths: ProjectPaths) -> dict[str, list[int]]:
        return {role: sorted(len(prompts_of(paths, f.stem)) for f in sessions_of(paths, role))
                for role in ("lead", "builder", "tester", "reviewer")}

    assert sessions(inproc_paths) == sessions(local_paths)
    assert max(sessions(inproc_paths)["builder"]) == 2  # the rework went on in the same session
    assert subprocess.run(["git", "-C", str(inproc_paths.root), "show", f"{inproc_run.tasks['t1'].head}:src/t1/out.txt"],
                          check=True, capture_output=True, text=True).stdout == "made by builder for t1 in turn 2\n"


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

    with pytest.raises(NeedsAProcess, match="cannot play the run of rule 'shell'"):
        await runner.run(turn("go"))
    assert [str(e) for e in runner.refused] == [
        "the in-process runner cannot play the run of rule 'shell' of 't-shell': run this test on the local runner "
        "(under bwrap)"]
    said = await runner.run(turn("say"))
    assert said.result.ok and said.result.text == "said " and said.git is None
    assert said.result.usage.input_tokens == 100 and said.result.native_id == said.result.session_id
    assert [t.prompt for t in runner.turns] == ["go", "say"]


@pytest.mark.parametrize(("action", "named"), [
    ({"fail": "crash", "reply": "x"}, "the fail: crash of rule 'it'"),
    ({"fail": "kill_self", "reply": "x"}, "the fail: kill_self of rule 'it'"),
    ({"stream": [{"text": "hi"}], "reply": "x"}, "the stream of rule 'it'"),
    ({"read": "notes.txt", "reply": "{reads}"}, "the read of rule 'it'"),
    ({"stderr": "warned", "reply": "x"}, "the stderr of rule 'it'"),
    ({"reply": "key {env[HOME]}"}, "the {env[…]} template of rule 'it'"),
])
async def test_each_action_only_a_process_plays_is_refused_by_name(agent_box_home: Path, tmp_path: Path,
                                                                  action: dict[str, Any], named: str) -> None:
    from tests.engine.support import write_profile

    write_profile("t-one", [{"id": "it", "when": {"prompt_contains": "go"}, "do": action}])
    runner = InProcessRunner()
    with pytest.raises(NeedsAProcess, match=f"cannot play {re.escape(named)} of 't-one'"):
        await runner.run(_turn(tmp_path, "t-one", "go"))
    assert len(runner.refused) == 1 and runner.turns[0].prompt == "go"


async def test_a_rule_on_the_agents_environment_is_refused(agent_box_home: Path, tmp_path: Path) -> None:
    from tests.engine.support import write_profile

    write_profile("t-env", [{"id": "envy", "when": {"prompt_contains": "go", "env": {"AB_X": "1"}}, "do": {"reply": "a"}},
                            {"id": "plain", "when": {"prompt_contains": "go"}, "do": {"reply": "b"}}])
    with pytest.raises(NeedsAProcess, match=r"rule 'envy' of 't-env' on the agent's environment \(when.env\)"):
        await InProcessRunner().run(_turn(tmp_path, "t-env", "go"))


async def test_a_profile_that_is_not_scripted_is_refused(agent_box_home: Path, tmp_path: Path) -> None:
    with pytest.raises(NeedsAProcess, match="plays scripted profiles only, not 'claude' "):
        await InProcessRunner().run(_turn(tmp_path, "claude", "go"))


@pytest.mark.parametrize(("writes", "target", "why"), [
    (("src/**",), "docs/a.md", "outside the write scopes ['src/**']"),
    ((), "src/a.py", "outside the write scopes []"),
    (("docs/*.md",), "docs/a.txt", "outside the write scopes ['docs/*.md']"),
    (("docs/*.md",), "docs/deep/a.md", "outside the write scopes ['docs/*.md']"),
    (("README.md",), "README.txt", "outside the write scopes ['README.md']"),
    (None, ".git/config", "a metadata path"),
    (None, "/tmp/elsewhere.txt", "outside the project"),
    (None, "../sibling.txt", "outside the project"),
])
async def test_a_write_only_the_sandbox_decides_is_refused(agent_box_home: Path, tmp_path: Path,
                                                           writes: tuple[str, ...] | None, target: str, why: str) -> None:
    from tests.engine.support import write_profile

    write_profile("t-writer", [{"id": "w", "when": {"prompt_contains": "go"}, "do": {"write": {target: "x"}, "reply": "ok"}}])
    with pytest.raises(NeedsAProcess, match=re.escape(f"the write of {target!r} in rule 'w' ({why})")):
        await InProcessRunner().run(_turn(tmp_path, "t-writer", "go", writes=writes))
    assert not (tmp_path / "work" / target).exists()


@pytest.mark.parametrize(("writes", "target"), [
    (("src/**",), "src/deep/a.py"), (("src/",), "src/a.py"), (("docs/*.md",), "docs/a.md"), (("*.md",), "a.md"),
    (("README.md",), "README.md"), (None, "anything/at/all.txt"), (("**",), "x/y.txt"),
])
async def test_a_write_inside_the_scopes_lands_where_the_sandbox_puts_it(agent_box_home: Path, tmp_path: Path,
                                                                        writes: tuple[str, ...] | None,
                                                                        target: str) -> None:
    from tests.engine.support import write_profile

    write_profile("t-writer", [{"id": "w", "when": {"prompt_contains": "go"}, "do": {"write": {target: "{role}!"}, "reply": "ok"}}])
    done = await InProcessRunner().run(_turn(tmp_path, "t-writer", "go", writes=writes))
    assert done.result.ok, done.result.error
    assert (tmp_path / "work" / target).read_text() == "!"


async def test_an_engine_turn_it_refuses_stops_the_run_loudly(tmp_path: Path, agent_box_home: Path) -> None:
    """Not a failed turn the engine would route (retry, escalate): the test fails, naming the scenario."""
    paths = a_project(tmp_path / "repo")
    setup_crew(paths.root, worker=[work_rule(run="echo hi", rule_id="shell-work")], tasks=[task("t1")])
    run_id = create(paths)
    runner = InProcessRunner()
    with pytest.raises(NeedsAProcess, match="cannot play the run of rule 'shell-work' of 't-worker'"):
        await drive(paths, run_id, runner=runner)
    assert [type(e) for e in runner.refused] == [NeedsAProcess]


async def test_an_engine_a_test_builds_runs_its_turns_in_process(tmp_path: Path, agent_box_home: Path) -> None:
    paths = a_project(tmp_path / "repo")
    run_id = create(paths)
    seen: list[object] = []

    async def look(engine: Any) -> None:
        seen.append(engine.turns.runner)

    run = await drive(paths, run_id, look)
    assert run.status == "done", run.status_reason
    assert [type(r) for r in seen] == [InProcessRunner]
    assert {t.task_id for t in seen[0].turns if t.workspace is not None} == {"t1", "t2"}  # type: ignore[attr-defined]


@pytest.mark.local_runner("proves the opt-out: a marked test keeps the local runner")
async def test_a_test_marked_local_runner_keeps_the_local_runner(tmp_path: Path, agent_box_home: Path) -> None:
    from agentbox.core.engine import runners

    assert isinstance(runners.configured_runner(), LocalRunner)


def _turn(tmp_path: Path, profile: str, prompt: str, writes: tuple[str, ...] | None = None) -> Any:
    import dataclasses

    from agentbox.core.agents import resolve as services
    from agentbox.core.agents.invoke import new_session_id
    from agentbox.core.engine.runners.base import Turn

    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    agent = dataclasses.replace(services.profile_agent(profile, work, None), writes=writes)
    return Turn(job_id=prompt, run_id="r", task_id=None, agent=agent, prompt=prompt, session_id=new_session_id(),
                resume=False, timeout_s=60)
