"""OpenTelemetry traces of runs and turns: whether they are on, where they go, the ids they carry.

Off by default. On when the standard `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
`OTEL_EXPORTER_OTLP_ENDPOINT` is set, or the user's config.yaml names `telemetry.endpoint`
(never crew.yaml: a repository does not choose where its runs are reported);
`OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` turn it off again. Spans go out as
OTLP over HTTP (protobuf). This module imports no OpenTelemetry: the SDK is loaded by
`telemetry_export`, and only when tracing is on; without the `agentbox[otel]` extra a
command says so in one line and goes on untraced.

Ids are derived, not drawn: a run's trace id from its run id, each span's id from the run id
and the key of what it records (`telemetry_spans`), so an engine killed and resumed goes on
in the same trace, and the trace context handed into a turn before it starts names the span
the engine exports once the turn has ended. Claude Code and Codex export their own telemetry:
a turn of theirs gets `TRACEPARENT`, the resource attributes and the collector's address,
and its sandbox may reach that collector (and only it) through the egress proxy.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from agentbox.core.telemetry.model import TraceSettings, span_id_for, trace_id_for, traceparent

if TYPE_CHECKING:
    from agentbox.core.agents.invoke import Agent, InvokeResult
    from agentbox.core.engine.models import Run
    from agentbox.core.paths import ProjectPaths

MISSING_SDK = ("agentbox: tracing is on ({source}) but the OpenTelemetry SDK is not installed; "
               "install it with `pip install 'agentbox[otel]'` (this {what} goes on without traces)")
TOOLS_WITH_TELEMETRY = frozenset({"claude", "codex"})
"""Tools that export their own OpenTelemetry and take a parent trace context from the environment."""


def settings(environ: Mapping[str, str] | None = None) -> TraceSettings | None:
    """Tracing's settings, or None when it is off (the environment first, then config.yaml)."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return None
    service = env.get("OTEL_SERVICE_NAME", "").strip() or "agentbox"
    traces = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    if traces or base:
        source = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" if traces else "OTEL_EXPORTER_OTLP_ENDPOINT"
        return TraceSettings(traces or _traces_url(base), base or None, source, service_name=service)
    return _from_user_config(service)


def _traces_url(endpoint: str) -> str:
    return endpoint.rstrip("/") + "/v1/traces"


def _from_user_config(service: str) -> TraceSettings | None:
    """The user's config.yaml `telemetry:` section, read only when the file mentions it (no YAML otherwise)."""
    from agentbox.core.paths import agent_box_home

    path = agent_box_home() / "config.yaml"  # not user_config.config_path: that module imports pydantic
    try:
        with open(path, "rb") as handle:
            if b"telemetry" not in handle.read(1 << 20):
                return None
    except OSError:
        return None
    from agentbox.core.config.user_config import load_user_config

    telemetry = load_user_config(path).telemetry
    if telemetry is None or not telemetry.endpoint:
        return None
    from agentbox.core.config.secrets import MissingVariable, expand

    try:
        headers = tuple((name, expand(value, os.environ)) for name, value in telemetry.headers.items())
    except MissingVariable as exc:
        from agentbox.core.errors import ConfigError

        raise ConfigError(f"names ${{{exc.name}}}, which is not set", file=path,
                          field="telemetry.headers", hint="set the variable, or remove the header") from None
    return TraceSettings(_traces_url(telemetry.endpoint), telemetry.endpoint.rstrip("/"), f"{path} telemetry.endpoint",
                         headers, telemetry.service_name or service, telemetry.tool_telemetry)


def resource_attributes(values: Mapping[str, str | None]) -> str:
    """`OTEL_RESOURCE_ATTRIBUTES` for the values given (W3C baggage-like: `k=v,k=v`, values percent-escaped)."""
    from urllib.parse import quote

    return ",".join(f"{key}={quote(str(value), safe='')}" for key, value in values.items() if value)


# ----------------------------------------------------------------------------- into a turn


def turn_environment(trace: TraceSettings, tool: str, parent: str, resource: Mapping[str, str | None]) -> dict[str, str]:
    """The variables that make `tool` export its own telemetry under the span `parent` (a traceparent)."""
    if tool not in TOOLS_WITH_TELEMETRY or not trace.tool_telemetry:
        return {}
    env = {"TRACEPARENT": parent, "OTEL_RESOURCE_ATTRIBUTES": resource_attributes(resource)}
    if tool == "claude":  # its telemetry, and its spans (beta), are each off unless asked for
        env.update(CLAUDE_CODE_ENABLE_TELEMETRY="1", CLAUDE_CODE_ENHANCED_TELEMETRY_BETA="1",
                   OTEL_TRACES_EXPORTER="otlp", OTEL_LOGS_EXPORTER="otlp", OTEL_METRICS_EXPORTER="otlp",
                   OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
                   OTEL_TRACES_EXPORT_INTERVAL="1000", OTEL_LOGS_EXPORT_INTERVAL="1000")
        if trace.endpoint:
            env["OTEL_EXPORTER_OTLP_ENDPOINT"] = trace.endpoint
        else:
            env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = trace.traces_url
    return env


def turn_arguments(trace: TraceSettings, tool: str) -> tuple[str, ...]:
    """Command-line settings `tool` needs to export its telemetry (codex reads no OTEL_* endpoint variable:
    its exporters are config keys, given here as `-c` overrides)."""
    if tool != "codex" or not trace.tool_telemetry:
        return ()
    import json

    logs = f"{trace.endpoint}/v1/logs" if trace.endpoint else None
    args = ["-c", f"otel.trace_exporter={{otlp-http={{endpoint={json.dumps(trace.traces_url)},protocol=\"binary\"}}}}"]
    if logs:
        args += ["-c", f"otel.exporter={{otlp-http={{endpoint={json.dumps(logs)},protocol=\"binary\"}}}}"]
    return tuple(args)


def traced_agent(agent: Agent, trace: TraceSettings | None, parent: str, resource: Mapping[str, str | None]) -> Agent:
    """`agent` with the trace context in its turn's environment and the collector on its allowlist."""
    if trace is None:
        return agent
    env = turn_environment(trace, agent.profile.tool, parent, resource)
    if not env:
        return agent
    collector = trace.collector
    if collector is not None:
        from agentbox.core.sandbox.egress import parse_entry

        try:
            parse_entry(collector, "telemetry")
        except ValueError:  # a collector no allowlist can name (`0.0.0.0`): the tool's own export stays off
            return agent
    allow = (*agent.egress_allow, collector) if collector else agent.egress_allow
    return dataclasses.replace(agent, env={**agent.env, **env}, egress_allow=allow,
                               extra_args=(*agent.extra_args, *turn_arguments(trace, agent.profile.tool)))


# ----------------------------------------------------------------------------- exporters


def missing_sdk(trace: TraceSettings, what: str) -> None:
    """Say once, in one line, that tracing is on but the SDK is missing."""
    print(MISSING_SDK.format(source=trace.source, what=what), file=sys.stderr)


class RunTracer(Protocol):
    """What the engine calls: after each save (new events are on disk) and when it lets the run go."""

    def after_save(self, run: Run) -> None: ...

    def close(self) -> None: ...


class _Untraced:
    def after_save(self, run: Run) -> None:
        pass

    def close(self) -> None:
        pass


UNTRACED: RunTracer = _Untraced()
"""The tracer of a run that is not traced."""


def run_tracer(project: ProjectPaths, run_id: str, trace: TraceSettings | None = None) -> RunTracer:
    """The run's tracer: a no-op when tracing is off (nothing of OpenTelemetry imported) or its SDK is missing."""
    trace = trace or settings()
    if trace is None:
        return UNTRACED
    try:
        from agentbox.core.telemetry.export import RunExporter
    except ImportError:
        missing_sdk(trace, "run")
        return UNTRACED
    return RunExporter(project, run_id, trace)


def turn_parent(run_id: str, job_id: str, started: float) -> str:
    """The traceparent of a run's turn (the span the engine exports when the turn ends)."""
    from agentbox.core.telemetry.spans import turn_key

    return traceparent(trace_id_for(run_id), span_id_for(run_id, turn_key(job_id, started)))


def export_invoke(trace: TraceSettings, span_ids: tuple[str, str], result: InvokeResult, started: float,
                  ended: float) -> None:
    """`agentbox invoke` alone: its one turn as a one-span trace (a line on stderr when it cannot be sent)."""
    try:
        from agentbox.core.telemetry.export import export_turn
    except ImportError:
        missing_sdk(trace, "turn")
        return
    export_turn(trace, span_ids, result, started, ended)


def new_invoke_ids() -> tuple[str, str]:
    """A fresh (trace id, span id) for a turn outside any run."""
    return os.urandom(16).hex(), os.urandom(8).hex()
