"""Worktree runs end to end: real git, real bwrap, scripted agents.

Each writer task works in its own worktree on its own branch; agentbox commits its turns,
reviews see the real diff, approval merges into the run's integration branch, and the
person's tree, index, stash and branch stay untouched until `agentbox merge`.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from agentbox.core import runs
from agentbox.core.engine.engine import Engine
from agentbox.core.engine.run_store import RunStore
from tests.engine.support import (
    create,
    drive,
    events,
    of_type,
    open_checkpoint,
    prompts_of,
    review_rule,
    send,
    setup_crew,
    task,
    until,
    when,
    work_rule,
)

pytestmark = [pytest.mark.bwrap, pytest.mark.local_runner("the worktree's bind layout: what an agent sees and may write, under bwrap")]


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout


def make_repo(root: Path) -> None:
    """The project as a git repository with one commit (and .agent-box kept out of it, as init's .gitignore does)."""
    (root / "src").mkdir(exist_ok=True)
    (root / "src" / "app.py").write_text("print('app')\n")
    (root / "README.md").write_text("# the project\n")
    (root / ".gitignore").write_text(".agent-box/runs/\n.agent-box/sessions/\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "-c", "user.name=P", "-c", "user.email=p@example.invalid", "add", "-A")
    git(root, "-c", "user.name=P", "-c", "user.email=p@example.invalid", "commit", "-q", "-m", "start")


def person_state(root: Path) -> dict[str, object]:
    """Everything of the person's that a run must not touch before `agentbox merge`."""
    files = {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
             for p in sorted(root.rglob("*")) if p.is_file() and ".git" not in p.relative_to(root).parts
             and ".agent-box" not in p.relative_to(root).parts}
    return {"files": files, "index": (root / ".git" / "index").read_bytes(), "stash": git(root, "stash", "list"),
            "head": git(root, "rev-parse", "HEAD"), "branch": git(root, "symbolic-ref", "HEAD"),
            "status": git(root, "status", "--porcelain")}


def writes(**files: str) -> dict[str, str]:
    return dict(files)


async def test_a_hierarchical_worktree_run_from_plan_to_merge(project: Path) -> None:
    make_repo(project)
    (project / "README.md").write_text("# the project\n\nuncommitted words of the person\n")  # dirty, tracked
    (project / "notes.txt").write_text("untracked, the person's\n")
    git(project, "stash", "list")
    tasks = [task("t1", "builder", writes=["src/t1/**"]), task("t3", "builder", writes=["src/t3/**"]),
             task("t2", "tester", writes=["tests/**"], deps=["t1"])]
    worker = [
        # t1 writes code and copies what it sees of the README (the person's uncommitted words)
        work_rule(task_id="t1", rule_id="w1", write=writes(**{"src/t1/code.py": "VALUE = 1\n"}),
                  run="cp README.md src/t1/readme_seen.txt"),
        # t3's first attempt is rejected; its rework adds a file in the same worktree
        work_rule(task_id="t3", rule_id="w3", times=1, write=writes(**{"src/t3/first.py": "first\n"})),
        work_rule(task_id="t3", rule_id="w3b", write=writes(**{"src/t3/second.py": "second\n"})),
        # t2 depends on t1: it sees t1's approved work in its own worktree
        work_rule(task_id="t2", rule_id="w2", run="mkdir -p tests && cp src/t1/code.py tests/seen_t1.py"),
    ]
    reviewer = [review_rule("reject", task_id="t3", times=1, rule_id="r3")]
    paths = setup_crew(project, worker=worker, reviewer=reviewer, tasks=tasks, limits={"max_workers": 2})
    before = person_state(project)
    run_id = create(paths)
    final = await drive(paths, run_id, timeout=120)
    assert final.status == "done", final.status_reason
    assert final.contract.workspace == "worktree" and final.git is not None and final.git.dirty
    assert person_state(project) == before  # tree, index, stash, branch: untouched by the run

    integration = final.git.integration_branch
    assert integration == f"agentbox/{run_id}"
    tree = set(git(project, "ls-tree", "-r", "--name-only", integration).split())
    assert {"src/t1/code.py", "src/t1/readme_seen.txt", "src/t3/first.py", "src/t3/second.py",
            "tests/seen_t1.py"} <= tree
    assert git(project, "show", f"{integration}:src/t1/readme_seen.txt").endswith("uncommitted words of the person\n")
    assert git(project, "show", f"{integration}:tests/seen_t1.py") == "VALUE = 1\n"
    for task_id in ("t1", "t2", "t3"):
        done = final.tasks[task_id]
        assert done.state == "approved" and done.merged and done.branch == f"agentbox/{run_id}@{task_id}"
        assert done.base and done.head and git(project, "merge-base", "--is-ancestor", done.head, integration) == ""
    assert [c.path for c in final.tasks["t3"].changed_files] == ["src/t3/first.py", "src/t3/second.py"]
    assert {c.path for c in final.tasks["t1"].changed_files} == {"src/t1/code.py", "src/t1/readme_seen.txt"}

    log = events(paths, run_id)
    assert "snapshotted" in (of_type(log, "workspace")[0]["why"] or "")
    commits = of_type(log, "commit", "t3")
    assert len(commits) == 2 and all(c["commit"] for c in commits)
    assert len(of_type(log, "merge")) == 3
    author = git(project, "log", "-1", "--format=%an|%s", final.tasks["t1"].head)
    assert author.startswith("builder (t-worker)|t1: did t1")
    # every review prompt carried the task's real diff
    review_prompts = prompts_of(paths, final.tasks["t3"].review_session_id or "")
    assert len(review_prompts) == 2 and all("## The task's changes" in p for p in review_prompts)
    assert "+first" in review_prompts[0] and "src/t3/second.py" in review_prompts[1]
    # no worktree is left once the tasks are merged
    assert not [line for line in git(project, "worktree", "list", "--porcelain").splitlines()
                if line.startswith("worktree ") and "/agentbox/worktrees/" in line]

    # done: a checkpoint asks whether to merge; `merge` brings the work into main and keeps the person's words
    (cp,) = final.open_checkpoints()
    assert cp.kind == "deliver" and "src/t1/code.py" in cp.question
    ok, message = runs.send_command(paths, run_id, {"action": "answer", "checkpoint": cp.id, "text": "merge"})
    assert ok, message
    assert (project / "src" / "t3" / "second.py").read_text() == "second\n"
    assert (project / "README.md").read_text().endswith("uncommitted words of the person\n")
    assert git(project, "status", "--porcelain") == before["status"]  # the person's own changes stay theirs
    assert " M README.md" in str(before["status"])
    after = RunStore(paths).load(run_id)
    assert after.git is not None and after.git.delivered == git(project, "rev-parse", "HEAD").strip()
    assert not after.open_checkpoints()


async def test_turns_that_write_nothing_read_the_runs_work_not_the_live_tree(project: Path) -> None:
    """The lead's plan and synthesis run in the run's view at its integration head: the
    synthesis reads the approved work, which the person's tree has only after `agentbox
    merge`, and neither turn sees what the person has in their tree and the run does not."""
    make_repo(project)
    (project / "notes.txt").write_text("untracked, the person's\n")
    tasks = [task("t1", "builder", writes=["src/t1/**"])]
    look = "ls; cat src/t1/code.py 2>&1; git log -1 --format=%s"
    lead = [{"id": "plan-looks", "when": when("[agentbox:plan"),
             "do": {"run": look, "reply_json": {"tasks": tasks, "notes": "{run_output}"}}},
            {"id": "synthesis-looks", "when": when("[agentbox:synthesis"),
             "do": {"run": look, "reply": "# Synthesis\n\n{run_output}"}}]
    worker = [work_rule(task_id="t1", rule_id="w1", write=writes(**{"src/t1/code.py": "VALUE = 1\n"}))]
    paths = setup_crew(project, lead=lead, worker=worker, tasks=tasks)
    run_id = create(paths)
    final = await drive(paths, run_id, timeout=120)
    assert final.status == "done", final.status_reason
    assert not (project / "src" / "t1").exists()  # not merged into the person's tree yet

    planned = of_type(events(paths, run_id), "plan")[0]["why"] or ""
    assert "README.md" in planned and "notes.txt" not in planned and "VALUE = 1" not in planned
    assert "start" in planned  # git works in the view: the base commit's subject
    assert final.result is not None
    synthesis = final.result.summary
    assert "VALUE = 1" in synthesis and "notes.txt" not in synthesis
    assert "agentbox: merge task t1" in synthesis  # the view's HEAD is the integration head, t1 merged
    # the view went with the run's other worktrees
    assert not [line for line in git(project, "worktree", "list", "--porcelain").splitlines()
                if line.startswith("worktree ") and "/agentbox/worktrees/" in line]


async def test_an_agent_cannot_write_git_metadata_in_its_worktree(project: Path) -> None:
    make_repo(project)
    attack = ("echo evil > .git/hooks/pre-commit 2>/dev/null; echo '[core]' >> .git/config 2>/dev/null; "
              "git update-ref refs/heads/planted HEAD 2>/dev/null; git commit --allow-empty -m x 2>/dev/null; "
              "mkdir -p src/t1; echo x > src/t1/new.txt; git status --porcelain > src/t1/status.txt 2>&1; true")
    worker = [work_rule(task_id="t1", rule_id="attack", run=attack)]
    roles = {"lead": {"profile": "t-lead", "writes": []}, "builder": {"profile": "t-worker"},  # the whole tree
             "reviewer": {"profile": "t-reviewer", "writes": []}}
    paths = setup_crew(project, worker=worker, tasks=[task("t1", "builder", writes=["**"])], roles=roles,
                       sequential={"steps": ["builder"]})
    run_id = create(paths)
    final = await drive(paths, run_id, timeout=90)
    assert final.status == "done", final.status_reason
    common = project / ".git"
    assert not (common / "hooks" / "pre-commit").exists()
    assert "[core]\n" not in (common / "config").read_text().split("[core]", 1)[1]
    assert subprocess.run(["git", "-C", str(project), "rev-parse", "--verify", "-q", "refs/heads/planted"],
                          capture_output=True).returncode != 0
    # git worked read-only inside: it saw the task's own change in progress
    seen = git(project, "show", f"agentbox/{run_id}:src/t1/status.txt")
    assert "src/t1/" in seen and "fatal" not in seen


async def test_two_tasks_changing_one_file_conflict_and_the_second_is_reworked(project: Path) -> None:
    make_repo(project)
    tasks = [task("t1", "builder", writes=["src/**"]), task("t2", "tester", writes=["src/**"])]
    worker = [
        work_rule(task_id="t1", rule_id="c1", write=writes(**{"src/app.py": "print('t1')\n"})),
        # t2 writes the same line; once sent back it resolves the markers by keeping both
        work_rule(task_id="t2", rule_id="c2", times=1, write=writes(**{"src/app.py": "print('t2')\n"})),
        work_rule(task_id="t2", rule_id="c2b", write=writes(**{"src/app.py": "print('t1')\nprint('t2')\n"})),
    ]
    # t2 is only reviewed after t1 is approved (its first review waits), so t1 merges first
    reviewer = [review_rule("approve", task_id="t2", rule_id="slow2", delay=1.5)]
    paths = setup_crew(project, worker=worker, reviewer=reviewer, tasks=tasks, limits={"max_workers": 2})
    run_id = create(paths)
    final = await drive(paths, run_id, timeout=120)
    assert final.status == "done", final.status_reason
    log = events(paths, run_id)
    (conflict,) = of_type(log, "merge.conflict", "t2")
    assert conflict["files"] == ["src/app.py"]
    rework = prompts_of(paths, final.tasks["t2"].session_id or "")[-1]
    assert "merge conflict" in rework and "src/app.py" in rework
    assert "Note from agentbox: merge conflict" in rework and "Note from the human" not in rework
    integration = final.git.integration_branch if final.git else ""
    assert git(project, "show", f"{integration}:src/app.py") == "print('t1')\nprint('t2')\n"
    assert git(project, "show", "HEAD:src/app.py") == "print('app')\n"  # the person's branch: untouched


def test_worktree_needs_a_git_repository(project: Path) -> None:
    paths = setup_crew(project, workspace="worktree")
    with pytest.raises(Exception, match="not the top of a git repository") as caught:
        runs.create_run(paths, "build")
    assert getattr(caught.value, "exit_code", None) == 2


async def test_a_shared_run_in_a_git_repository_works_in_the_live_tree(project: Path) -> None:
    make_repo(project)
    worker = [work_rule(task_id="t1", rule_id="s1", write=writes(**{"src/t1/live.py": "x = 1\n"}))]
    paths = setup_crew(project, worker=worker, tasks=[task("t1", "builder")], workspace="shared")
    run_id = create(paths)
    final = await drive(paths, run_id, timeout=90)
    assert final.status == "done" and final.git is None and final.contract.workspace == "shared"
    assert (project / "src" / "t1" / "live.py").read_text() == "x = 1\n"
    assert "agentbox/" not in git(project, "branch", "--list")



async def test_a_new_worktree_gets_the_ignored_files_and_its_setup_command_once(project: Path) -> None:
    make_repo(project)
    (project / ".gitignore").write_text(".agent-box/runs/\n.agent-box/sessions/\n.env\ndeps/\n")
    (project / ".env").write_text("TOKEN=local\n")
    worker = [
        work_rule(task_id="t1", rule_id="first", times=1, run="cp .env src/t1_env.txt; cp deps/count src/t1_count.txt"),
        work_rule(task_id="t1", rule_id="again", run="cp deps/count src/t1_count.txt"),
    ]
    reviewer = [review_rule("reject", task_id="t1", times=1, rule_id="once")]  # a second turn in the same worktree
    paths = setup_crew(project, worker=worker, reviewer=reviewer, tasks=[task("t1", "builder", writes=["src/**"])],
                       workspace_setup={"copy": [".env"], "run": "mkdir -p deps && echo installed >> deps/count"})
    git(project, "-c", "user.name=P", "-c", "user.email=p@example.invalid", "commit", "-qam", "ignore .env")
    run_id = create(paths)
    final = await drive(paths, run_id, timeout=120)
    assert final.status == "done", final.status_reason
    branch = f"agentbox/{run_id}"
    assert git(project, "show", f"{branch}:src/t1_env.txt") == "TOKEN=local\n"
    assert git(project, "show", f"{branch}:src/t1_count.txt") == "installed\n"  # once, not once per turn
    assert "deps/count" not in git(project, "ls-tree", "-r", "--name-only", branch)  # ignored: never committed


async def test_a_failing_setup_command_stops_the_task_with_its_output(project: Path) -> None:
    make_repo(project)
    paths = setup_crew(project, tasks=[task("t1", "builder", writes=["src/**"])], limits={"max_workers": 1},
                       workspace_setup={"run": "echo no network here >&2; exit 3"})
    run_id = create(paths)

    async def read_the_escalation_then_cancel(engine: Engine) -> None:
        await until(engine, lambda e: open_checkpoint(e, "retry_escalation") is not None, timeout=90)
        question = open_checkpoint(engine, "retry_escalation").question
        assert "workspace setup failed" in question and "exited 3" in question and "no network here" in question
        ok, message = await send(engine.project, engine.run.id, action="cancel_run")
        assert ok, message

    final = await drive(paths, run_id, human=read_the_escalation_then_cancel, timeout=120, backoff=[0.05, 0.05, 0.05])
    assert final.status == "cancelled"
