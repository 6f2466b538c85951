"""Rough edges a new user meets in the CLI: approving a plan, removing a used role, several
active runs, the demo's paths, internal jargon in the example files.

Everything goes through the real entry point (`run_cli`); runs use the scripted agents.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from agentbox.core import runs
from agentbox.core.paths import ProjectPaths
from tests.cli.test_foundation_cli import assert_usage_error, crew_text, role_json
from tests.conftest import REPO, run_cli
from tests.engine.support import setup_crew


def status(project: Path, run_id: str) -> dict[str, Any]:
    result = run_cli("status", run_id, "--json", cwd=project)
    assert result.code == 0, result.err
    return json.loads(result.out)


def wait_for(project: Path, run_id: str, predicate: Any, timeout: float = 40) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        state = status(project, run_id)
        if predicate(state):
            return state
        assert time.monotonic() < deadline, f"timed out: {state['status']} ({state['status_reason']})"
        time.sleep(0.2)


def open_plan(state: dict[str, Any]) -> list[str]:
    return [c["id"] for c in state["checkpoints"].values() if c["kind"] == "plan_approval" and c["status"] == "open"]


# ----------------------------------------------------------------------------- approve the plan


@pytest.mark.bwrap
@pytest.mark.parametrize("how", ["--plan", "RUN cp-N", "cp-N --run RUN"])
def test_approve_releases_a_plan_waiting_for_approval(project: Path, how: str) -> None:
    setup_crew(project, hierarchical={"plan_approval": True})
    started = run_cli("run", "build the thing", "--detach", cwd=project)
    assert started.code == 0, started.err
    run_id = started.out.strip().splitlines()[-1]
    try:
        state = wait_for(project, run_id, lambda s: bool(open_plan(s)))
        [cp] = open_plan(state)
        args = {"--plan": ["--plan"], "RUN cp-N": [run_id, cp], "cp-N --run RUN": [cp, "--run", run_id]}[how]
        approved = run_cli("approve", *args, cwd=project)
        assert approved.code == 0, approved.err
        assert f"{cp}: answered" in approved.out
        final = wait_for(project, run_id, lambda s: s["status"] in ("done", "failed", "cancelled"))
        assert final["status"] == "done", final["status_reason"]
        assert final["checkpoints"][cp]["answer"] == "approve"
        assert set(final["tasks"]) == {"t1", "t2"}
    finally:
        run_cli("cancel", run_id, cwd=project)


@pytest.mark.bwrap
def test_approve_refuses_what_is_not_a_plan(project: Path) -> None:
    setup_crew(project)
    assert_usage_error(run_cli("approve", "--plan", cwd=project), "no plan waits for approval")
    assert_usage_error(run_cli("approve", cwd=project), "say what to approve", "approve --plan")
    run_id = runs.create_run(ProjectPaths(project), "build the thing").id
    assert_usage_error(run_cli("approve", run_id, "cp-1", cwd=project), "no checkpoint 'cp-1'")


def test_approve_help_says_how_to_approve_the_plan() -> None:
    helped = run_cli("approve", "--help")
    assert helped.code == 0
    assert "--plan" in helped.out and "RUN cp-N" in helped.out


# ----------------------------------------------------------------------------- role rm


@pytest.mark.parametrize(("role", "where"), [
    ("reviewer", "hierarchical.reviewer"),
    ("lead", "hierarchical.lead"),
    ("tester", "sequential.steps[1]"),
    ("host", "group_chat.speakers[0], group_chat.lead, group_chat.done_role"),
    ("frontdesk", "handoff.start"),
])
def test_role_rm_refuses_a_role_the_mode_settings_name(project: Path, role: str, where: str) -> None:
    before = crew_text(project)
    refused = run_cli("role", "rm", role, cwd=project)
    assert_usage_error(refused, f"role {role!r} is still named in crew.yaml: {where}", f"role rm {role} --force")
    assert crew_text(project) == before
    forced = run_cli("role", "rm", role, "--force", cwd=project)
    assert forced.code == 0, forced.err
    assert role not in role_json(project)


def test_role_rm_of_a_role_no_setting_names_needs_no_force(project: Path) -> None:
    assert_usage_error(run_cli("role", "rm", "skeptic", cwd=project), "group_chat.speakers[2]")
    removed = run_cli("role", "rm", "specialist", cwd=project)
    assert removed.code == 0, removed.err


# ----------------------------------------------------------------------------- several active runs


@pytest.mark.parametrize("command", ["pause", "resume", "cancel"])
def test_commands_without_a_run_ask_when_several_runs_are_active(project: Path, command: str) -> None:
    paths = ProjectPaths(project)
    first = runs.create_run(paths, "first goal").id
    time.sleep(0.01)
    second = runs.create_run(paths, "second goal").id
    refused = run_cli(command, cwd=project)
    assert_usage_error(refused, "2 runs are active", first, second, "first goal", f"agentbox {command} ")
    for run_id in (first, second):
        assert status(project, run_id)["paused"] is False
        assert status(project, run_id)["status"] == "planning"

    named = run_cli(command, first, cwd=project)
    assert named.code == 0, named.err
    assert run_cli("cancel", second, cwd=project).code == 0
    if command != "cancel":  # one active run left: it is the one meant
        alone = run_cli(command, cwd=project)
        assert alone.code == 0, alone.err
        assert status(project, first)["paused"] is (command == "pause")


# ----------------------------------------------------------------------------- demo --no-tui


@pytest.mark.bwrap
def test_demo_no_tui_prints_no_path_inside_the_deleted_project(tmp_path: Path) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    result = run_cli("demo", "--no-tui", env={"TMPDIR": str(temp)}, timeout=180)
    assert result.code == 0, result.err[-2000:]
    [root] = re.findall(r"demo project: (\S+)", result.err)
    assert not Path(root).exists()
    assert f"removed the demo project {root}" in result.err
    after_run = result.out[result.out.index("\nrun run-"):]
    assert root not in after_run, after_run
    assert "synthesis (the demo project is removed on exit; `agentbox demo --no-tui --keep` keeps it)" in after_run
    # the demo project is a git repository: the run worked on branches and the stand-in human merged it
    assert "worktree workspace" in result.out
    assert re.search(r"the stand-in human answered the merge question: cp-\d+: agentbox/run-\S+ merged into main",
                     after_run), after_run


def test_the_demo_project_is_a_clean_git_repository_with_one_commit(tmp_path: Path) -> None:
    from agentbox.core.admin.demo import make_demo_project

    project = make_demo_project(tmp_path)
    log = subprocess.run(["git", "-C", str(project.root), "log", "--format=%an|%s"], capture_output=True, text=True)
    assert log.stdout == "agentbox demo|the demo project\n", log.stderr
    status = subprocess.run(["git", "-C", str(project.root), "status", "--porcelain", "--ignored"],
                            capture_output=True, text=True).stdout
    assert status == "", status  # the crew is committed, and nothing of the run's state is there yet


# ----------------------------------------------------------------------------- jargon


JARGON = re.compile(r"\bseeds?\b(?! (?:of|for) )|\b00[0-4]_|\bthe five rules\b", re.IGNORECASE)


def test_user_facing_example_files_hold_no_internal_jargon() -> None:
    files = [*(REPO / ".agent-box.example").rglob("*"), *(REPO / "profiles").rglob("*"),
             *(REPO / "docs").rglob("*.md"), REPO / "README.md"]
    found = [f"{path.relative_to(REPO)}:{number}: {line.strip()}"
             for path in files if path.is_file() and path.suffix in (".yaml", ".yml", ".md", ".json", ".txt", "")
             for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
             if JARGON.search(line)]
    assert found == []
    helped = run_cli("graph", "check", "--help")
    assert "five rules" not in helped.out
