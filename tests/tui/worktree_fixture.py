"""A worktree run made with real git: a repository, task branches with commits, merged into the run's branch.

The run state is written as the engine leaves a worktree run (each task's branch, base,
head, changed files and merge commit; the run's base and integration branch), but the
commits are made here with plain git, so a test needs no agent, no sandbox and no engine.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from agentbox.core import workspace
from agentbox.core.engine.models import ChangedPath, Contract, Run, RunGit, Task
from agentbox.core.engine.run_store import RunStore
from agentbox.core.paths import ProjectPaths
from tests.tui.builders import T0, copy_example

RUN_ID = "run-20260101-130000-c3d4"
PERSON = ("-c", "user.name=Person", "-c", "user.email=person@example.invalid", "-c", "commit.gpgSign=false")
GREET = '"""Greetings."""\n\n\ndef greet(name: str) -> str:\n    """Say hello."""\n    return f"Hello, {name}!"\n'
TEST = 'from src.greet import greet\n\n\ndef test_greet() -> None:\n    assert greet("Ada") == "Hello, Ada!"\n'


def git(root: Path, *args: str) -> str:
    """Run git in `root` as the person would (at a fixed time, so every commit id is the same each run)."""
    when = f"@{int(T0)} +0000"
    env = {**os.environ, "GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when}
    return subprocess.run(["git", "-C", str(root), *PERSON, *args], check=True, capture_output=True,
                          text=True, env=env).stdout


def _commit_on(root: Path, branch: str, start: str, files: dict[str, str | None], message: str) -> str:
    """A commit on a new `branch` from `start` writing `files` (None deletes), the person's tree left as it was."""
    git(root, "checkout", "-q", "-b", branch, start)
    for name, text in files.items():
        path = root / name
        if text is None:
            git(root, "rm", "-q", name)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        git(root, "add", name)
    git(root, "commit", "-q", "-m", message)
    head = git(root, "rev-parse", "HEAD").strip()
    git(root, "checkout", "-q", "main")
    return head


def _changed(root: Path, base: str, head: str) -> list[ChangedPath]:
    return [ChangedPath(path=c.path, change=c.change.value, added=c.added, removed=c.removed, old_path=c.old_path)
            for c in workspace.changed_files(root, base, head)]


def build_worktree_run(root: Path, *, status: str = "done") -> ProjectPaths:
    """A project whose one run worked in worktrees: builder's `greet` and tester's `tests` approved and merged
    into `agentbox/<run>`, `docs` with a branch but no commit yet, the lead's `plan` writing nothing."""
    project = copy_example(root)
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("print('app')\n")
    (root / "README.md").write_text("# the project\n")
    (root / "OLD.md").write_text("old notes\n")
    (root / ".gitignore").write_text(".agent-box/\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "start")
    base = git(root, "rev-parse", "HEAD").strip()
    integration = workspace.integration_branch(RUN_ID)
    git(root, "branch", integration, base)

    greet_head = _commit_on(root, workspace.task_branch(RUN_ID, "greet"), base,
                            {"src/greet.py": GREET, "src/app.py": "from src.greet import greet\n\nprint(greet('app'))\n",
                             "OLD.md": None}, "greet: add greet()")
    tests_head = _commit_on(root, workspace.task_branch(RUN_ID, "tests"), base,
                            {"tests/test_greet.py": TEST}, "tests: cover greet()")
    git(root, "checkout", "-q", integration)
    git(root, "merge", "-q", "--no-ff", "-m", "merge greet", workspace.task_branch(RUN_ID, "greet"))
    greet_merged = git(root, "rev-parse", "HEAD").strip()
    git(root, "merge", "-q", "--no-ff", "-m", "merge tests", workspace.task_branch(RUN_ID, "tests"))
    tests_merged = git(root, "rev-parse", "HEAD").strip()
    git(root, "checkout", "-q", "main")
    git(root, "branch", workspace.task_branch(RUN_ID, "docs"), tests_merged)

    def task(task_id: str, assignee: str, state: str, writes: list[str], **git_fields: object) -> Task:
        return Task(id=task_id, assignee=assignee, brief=f"the {task_id} work", writes=writes, state=state,
                    created=T0, updated=T0, **git_fields)  # type: ignore[arg-type]

    tasks = {
        "plan": task("plan", "lead", "approved", []),
        "greet": task("greet", "builder", "approved", ["src/**"], branch=workspace.task_branch(RUN_ID, "greet"),
                      base=base, head=greet_head, changed_files=_changed(root, base, greet_head), merged=greet_merged),
        "tests": task("tests", "tester", "approved", ["tests/**"], branch=workspace.task_branch(RUN_ID, "tests"),
                      base=base, head=tests_head, changed_files=_changed(root, base, tests_head), merged=tests_merged),
        "docs": task("docs", "builder", "cancelled" if status in ("done", "failed", "cancelled") else "executing",
                     ["docs/**"], branch=workspace.task_branch(RUN_ID, "docs"), base=tests_merged, head=tests_merged),
    }
    run = Run(id=RUN_ID, contract=Contract(goal="greet people", mode="hierarchical", workspace="worktree",
                                           roles={"lead": "demo-lead", "builder": "demo-worker",
                                                  "tester": "demo-worker", "reviewer": "demo-reviewer"}),
              git=RunGit(base=base, head=base, branch="main", integration_branch=integration),
              status=status, created=T0, updated=T0, finished=T0 + 60 if status == "done" else None, tasks=tasks)  # type: ignore[arg-type]
    RunStore(project).create(run)
    return project
