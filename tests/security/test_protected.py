"""crew.yaml's `protected:` paths: no role writes them in any turn, whatever its scope.

The scripted probe agent (a real process in the real bwrap sandbox built by `invoke()`)
attacks a protected path every way a writer could: write it, add to it, delete it,
rename its parent away and recreate it, create it where it did not exist, and reach it
through a file or pattern scope's private view. From the host, nothing it did lands on a
protected path, and the role's own scope stays writable. Runs as root and, through
`test_unprivileged_pass.py`, as an ordinary user.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import pytest

from agentbox.core.agents import resolve as services
from agentbox.core.agents.invoke import invoke
from agentbox.core.errors import SandboxError
from agentbox.core.paths import ProjectPaths
from tests.sandbox_support import make_profile

pytestmark = pytest.mark.bwrap

PROTECTED = ["src/contracts/**", "tests/acceptance/**", "SPEC.md", "LOCK.md", "docs/*.lock"]


def _crew(project: Path, roles: dict[str, dict[str, object]], protected: list[str]) -> ProjectPaths:
    crew = {"mode": "sequential", "roles": roles, "protected": protected, "limits": {"task_timeout_s": 60}}
    (project / ".agent-box" / "crew.yaml").write_text(json.dumps(crew))
    return ProjectPaths(project)


@pytest.fixture
def guarded(project: Path, agent_box_home: Path) -> ProjectPaths:
    """A git project whose contract and acceptance dir exist; SPEC.md, LOCK.md and tests/acceptance/ do not."""
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    (project / "src" / "contracts").mkdir(parents=True)
    (project / "src" / "contracts" / "api.yaml").write_text("version: 1\n")
    (project / "docs").mkdir()
    (project / "docs" / "deps.lock").write_text("pinned\n")
    (project / "README.md").write_text("readme\n")
    subprocess.run(["git", "-C", str(project), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(project), "-c", "user.email=t@example.invalid", "-c", "user.name=t",
                    "commit", "-qm", "init"], check=True)
    make_profile(agent_box_home, "probe")
    return _crew(project, {
        "all": {"profile": "probe"},
        "src": {"profile": "probe", "writes": ["src/**", "tests/**"]},
        "md": {"profile": "probe", "writes": ["*.md", "docs/*"]},
    }, PROTECTED)


ATTACKS = (
    "echo evil > {r}/src/contracts/api.yaml; echo evil >> {r}/src/contracts/api.yaml; "
    "echo evil > {r}/src/contracts/new.yaml; rm -f {r}/src/contracts/api.yaml; "
    "mv {r}/src/contracts {r}/src/c2; "
    "mv {r}/src {r}/src2 && mkdir -p {r}/src/contracts && echo evil > {r}/src/contracts/api.yaml; "
    "mv {r}/tests {r}/t2; mkdir -p {r}/tests/acceptance; echo evil > {r}/tests/acceptance/test_ok.py; "
    "echo evil > {r}/SPEC.md; echo evil > {r}/docs/new.lock; echo evil > {r}/docs/deps.lock; "
    "echo mine > {r}/src/app.py; echo mine > {r}/docs/notes.md; echo mine > {r}/NOTES.md; true"
)


def _protected_files(root: Path) -> dict[str, str]:
    found = {str(p.relative_to(root)): p.read_text() for base in ("src/contracts", "tests/acceptance")
             if (root / base).is_dir() for p in (root / base).rglob("*") if p.is_file()}
    for name in ("SPEC.md", "LOCK.md", "docs/deps.lock", "docs/new.lock"):
        if (root / name).exists():
            found[name] = (root / name).read_text()
    return found


PRISTINE = {"src/contracts/api.yaml": "version: 1\n", "docs/deps.lock": "pinned\n"}


@pytest.mark.parametrize("role", ["all", "src", "md"])
async def test_no_scope_writes_a_protected_path(guarded: ProjectPaths, role: str) -> None:
    root = guarded.root
    result = await invoke(services.role_agent(guarded, role), "run " + ATTACKS.format(r=root))
    assert result.ok, result.error
    assert _protected_files(root) == PRISTINE
    assert not (root / "src2").exists() and not (root / "src" / "c2").exists()
    mine = {"all": ["src/app.py", "docs/notes.md", "NOTES.md"], "src": ["src/app.py"], "md": ["docs/notes.md", "NOTES.md"]}
    for path in mine[role]:  # the role's own scope stays writable
        assert (root / path).read_text() == "mine\n", path


async def test_a_worktree_turn_cannot_write_a_protected_path_either(guarded: ProjectPaths, tmp_path: Path) -> None:
    worktree = tmp_path / "wt"
    subprocess.run(["git", "-C", str(guarded.root), "worktree", "add", "-q", "--detach", str(worktree)], check=True)
    for role in ("all", "src"):
        agent = dataclasses.replace(services.role_agent(guarded, role), worktree=worktree)
        result = await invoke(agent, "run " + ATTACKS.format(r=guarded.root))
        assert result.ok, result.error
        assert _protected_files(worktree) == PRISTINE, role
        assert (worktree / "src" / "app.py").read_text() == "mine\n"
    assert _protected_files(guarded.root) == PRISTINE


async def test_a_pattern_scope_never_carries_a_protected_file_back(guarded: ProjectPaths) -> None:
    root = guarded.root
    (root / "SPEC.md").write_text("the spec\n")
    result = await invoke(services.role_agent(guarded, "md"),
                          f"run echo evil > {root}/SPEC.md; mv {root}/SPEC.md {root}/OLD.md; echo evil > {root}/LOCK.md;"
                          f" echo evil > {root}/docs/deps.lock; echo evil > {root}/docs/x.lock; echo mine > {root}/README.md")
    assert result.ok, result.error
    assert (root / "SPEC.md").read_text() == "the spec\n"
    assert not (root / "LOCK.md").exists() and not (root / "OLD.md").exists() and not (root / "docs" / "x.lock").exists()
    assert (root / "docs" / "deps.lock").read_text() == "pinned\n"
    assert (root / "README.md").read_text() == "mine\n"


async def test_a_protected_path_through_a_symlink_is_refused(guarded: ProjectPaths, agent_box_home: Path) -> None:
    root = guarded.root
    (root / "tests").symlink_to("/etc")  # a repository's link where a protected path goes
    with pytest.raises(SandboxError, match="symlink"):
        await invoke(services.role_agent(guarded, "all"), "run true")


async def test_the_setup_command_cannot_write_a_protected_path(guarded: ProjectPaths, tmp_path: Path) -> None:
    from agentbox.core.agents.setup_command import run_setup

    worktree = tmp_path / "wt"
    subprocess.run(["git", "-C", str(guarded.root), "worktree", "add", "-q", "--detach", str(worktree)], check=True)
    outcome = run_setup(guarded.root, worktree, (), (), ATTACKS.format(r=guarded.root), 60, tmp_path / "setup.log",
                        tuple(PROTECTED))
    assert outcome.ok, outcome.detail
    assert _protected_files(worktree) == PRISTINE
    assert (worktree / "src" / "app.py").read_text() == "mine\n"


def test_an_attached_session_cannot_write_a_protected_path(guarded: ProjectPaths) -> None:
    """The sandbox `agentbox attach` opens, with a shell in place of the tool."""
    with services.interactive_session(services.role_agent(guarded, "all"), None) as command:
        shell = [*command.argv[: command.argv.index("--") + 1], "/bin/sh", "-c", ATTACKS.format(r=guarded.root)]
        proc = subprocess.run(shell, env=command.env, pass_fds=command.pass_fds, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert _protected_files(guarded.root) == PRISTINE
    assert (guarded.root / "src" / "app.py").read_text() == "mine\n"
