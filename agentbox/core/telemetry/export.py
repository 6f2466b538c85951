"""The OpenTelemetry SDK side of tracing: spans handed to an OTLP/HTTP exporter.

Imported only when tracing is on (`telemetry.run_tracer`, `telemetry.export_invoke`); an
ImportError here means the `agentbox[otel]` extra is missing. A run's spans are read from its
decision log after each save (`RunExporter.after_save`), so they are only what the run's files
already say, and exported in the background; `traced.json` in the run's folder keeps the
sequence number of the last log line whose spans the collector took, so a new engine on the
same run (after a crash) sends what was lost and not what was already sent.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from agentbox import __version__
from agentbox.core import store
from agentbox.core.agents.sessions import SessionStore
from agentbox.core.errors import AgentboxError
from agentbox.core.telemetry.model import TraceSettings, span_id_for, trace_id_for
from agentbox.core.telemetry.spans import SpanBuilder, SpanRecord

if TYPE_CHECKING:
    from agentbox.core.agents.invoke import InvokeResult
    from agentbox.core.engine.models import Run
    from agentbox.core.paths import ProjectPaths

CURSOR_FILE = "traced.json"
SCOPE = InstrumentationScope("agentbox", __version__)
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_warned = threading.Event()


def _quiet_sdk_logs() -> None:
    """The exporter's own warnings become one line of ours (`_say`), not a log record per retry."""
    logging.getLogger("opentelemetry.exporter.otlp.proto.http").setLevel(logging.CRITICAL)
    logging.getLogger("opentelemetry.sdk.trace.export").setLevel(logging.CRITICAL)


def _say(trace: TraceSettings) -> None:
    """Once per process: the collector did not take spans."""
    if not _warned.is_set():
        _warned.set()
        print(f"agentbox: traces could not be sent to {trace.traces_url} (is the collector running?)", file=sys.stderr)


def _exporter(trace: TraceSettings) -> OTLPSpanExporter:
    _quiet_sdk_logs()
    return OTLPSpanExporter(endpoint=trace.traces_url, headers=dict(trace.headers) or None)


def _value(value: Any) -> Any:
    """An attribute value OpenTelemetry takes (a number, bool, string, or a list of strings)."""
    if isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return str(value)


def _context(trace_id: str, span_id: str) -> SpanContext:
    return SpanContext(int(trace_id, 16), int(span_id, 16), is_remote=False, trace_flags=_SAMPLED)


def readable(span: SpanRecord, run_id: str, resource: Resource) -> ReadableSpan:
    """The SDK's span for one of a run's spans, with the ids its keys fix."""
    trace_id = trace_id_for(run_id)
    parent = _context(trace_id, span_id_for(run_id, span.parent)) if span.parent else None
    attributes = {name: _value(value) for name, value in span.attributes.items()}
    attributes["agentbox.event.seq"] = span.end_seq
    status = Status(StatusCode.ERROR, span.error) if span.error else Status(StatusCode.UNSET)
    end = span.end if span.end is not None else span.start
    return ReadableSpan(name=span.name, context=_context(trace_id, span_id_for(run_id, span.key)), parent=parent,
                        resource=resource, attributes=attributes, kind=SpanKind.INTERNAL, status=status,
                        start_time=int(span.start * 1e9), end_time=int(end * 1e9), instrumentation_scope=SCOPE)


class _Cursor(SpanExporter):
    """Passes spans on and, once the collector took them, remembers the log line they reach."""

    def __init__(self, inner: SpanExporter, path: Path, seq: int, trace: TraceSettings) -> None:
        self.inner, self.path, self.seq, self.trace = inner, path, seq, trace
        self.failed = False
        self.closing = False
        """Set when the engine lets go: after a failure the rest is not tried (the next engine sends it)."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self.closing and self.failed:
            return SpanExportResult.FAILURE
        result = self.inner.export(spans)
        self.failed = result is not SpanExportResult.SUCCESS
        if self.failed:
            _say(self.trace)
            return result
        reached = max((int((s.attributes or {}).get("agentbox.event.seq", 0)) for s in spans), default=0)  # type: ignore[arg-type]
        if reached > self.seq:
            self.seq = reached
            with contextlib.suppress(OSError, AgentboxError):
                store.atomic_write_json(self.path, {"seq": reached}, durable=False)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class RunExporter:
    """One engine's tracer of one run: the run's log read after each save, its ended spans exported."""

    def __init__(self, project: ProjectPaths, run_id: str, trace: TraceSettings) -> None:
        from agentbox.core.engine.run_store import RunStore

        self.project = project
        self.run_id = run_id
        self.store = RunStore(project)
        self.sessions = SessionStore(project.sessions_dir)
        cursor = self.store.dir(run_id) / CURSOR_FILE
        saved = _read_cursor(cursor)
        self.sent_through = saved
        """Spans ended at or before this log line were exported by an earlier engine."""
        self.builder = SpanBuilder(run_id, self._turn_facts)
        self.offset = 0
        self.resource = Resource.create({"service.name": trace.service_name, "service.version": __version__,
                                         "agentbox.run.id": run_id})
        self.cursor = _Cursor(_exporter(trace), cursor, saved, trace)
        self.processor = BatchSpanProcessor(self.cursor, schedule_delay_millis=500, max_queue_size=16384)

    def after_save(self, run: Run) -> None:
        """Read what the save put in the log; hand on the spans it ended."""
        contract = run.contract
        self.builder.run_attributes = {"agentbox.run.mode": str(contract.mode), "agentbox.run.goal": contract.goal[:300],
                                       "agentbox.tokens": run.totals.tokens, "agentbox.turns": run.totals.turns}
        if run.totals.cost_usd is not None:
            self.builder.run_attributes["agentbox.cost_usd"] = run.totals.cost_usd
        try:
            events, self.offset = self.store.events(self.run_id, self.offset)
        except (OSError, AgentboxError):
            return  # the engine reports a damaged log itself
        for span in self.builder.feed(events):
            if span.end_seq > self.sent_through:
                self.processor.on_end(readable(span, self.run_id, self.resource))

    def close(self) -> None:
        """Send what is still queued (bounded by the exporter's timeout) and stop."""
        self.cursor.closing = True
        self.processor.shutdown()

    def _turn_facts(self, role: str, session: str, number: int) -> Mapping[str, Any] | None:
        """What the session's records say of one turn: its tool, profile, native id, model, usage."""
        try:
            record = self.sessions.read(self.sessions.root / role / f"{session}.json")
            turns = self.sessions.turns(record)
        except (OSError, AgentboxError, ValueError):
            return None
        turn = next((t for t in reversed(turns) if t.get("turn") == number), {})
        return {**turn, "profile": record.profile, "tool": record.tool,
                "native_id": turn.get("native_id") or record.native_id}


def _read_cursor(path: Path) -> int:
    try:
        data = store.read_json(path, {})
    except (OSError, AgentboxError):
        return 0
    seq = data.get("seq") if isinstance(data, dict) else None
    return seq if type(seq) is int and seq >= 0 else 0


def turn_attributes(result: InvokeResult) -> dict[str, Any]:
    """The attributes of a turn's span from its result (the names a run's turn spans use)."""
    usage = result.usage
    values: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": result.role or result.profile,
        "agentbox.role": result.role, "agentbox.profile": result.profile, "agentbox.tool": result.tool,
        "gen_ai.provider.name": result.tool, "agentbox.session.id": result.session_id,
        "agentbox.native_session.id": result.native_id, "gen_ai.conversation.id": result.native_id,
        "gen_ai.request.model": result.model, "gen_ai.response.model": result.model,
        "agentbox.turn.number": result.turn, "gen_ai.usage.input_tokens": usage.input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens, "agentbox.usage.cached_input_tokens": usage.cached_input_tokens,
        "agentbox.tokens": usage.total_tokens, "agentbox.cost_usd": usage.cost_usd, "agentbox.outcome": result.status,
        "error.type": result.error_kind, "agentbox.duration_s": round(result.duration_s, 3),
    }
    return {name: _value(value) for name, value in values.items() if value is not None and value != ""}


def export_turn(trace: TraceSettings, ids: tuple[str, str], result: InvokeResult, started: float, ended: float) -> None:
    """One turn outside a run as a one-span trace, sent now (a line on stderr when the collector did not take it)."""
    trace_id, span_id = ids
    resource = Resource.create({"service.name": trace.service_name, "service.version": __version__})
    status = Status(StatusCode.ERROR, (result.error or result.error_kind or "error")[:300]) if not result.ok \
        else Status(StatusCode.UNSET)
    span = ReadableSpan(name=f"invoke {result.role or result.profile}", context=_context(trace_id, span_id),
                        resource=resource, attributes=turn_attributes(result), kind=SpanKind.INTERNAL, status=status,
                        start_time=int(started * 1e9), end_time=int(max(ended, started) * 1e9),
                        instrumentation_scope=SCOPE)
    exporter = _exporter(trace)
    try:
        if exporter.export([span]) is not SpanExportResult.SUCCESS:
            _say(trace)
    finally:
        exporter.shutdown()
