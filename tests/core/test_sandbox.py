"""The bubblewrap sandbox: the pure argv builder, its helpers, and real bwrap through invoke().

The pure half checks `bwrap_argv` as a list (mount order decides what wins, so order is
the contract). The `bwrap` half runs the scripted agent through `invoke()` in a real
sandbox and probes it from the inside: writes in and out of scope, canaries in the home,
in other profiles and in the host's /tmp, the network, and the environment.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentbox.core.agents import resolve as services
from agentbox.core.agents.invoke import invoke
from agentbox.core.errors import SandboxError
from agentbox.core.paths import ProjectPaths
from agentbox.core.runtimes.base import HomeBind
from agentbox.core.sandbox import bwrap as sandbox
from agentbox.core.sandbox.bwrap import SandboxSpec, bwrap_argv
from tests.sandbox_support import ask, make_profile, write_crew

# ----------------------------------------------------------------------------- pure argv

ROOT = Path("/work/proj")


def spec(**overrides: Any) -> SandboxSpec:
    """A spec with every kind of mount, so order can be checked across all of them."""
    fields: dict[str, Any] = {
        "project_root": ROOT,
        "writable": (ROOT / "src", ROOT / "tests"),
        "protected": (ROOT / ".agent-box",),
        "extra_rw": (ROOT / ".agent-box" / "runs" / "r1" / "artifacts",),
        "homes": (HomeBind(Path("/abh/profiles/p/dot-claude"), Path("/home/u/.claude")),
                  HomeBind(Path("/abh/profiles/p/dot-claude.json"), Path("/home/u/.claude.json"), is_file=True)),
        "hidden": (Path("/abh"), Path("/home/u")),
        "ro_binds": (Path("/home/u/.local/share/tool"), Path("/home/u/.venv")),
        "env": {"PATH": "/usr/bin:/bin", "HOME": "/home/u"},
    }
    fields.update(overrides)
    return SandboxSpec(**fields)


def index_of(argv: list[str], *triple: str) -> int:
    """Position of a mount option with its arguments (e.g. `--bind SRC DST`)."""
    for i in range(len(argv) - len(triple) + 1):
        if tuple(argv[i : i + len(triple)]) == triple:
            return i
    raise AssertionError(f"{triple} not in {argv}")


def options(argv: list[str]) -> list[str]:
    """The bwrap part of the argv (before `--`)."""
    return argv[: argv.index("--")]


def test_argv_starts_with_bwrap_and_ends_with_the_command() -> None:
    argv = bwrap_argv(spec(), ["tool", "-p", "hi -- there"], bwrap="/usr/bin/bwrap")
    assert argv[0] == "/usr/bin/bwrap"
    assert argv[argv.index("--") :] == ["--", "tool", "-p", "hi -- there"]
    assert argv[:4] == ["/usr/bin/bwrap", "--ro-bind", "/", "/"]
    for fresh in (("--dev", "/dev"), ("--proc", "/proc"), ("--tmpfs", "/tmp")):
        index_of(argv, *fresh)
    for flag in ("--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent"):
        assert flag in options(argv)
    assert index_of(argv, "--chdir", str(ROOT)) > index_of(argv, "--ro-bind", str(ROOT), str(ROOT))


def test_mount_order_hidden_then_rebinds_then_project_then_scopes_then_protected_then_artifacts_then_homes() -> None:
    # a whole-project writer with a nested scope: every kind of mount appears
    argv = bwrap_argv(spec(writable=(ROOT / "src", ROOT)), ["tool"])
    private_tmp = index_of(argv, "--tmpfs", "/tmp")
    hidden = [index_of(argv, "--tmpfs", p) for p in ("/abh", "/home/u")]
    rebinds = [index_of(argv, "--ro-bind", p, p) for p in ("/home/u/.local/share/tool", "/home/u/.venv")]
    project = index_of(argv, "--ro-bind", str(ROOT), str(ROOT))
    scopes = [index_of(argv, "--bind", str(p), str(p)) for p in (ROOT, ROOT / "src")]
    box = str(ROOT / ".agent-box")
    protected = index_of(argv, "--ro-bind", box, box)
    artifacts = str(ROOT / ".agent-box" / "runs" / "r1" / "artifacts")
    artifact = index_of(argv, "--bind", artifacts, artifacts)
    homes = [index_of(argv, "--bind", "/abh/profiles/p/dot-claude", "/home/u/.claude"),
             index_of(argv, "--bind", "/abh/profiles/p/dot-claude.json", "/home/u/.claude.json")]
    assert private_tmp < min(hidden)
    assert max(hidden) < min(rebinds)
    assert max(rebinds) < project < min(scopes)
    assert max(scopes) < protected < artifact < min(homes)
    last_mount = max(i for i, a in enumerate(options(argv)) if a in ("--bind", "--ro-bind", "--tmpfs"))
    assert last_mount == max(homes), "tool homes are the last mounts"


def test_nested_mounts_come_parent_first() -> None:
    deep, shallow = Path("/home/u/a/b/c"), Path("/home/u/a")
    argv = bwrap_argv(spec(hidden=(Path("/home/u/x/y"), Path("/home/u")), ro_binds=(deep, shallow),
                           writable=(ROOT / "src" / "deep", ROOT / "src")), ["t"])
    assert index_of(argv, "--tmpfs", "/home/u") < index_of(argv, "--tmpfs", "/home/u/x/y")
    assert index_of(argv, "--ro-bind", str(shallow), str(shallow)) < index_of(argv, "--ro-bind", str(deep), str(deep))
    src, deep_src = str(ROOT / "src"), str(ROOT / "src" / "deep")
    assert index_of(argv, "--bind", src, src) < index_of(argv, "--bind", deep_src, deep_src)


def test_whole_project_writer_gets_agent_box_back_read_only() -> None:
    argv = bwrap_argv(spec(writable=(ROOT,), extra_rw=()), ["t"])
    box = str(ROOT / ".agent-box")
    assert index_of(argv, "--bind", str(ROOT), str(ROOT)) < index_of(argv, "--ro-bind", box, box)


def test_read_only_role_binds_nothing_of_the_project_writable() -> None:
    argv = bwrap_argv(spec(writable=(), extra_rw=()), ["t"])
    binds = [argv[i + 1] for i, a in enumerate(argv) if a == "--bind"]
    assert not any(Path(b).is_relative_to(ROOT) for b in binds), binds
    # metadata is bound read-only whatever the scopes: no order of mounts can open it
    box = str(ROOT / ".agent-box")
    assert index_of(argv, "--ro-bind", str(ROOT), str(ROOT)) < index_of(argv, "--ro-bind", box, box)


def test_hidden_dirs_inside_the_project_are_hidden_again_after_the_project_binds() -> None:
    home = Path("/home/u")
    box_home = home / ".agent-box"
    scenario_dir = box_home / "profiles" / "p"
    argv = bwrap_argv(spec(project_root=home, writable=(home,), protected=(), extra_rw=(box_home / "sessions" / "s",),
                           hidden=(home, box_home), ro_binds=(scenario_dir, home / ".pyenv")), ["t"])
    project_rw = index_of(argv, "--bind", str(home), str(home))
    tmpfs = [i for i, a in enumerate(argv) if a == "--tmpfs" and argv[i + 1] == str(box_home)]
    assert len(tmpfs) == 1 and project_rw < tmpfs[0]  # hidden after the project bind that would uncover it
    rebinds = [i for i, a in enumerate(argv) if a == "--ro-bind" and argv[i + 1] == str(scenario_dir)]
    assert len(rebinds) == 2 and rebinds[1] > tmpfs[0]  # and what it needs is bound back in it
    pyenv = [i for i, a in enumerate(argv) if a == "--ro-bind" and argv[i + 1] == str(home / ".pyenv")]
    assert len(pyenv) == 1  # not under a re-hidden dir: bound once
    scratch = str(box_home / "sessions" / "s")
    assert index_of(argv, "--bind", scratch, scratch) > tmpfs[0]
    # the project itself is never hidden, even though it is the (hidden) home
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--tmpfs"].count(str(home)) == 1


@pytest.mark.parametrize("network", [True, False])
def test_unshare_net_iff_network_is_off(network: bool) -> None:
    assert ("--unshare-net" in bwrap_argv(spec(network=network), ["t"])) is (not network)


@pytest.mark.parametrize("interactive", [True, False])
def test_new_session_iff_not_interactive(interactive: bool) -> None:
    assert ("--new-session" in bwrap_argv(spec(interactive=interactive), ["t"])) is (not interactive)


def test_environment_is_cleared_and_only_the_given_env_is_set() -> None:
    env = {"PATH": "/usr/bin", "HOME": "/home/u", "X_ONE": "a b", "EMPTY": ""}
    argv = bwrap_argv(spec(env=env), ["t"])
    opts = options(argv)
    assert "--clearenv" in opts
    set_env = {opts[i + 1]: opts[i + 2] for i, a in enumerate(opts) if a == "--setenv"}
    assert set_env == env
    assert opts.index("--clearenv") < opts.index("--setenv")
    assert "--unsetenv" not in opts


def test_rw_binds_and_cwd_are_honoured() -> None:
    argv = bwrap_argv(spec(rw_binds=(Path("/srv/cache"),), cwd=ROOT / "src"), ["t"])
    index_of(argv, "--bind", "/srv/cache", "/srv/cache")
    index_of(argv, "--chdir", str(ROOT / "src"))


def test_argv_builder_is_pure() -> None:
    first = bwrap_argv(spec(), ["t"])
    assert bwrap_argv(spec(), ["t"]) == first
    assert not Path("/work/proj").exists()  # it never touched the filesystem to build that


# ----------------------------------------------------------------------------- install roots


def test_install_roots_of_the_real_venv_python() -> None:
    venv_python = Path(sys.prefix) / "bin" / "python"
    if not venv_python.exists():
        pytest.skip("not running from a venv")
    roots = sandbox.install_roots(venv_python)
    assert Path(sys.prefix).absolute() in roots
    real = venv_python.resolve()
    assert any(real.is_relative_to(root) for root in roots), (real, roots)


def test_install_roots_of_a_copied_venv_python_follow_pyvenv_cfg(tmp_path: Path) -> None:
    base, venv = tmp_path / "base", tmp_path / "venv"
    (base / "bin").mkdir(parents=True)
    (base / "bin" / "python").write_bytes(b"\x7fELF")
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_bytes(b"\x7fELF")
    (venv / "pyvenv.cfg").write_text(f"home = {base / 'bin'}\ninclude-system-site-packages = false\n")
    assert {venv, base} <= sandbox.install_roots(venv / "bin" / "python")


def test_install_roots_of_an_npm_package(tmp_path: Path) -> None:
    node_prefix, npm_prefix = tmp_path / "node", tmp_path / "npm"
    (node_prefix / "bin").mkdir(parents=True)
    (node_prefix / "bin" / "node").write_bytes(b"\x7fELF")
    package = npm_prefix / "lib" / "node_modules" / "@openai" / "codex" / "bin"
    package.mkdir(parents=True)
    (package / "codex.js").write_text(f"#!{node_prefix / 'bin' / 'node'}\nconsole.log(1)\n")
    (npm_prefix / "bin").mkdir()
    (npm_prefix / "bin" / "codex").symlink_to(package / "codex.js")
    roots = sandbox.install_roots(npm_prefix / "bin" / "codex")
    assert npm_prefix in roots and node_prefix in roots
    assert not any(r.is_relative_to(npm_prefix / "lib" / "node_modules") for r in roots), roots


@pytest.mark.parametrize("shebang", ["#!{interp}", "#!/usr/bin/env {name}", "#!/usr/bin/env -S {name} -u",
                                     "#! /usr/bin/env FOO=1 {name} --flag"])
def test_install_roots_of_a_shebang_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shebang: str) -> None:
    interp_prefix, tool_prefix = tmp_path / "interp", tmp_path / "tool"
    (interp_prefix / "bin").mkdir(parents=True)
    interp = interp_prefix / "bin" / "myinterp"
    interp.write_text("#!/bin/sh\n")
    interp.chmod(0o755)
    monkeypatch.setenv("PATH", f"{interp_prefix / 'bin'}:/usr/bin:/bin")
    (tool_prefix / "bin").mkdir(parents=True)
    script = tool_prefix / "bin" / "mytool"
    script.write_text(shebang.format(interp=interp, name="myinterp") + "\nrun()\n")
    roots = sandbox.install_roots(script)
    assert tool_prefix in roots and interp_prefix in roots, roots


def test_binds_needed_keeps_only_hidden_or_tmp_paths_outermost_first(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for d in (home / "a" / "b", home / "c", tmp_path / "visible"):
        d.mkdir(parents=True)
    paths = [home / "a" / "b", home / "a", home / "c", home / "missing", Path("/usr"), tmp_path / "visible"]
    needed = sandbox.binds_needed(paths, [home])
    # tmp_path lives under the private /tmp, so `visible` must be bound back too
    assert set(needed) == {home / "a", home / "c", tmp_path / "visible"}
    assert Path("/usr") not in needed


# ----------------------------------------------------------------------------- real bwrap

@pytest.fixture
def crew(project: Path, agent_box_home: Path) -> ProjectPaths:
    """A crew of probe agents: a scoped builder, a whole-project writer, a reviewer."""
    make_profile(agent_box_home, "probe")
    return write_crew(project, {
        "builder": {"profile": "probe", "writes": ["src/**"]},
        "writer": {"profile": "probe"},
        "reviewer": {"profile": "probe", "writes": []},
    })


@pytest.mark.bwrap
async def test_writes_inside_the_scope_succeed_and_outside_fail(crew: ProjectPaths) -> None:
    root = crew.root
    ok = await ask(crew, "builder", f"write {root}/src/app.py")
    assert ok.ok and ok.sandboxed, ok
    assert (root / "src" / "app.py").read_text() == "written by builder"
    for target in (root / "tests" / "x.py", root / "top.txt"):
        refused = await ask(crew, "builder", f"write {target}")
        assert (refused.status, refused.error_kind) == ("error", "tool_error"), refused
        assert "Read-only file system" in (refused.error or ""), refused.error
        assert not target.exists()


@pytest.mark.bwrap
async def test_a_literal_scope_opens_that_file_and_changes_nothing_beside_it(project: Path, agent_box_home: Path) -> None:
    """A role allowed only `CHANGES.md` (not there yet) and `README.md` writes them, even
    atomically (temp file + rename, like claude's Write); what exists beside them stays as it is."""
    make_profile(agent_box_home, "probe")
    proj = write_crew(project, {"scribe": {"profile": "probe", "writes": ["CHANGES.md", "README.md", "notes/TODO.md"]}})
    root = proj.root
    (root / "README.md").write_text("old")
    (root / "setup.py").write_text("keep")
    written = await ask(proj, "scribe", f"write {root}/CHANGES.md")
    assert written.ok and (root / "CHANGES.md").read_text() == "written by scribe", written
    swap = f"echo new > {root}/README.md.tmp && mv {root}/README.md.tmp {root}/README.md && echo swapped"
    swapped = await ask(proj, "scribe", f"run {swap}")
    assert swapped.ok and "swapped" in swapped.text and (root / "README.md").read_text() == "new\n", swapped
    for command in (f"echo x > {root}/setup.py", f"rm {root}/setup.py", f"echo x > {root}/.agent-box/crew.yaml"):
        refused = await ask(proj, "scribe", f"run {command}")
        assert refused.ok and not refused.text.startswith("0|"), (command, refused)
    assert (root / "setup.py").read_text() == "keep"
    # a new file beside a literal scope lands only in the turn's private view, never in the project
    for name in ("other.md", "../conftest.py"):
        planted = await ask(proj, "scribe", f"run echo x > {root}/notes/{name}")
        assert planted.ok, planted
    assert not (root / "conftest.py").exists()
    assert not (root / "notes").exists(), "the unwritten scope's made dir is taken back"


@pytest.mark.bwrap
async def test_nobody_writes_the_crew_file_not_even_a_whole_project_writer(crew: ProjectPaths) -> None:
    before = crew.crew_file.read_text()
    assert (await ask(crew, "writer", f"write {crew.root}/anywhere/file.txt")).ok
    refused = await ask(crew, "writer", f"write {crew.crew_file}")
    assert refused.error_kind == "tool_error" and "Read-only" in (refused.error or "")
    assert crew.crew_file.read_text() == before


@pytest.mark.bwrap
async def test_reviewer_cannot_write_the_project(crew: ProjectPaths) -> None:
    for target in (crew.root / "src" / "x.py", crew.root / "x.txt"):
        result = await ask(crew, "reviewer", f"write {target}")
        assert result.error_kind == "tool_error", result
        assert not target.exists()
    readable = await ask(crew, "reviewer", f"read {crew.crew_file}")
    assert "roles" in json.loads(readable.text)[str(crew.crew_file)]


@pytest.fixture
def outside_tmp(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """A scratch dir outside the host /tmp (which the sandbox hides wholesale anyway).

    Canaries in a HOME or AGENT_BOX_HOME under /tmp would prove nothing about hiding
    those two, so they live in pytest's cache dir in the repository instead.
    """
    cache = getattr(request.config, "cache", None)
    if cache is None:
        yield tmp_path
        return
    directory = Path(cache.mkdir("sandbox-canaries")) / uuid.uuid4().hex
    directory.mkdir()
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.bwrap
async def test_home_and_other_profiles_are_invisible(project: Path, outside_tmp: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    home, box_home = outside_tmp / "home", outside_tmp / "agent-box-home"
    (home / ".ssh").mkdir(parents=True)
    ssh_canary = home / ".ssh" / "id_rsa"
    ssh_canary.write_text("SSH-CANARY")
    (home / ".claude").mkdir()
    (home / ".claude" / "settings.json").write_text('{"CANARY": true}')
    token = box_home / "profiles" / "other" / "dot-claude" / ".credentials.json"
    token.parent.mkdir(parents=True)
    token.write_text('{"token": "TOKEN-CANARY"}')
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("AGENT_BOX_HOME", str(box_home))
    make_profile(box_home, "probe")
    proj = write_crew(project, {"writer": {"profile": "probe"}})
    for canary in (ssh_canary, home / ".claude" / "settings.json", token):
        result = await ask(proj, "writer", f"read {canary}")
        assert result.ok, result.error
        seen = json.loads(result.text)[str(canary)]
        assert seen.startswith("ERROR:") and "CANARY" not in result.text, seen
    in_home = await ask(proj, "writer", f"run ls -A {home}")
    assert in_home.text.split("|")[1].split() == [".scripted"]  # only the profile's tool home
    in_profiles = await ask(proj, "writer", f"run ls -A {box_home / 'profiles'}")
    assert in_profiles.text.split("|")[1].split() == ["probe"]  # only its own profile
    home_var = await ask(proj, "writer", "run echo $HOME")
    assert home_var.text == f"0|{home}"  # HOME inside points at the emptied home
    own = await ask(proj, "writer", f"read {box_home / 'profiles' / 'probe' / 'scenario.json'}")
    assert "rules" in own.text  # its own profile is bound back (read-only) for the scenario


def home_as_project(outside_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """HOME = the working dir of `profile:probe` (agent-box v1 users launch from ~)."""
    home = outside_tmp / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("SSH-CANARY")
    box_home = home / ".agent-box"
    token = box_home / "profiles" / "other" / "dot-claude" / ".credentials.json"
    token.parent.mkdir(parents=True)
    token.write_text('{"token": "TOKEN-CANARY"}')
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("AGENT_BOX_HOME", str(box_home))
    make_profile(box_home, "probe")
    return home, token


async def test_working_in_the_home_dir_is_refused(outside_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the home as the project, ~/.ssh and other profiles would be part of the project bind."""
    home, token = home_as_project(outside_tmp, monkeypatch)
    for cwd in (home, home.parent):
        with pytest.raises(SandboxError, match="contains your home directory"):
            await invoke(services.profile_agent("probe", cwd, None), f"read {token}")
    assert not list((home / ".agent-box" / "sessions").glob("*/*.turns.jsonl"))


@pytest.mark.bwrap
async def test_host_tmp_is_private(crew: ProjectPaths, tmp_path: Path) -> None:
    host_tmp = tmp_path / "host-secret.txt"  # under the host /tmp, outside the project
    host_tmp.write_text("TMP-CANARY")
    result = await ask(crew, "writer", f"read {host_tmp}")
    assert json.loads(result.text)[str(host_tmp)].startswith("ERROR:"), result.text
    written = await ask(crew, "writer", "run echo inside > /tmp/from-agent && cat /tmp/from-agent")
    assert written.text == "0|inside"
    assert not Path("/tmp/from-agent").exists()


@pytest.mark.bwrap
async def test_network_off_has_no_route_and_host_shares_the_hosts(project: Path, agent_box_home: Path) -> None:
    make_profile(agent_box_home, "offline", sandbox_policy={"network": False})
    make_profile(agent_box_home, "online", sandbox_policy={"network": "host"})
    proj = write_crew(project, {"off": {"profile": "offline"}, "on": {"profile": "online"}})
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        port = listener.getsockname()[1]
        probe = (f"run {sys.executable} -I -c \"import socket; "
                 f"socket.create_connection(('127.0.0.1', {port}), timeout=3); print('CONNECTED')\" 2>&1")
        offline = await ask(proj, "off", probe)
        online = await ask(proj, "on", probe)
    assert offline.ok and "CONNECTED" not in offline.text and not offline.text.startswith("0|"), offline.text
    assert online.ok and online.text.startswith("0|") and "CONNECTED" in online.text, online.text


@pytest.mark.bwrap
async def test_sandbox_none_runs_unsandboxed_and_says_so(project: Path, agent_box_home: Path, tmp_path: Path) -> None:
    make_profile(agent_box_home, "bare", sandbox_policy="none")
    proj = write_crew(project, {"bare": {"profile": "bare"}})
    host_tmp = tmp_path / "visible.txt"
    host_tmp.write_text("HOST")
    result = await ask(proj, "bare", f"read {host_tmp}")
    assert result.ok and result.sandboxed is False
    assert json.loads(result.text)[str(host_tmp)] == "HOST"
    record = services.role_agent(proj, "bare").sessions.find(result.session_id)
    assert record.sandboxed is False


@pytest.mark.bwrap
@pytest.mark.parametrize("policy", [{"network": False}, "none"], ids=["bwrap", "none"])
async def test_environment_inside_is_cleared_but_profile_env_is_set(
        project: Path, agent_box_home: Path, monkeypatch: pytest.MonkeyPatch, policy: Any) -> None:
    monkeypatch.setenv("AGENTBOX_SECRET_CANARY", "leaked")
    make_profile(agent_box_home, "envy", sandbox_policy=policy, env={"PROFILE_VAR": "from-profile"})
    proj = write_crew(project, {"envy": {"profile": "envy", "env": {"ROLE_VAR": "from-role"}}})
    result = await ask(proj, "envy", "run echo ${AGENTBOX_SECRET_CANARY-unset} $PROFILE_VAR $ROLE_VAR $AGENTBOX_ROLE")
    assert result.ok, result
    assert result.text == "0|unset from-profile from-role envy"
    assert os.environ["AGENTBOX_SECRET_CANARY"] == "leaked"
