"""Every mode in a worktree run: real git, real bwrap, scripted agents, each run driven to done.

Whatever a mode's writers write reaches the run's integration branch, exactly, and nothing
else does: a mode's read-only turns (speakers, checkers, reviewers, the front desk) change
nothing, the person's tree, index, stash and branch stay as they were (until the run is
delivered, where crew.yaml says `deliver: merge`), and no worktree is left once the run is
done. Shared workspaces keep today's behaviour; their tests run in projects that are no git
repository.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentbox.core.engine.models import Run
from agentbox.core.paths import ProjectPaths
from tests.engine.modes_support import write_crew, write_profile
from tests.engine.support import (
    assert_log_consistent,
    create,
    drive,
    of_type,
    setup_crew,
    task,
    work_rule,
)
from tests.engine.test_worktree_runs import git, make_repo, person_state

pytestmark = [pytest.mark.bwrap, pytest.mark.local_runner("the worktree's bind layout: what an agent sees and may write, under bwrap")]


def run_changes(root: Path, run: Run) -> dict[str, str | None]:
    """What the run's integration branch changes over its base: path → content (None: deleted)."""
    assert run.git is not None
    out = git(root, "diff", "--no-renames", "--name-status", "-z", run.git.base, run.git.integration_branch)
    fields = out.split("\0")
    return {path: None if status == "D" else git(root, "show", f"{run.git.integration_branch}:{path}")
            for status, path in zip(fields[0::2], fields[1::2], strict=False) if path}


def task_branches(root: Path, run: Run) -> list[str]:
    return git(root, "branch", "--list", "--format=%(refname:short)", f"agentbox/{run.id}@*").split()


def assert_nothing_left(root: Path, run: Run) -> None:
    """No worktree of the run is left, in git's list or on disk."""
    listed = [line for line in git(root, "worktree", "list", "--porcelain").splitlines() if line.startswith("worktree ")]
    assert listed == [f"worktree {root}"], listed
    left = root / ".git" / "agentbox" / "worktrees" / run.id
    assert [p for p in left.rglob("*") if not p.is_dir()] == []


def in_a_repo(project: Path) -> None:
    """The project as a git repository; the person has a file of their own, untracked."""
    make_repo(project)
    (project / "notes.txt").write_text("the person's own, untracked\n")


async def finish(paths: ProjectPaths, run_id: str, before: dict[str, object]) -> Run:
    """Drive the run to done; the person's things untouched, nothing left behind."""
    run = await drive(paths, run_id, timeout=180)
    assert run.status == "done", run.status_reason
    assert run.contract.workspace == "worktree" and run.git is not None
    assert person_state(paths.root) == before, "the person's tree, index, stash or branch changed"
    assert_nothing_left(paths.root, run)
    assert_log_consistent(paths, run_id)
    return run


# ----------------------------------------------------------------------------- sequential


@pytest.mark.parametrize("reviewed", [True, False], ids=["reviewed", "unreviewed"])
async def test_sequential_steps_build_on_each_others_merged_work(project: Path, reviewed: bool) -> None:
    in_a_repo(project)
    worker = [
        work_rule(task_id="step1-builder", write={"src/seq/one.py": "ONE = 1\n", "src/app.py": "print('step 1')\n"}),
        work_rule(task_id="step2-tester", write={"tests/test_one.py": "def test() -> None:\n    pass\n"},
                  run="cp src/seq/one.py tests/one_seen.py"),  # the step before it, approved and merged
    ]
    roles: dict[str, dict[str, Any]] = {"builder": {"profile": "t-worker", "writes": ["src/**"]},
                                        "tester": {"profile": "t-worker", "writes": ["tests/**"]}}
    if reviewed:
        roles["reviewer"] = {"profile": "t-reviewer", "writes": []}
    paths = setup_crew(project, worker=worker, mode="sequential", roles=roles)
    if not reviewed:  # no reviewer named: the engine accepts each valid step itself
        paths = write_crew(project, "sequential", roles, sequential={"steps": ["builder", "tester"]})
    before = person_state(project)
    run = await finish(paths, create(paths, "pipe it", mode="sequential"), before)
    assert [[v.by for v in t.verdicts] for t in run.tasks.values()] == [["reviewer" if reviewed else "pipeline"]] * 2
    assert run_changes(project, run) == {"src/seq/one.py": "ONE = 1\n", "src/app.py": "print('step 1')\n",
                                         "tests/test_one.py": "def test() -> None:\n    pass\n",
                                         "tests/one_seen.py": "ONE = 1\n"}
    assert all(t.merged for t in run.tasks.values())
    assert {c.path for c in run.tasks["step2-tester"].changed_files} == {"tests/test_one.py", "tests/one_seen.py"}


# ----------------------------------------------------------------------------- hierarchical


async def test_hierarchical_work_is_delivered_into_the_persons_branch_when_crew_says_merge(project: Path) -> None:
    in_a_repo(project)
    tasks = [task("t1", "builder", writes=["src/h/**"]), task("t2", "tester", writes=["tests/**"], deps=["t1"])]
    worker = [work_rule(task_id="t1", write={"src/h/one.py": "H = 1\n"}),
              work_rule(task_id="t2", run="mkdir -p tests && cp src/h/one.py tests/h_seen.py")]
    paths = setup_crew(project, worker=worker, tasks=tasks, deliver="merge")
    before = person_state(project)
    head = git(project, "rev-parse", "HEAD").strip()
    run = await drive(paths, create(paths, "build it"), timeout=180)
    assert run.status == "done", run.status_reason
    assert run.git is not None
    assert run_changes(project, run) == {"src/h/one.py": "H = 1\n", "tests/h_seen.py": "H = 1\n"}
    # delivered at once: one merge commit on the person's branch, their own changes kept
    assert run.git.delivered == git(project, "rev-parse", "HEAD").strip()
    parents = git(project, "log", "-1", "--format=%P", "HEAD").split()
    assert parents[0] == head and len(parents) == 2
    # crew.yaml is the person's uncommitted change, so the run started from a snapshot of it:
    # the merge brings the run's tasks replayed without it, and the snapshot is in no history of theirs
    assert run.git.dirty and run.git.base not in git(project, "rev-list", "HEAD").split()
    assert git(project, "log", "--format=%s", f"{head}..{parents[1]}").splitlines() == \
        [f"agentbox: merge task {t} into run {run.id}" for t in ("t2", "t1")]
    assert (project / "tests" / "h_seen.py").read_text() == "H = 1\n"
    assert git(project, "status", "--porcelain") == before["status"]  # crew.yaml still the person's change
    assert git(project, "stash", "list") == before["stash"]
    assert (project / "notes.txt").read_text() == "the person's own, untracked\n"
    assert_nothing_left(project, run)
    assert not run.open_checkpoints()


# ----------------------------------------------------------------------------- group chat


async def test_group_chat_is_talk_its_speakers_write_nothing(project: Path) -> None:
    in_a_repo(project)
    write_profile("talker", [{"when": {"prompt_regex": r"\[agentbox:speech role=(?P<r>\w+) round=(?P<k>\d) n=(?P<n>\d+)\]"},
                              "do": {"run": "echo {r} > docs/{r}.md 2>/dev/null; echo {r} > {r}.txt 2>/dev/null; true",
                                     "reply_json": {"message": "{r} says message {n}"}}}])
    roles = {name: {"profile": "talker", "writes": ["docs/**"]} for name in ("a", "b")}
    paths = write_crew(project, "group_chat", roles,
                       group_chat={"speakers": ["a", "b"], "selection": "round_robin", "max_rounds": 1})
    before = person_state(project)
    run = await finish(paths, create(paths, "discuss", "group_chat"), before)
    assert run.result is not None and run.result.terminated_by == "max_rounds"
    assert run_changes(project, run) == {} and task_branches(project, run) == []
    assert not (project / "docs").exists() and not (project / "a.txt").exists()


# ----------------------------------------------------------------------------- handoff


def handoff_rule(role: str, turn: int, reply: dict[str, Any], **action: Any) -> dict[str, Any]:
    return {"when": {"prompt_contains": f"[agentbox:handoff role={role} ", "turn": turn},
            "do": {"reply_json": reply, **action}}


async def test_handoff_turns_that_write_are_committed_and_merged_at_once(project: Path) -> None:
    in_a_repo(project)
    write_profile("relay", [
        handoff_rule("frontdesk", 1, {"action": "handoff", "to": "specialist", "message": "write the notes"}),
        handoff_rule("specialist", 1, {"action": "handoff", "to": "frontdesk", "message": "notes written"},
                     write={"docs/a.md": "A1\n"}),
        # the front desk reads the live tree (the person's), read-only: the notes are not there
        handoff_rule("frontdesk", 2, {"action": "handoff", "to": "specialist", "message": "more please"},
                     run="cat docs/a.md > seen.txt 2>&1; true"),
        # the specialist's second turn finds its first turn's notes in the handoff worktree
        handoff_rule("specialist", 2, {"action": "answer", "message": "all written"},
                     run="cp docs/a.md docs/a_seen.md && printf 'A2\\n' > docs/a.md && printf 'B\\n' > docs/b.md"),
    ])
    roles = {"frontdesk": {"profile": "relay", "writes": []}, "specialist": {"profile": "relay", "writes": ["docs/**"]}}
    paths = write_crew(project, "handoff", roles, handoff={"start": "frontdesk", "max_ping_pong": 5})
    before = person_state(project)
    run = await finish(paths, create(paths, "write notes", "handoff"), before)
    assert run.result is not None and run.result.answered_by == "specialist" and run.result.handoffs == 3
    assert run_changes(project, run) == {"docs/a.md": "A2\n", "docs/b.md": "B\n", "docs/a_seen.md": "A1\n"}
    # the specialist's two turns: two commits on the run's handoff branch, each merged after its turn
    assert run.git is not None and task_branches(project, run) == [f"agentbox/{run.id}@handoff"]
    assert git(project, "rev-list", "--count", f"{run.git.integration_branch}..agentbox/{run.id}@handoff") == "0\n"
    log = assert_log_consistent(paths, run.id)
    commits = [e for e in of_type(log, "commit") if e.get("commit")]
    assert [e["role"] for e in commits] == ["specialist", "specialist"]
    assert len(of_type(log, "merge")) == 2
    assert not (project / "docs").exists() and not (project / "seen.txt").exists()


# ----------------------------------------------------------------------------- graph


def node_rule(marker: str, reply: dict[str, Any], **action: Any) -> dict[str, Any]:
    return {"when": {"prompt_contains": marker}, "do": {"reply_json": reply, **action}}


GREET_1 = "def greet(name):\n    return 'Hello ' + name\n"
GREET_2 = '"""Greetings."""\n\n\ndef greet(name):\n    return f"Hello, {name}!"\n'


async def test_graph_nodes_work_on_branches_and_a_check_sees_the_merged_work(project: Path) -> None:
    in_a_repo(project)
    seen = {"summary": "saw: {reads[src/greet.py]}", "evidence": ["read src/greet.py"]}
    write_profile("noder", [
        node_rule("[agentbox:node node=design ", {"summary": "designed", "evidence": ["docs/design.md"]},
                  write={"docs/design.md": "# Design\n"}),
        node_rule("[agentbox:node node=implement task=implement round=1 ", {"summary": "v1", "evidence": ["v1"]},
                  write={"src/greet.py": GREET_1}),
        node_rule("[agentbox:node node=implement ", {"summary": "v2", "evidence": ["docstring added"]},
                  write={"src/greet.py": GREET_2}),
        # the checker reads the code in its own worktree: what implement's approved turn merged
        node_rule("[agentbox:node node=check task=check round=1 ",
                  {**seen, "outcome": "fail", "fail_reason": "impl_bug", "remediation": "add a docstring"},
                  read="src/greet.py", run="echo checked > check.txt 2>/dev/null; true"),
        node_rule("[agentbox:node node=check ", seen, read="src/greet.py"),
    ])
    roles = {"designer": {"profile": "noder", "writes": ["docs/**"]}, "coder": {"profile": "noder", "writes": ["src/**"]},
             "checker": {"profile": "noder", "writes": []}}
    graph = {"nodes": [{"name": "design", "role": "designer", "brief": "design it"},
                       {"name": "implement", "role": "coder", "brief": "implement it"},
                       {"name": "check", "role": "checker", "brief": "check it"}],
             "edges": [{"from": "design", "to": "implement", "condition": "success"},
                       {"from": "implement", "to": "check", "condition": "success"},
                       {"from": "check", "to": "implement", "condition": "fail", "fail_reason": "impl_bug",
                        "kind": "backward"},
                       {"from": "check", "to": "design", "condition": "fail", "kind": "backward"}]}
    (project / ".agent-box" / "graphs" / "g.yaml").write_text(json.dumps(graph))
    paths = write_crew(project, "graph", roles, graph={"file": "graphs/g.yaml"})
    before = person_state(project)
    run = await finish(paths, create(paths, "greet", "graph"), before)
    assert list(run.tasks) == ["design", "implement", "check", "implement.2", "check.2"]
    assert run_changes(project, run) == {"docs/design.md": "# Design\n", "src/greet.py": GREET_2}
    assert run.tasks["check"].submitted_summary == f"saw: {GREET_1.strip()}"
    assert run.tasks["check.2"].submitted_summary == f"saw: {GREET_2.strip()}"
    assert [c.path for c in run.tasks["implement.2"].changed_files] == ["src/greet.py"]
    assert run.tasks["check"].changed_files == [] and run.tasks["check.2"].changed_files == []
    assert all(t.merged for t in run.tasks.values() if t.id != "check")  # a failed node's branch is not merged
