"""The one table of tools: every list of tool names agrees with it."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from agentbox.core.admin import doctor
from agentbox.core.config.models import Profile
from agentbox.core.runtimes import adapter_for, find_executable
from agentbox.core.tools import AGENT_CLIS, TOOL_TABLE, TOOLS

REPO = Path(__file__).resolve().parents[2]


def test_the_table_holds_every_tool_name_in_order() -> None:
    assert tuple(TOOL_TABLE) == TOOLS
    assert all(info.name == name for name, info in TOOL_TABLE.items())
    assert set(AGENT_CLIS) == set(TOOLS) - {"scripted"}


def test_every_tool_has_its_adapter() -> None:
    for tool in TOOLS:
        assert adapter_for(tool).tool == tool


def test_the_profile_schema_lists_every_tool() -> None:
    schema = Profile.model_json_schema()
    assert schema["$defs"]["Runtime"]["properties"]["tool"]["enum"] == list(TOOLS)


def test_the_scripted_runtime_runs_with_agentbox_python() -> None:
    assert find_executable("scripted") == Path(sys.executable)


def test_install_script_links_exactly_the_agent_clis() -> None:
    script = (REPO / "scripts" / "install-clis.sh").read_text()
    linked = re.findall(r"^link (\S+)", script, re.MULTILINE)
    assert linked == list(AGENT_CLIS)


def test_doctor_checks_every_agent_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[str] = []
    monkeypatch.setattr(doctor, "_tool_version", lambda tool: checked.append(tool) or doctor.Check(tool, "warn", "-"))
    monkeypatch.setattr(doctor, "check_bwrap", lambda: doctor.Check("bwrap", "ok", "-"))
    monkeypatch.setattr(doctor, "check_sandbox", lambda: doctor.Check("sandbox", "ok", "-"))
    doctor.run_checks()
    assert sorted(checked) == sorted(AGENT_CLIS)


def test_a_failure_said_twice_by_a_tool_is_reported_once() -> None:
    from agentbox.core.admin.profile_check import _one_account

    said = "Not logged in · Please run /login"
    assert _one_account(said, said) == said
    assert _one_account(said, f"{said}\n") == said
    assert _one_account("error 401", f"{said} (error 401)") == f"{said} (error 401)"
    assert _one_account(None, "", said) == said
    assert _one_account("spawn failed", said) == f"spawn failed {said}"


def test_opencode_jsonc_names_the_endpoint_and_model(tmp_path: Path) -> None:
    from agentbox.core.admin.profile_check import _read_jsonc

    path = tmp_path / "opencode.jsonc"
    path.write_text('{\n  // my local server\n  "model": "local/qwen", /* the default */\n'
                    '  "provider": {"local": {"options": {"baseURL": "http://127.0.0.1:8080/v1",},},},\n}\n')
    data = _read_jsonc(path)
    assert data["model"] == "local/qwen"
    assert data["provider"]["local"]["options"]["baseURL"] == "http://127.0.0.1:8080/v1"  # "//" in a string kept
