"""Attacks on the sandbox from inside an agent, as a hostile model would make them.

Each test drives the scripted probe agent (a real process, in the real bwrap sandbox
built by `invoke()`) to try one way out, then checks from the host that nothing got
through. The whole module runs twice in CI: as root (CI's own user), and as an
unprivileged user through `test_unprivileged_pass.py`, because people run agentbox both
ways and the holes differ.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentbox.core.errors import SandboxError, UsageError
from agentbox.core.paths import ProjectPaths
from agentbox.core.sandbox import bwrap as sandbox
from agentbox.core.sandbox import seccomp
from tests.sandbox_support import ask, make_profile, write_crew

pytestmark = pytest.mark.bwrap

IS_ROOT = os.geteuid() == 0


def ran(result) -> tuple[int, str]:  # type: ignore[no-untyped-def]
    """(exit status, output) of a probe's `run` step."""
    assert result.ok, result.error
    status, _, output = result.text.partition("|")
    return int(status), output


@pytest.fixture
def git_project(project: Path, agent_box_home: Path) -> ProjectPaths:
    """The example project as a real git repository, with probe roles of every scope shape."""
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    subprocess.run(["git", "-C", str(project), "config", "user.email", "t@example.invalid"], check=True)
    subprocess.run(["git", "-C", str(project), "config", "user.name", "t"], check=True)
    (project / "README.md").write_text("readme\n")
    (project / "src").mkdir()
    subprocess.run(["git", "-C", str(project), "add", "README.md"], check=True)
    subprocess.run(["git", "-C", str(project), "commit", "-qm", "init"], check=True)
    make_profile(agent_box_home, "probe")
    return write_crew(project, {
        "all": {"profile": "probe"},
        "star2": {"profile": "probe", "writes": ["**"]},
        "star": {"profile": "probe", "writes": ["*"]},
        "md": {"profile": "probe", "writes": ["*.md"]},
        "readme": {"profile": "probe", "writes": ["README.md"]},
        "src": {"profile": "probe", "writes": ["src/**"]},
        "reviewer": {"profile": "probe", "writes": []},
    })


# ----------------------------------------------------------------------------- 1. capabilities


async def test_no_capability_survives_and_mounts_cannot_be_undone(git_project: ProjectPaths,
                                                                  agent_box_home: Path) -> None:
    status, caps = ran(await ask(git_project, "all", "run grep -E '^Cap(Prm|Eff)' /proc/self/status"))
    assert status == 0 and caps.split() == ["CapPrm:", "0000000000000000", "CapEff:", "0000000000000000"], caps
    home = Path.home()
    for attack in (f"umount -l {home}", f"umount -l {agent_box_home}", "mount -o remount,rw /",
                   f"mount -o remount,rw,bind {git_project.box}", "mount -t tmpfs none /mnt",
                   "unshare -m true", "unshare -U true", "unshare -r true"):
        status, output = ran(await ask(git_project, "all", f"run {attack}"))
        assert status != 0, (attack, output)
    # nothing was revealed: the agent still sees an empty home and cannot write crew.yaml
    crew = git_project.crew_file.read_text()
    await ask(git_project, "all", f"run umount -l {git_project.box}; echo x > {git_project.crew_file}")
    assert git_project.crew_file.read_text() == crew


async def test_the_seccomp_filter_refuses_what_undoes_a_sandbox(git_project: ProjectPaths) -> None:
    keyctl = seccomp._ARCHES[__import__("platform").machine()].numbers["keyctl"]
    probe = ("import ctypes,errno;l=ctypes.CDLL(None,use_errno=True);"
             f"r=[l.unshare(0x10000000),l.setns(0,0),l.syscall({keyctl},0,0,0,0,0),l.ptrace(16,1,0,0)];"
             "print(r,ctypes.get_errno()==errno.EPERM)")
    status, output = ran(await ask(git_project, "all", f'run {sys.executable} -c "{probe}"'))
    assert status == 0 and output.strip() == "[-1, -1, -1, -1] True", output
    status, output = ran(await ask(git_project, "all", "run grep Seccomp: /proc/self/status"))
    assert output.split() == ["Seccomp:", "2"], output


def test_the_filter_has_a_table_for_this_machine() -> None:
    assert seccomp.supported()
    assert len(seccomp.program()) % 8 == 0 and len(seccomp.program()) > 8 * 30


# ----------------------------------------------------------------------------- 2. metadata


GIT_TARGETS = (".git/hooks/pre-commit", ".git/config", ".git/HEAD", ".git/refs/heads/evil", ".git/info/attributes")


@pytest.mark.parametrize("role", ["all", "star2", "star", "md", "readme", "src"])
async def test_no_role_writes_git_metadata_whatever_its_scope(git_project: ProjectPaths, role: str) -> None:
    root = git_project.root
    before = {t: (root / t).read_bytes() if (root / t).exists() else None for t in GIT_TARGETS}
    for target in GIT_TARGETS:
        await ask(git_project, role, f"run printf '#!/bin/sh\\ntouch /tmp/pwned' > {root / target}")
    after = {t: (root / t).read_bytes() if (root / t).exists() else None for t in GIT_TARGETS}
    assert after == before
    git = subprocess.run(["git", "-C", str(root), "status", "--porcelain"], capture_output=True, text=True)
    assert git.returncode == 0


async def test_a_worktree_admin_dir_is_read_only_too(git_project: ProjectPaths, tmp_path: Path,
                                                     agent_box_home: Path) -> None:
    worktree = tmp_path / "wt"
    subprocess.run(["git", "-C", str(git_project.root), "worktree", "add", "-q", str(worktree)], check=True)
    import shutil

    shutil.copytree(git_project.box, worktree / ".agent-box", dirs_exist_ok=True)
    proj = ProjectPaths(worktree)
    admin = git_project.root / ".git" / "worktrees" / "wt"
    before = (admin / "HEAD").read_bytes()
    status, output = ran(await ask(proj, "all", f"run echo evil > {admin / 'HEAD'}; echo x > {worktree / '.git'}"))
    assert status != 0
    assert (admin / "HEAD").read_bytes() == before and (worktree / ".git").read_text().startswith("gitdir:")


# ----------------------------------------------------------------------------- 3. host sockets


def _socket_dirs() -> list[Path]:
    """Host dirs this user can make a socket in, whose sockets an agent must not reach."""
    candidates = [Path("/run"), Path("/var/run"), Path("/dev/shm"), Path(f"/run/user/{os.getuid()}")]
    return [d for d in dict.fromkeys(c.resolve() for c in candidates) if d.is_dir() and os.access(d, os.W_OK)]


@contextlib.contextmanager
def listening(path: Path | bytes) -> Iterator[socket.socket]:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path) if isinstance(path, Path) else path)
    server.listen(1)
    try:
        yield server
    finally:
        server.close()
        if isinstance(path, Path):
            with contextlib.suppress(OSError):
                path.unlink()


@pytest.mark.parametrize("directory", _socket_dirs(), ids=str)
async def test_host_unix_sockets_are_unreachable(git_project: ProjectPaths, directory: Path) -> None:
    path = directory / f"agentbox-test-{uuid.uuid4().hex[:8]}.sock"
    connect = (f"{sys.executable} -c \"import socket;s=socket.socket(socket.AF_UNIX);"
               f"s.connect('{path}');print('connected')\"")
    with listening(path):
        status, output = ran(await ask(git_project, "all", f"run {connect}"))
    assert status != 0 and "connected" not in output


async def test_abstract_sockets_are_unreachable_without_network(git_project: ProjectPaths) -> None:
    name = f"agentbox-test-{uuid.uuid4().hex[:8]}"
    connect = (f"{sys.executable} -c \"import socket;s=socket.socket(socket.AF_UNIX);"
               f"s.connect(b'\\\\0{name}');print('connected')\"")
    with listening(b"\0" + name.encode()):
        status, output = ran(await ask(git_project, "all", f"run {connect}"))
    assert status != 0 and "connected" not in output


# ----------------------------------------------------------------------------- 4. run state


async def test_run_and_session_state_is_invisible_and_unwritable(git_project: ProjectPaths) -> None:
    runs = git_project.box / "runs" / "r-1"
    runs.mkdir(parents=True)
    (runs / "run.json").write_text("{}")
    (runs / "events.jsonl.lock").write_text("")
    status, output = ran(await ask(git_project, "all",
                                   f"run ls -A {git_project.box / 'runs'}; echo x > {runs / 'run.json'}"))
    assert "Directory nonexistent" in output and "r-1\n" not in output, output  # hidden: nothing to lock or read
    assert (runs / "run.json").read_text() == "{}"
    await ask(git_project, "reviewer", "run true")  # another role's session on disk
    status, output = ran(await ask(git_project, "all", f"run ls -A {git_project.box / 'sessions'}; "
                                                       f"find {git_project.box / 'sessions'} -type f"))
    # only the path to its own turn's scratch dir: other roles' transcripts are not readable
    listing, *files = output.split()
    assert listing == "all" and all(".scratch/" in f and "/sessions/all/" in f for f in files), output


@pytest.mark.parametrize("scope", [".agent-box/runs/**", ".agent-box/**", ".git/**", "../**", "/tmp/**", ""])
async def test_scopes_into_metadata_or_out_of_the_project_are_refused(git_project: ProjectPaths,
                                                                       agent_box_home: Path, scope: str) -> None:
    from agentbox.core.agents import resolve as services

    agent = services.role_agent(git_project, "all")
    hostile = type(agent)(**{**agent.__dict__, "writes": (scope,)})
    with pytest.raises((UsageError, SandboxError)):
        await __import__("agentbox.core.agents.invoke", fromlist=["invoke"]).invoke(hostile, "run true")


# ----------------------------------------------------------------------------- 5. exact scopes


async def test_a_planted_symlink_gives_no_later_scope_a_way_out(git_project: ProjectPaths,
                                                                 agent_box_home: Path) -> None:
    root = git_project.root
    status, _ = ran(await ask(git_project, "src", f"run ln -s ../.git {root / 'src' / 'g2'}"))
    assert status == 0 and (root / "src" / "g2").is_symlink()
    write_crew(root, {"hook": {"profile": "probe", "writes": ["src/g2/**"]},
                      "file": {"profile": "probe", "writes": ["src/g2/hooks/pre-commit"]}})
    for role in ("hook", "file"):
        with pytest.raises(SandboxError, match="symlink"):
            await ask(git_project, role, f"write {root}/src/g2/hooks/pre-commit")
    assert not (root / ".git" / "hooks" / "pre-commit").exists()


async def test_a_literal_scope_writes_that_file_only(git_project: ProjectPaths) -> None:
    root = git_project.root
    status, _ = ran(await ask(git_project, "readme",
                              f"run echo new > {root}/README.md && echo 'import os' > {root}/conftest.py && "
                              f"mkdir -p {root}/.github/workflows && echo 'on: push' > {root}/.github/workflows/x.yml"))
    assert status == 0  # it happened in the turn's private view...
    assert (root / "README.md").read_text() == "new\n"  # ...and only the scoped file came back
    assert not (root / "conftest.py").exists() and not (root / ".github").exists()


async def test_a_pattern_scope_writes_matching_files_only(git_project: ProjectPaths) -> None:
    root = git_project.root
    ran(await ask(git_project, "md", f"run echo a > {root}/NOTES.md; echo b > {root}/setup.py; "
                                     f"mkdir {root}/docs; echo c > {root}/docs/x.md"))
    assert (root / "NOTES.md").read_text() == "a\n"
    assert not (root / "setup.py").exists() and not (root / "docs").exists()


# ----------------------------------------------------------------------------- 6. the terminal


def test_an_interactive_sandbox_cannot_push_keys_into_the_terminal(tmp_path: Path) -> None:
    """TIOCSTI on the controlling terminal is refused (attach/launch keep the user's terminal)."""
    import pty

    project = tmp_path / "p"
    project.mkdir()
    spec = sandbox.SandboxSpec(project_root=project, writable=(), protected=(), extra_rw=(), homes=(), hidden=(),
                               ro_binds=tuple(sandbox.binds_needed(sandbox.python_roots(), [])),
                               interactive=True, env={"PATH": "/usr/bin:/bin"})
    inject = ("import fcntl,termios\ntry:\n fcntl.ioctl(0, termios.TIOCSTI, b'x'); print('INJECTED')\n"
              "except OSError as e: print('refused', e.errno)")
    argv = sandbox.bwrap_argv(spec, [sys.executable, "-c", inject], sandbox.require_bwrap())
    with sandbox.launch(argv) as launched:
        pid, fd = pty.fork()
        if pid == 0:  # the child: the pty is its controlling terminal, as for `agentbox attach`
            os.execvp(launched.argv[0], launched.argv)
        output = b""
        with contextlib.suppress(OSError):
            while chunk := os.read(fd, 1024):
                output += chunk
        os.waitpid(pid, 0)
    assert b"refused 1" in output and b"INJECTED" not in output, output


# ----------------------------------------------------------------------------- 8. command lines


async def test_keys_and_prompts_never_appear_on_a_command_line(project: Path, agent_box_home: Path) -> None:
    secret, prompt_word = f"sk-{uuid.uuid4().hex}", f"PROMPT{uuid.uuid4().hex[:10]}"
    make_profile(agent_box_home, "keyed", env={"API_KEY": secret})
    proj = write_crew(project, {"k": {"profile": "keyed"}})
    seen: list[str] = []

    async def watch() -> None:
        while True:
            for entry in Path("/proc").iterdir():
                with contextlib.suppress(OSError):
                    line = (entry / "cmdline").read_bytes()
                    if line.startswith(b"/bin/sh\0-c\0"):
                        continue  # the probe's own `run` child: the agent showing its command, not agentbox
                    if secret.encode() in line or prompt_word.encode() in line:
                        seen.append(line.decode(errors="replace"))
            await asyncio.sleep(0.02)

    watcher = asyncio.ensure_future(watch())
    try:
        status, output = ran(await ask(proj, "k", f"run sleep 1; echo $API_KEY # {prompt_word}"))
    finally:
        watcher.cancel()
    assert output.strip() == secret  # the key reached the agent...
    assert seen == []  # ...through no command line any local user can read


# ----------------------------------------------------------------------------- 9. host follows no link


async def test_a_turn_never_reuses_a_scratch_dir_an_agent_could_have_prepared(git_project: ProjectPaths,
                                                                               tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    # the probe learns its scratch dir from its open files and plants links there for "the next turn"
    plant = (f"for d in $(ls -d {git_project.box}/sessions/*/*/turn-*.scratch 2>/dev/null) /proc/self/cwd; do "
             f"ln -s {victim} $d/scenario.json 2>/dev/null; done; true")
    first = await ask(git_project, "all", f"run {plant}")
    second = await ask(git_project, "all", "run true")
    assert first.ok and second.ok
    assert victim.read_text() == "precious"
    logs = Path(first.log_path or "").parent
    assert not list(logs.glob("turn-*.scratch")), "scratch dirs are removed after their turn"


async def test_a_profile_file_swapped_for_a_symlink_is_refused(project: Path, agent_box_home: Path,
                                                               tmp_path: Path) -> None:
    from agentbox.core.config.profiles import resolve

    make_profile(agent_box_home, "probe")
    proj = write_crew(project, {"w": {"profile": "probe"}})
    assert (await ask(proj, "w", "run true")).ok
    info = resolve("probe")
    target = tmp_path / "outside"
    target.mkdir()
    config = info.config_dir
    import shutil

    shutil.rmtree(config)
    config.symlink_to(target)  # what an agent with write access to the profile could leave
    with pytest.raises(SandboxError, match="symlink"):
        await ask(proj, "w", "run true")
    assert list(target.iterdir()) == []


# ----------------------------------------------------------------------------- 11. resources


@pytest.mark.parametrize(("directory", "megabytes"), [("/tmp", 1100), ("/var/tmp", 300), ("/dev/shm", 80)])
async def test_private_ram_dirs_are_size_bounded(git_project: ProjectPaths, directory: str, megabytes: int) -> None:
    status, output = ran(await ask(git_project, "reviewer", f"run fallocate -l {megabytes}M {directory}/fill "
                                                            f"|| head -c {megabytes}M /dev/zero > {directory}/fill"))
    assert status != 0 and "No space left" in output, output


async def test_dev_is_read_only_and_host_secrets_are_masked(git_project: ProjectPaths) -> None:
    status, output = ran(await ask(git_project, "all", "run touch /dev/evil"))
    assert status != 0
    status, output = ran(await ask(git_project, "all", "run cat /etc/shadow /etc/gshadow; touch /run/x"))
    assert "root:" not in output, output  # masked, for root too
    assert "'/run/x': Read-only file system" in output, output


def test_home_binds_are_checked_not_followed(tmp_path: Path) -> None:
    """A config bind whose source an agent swapped for a link is refused before bwrap follows it."""
    from agentbox.core.sandbox.tool_homes import check_bind_source

    state = tmp_path / "profile"
    (state / "dot-tool").mkdir(parents=True)
    check_bind_source(state / "dot-tool", state)
    (state / "dot-tool.json").symlink_to("/etc/passwd")
    with pytest.raises(SandboxError):
        check_bind_source(state / "dot-tool.json", state)


# ----------------------------------------------------------------------------- 7. shared profile state


async def test_no_turn_plants_what_later_turns_of_the_profile_load(git_project: ProjectPaths,
                                                                    agent_box_home: Path) -> None:
    """The reviewer may not leave bytecode (or settings, hooks, plugins) that every later turn runs."""
    import importlib.util

    from agentbox.core.runtimes.scripted import PROGRAM

    assert (await ask(git_project, "all", "run true")).ok  # agentbox compiled the agent on the host
    compiled = Path(importlib.util.cache_from_source(str(PROGRAM)))
    before = compiled.read_bytes() if compiled.exists() else None
    status, output = ran(await ask(git_project, "reviewer", f"run echo evil > {compiled}"))
    # read-only (or, where the user could not write the cache, not even there to be replaced)
    assert status != 0 and ("Read-only file system" in output or "Directory nonexistent" in output), output
    assert (compiled.read_bytes() if compiled.exists() else None) == before
    # the profile's own dir is session state, loaded by no later turn: a pycache planted there is inert
    ran(await ask(git_project, "reviewer", "run mkdir -p $SCRIPTED_HOME/.pycache && echo x > "
                                           "$SCRIPTED_HOME/.pycache/scripted_agent.cpython-311.pyc"))
    assert (await ask(git_project, "all", "run true")).ok  # the profile still works for everyone


def test_doctor_reports_what_the_sandbox_enforces_here() -> None:
    from agentbox.core.admin.doctor import check_sandbox

    check = check_sandbox()
    assert check.status == "ok", check
    for fact in ("no capabilities", "seccomp filter", "host sockets hidden", "no new namespaces"):
        assert fact in check.detail
    assert ("as root" in check.detail) is IS_ROOT
