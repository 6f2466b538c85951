"""What a command loads is bounded: each command imports only what it uses.

`agentbox --version` loads no part of the core; `agentbox invoke` runs one turn without the
event loop, psutil, the engine, the crew or the other tools' adapters, and, once its
profile.yaml has been checked and is unchanged, without the YAML parser and the models;
`agentbox sessions` lists records without the config models or YAML. Checked with `sys.modules` in a fresh
interpreter after the command ran (a real turn, in the real sandbox), never with timings.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PROBE = textwrap.dedent(
    """
    import os
    import sys

    if os.environ.get("PROBE_WITHOUT_OTEL"):  # as if the `agentbox[otel]` extra were not installed
        sys.modules["opentelemetry"] = None

    from agentbox.cli import main

    try:
        code = main(sys.argv[2:])
    except SystemExit as exc:  # argparse's --version exits
        code = exc.code
    modules = sorted(sys.modules)  # before the probe's own json import

    import json

    with open(sys.argv[1], "w") as out:
        json.dump({"code": code, "modules": modules}, out)
    """
)

HEAVY = ("textual", "agentbox.tui", "asyncio", "concurrent.futures", "ssl", "psutil", "watchfiles", "rich",
         "agentbox.core.engine", "agentbox.core.runs", "agentbox.core.reports.monitor", "agentbox.core.graph.load")
"""Never needed to run one turn or print something short."""

FORBIDDEN: dict[str, tuple[str, ...]] = {
    "--version": (*HEAVY, "agentbox.core", "pydantic", "pydantic_core", "ruamel", "json", "sqlite3"),
    "invoke profile:noop hi": (*HEAVY, "sqlite3", "opentelemetry", "agentbox.core.telemetry.export", "agentbox.core.config.project", "agentbox.core.runtimes.transcripts",
                               "agentbox.core.runtimes.claude", "agentbox.core.runtimes.codex",
                               "agentbox.core.runtimes.opencode", "agentbox.core.runtimes.hermes",
                               "agentbox.core.admin.schemas", "agentbox.core.admin.doctor",
                               # a turn without `network: true`, tracing or a codex config loads none of these
                               "agentbox.core.sandbox.egress", "agentbox.core.agents.egress_turn", "agentbox.core.sandbox.egress_proxy",
                               "agentbox.core.telemetry.model", "tomllib"),
    "sessions": (*HEAVY, "pydantic", "pydantic_core", "ruamel", "agentbox.core.config.models", "agentbox.core.agents.invoke",
                 "agentbox.core.sandbox.bwrap", "sqlite3"),
}


def loaded_by(command: str, cwd: Path, tmp_path: Path, env: dict[str, str] | None = None,
              stderr: list[str] | None = None) -> list[str]:
    """The modules in sys.modules after `agentbox COMMAND` ran in a fresh interpreter (it must succeed)."""
    report = tmp_path / "modules.json"
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    proc = subprocess.run([sys.executable, "-c", PROBE, str(report), *shlex.split(command)], cwd=cwd,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
                          env={**environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr
    result = json.loads(report.read_text())
    assert result["code"] in (0, None), (command, result["code"], proc.stderr)
    if stderr is not None:
        stderr.append(proc.stderr)
    return result["modules"]


PARSER_AND_MODELS = ("pydantic", "pydantic_core", "ruamel", "agentbox.core.config.models", "agentbox.core.yaml_io",
                     "agentbox.core.config.user_config")
"""What checking a YAML file takes: not needed to run a turn of a profile checked before."""


def _noop_profile(agent_box_home: Path) -> None:
    profile = agent_box_home / "profiles" / "noop"
    profile.mkdir(parents=True)
    (profile / "scenario.json").write_text(json.dumps({"rules": [], "fallback": {"reply": "ok"}}))
    (profile / "profile.yaml").write_text("name: noop\nruntime:\n  tool: scripted\n  scenario: scenario.json\n"
                                          "sandbox:\n  network: false\n")


@pytest.mark.bwrap
@pytest.mark.parametrize("command", list(FORBIDDEN))
def test_a_command_imports_only_what_it_uses(command: str, agent_box_home: Path, tmp_path: Path) -> None:
    _noop_profile(agent_box_home)
    workdir = tmp_path / "work"
    workdir.mkdir()
    modules = loaded_by(command, workdir, tmp_path)
    loaded = [m for m in modules if any(m == f or m.startswith(f + ".") for f in FORBIDDEN[command])]
    assert loaded == [], f"`agentbox {command}` imported {loaded}"
    assert "agentbox.cli" in modules  # the probe really ran the CLI
    if command.startswith("invoke"):
        assert list((agent_box_home / "sessions").rglob("*.turns.jsonl")), "no turn was recorded"


def _scripted_project(tmp_path: Path) -> Path:
    """A project whose crew of scripted agents finishes a sequential run in a few turns."""
    from tests.engine.support import setup_crew

    root = tmp_path / "proj"
    (root / ".agent-box").mkdir(parents=True)
    for name in ("lead", "builder", "tester", "reviewer"):
        (root / ".agent-box" / "roles").mkdir(exist_ok=True)
        (root / ".agent-box" / "roles" / f"{name}.md").write_text(f"You are the {name}.\n")
    setup_crew(root, mode="sequential")
    return root


TRACED_COMMANDS = ("run 'do it' --mode sequential --quiet", "status")


@pytest.mark.bwrap
def test_tracing_off_loads_no_opentelemetry(agent_box_home: Path, tmp_path: Path) -> None:
    root = _scripted_project(tmp_path)
    for command in TRACED_COMMANDS:
        modules = loaded_by(command, root, tmp_path)
        loaded = [m for m in modules if m.split(".")[0] == "opentelemetry" or m == "agentbox.core.telemetry.export"]
        assert loaded == [], f"`agentbox {command}` with tracing off imported {loaded}"
    assert "agentbox.core.engine.engine" in loaded_by(TRACED_COMMANDS[0], root, tmp_path)  # a run really ran


@pytest.mark.bwrap
def test_tracing_on_without_the_sdk_says_so_in_one_line(agent_box_home: Path, tmp_path: Path) -> None:
    root = _scripted_project(tmp_path)
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "PROBE_WITHOUT_OTEL": "1"}
    for command in (TRACED_COMMANDS[0], "invoke builder hi"):
        said: list[str] = []
        loaded_by(command, root, tmp_path, env=env, stderr=said)
        lines = [line for line in said[0].splitlines() if "OpenTelemetry" in line]
        assert lines == [f"agentbox: tracing is on (OTEL_EXPORTER_OTLP_ENDPOINT) but the OpenTelemetry SDK is not "
                         f"installed; install it with `pip install 'agentbox[otel]'` (this "
                         f"{'run' if command.startswith('run') else 'turn'} goes on without traces)"], said[0]
        assert "Traceback" not in said[0]


@pytest.mark.bwrap
def test_invoke_of_a_checked_profile_loads_no_parser_or_models(agent_box_home: Path, tmp_path: Path) -> None:
    _noop_profile(agent_box_home)
    workdir = tmp_path / "work"
    workdir.mkdir()
    cold = loaded_by("invoke profile:noop hi", workdir, tmp_path)
    assert "pydantic" in cold and "ruamel.yaml" in cold  # the first turn checks profile.yaml in full
    warm = loaded_by("invoke profile:noop hi", workdir, tmp_path)
    loaded = [m for m in warm if any(m == f or m.startswith(f + ".") for f in (*PARSER_AND_MODELS, *HEAVY))]
    assert loaded == [], f"a turn of an unchanged, checked profile imported {loaded}"
    assert len(list((agent_box_home / "sessions").rglob("*.turns.jsonl"))) == 2, "both turns ran"


LONG_LIVED_PROBE = textwrap.dedent(
    """
    import json
    import sys
    from pathlib import Path

    from agentbox.cli import startup

    startup.install(sys.argv[2])  # what `main()` does first
    import asyncio
    root = Path(sys.argv[3])
    if sys.argv[2] == "run":
        import agentbox.cli.runs  # the handler of `agentbox run --resume`
        import agentbox.core.engine.engine
        from agentbox.core.agents import resolve
        from agentbox.core.config import project
        from agentbox.core.paths import ProjectPaths

        paths = ProjectPaths(root)
        crew = project.load_crew(paths).crew  # as Engine.open reads it
        agents = [resolve.role_agent(paths, role, crew=crew) for role in crew.roles]  # as its turns do
        assert agents
    else:
        import agentbox.tui.app
        from agentbox.core import watch
        from agentbox.core.config import project
        from agentbox.core.paths import ProjectPaths

        paths = ProjectPaths(root)
        project.load_crew(paths)  # the dashboard's first read

        async def follow() -> None:
            watching = asyncio.Event()
            stream = watch.watch_project(paths, ready=watching.set)
            task = asyncio.ensure_future(stream.__anext__())
            await asyncio.wait_for(watching.wait(), 30)  # its thread starts when it starts (a loaded machine: s)
            (paths.box / "runs").mkdir(exist_ok=True)
            (paths.box / "runs" / "r1").mkdir()
            (paths.box / "runs" / "r1" / "run.json").write_text("{}")
            batch = await asyncio.wait_for(task, 10)
            assert batch, batch
            await stream.aclose()

        asyncio.run(follow())
    modules = sorted(sys.modules)
    import hashlib, hmac
    digests = [hashlib.sha256(b"agentbox").hexdigest(), hmac.new(b"k", b"m", "sha256").hexdigest()]
    import ssl  # a later import still gets the real module, and asyncio with it
    import asyncio.sslproto
    with open(sys.argv[1], "w") as out:
        json.dump({"modules": modules, "digests": digests,
                   "asyncio_ssl": asyncio.sslproto.ssl is ssl and asyncio.base_events.ssl is ssl}, out)
    """
)

LONG_LIVED_HEAVY = ("ssl", "_ssl", "_hashlib", "importlib.metadata", "email", "zipfile", "csv", "ruamel", "attr",
                    "agentbox.core.yaml_io", "anyio", "multiprocessing", "pydantic.plugin._loader.entry_points")
"""What the engine's and the TUI's start keep out (a checked crew.yaml and profiles, no pydantic plugin)."""


@pytest.mark.parametrize("command", ["run", "tui"])
def test_the_engine_and_the_tui_start_without_the_heavy_modules(command: str, agent_box_home: Path,
                                                                 project: Path, tmp_path: Path) -> None:
    """P6: the engine's and the TUI's start load no ssl, OpenSSL hashes, importlib.metadata or YAML parser."""
    from agentbox.core.config import project as project_mod
    from agentbox.core.paths import ProjectPaths

    project_mod.check_references(ProjectPaths(project), project_mod.load_crew(ProjectPaths(project)))  # `agentbox run`
    out = tmp_path / "probe.json"
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    done = subprocess.run([sys.executable, "-c", LONG_LIVED_PROBE, str(out), command, str(project)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    found = json.loads(out.read_text())
    loaded = [m for m in LONG_LIVED_HEAVY if m in found["modules"]]
    assert loaded == [], f"`agentbox {command}` imported {loaded}"
    assert "pydantic" in found["modules"] and "asyncio" in found["modules"]
    import hashlib
    import hmac

    assert found["digests"] == [hashlib.sha256(b"agentbox").hexdigest(), hmac.new(b"k", b"m", "sha256").hexdigest()]
    assert found["asyncio_ssl"] is True, "asyncio gets ssl once anything imports it"
