"""What a command loads is bounded: each command imports only what it uses.

`agentbox --version` loads no part of the core; `agentbox invoke` runs one turn without the
event loop, psutil, the engine, the crew or the other tools' adapters, and, once its
profile.yaml has been checked and is unchanged, without the YAML parser and the models;
`agentbox sessions` lists records without the config models or YAML. Checked with `sys.modules` in a fresh
interpreter after the command ran (a real turn, in the real sandbox), never with timings.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PROBE = textwrap.dedent(
    """
    import sys

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
         "agentbox.core.engine", "agentbox.core.runs", "agentbox.core.monitor", "agentbox.core.graph")
"""Never needed to run one turn or print something short."""

FORBIDDEN: dict[str, tuple[str, ...]] = {
    "--version": (*HEAVY, "agentbox.core", "pydantic", "pydantic_core", "ruamel", "json", "sqlite3"),
    "invoke profile:noop hi": (*HEAVY, "sqlite3", "agentbox.core.project", "agentbox.core.runtimes.transcripts",
                               "agentbox.core.runtimes.claude", "agentbox.core.runtimes.codex",
                               "agentbox.core.runtimes.opencode", "agentbox.core.runtimes.hermes",
                               "agentbox.core.schemas", "agentbox.core.doctor"),
    "sessions": (*HEAVY, "pydantic", "pydantic_core", "ruamel", "agentbox.core.config", "agentbox.core.invoke",
                 "agentbox.core.sandbox", "sqlite3"),
}


def loaded_by(command: str, cwd: Path, tmp_path: Path) -> list[str]:
    """The modules in sys.modules after `agentbox COMMAND` ran in a fresh interpreter (it must succeed)."""
    report = tmp_path / "modules.json"
    proc = subprocess.run([sys.executable, "-c", PROBE, str(report), *command.split()], cwd=cwd,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(report.read_text())
    assert result["code"] in (0, None), (command, result["code"], proc.stderr)
    return result["modules"]


PARSER_AND_MODELS = ("pydantic", "pydantic_core", "ruamel", "agentbox.core.config", "agentbox.core.yaml_io",
                     "agentbox.core.user_config")
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
