"""Secrets in profiles: `${VAR}` and `pass_env` reach the agent at turn time and are
written nowhere: not in AGENT_BOX_HOME, the project, CLI output or a run's events."""

from __future__ import annotations

import hashlib
import json
import stat
import uuid
from pathlib import Path

import pytest

from agentbox.core.config import secrets
from agentbox.core.config.profiles import resolve
from agentbox.core.errors import ConfigError
from tests.conftest import run_cli
from tests.sandbox_support import make_profile

# ----------------------------------------------------------------------------- the syntax


@pytest.mark.parametrize(("value", "environ", "expected"), [
    ("${A}", {"A": "x"}, "x"),
    ("pre-${A}-post", {"A": "x"}, "pre-x-post"),
    ("${A:-dflt}", {}, "dflt"),
    ("${A:-dflt}", {"A": ""}, "dflt"),
    ("${A}", {"A": ""}, ""),
    ("$$HOME and $$${A}", {"A": "x"}, "$HOME and $x"),
    ("$HOME stays", {"HOME": "/h"}, "$HOME stays"),
    ("no refs", {}, "no refs"),
    ("${A:-a:-b}", {}, "a:-b"),
])
def test_expand(value: str, environ: dict[str, str], expected: str) -> None:
    assert secrets.expand(value, environ) == expected


@pytest.mark.parametrize("value", ["${A", "${}", "${1A}", "${A B}", "${A-x}"])
def test_bad_reference_syntax(value: str) -> None:
    assert secrets.reference_problem(value)


def test_unset_reference_raises() -> None:
    with pytest.raises(secrets.MissingVariable) as caught:
        secrets.expand("k=${NOPE_X}", {})
    assert caught.value.name == "NOPE_X"


def test_mask_and_display() -> None:
    assert secrets.mask("key sk-123456 in error", ["sk-123456"]) == "key **** in error"
    shown = secrets.display_env({"ANTHROPIC_API_KEY": "sk-ant-abcdefghijklmnopqrstuv", "K": "${K}",
                                 "OPENAI_API_KEY": "${OPENAI_API_KEY}", "LOG_LEVEL": "debug"})
    assert shown == {"ANTHROPIC_API_KEY": "****", "K": "${K}", "OPENAI_API_KEY": "${OPENAI_API_KEY}",
                     "LOG_LEVEL": "debug"}


# ----------------------------------------------------------------------------- profiles


def _profile(home: Path, name: str, runtime_extra: str) -> Path:
    directory = home / "profiles" / name
    directory.mkdir(parents=True)
    (directory / "profile.yaml").write_text(
        f"name: {name}\n"
        "runtime:\n"
        "  tool: scripted\n"
        f"{runtime_extra}"
        "sandbox: none\n")
    return directory


def test_unset_variable_names_profile_file_line_and_variable(agent_box_home: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    _profile(agent_box_home, "keyed", "  env:\n    LOG: debug\n    ANTHROPIC_API_KEY: ${AB_UNSET_KEY}\n")
    monkeypatch.delenv("AB_UNSET_KEY", raising=False)
    with pytest.raises(ConfigError) as caught:
        secrets.resolve_env(resolve("keyed"))
    message = str(caught.value)
    assert "'keyed'" in message and "AB_UNSET_KEY" in message
    assert f"{agent_box_home / 'profiles' / 'keyed' / 'profile.yaml'}:6:" in message
    monkeypatch.setenv("AB_UNSET_KEY", "v")
    assert secrets.resolve_env(resolve("keyed")) == {"LOG": "debug", "ANTHROPIC_API_KEY": "v"}


def test_unset_pass_env_names_its_line(agent_box_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _profile(agent_box_home, "passing", "  pass_env: [HOME, AB_UNSET_PASS]\n")
    monkeypatch.delenv("AB_UNSET_PASS", raising=False)
    with pytest.raises(ConfigError) as caught:
        secrets.resolve_env(resolve("passing"))
    assert "profile.yaml:4:" in str(caught.value) and "AB_UNSET_PASS" in str(caught.value)


def test_bad_syntax_is_a_config_error_at_load(agent_box_home: Path) -> None:
    _profile(agent_box_home, "broken", "  env:\n    K: ${OOPS\n")
    result = run_cli("profile", "show", "broken")
    assert result.code == 2
    assert "profile.yaml:5" in result.err and "unterminated" in result.err
    assert "Traceback" not in result.err


def test_invoke_with_an_unset_variable_fails_before_any_process(agent_box_home: Path, tmp_path: Path) -> None:
    _profile(agent_box_home, "keyed", "  env:\n    ANTHROPIC_API_KEY: ${AB_UNSET_KEY}\n")
    result = run_cli("invoke", "profile:keyed", "hello", cwd=tmp_path)
    assert result.code == 2, result.err
    assert "AB_UNSET_KEY" in result.err and "profile.yaml:5" in result.err
    assert "Traceback" not in result.err
    recorded = [p for p in agent_box_home.rglob("*.json") if not p.is_relative_to(agent_box_home / "cache")]
    assert not recorded, "nothing of the turn was recorded (the checked profile may be cached)"


def test_profile_show_masks_literal_keys(agent_box_home: Path) -> None:
    key = "sk-ant-" + uuid.uuid4().hex
    _profile(agent_box_home, "literal", f"  env:\n    ANTHROPIC_API_KEY: {key}\n    B: ${{B_REF}}\n")
    result = run_cli("profile", "show", "literal", "--json")
    assert result.code == 0, result.err
    assert key not in result.out
    assert json.loads(result.out)["env"] == {"ANTHROPIC_API_KEY": "****", "B": "${B_REF}"}


def test_profile_add_writes_profile_yaml_for_the_owner_only(agent_box_home: Path) -> None:
    assert run_cli("profile", "add", "mine", "--from", "claude").code == 0
    mode = stat.S_IMODE((agent_box_home / "profiles" / "mine" / "profile.yaml").stat().st_mode)
    assert mode == 0o600


def test_doctor_warns_about_a_literal_key_others_can_read(agent_box_home: Path) -> None:
    directory = _profile(agent_box_home, "leaky", f"  env:\n    OPENAI_API_KEY: sk-{uuid.uuid4().hex}\n")
    (directory / "profile.yaml").chmod(0o644)
    report = json.loads(run_cli("doctor", "--json").out)
    check = next(c for c in report["checks"] if c["name"] == "secrets")
    assert check["status"] == "warn" and "leaky" in check["detail"]
    (directory / "profile.yaml").chmod(0o600)
    report = json.loads(run_cli("doctor", "--json").out)
    assert next(c for c in report["checks"] if c["name"] == "secrets")["status"] == "ok"


def test_profile_rm_of_an_unknown_profile_says_so(agent_box_home: Path) -> None:
    result = run_cli("profile", "rm", "nosuch")
    assert result.code == 2
    assert "no such profile 'nosuch'" in result.err
    assert "refusing" not in result.err


# ----------------------------------------------------------------------------- end to end, in bwrap


def _grep_tree(root: Path, needles: list[bytes]) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            found += [f"{path}: {needle!r}" for needle in needles if needle in data]
    return found


@pytest.mark.bwrap
def test_secret_reaches_the_agent_and_is_written_nowhere(agent_box_home: Path, project: Path) -> None:
    by_reference = f"ref-{uuid.uuid4().hex}"
    by_name = f"pass-{uuid.uuid4().hex}"
    directory = make_profile(agent_box_home, "prober", env={"PROBE_REF": "${AB_SECRET_REF}"})
    document = json.loads((directory / "profile.yaml").read_text())
    document["runtime"]["pass_env"] = ["AB_SECRET_PASS"]
    (directory / "profile.yaml").write_text(json.dumps(document))
    (project / ".agent-box" / "crew.yaml").write_text(json.dumps(
        {"mode": "sequential", "roles": {"prober": {"profile": "prober"}}, "limits": {"task_timeout_s": 60}}))
    env = {"AB_SECRET_REF": by_reference, "AB_SECRET_PASS": by_name}
    # the agent hashes what it got: the prompt and the reply never hold the secret itself
    prompt = 'run printf %s "$PROBE_REF:$AB_SECRET_PASS" | sha256sum'
    expected = hashlib.sha256(f"{by_reference}:{by_name}".encode()).hexdigest()

    outputs = []
    for target in ("prober", "profile:prober"):
        result = run_cli("invoke", target, prompt, "--json", cwd=project, env=env)
        outputs.append(result)
        assert result.code == 0, result.err
        assert json.loads(result.out)["text"].startswith(f"0|{expected}")
    outputs.append(run_cli("sessions", "prober", "--json", cwd=project, env=env))
    outputs.append(run_cli("profile", "show", "prober", "--json", env=env))
    outputs.append(run_cli("doctor", "--json", cwd=project, env=env))

    needles = [by_reference.encode(), by_name.encode()]
    assert not [o for o in outputs if any(n.decode() in o.out + o.err for n in needles)]
    assert not _grep_tree(agent_box_home, needles)
    assert not _grep_tree(project, needles)
    logs = [p for p in (project / ".agent-box" / "sessions").rglob("*.logs")]
    assert logs and all(stat.S_IMODE(p.stat().st_mode) == 0o700 for p in logs)
