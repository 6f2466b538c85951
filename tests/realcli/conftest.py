"""Fixtures for driving the four real agent CLIs through `agentbox invoke`, in bwrap,
against the fake model server (tests/fakes/model_server.py; recipes in tests/fakes/NOTES.md).

* `model_server` (session): one FakeModelServer for the whole suite; `fake` (per test)
  is a view of it that only sees the requests made during the test and drops any
  scripted replies the test left unused.
* `host_home` (per test): the HOME of the agentbox subprocess, **outside /tmp** (the
  sandbox's private /tmp would hide anything under it anyway, which would prove
  nothing), holding a `~/.ssh/agentbox-canary` secret the agents must not read.
* `realcli_env` (per test): PATH with the pinned CLIs in `.tools/bin` first, HOME =
  `host_home`; both go to every `agentbox` subprocess (run_cli merges os.environ).
* `make_profile(tool, name)`: `agentbox profile add NAME --from TOOL`, then the tool's
  config pointing it at the fake server, written the way a user would.
* `Box`: `invoke(...)` / `sessions_show(...)` wrappers around the real entry point.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, TOOLS_BIN, CliResult, run_cli
from tests.fakes.model_server import FakeModelServer

#: Outer limit of one agent turn (the machine is small and shared; opencode ~3 s, hermes ~7 s).
TURN_TIMEOUT_S = 120
CANARY_NAME = "agentbox-canary"


# ----------------------------------------------------------------------------- fake server


@pytest.fixture(scope="session")
def model_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeModelServer]:
    """One fake model server (all three protocols) for the whole realcli suite."""
    log = tmp_path_factory.mktemp("fake-model-server") / "requests.jsonl"
    with FakeModelServer(log) as server:
        yield server


class FakeView:
    """The shared fake server seen from one test: requests since the test began."""

    def __init__(self, server: FakeModelServer) -> None:
        self.server = server
        self.port = server.port
        self.base_url = server.base_url
        self._mark = len(server.requests())

    def enqueue(self, *specs: dict[str, Any]) -> None:
        """Queue scripted replies (see the fake's docstring)."""
        self.server.enqueue(*specs)

    def pending(self) -> list[dict[str, Any]]:
        """Scripted replies not consumed yet."""
        return self.server.pending()

    def requests(self) -> list[dict[str, Any]]:
        """Every request logged since the test began."""
        return self.server.requests()[self._mark:]

    def model_requests(self, protocol: str | None = None) -> list[dict[str, Any]]:
        """The model calls logged since the test began (optionally of one protocol)."""
        return [r for r in self.requests() if r.get("protocol") in ("anthropic", "responses", "chat")
                and (protocol is None or r["protocol"] == protocol)]

    def mark(self) -> int:
        """Index into `requests()` for `since(mark)`."""
        return len(self.requests())

    def since(self, mark: int, protocol: str | None = None) -> list[dict[str, Any]]:
        """Model requests logged after `mark`."""
        return [r for r in self.requests()[mark:] if r.get("protocol") in ("anthropic", "responses", "chat")
                and (protocol is None or r["protocol"] == protocol)]

    def clear_script(self) -> None:
        """Drop scripted replies this test did not consume (the server is shared)."""
        with self.server._lock:
            self.server._script.clear()


@pytest.fixture
def fake(model_server: FakeModelServer) -> Iterator[FakeView]:
    """The shared fake server, scoped to this test's requests; leftovers dropped after."""
    view = FakeView(model_server)
    view.clear_script()
    yield view
    view.clear_script()


def body_text(request: dict[str, Any]) -> str:
    """A logged request's body as one JSON string (for substring assertions)."""
    return json.dumps(request.get("body"), ensure_ascii=False)


# ----------------------------------------------------------------------------- host home + env


@pytest.fixture
def host_home() -> Iterator[Path]:
    """A HOME outside /tmp with a `~/.ssh/agentbox-canary` secret; removed afterwards."""
    base = REPO / ".pytest_cache" / "realcli-homes"  # gitignored, and not under /tmp
    base.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="home-", dir=base))
    ssh = home / ".ssh"
    ssh.mkdir(mode=0o700)
    (ssh / CANARY_NAME).write_text(f"SECRET-{uuid.uuid4().hex}\n")
    try:
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)


def canary_secret(home: Path) -> str:
    """The canary's secret text."""
    return (home / ".ssh" / CANARY_NAME).read_text().strip()


@pytest.fixture
def realcli_env(host_home: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """PATH with the pinned CLIs first and HOME = host_home, for every agentbox subprocess."""
    path = f"{TOOLS_BIN}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"
    monkeypatch.setenv("PATH", path)
    monkeypatch.setenv("HOME", str(host_home))
    for var in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "HERMES_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME",
                "XDG_STATE_HOME", "XDG_CACHE_HOME", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    return {"PATH": path, "HOME": str(host_home)}


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A plain directory (no project) to run `profile:NAME` turns in."""
    path = tmp_path / "work"
    path.mkdir()
    return path


# ----------------------------------------------------------------------------- profiles


def _profile_dir(name: str) -> Path:
    return Path(os.environ["AGENT_BOX_HOME"]) / "profiles" / name


def profile_config(name: str, tool: str) -> Path:
    """The host dir of profile `name`'s tool config (bound over the tool's home in the sandbox)."""
    return _profile_dir(name) / f"dot-{tool}"


def _set_runtime_env(name: str, env: dict[str, str]) -> None:
    from agentbox.core.yaml_io import load_yaml, write_yaml

    path = _profile_dir(name) / "profile.yaml"
    document = load_yaml(path)
    document["runtime"]["env"] = dict(env)
    write_yaml(path, document)


def write_tool_config(tool: str, name: str, base_url: str) -> Path:
    """Point profile `name`'s tool at the fake server (config file and/or runtime env)."""
    directory = _profile_dir(name)
    if tool == "claude":
        _set_runtime_env(name, {"ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": "fake-key"})
        return directory / "dot-claude"
    if tool == "codex":
        config = directory / "dot-codex"
        config.mkdir(exist_ok=True)
        (config / "config.toml").write_text(
            'model = "fake-model"\n'
            'model_provider = "fake"\n\n'
            "[model_providers.fake]\n"
            'name = "Fake local server"\n'
            f'base_url = "{base_url}/v1"\n'
            'env_key = "FAKE_API_KEY"\n'
            'wire_api = "responses"\n'
        )
        _set_runtime_env(name, {"FAKE_API_KEY": "fake-key"})
        return config
    if tool == "opencode":
        config = directory / "dot-opencode"
        config.mkdir(exist_ok=True)
        (config / "opencode.json").write_text(json.dumps({
            "provider": {"fake": {"npm": "@ai-sdk/openai-compatible", "name": "Fake",
                                  "options": {"baseURL": f"{base_url}/v1", "apiKey": "fake-key"},
                                  "models": {"fake-model": {"name": "Fake Model"}}}},
            "model": "fake/fake-model", "autoupdate": False, "share": "disabled",
        }, indent=2))
        # opencode looks up @opencode-ai/plugin on npm every run: keep that on loopback
        _set_runtime_env(name, {"npm_config_registry": f"{base_url}/npm/"})
        return config
    if tool == "hermes":
        config = directory / "dot-hermes"
        config.mkdir(exist_ok=True)
        shipped = config / "config.yaml"  # the template's settings stay, as a user's would: only the model is added
        shipped.write_text(
            (shipped.read_text() if shipped.exists() else "")
            + "\nmodel:\n"
            "  provider: custom\n"
            "  default: fake-model\n"
            f"  base_url: {base_url}/v1\n"
            "  context_length: 128000\n"
        )  # hermes' defaults otherwise (its tirith scanner on, as a user's config has it)
        # skip chat mode's PyPI update check (cached 6 h)
        (config / ".update_check").write_text(json.dumps({"ts": time.time(), "behind": 0, "rev": None,
                                                          "ver": "0.19.0"}))
        return config
    raise ValueError(tool)


@pytest.fixture
def make_profile(realcli_env: dict[str, str], fake: FakeView):
    """`make_profile(tool, name=None)`: a user profile of `tool` talking to the fake server."""

    def make(tool: str, name: str | None = None) -> str:
        name = name or f"rc-{tool}"
        result = run_cli("profile", "add", name, "--from", tool)
        assert result.code == 0, result.err
        write_tool_config(tool, name, str(fake.base_url))
        return name

    return make


# ----------------------------------------------------------------------------- running agentbox


@dataclass
class Turn:
    """One `agentbox invoke --json` run."""

    code: int
    result: dict[str, Any]
    cli: CliResult
    seconds: float

    def __str__(self) -> str:
        return f"exit {self.code} in {self.seconds:.1f}s\nstdout: {self.cli.out[-3000:]}\nstderr: {self.cli.err[-3000:]}"


class Box:
    """The real `agentbox` entry point, run from one directory."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd

    def invoke(self, target: str, prompt: str, *flags: str) -> Turn:
        """`agentbox invoke TARGET PROMPT FLAGS --json --timeout 120`; the JSON result parsed."""
        started = time.monotonic()
        cli = run_cli("invoke", target, prompt, *flags, "--json", "--timeout", str(TURN_TIMEOUT_S),
                      cwd=self.cwd, timeout=TURN_TIMEOUT_S + 60)
        seconds = time.monotonic() - started
        try:
            result = json.loads(cli.out)
        except json.JSONDecodeError:
            pytest.fail(f"agentbox invoke printed no JSON result (exit {cli.code})\n"
                        f"stdout: {cli.out[-3000:]}\nstderr: {cli.err[-3000:]}")
        assert "Traceback" not in cli.err, cli.err
        return Turn(cli.code, result, cli, seconds)

    def session(self, session_id: str) -> dict[str, Any]:
        """`agentbox sessions show UUID --json`."""
        cli = run_cli("sessions", "show", session_id, "--json", cwd=self.cwd)
        assert cli.code == 0, cli.err
        return json.loads(cli.out)


def write_project(root: Path, roles: dict[str, dict[str, Any]]) -> Path:
    """A minimal project at `root` whose crew has `roles` (sequential over them)."""
    box = root / ".agent-box"
    (box / "roles").mkdir(parents=True, exist_ok=True)
    lines = ["mode: sequential", "roles:"]
    for role, spec in roles.items():
        lines.append(f"  {role}:")
        for key, value in spec.items():
            lines.append(f"    {key}: {json.dumps(value)}")
    lines += ["limits:", f"  task_timeout_s: {TURN_TIMEOUT_S}", "sequential:",
              f"  steps: {json.dumps(list(roles))}"]
    (box / "crew.yaml").write_text("\n".join(lines) + "\n")
    return root
