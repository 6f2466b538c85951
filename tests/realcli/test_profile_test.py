"""`agentbox profile test NAME --json` with the real CLIs against the fake model server:
ok, key missing, endpoint down (reported in seconds), not logged in."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.realcli.conftest import FakeView, profile_config

pytestmark = [pytest.mark.realcli, pytest.mark.bwrap]


def _profile_test(name: str, **env: str) -> tuple[int, dict[str, Any], float, str]:
    started = time.monotonic()
    cli = run_cli("profile", "test", name, "--json", "--timeout", "120", env=env, timeout=240)
    seconds = time.monotonic() - started
    assert "Traceback" not in cli.err, cli.err
    return cli.code, json.loads(cli.out), seconds, cli.err


def _set_env(name: str, env: dict[str, str]) -> None:
    from agentbox.core.yaml_io import load_yaml, write_yaml

    path = profile_config(name, "x").parent / "profile.yaml"
    document = load_yaml(path)
    document["runtime"]["env"] = env
    write_yaml(path, document)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("tool", ["claude", "codex", "opencode", "hermes"])
def test_ok(tool: str, make_profile, fake: FakeView) -> None:
    name = make_profile(tool)
    code, report, _, err = _profile_test(name)
    assert code == 0, (report, err)
    assert report["ok"] and report["problem"] is None
    assert report["diagnosis"].startswith("ok:")
    assert report["reachable"] is True and report["authenticated"] is True
    assert report["endpoint"].startswith(str(fake.base_url))
    assert report["model"], "the model the profile asks for (template or tool config)"
    assert "OK" in report["text"]
    assert report["native_id"] and report["session_id"]
    assert report["usage"]["output_tokens"] and report["latency_s"] > 0
    assert fake.model_requests(), "the real CLI talked to the fake model"
    if tool == "claude":  # the test's throwaway directory leaves no folder in claude's projects
        assert not list((profile_config(name, "claude") / "projects").glob("*agentbox-test*"))


def test_key_missing(make_profile, fake: FakeView) -> None:
    name = make_profile("claude")
    _set_env(name, {"ANTHROPIC_BASE_URL": str(fake.base_url), "ANTHROPIC_API_KEY": "${RC_UNSET_KEY}"})
    code, report, _, _ = _profile_test(name)
    assert code == 1
    assert report["problem"] == "key_missing"
    assert "RC_UNSET_KEY" in report["diagnosis"] and "profile.yaml:" in report["diagnosis"]
    assert not fake.model_requests()
    # the same profile with the variable set in the shell that runs agentbox: ok
    code, report, _, _ = _profile_test(name, RC_UNSET_KEY="fake-key")
    assert code == 0 and report["ok"], report


@pytest.mark.parametrize("tool", ["claude", "codex"])
def test_endpoint_down_is_reported_fast(tool: str, make_profile, fake: FakeView) -> None:
    name = make_profile(tool)
    down = f"http://127.0.0.1:{_closed_port()}"
    if tool == "claude":
        _set_env(name, {"ANTHROPIC_BASE_URL": down, "ANTHROPIC_API_KEY": "fake-key"})
    else:
        config = profile_config(name, "codex") / "config.toml"
        config.write_text(config.read_text().replace(str(fake.base_url), down))
    code, report, seconds, err = _profile_test(name)
    assert code == 1
    assert report["problem"] == "endpoint_unreachable", report
    assert report["reachable"] is False
    assert down in report["diagnosis"]
    assert seconds < 10, f"took {seconds:.1f} s"
    assert "endpoint unreachable" in run_cli("profile", "test", name).err


def test_not_logged_in(make_profile, fake: FakeView) -> None:
    name = make_profile("claude")
    _set_env(name, {"ANTHROPIC_BASE_URL": str(fake.base_url)})  # no key, no login
    code, report, _, _ = _profile_test(name)
    assert code == 1
    assert report["problem"] == "not_logged_in", report
    assert f"agentbox launch {name}" in report["diagnosis"]
    assert report["authenticated"] is False
    assert report["session_id"], "the real claude ran and said so"
    assert report["diagnosis"].lower().count("please run /login") == 1, report["diagnosis"]  # said once


def test_a_profile_without_network_says_so_at_once(make_profile, fake: FakeView) -> None:
    from agentbox.core.yaml_io import load_yaml, write_yaml

    name = make_profile("claude")
    path = profile_config(name, "x").parent / "profile.yaml"
    document = load_yaml(path)
    document["sandbox"]["network"] = False
    write_yaml(path, document)
    cli = run_cli("profile", "test", name, timeout=5)  # no turn, no probe from the host: at once
    assert cli.code == 1 and "Traceback" not in cli.err
    [diagnosis] = [line for line in cli.err.splitlines() if line.strip()]
    assert diagnosis.startswith("no network: the profile has no network (sandbox.network: false)")
    assert "reachable:      no" in cli.out
    assert fake.requests() == [], "no turn ran"


def test_doctor_profiles_tests_the_crew(make_profile, fake: FakeView, tmp_path: Path) -> None:
    from tests.realcli.conftest import write_project

    good = make_profile("claude", "rc-good")
    bad = make_profile("claude", "rc-bad")
    _set_env(bad, {"ANTHROPIC_BASE_URL": f"http://127.0.0.1:{_closed_port()}", "ANTHROPIC_API_KEY": "k"})
    root = write_project(tmp_path / "proj", {"lead": {"profile": good}, "reviewer": {"profile": bad}})
    cli = run_cli("doctor", "--profiles", "--json", cwd=root, timeout=400)
    checks = {c["name"]: c for c in json.loads(cli.out)["checks"]}
    assert checks[f"profile {good}"]["status"] == "ok", checks
    assert checks[f"profile {bad}"]["status"] == "fail"
    assert "endpoint unreachable" in checks[f"profile {bad}"]["detail"]
    assert cli.code == 1


@pytest.mark.parametrize("tool", ["claude", "opencode"])
def test_unknown_model(tool: str, make_profile, fake: FakeView) -> None:
    """The endpoint answers, but not for this model: one line says so, with the model named."""
    name = make_profile(tool)
    message = "model_not_found: the model `fake-nope` does not exist"
    protocol = {"claude": "anthropic", "opencode": "chat"}[tool]
    fake.enqueue({"error": {"status": 404, "message": message, "type": "not_found_error", "code": "model_not_found"},
                  "match": {"protocol": protocol}, "times": -1})  # every request: claude retries
    code, report, _, err = _profile_test(name)
    assert code == 1, (report, err)
    assert report["problem"] == "unknown_model", report
    assert report["reachable"] is True
    assert fake.model_requests(), "the CLI reached the endpoint"
