"""Host git on a tree an agent wrote: nothing the agent (or the repository) configured runs.

After each work turn agentbox runs git on the host in the task's worktree (`add -A`, status,
diffs, merges, clean), with the person's rights. A writer under real bwrap makes a nested
repository there (`git init src/sub`) whose own `.git/config` defines a clean filter, a
textconv and an fsmonitor that each touch a marker outside the sandbox's reach, and a
`.gitattributes` naming them; it also names drivers the person's own git config defines (a
global one, a repository one). Whatever agentbox's git does with that tree afterwards
(commit, review diff, merge, `agentbox diff`, `merge`, `clean`) must run none of them, and the
nested repository arrives as plain files, never as a gitlink git could walk into. The same
holds when crew.yaml's `workspace_setup.run` plants it and the agent is harmless.

Runs as root and again as an unprivileged user (`test_unprivileged_pass.py`).
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from agentbox.core import runs
from agentbox.core import workspace as ws
from agentbox.core.reports import changes as run_changes
from tests.engine.support import create, drive, setup_crew, task, work_rule

pytestmark = pytest.mark.bwrap


def git(root: Path, *args: str) -> str:
    """The test's own git, without the hostile global config the `markers` fixture installs."""
    env = {k: v for k, v in os.environ.items() if k != "XDG_CONFIG_HOME"}
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True,
                          env=env).stdout


def make_repo(root: Path, markers: Path) -> None:
    """The person's repository; its own config (as `git lfs install --local` would) defines a filter."""
    (root / "src").mkdir(exist_ok=True)
    (root / "src" / "app.py").write_text("print('app')\n")
    (root / ".gitignore").write_text(".agent-box/runs/\n.agent-box/sessions/\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.name", "P")
    git(root, "config", "user.email", "p@example.invalid")
    git(root, "config", "filter.local.clean", f"touch {markers}/local-clean; cat")
    git(root, "config", "filter.local.smudge", f"touch {markers}/local-smudge; cat")
    git(root, "config", "diff.local.textconv", f"touch {markers}/local-textconv; cat")
    git(root, "config", "merge.local.driver", f"touch {markers}/local-merge; false")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "start")


def nested_repo_attack(markers: Path) -> str:
    """Shell run in the sandbox: a nested repository whose config runs a marker command for
    every hook git has, plus attributes naming the person's drivers at the worktree's top."""
    def touch(name: str) -> str:
        return shlex.quote(f"touch {markers}/{name}; cat")

    return " && ".join([
        f"touch {markers}/from-inside 2>/dev/null; true",  # the control: the marker dir is out of reach
        "git init -q src/sub", "cd src/sub", "echo hello > a.txt",
        "printf '* filter=x diff=x merge=x\\n' > .gitattributes",
        "git add -A", "git -c user.name=a -c user.email=a@b commit -qm nested",
        f"git config filter.x.clean {touch('nested-clean')}",
        f"git config filter.x.smudge {touch('nested-smudge')}",
        f"git config diff.x.textconv {touch('nested-textconv')}",
        f"git config core.fsmonitor {shlex.quote(f'touch {markers}/nested-fsmonitor; false')}",
        f"git config core.hooksPath {markers}",
        "echo HELLO > a.txt",  # same size, same second: git must hash it again (the clean filter)
        "cd ../..",
        "printf '* filter=local diff=local merge=local\\n*.txt filter=global diff=global\\n' > src/.gitattributes",
        "echo 'changed by the agent' >> src/app.py",
        "mkdir -p src/empty && git init -q src/empty",  # a nested repository with no commit at all
        "echo new > src/empty/file.txt",
    ])


@pytest.fixture
def markers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory no sandbox can write, and the person's global git config naming it."""
    found = tmp_path / "markers"
    found.mkdir()
    xdg = tmp_path / "xdg"
    (xdg / "git").mkdir(parents=True)
    (xdg / "git" / "config").write_text(
        f"[filter \"global\"]\n\tclean = touch {found}/global-clean; cat\n"
        f"[diff \"global\"]\n\ttextconv = touch {found}/global-textconv; cat\n")
    (xdg / "git" / "attributes").write_text("* filter=global\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    return found


def assert_plain_files(root: Path, branch: str) -> None:
    """The nested repositories' files are on `branch` as ordinary files: no gitlink, no `.git`."""
    entries = git(root, "ls-tree", "-r", "--full-tree", branch).splitlines()
    assert not [e for e in entries if e.startswith("160000")], entries
    paths = {e.split("\t", 1)[1] for e in entries}
    assert {"src/sub/a.txt", "src/sub/.gitattributes", "src/empty/file.txt"} <= paths, paths
    assert not [p for p in paths if "/.git/" in p or p.endswith("/.git")]
    assert git(root, "show", f"{branch}:src/sub/a.txt") == "HELLO\n"


async def run_attacked(project: Path, markers: Path, *, worker_runs: str | None, setup: str | None) -> str:
    worker = [work_rule(task_id="t1", write={"src/t1.py": "T = 1\n"}, **({"run": worker_runs} if worker_runs else {}))]
    settings = {"workspace_setup": {"run": setup}} if setup else {}
    paths = setup_crew(project, worker=worker, tasks=[task("t1", "builder", writes=["src/**"])], **settings)
    make_repo(project, markers)
    run_id = create(paths)
    run = await drive(paths, run_id, timeout=120, backoff=[0.05, 0.05, 0.05])
    assert run.status == "done", run.status_reason
    assert sorted(p.name for p in markers.iterdir()) == [], "host git ran what the tree configured"
    assert run.git is not None
    assert_plain_files(project, run.git.integration_branch)
    # everything the person does with the run afterwards: diff, merge, clean
    text = run_changes.run_diff(paths, runs.load(paths, run_id), stat_only=False)
    assert "src/sub/a.txt" in text.stat
    ok, message = runs.send_command(paths, run_id, {"action": "deliver", "into": None, "squash": False})
    assert ok, message
    ws.clean(project, run_id)
    assert sorted(p.name for p in markers.iterdir()) == [], "host git ran what the tree configured"
    # the person's own `git merge` world: ordinary files, nothing that walks into a repository
    assert_plain_files(project, "main")
    assert (project / "src" / "sub" / "a.txt").read_text() == "HELLO\n"
    assert not (project / "src" / "sub" / ".git").exists()
    return run_id


async def test_a_writers_nested_repository_runs_nothing_on_the_host(project: Path, markers: Path) -> None:
    await run_attacked(project, markers, worker_runs=nested_repo_attack(markers), setup=None)


async def test_a_setup_commands_nested_repository_runs_nothing_on_the_host(project: Path, markers: Path) -> None:
    await run_attacked(project, markers, worker_runs=None, setup=nested_repo_attack(markers))
