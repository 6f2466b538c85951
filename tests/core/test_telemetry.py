"""Tracing's switch and its one-turn trace: off by default, on with the standard OTEL_* variables or
the user's config.yaml, and `agentbox invoke` alone sends a one-span trace to a local collector."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentbox.core.errors import ConfigError
from agentbox.core.telemetry import tracing as telemetry
from agentbox.core.telemetry.model import span_id_for, trace_id_for
from tests.conftest import run_cli
from tests.fakes.otlp_receiver import OtlpReceiver, dumps


def test_off_unless_a_collector_is_named(agent_box_home: Path) -> None:
    assert telemetry.settings({}) is None
    on = telemetry.settings({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318/"})
    assert on is not None and on.traces_url == "http://127.0.0.1:4318/v1/traces"
    assert on.collector == "127.0.0.1:4318" and on.source == "OTEL_EXPORTER_OTLP_ENDPOINT"
    only = telemetry.settings({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:5000/t"})
    assert only is not None and only.traces_url == "http://127.0.0.1:5000/t" and only.endpoint is None
    for off in ({"OTEL_SDK_DISABLED": "true"}, {"OTEL_TRACES_EXPORTER": "none"}):
        assert telemetry.settings({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", **off}) is None


def test_the_users_config_turns_it_on_and_its_mistakes_are_located(agent_box_home: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    config = agent_box_home / "config.yaml"
    config.write_text("notify:\n  bell: false\n")
    assert telemetry.settings({}) is None
    monkeypatch.setenv("OTLP_TOKEN", "s3cret")
    config.write_text("telemetry:\n  endpoint: http://127.0.0.1:4318\n  headers:\n"
                      "    Authorization: Bearer ${OTLP_TOKEN}\n  service_name: crew-a\n")
    on = telemetry.settings({})
    assert on is not None and on.traces_url == "http://127.0.0.1:4318/v1/traces"
    assert on.headers == (("Authorization", "Bearer s3cret"),) and on.service_name == "crew-a"
    assert str(config) in on.source
    # the environment wins over the file
    env = telemetry.settings({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9999"})
    assert env is not None and env.traces_url == "http://127.0.0.1:9999/v1/traces"
    config.write_text("telemetry:\n  endpoint: ftp://127.0.0.1\n")
    with pytest.raises(ConfigError) as bad:
        telemetry.settings({})
    assert f"{config}:2" in bad.value.message and "telemetry.endpoint" in bad.value.message


def test_a_turns_trace_context_goes_to_claude_and_codex_only() -> None:
    trace = telemetry.settings({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert trace is not None
    parent = telemetry.traceparent(trace_id_for("r"), span_id_for("r", "k"))
    env = telemetry.turn_environment(trace, "claude", parent, {"agentbox.run.id": "r", "agentbox.task.id": None})
    assert env["TRACEPARENT"] == parent and parent.startswith("00-") and parent.endswith("-01")
    assert env["OTEL_RESOURCE_ATTRIBUTES"] == "agentbox.run.id=r"
    assert env["CLAUDE_CODE_ENABLE_TELEMETRY"] == "1" and env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://127.0.0.1:4318"
    assert "OTEL_EXPORTER_OTLP_HEADERS" not in env  # the collector's credentials stay out of the sandbox
    assert telemetry.turn_environment(trace, "codex", parent, {})["TRACEPARENT"] == parent
    assert telemetry.turn_arguments(trace, "codex") == (
        "-c", 'otel.trace_exporter={otlp-http={endpoint="http://127.0.0.1:4318/v1/traces",protocol="binary"}}',
        "-c", 'otel.exporter={otlp-http={endpoint="http://127.0.0.1:4318/v1/logs",protocol="binary"}}')
    assert telemetry.turn_arguments(trace, "claude") == ()
    assert telemetry.turn_environment(trace, "opencode", parent, {}) == {}
    assert trace_id_for("r") == trace_id_for("r") != trace_id_for("s") and len(trace_id_for("r")) == 32


@pytest.mark.bwrap
def test_invoke_alone_is_a_one_span_trace(agent_box_home: Path, tmp_path: Path) -> None:
    profile = agent_box_home / "profiles" / "noop"
    profile.mkdir(parents=True)
    (profile / "scenario.json").write_text(json.dumps({"rules": [], "fallback": {
        "reply": "ok", "usage": {"input_tokens": 7, "output_tokens": 3}, "cost_usd": 0.002}}))
    (profile / "profile.yaml").write_text("name: noop\nruntime:\n  tool: scripted\n  scenario: scenario.json\n"
                                          "  model: tiny\nsandbox:\n  network: false\n")
    work = tmp_path / "work"
    work.mkdir()
    with OtlpReceiver() as collector:
        result = run_cli("invoke", "profile:noop", "hi", "--json", cwd=work,
                         env={"OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint})
        assert result.code == 0, result.err
        turn = json.loads(result.out)
        spans = collector.received()
    assert len(spans) == 1, dumps(spans)
    (span,) = spans
    assert span.parent_id == "" and span.name == "invoke noop" and span.status_code == 0
    attrs = span.attributes
    assert attrs["agentbox.session.id"] == turn["session_id"] and attrs["agentbox.native_session.id"] == turn["native_id"]
    assert attrs["agentbox.profile"] == "noop" and attrs["agentbox.tool"] == "scripted"
    assert attrs["gen_ai.request.model"] == "tiny" and attrs["agentbox.outcome"] == "ok"
    assert attrs["gen_ai.usage.input_tokens"] == 7 and attrs["agentbox.tokens"] == 10
    assert attrs["agentbox.cost_usd"] == pytest.approx(0.002)
    assert span.resource["service.name"] == "agentbox"
    assert "traces could not be sent" not in result.err


@pytest.mark.bwrap
def test_a_collector_that_is_down_costs_one_line(agent_box_home: Path, tmp_path: Path) -> None:
    profile = agent_box_home / "profiles" / "noop"
    profile.mkdir(parents=True)
    (profile / "scenario.json").write_text(json.dumps({"rules": [], "fallback": {"reply": "ok"}}))
    (profile / "profile.yaml").write_text("name: noop\nruntime:\n  tool: scripted\n  scenario: scenario.json\n"
                                          "sandbox:\n  network: false\n")
    with OtlpReceiver() as gone:
        endpoint = gone.endpoint  # a port that was just free: nothing listens there once it closes
    result = run_cli("invoke", "profile:noop", "hi", cwd=tmp_path,
                     env={"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_TIMEOUT": "1"})
    assert result.code == 0, result.err
    assert [line for line in result.err.splitlines() if "traces" in line] == [
        f"agentbox: traces could not be sent to {endpoint}/v1/traces (is the collector running?)"], result.err
    assert "Traceback" not in result.err


def test_the_collector_and_only_it_joins_a_traced_turns_allowlist(agent_box_home: Path) -> None:
    from agentbox.core.agents import egress_turn
    from agentbox.core.agents import resolve as services

    for tool in ("claude", "scripted"):
        directory = agent_box_home / "profiles" / f"p-{tool}"
        directory.mkdir(parents=True)
        (directory / "profile.yaml").write_text(json.dumps({
            "name": f"p-{tool}", "runtime": {"tool": tool, "env": {"ANTHROPIC_BASE_URL": "http://127.0.0.1:7001"}},
            "sandbox": {"network": True}}))
    trace = telemetry.settings({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    parent = telemetry.traceparent(trace_id_for("r"), span_id_for("r", "k"))
    claude = telemetry.traced_agent(services.resolve_agent("profile:p-claude", None), trace, parent, {})
    assert claude.egress_allow == ("127.0.0.1:4318",) and claude.env["TRACEPARENT"] == parent
    rules = egress_turn.profile_rules(claude.profile, {"ANTHROPIC_BASE_URL": "http://127.0.0.1:7001"},
                                      claude.egress_allow)
    assert [str(r) for r in rules.rules] == ["127.0.0.1:7001", "127.0.0.1:4318"]
    assert sorted(rules.loopback_ports) == [4318, 7001]
    scripted = services.resolve_agent("profile:p-scripted", None)
    assert telemetry.traced_agent(scripted, trace, parent, {}) is scripted  # no telemetry of its own: nothing opened
    assert telemetry.traced_agent(claude, None, parent, {}) is claude
    wide = telemetry.settings({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://0.0.0.0:4318"})
    plain = services.resolve_agent("profile:p-claude", None)
    assert telemetry.traced_agent(plain, wide, parent, {}) is plain  # no allowlist may name every address


def test_doctor_says_whether_runs_are_traced(agent_box_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentbox.core.admin.doctor import check_traces

    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED",
                 "OTEL_TRACES_EXPORTER"):
        monkeypatch.delenv(name, raising=False)
    assert check_traces().detail == "off"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    on = check_traces()
    assert on.status == "ok" and on.detail.endswith("spans go to http://127.0.0.1:4318/v1/traces")
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT")
    (agent_box_home / "config.yaml").write_text("telemetry:\n  endpoint: nowhere\n")
    bad = check_traces()
    assert bad.status == "warn" and "telemetry.endpoint" in bad.detail and not bad.required
