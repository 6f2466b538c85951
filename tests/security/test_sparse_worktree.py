"""A task's sparse worktree under real bwrap: the agent sees the whole tree, writes its scopes only.

A new worktree checks out only the directories its writer's scopes need; the sandbox shows
the repository's shared base read-only at the project's path with those directories bound
over it (`agentbox.core.workspace.bases`). From inside, nothing of that may show: every file
of the base is there, git sees a clean worktree with every file tracked, writes outside the
scopes and into git's metadata or the base are refused, and the commit holds the turn's
writes only.

Runs as root and again as an unprivileged user (`test_unprivileged_pass.py`).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.engine.support import create, drive, setup_crew, task, work_rule

pytestmark = pytest.mark.bwrap

PROBE = " ; ".join([
    "cat lib/keep.txt README.md",
    "ls lib | wc -l",
    "(echo evil > lib/evil.txt) 2>/dev/null && echo wrote-lib || echo refused-lib",
    "(echo evil > README.md) 2>/dev/null && echo wrote-top || echo refused-top",
    "(echo evil > .git) 2>/dev/null && echo wrote-git || echo refused-git",
    "(touch /run/agentbox/git/agentbox/bases/x) 2>/dev/null && echo wrote-bases || echo refused-bases",
    "git ls-files | wc -l",
    "git status --porcelain --untracked-files=no | wc -l",
    "echo mine > src/mine.txt",
])


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout


def make_repo(root: Path) -> None:
    for directory in ("src", "lib", "vendor/deep"):
        (root / directory).mkdir(parents=True, exist_ok=True)
        for i in range(6):
            (root / directory / f"m{i}.py").write_text(f"# {directory} {i}\n")
    (root / "lib" / "keep.txt").write_text("kept in lib\n")
    (root / "README.md").write_text("# the project\n")
    (root / ".gitignore").write_text(".agent-box/runs/\n.agent-box/sessions/\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "-c", "user.name=P", "-c", "user.email=p@example.invalid", "add", "-A")
    git(root, "-c", "user.name=P", "-c", "user.email=p@example.invalid", "commit", "-q", "-m", "start")


async def test_a_sparse_worktree_is_seen_whole_and_written_only_in_scope(project: Path) -> None:
    worker = [work_rule(task_id="t1", run=f"{{ {PROBE} ; }} > src/seen.txt 2>&1")]
    paths = setup_crew(project, worker=worker, tasks=[task("t1", "builder", writes=["src/**"])])
    make_repo(project)
    tracked = len(git(project, "ls-files").split())
    run = await drive(paths, create(paths), timeout=120, backoff=[0.05, 0.05, 0.05])
    assert run.status == "done", run.status_reason
    branch = run.tasks["t1"].branch
    seen = git(project, "show", f"{branch}:src/seen.txt").split("\n")
    assert seen[:2] == ["kept in lib", "# the project"]  # outside the scope: the base's files
    assert seen[2:7] == ["7", "refused-lib", "refused-top", "refused-git", "refused-bases"], seen
    assert seen[7:9] == [str(tracked), "0"], seen  # git inside: every file tracked, none changed
    changed = git(project, "diff", "--name-only", run.tasks["t1"].base, run.tasks["t1"].head).split()
    assert sorted(changed) == ["src/mine.txt", "src/seen.txt"]
    common = project / ".git"
    assert [p.name for p in (common / "agentbox" / "bases").iterdir()] == [git(project, "rev-parse", "HEAD").strip()]
    assert not (project / "src" / "mine.txt").exists()  # the person's tree is untouched
