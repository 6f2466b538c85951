"""A local OTLP/HTTP receiver for tests: decodes what exporters POST to `/v1/traces`, `/v1/logs`, `/v1/metrics`.

Spans (`ExportTraceServiceRequest`, protobuf or JSON) become plain `ReceivedSpan`s with hex ids and
their attributes as Python values; logs and metrics are only counted with their names, which is
enough to say what a tool sent. Binds 127.0.0.1 on a free port; use it as a context manager.
"""

from __future__ import annotations

import gzip
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class ReceivedSpan:
    """One span as a collector would store it."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    status_code: int
    status_message: str
    scope: str = ""
    events: list[str] = field(default_factory=list)


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind is None:
        return None
    value = getattr(any_value, kind)
    if kind == "array_value":
        return [_value(v) for v in value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.values}
    return value


def _attributes(pairs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in pairs}


class OtlpReceiver:
    """Collects every OTLP/HTTP export sent to it (thread-safe lists)."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.log_records: list[dict[str, Any]] = []
        self.metric_names: list[str] = []
        self.requests: list[tuple[str, dict[str, str]]] = []
        """(path, headers) of every request."""
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self._body()
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver._take(self.path, dict(self.headers), body)
                kind = self.headers.get("Content-Type", "application/x-protobuf")
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", "0" if "protobuf" in kind else "2")
                self.end_headers()
                if "protobuf" not in kind:
                    self.wfile.write(b"{}")

            def _body(self) -> bytes:
                if "chunked" not in self.headers.get("Transfer-Encoding", ""):
                    return self.rfile.read(int(self.headers.get("Content-Length") or 0))
                chunks = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline().strip():  # trailers
                            pass
                        return b"".join(chunks)
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _take(self, path: str, headers: dict[str, str], body: bytes) -> None:
        from google.protobuf import json_format
        from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
            ExportMetricsServiceRequest,
        )
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        as_json = "json" in headers.get("Content-Type", headers.get("content-type", ""))
        kinds = {"/v1/traces": ExportTraceServiceRequest, "/v1/logs": ExportLogsServiceRequest,
                 "/v1/metrics": ExportMetricsServiceRequest}
        with self._lock:
            self.requests.append((path, headers))
        model = kinds.get(path.split("?")[0])
        if model is None:
            return
        message = model()
        if as_json:
            json_format.Parse(body.decode(), message, ignore_unknown_fields=True)
        else:
            message.ParseFromString(body)
        with self._lock:
            if isinstance(message, ExportTraceServiceRequest):
                self._spans(message)
            elif isinstance(message, ExportLogsServiceRequest):
                for resource_logs in message.resource_logs:
                    for scope_logs in resource_logs.scope_logs:
                        for record in scope_logs.log_records:
                            self.log_records.append({
                                "body": _value(record.body), "attributes": _attributes(record.attributes),
                                "trace_id": record.trace_id.hex(), "span_id": record.span_id.hex(),
                                "resource": _attributes(resource_logs.resource.attributes)})
            else:
                for resource_metrics in message.resource_metrics:
                    for scope_metrics in resource_metrics.scope_metrics:
                        self.metric_names += [m.name for m in scope_metrics.metrics]

    def _spans(self, message: Any) -> None:
        for resource_spans in message.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(ReceivedSpan(
                        name=span.name, trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                        parent_id=span.parent_span_id.hex(), start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano, attributes=_attributes(span.attributes),
                        resource=resource, status_code=span.status.code, status_message=span.status.message,
                        scope=scope_spans.scope.name, events=[e.name for e in span.events]))

    def received(self) -> list[ReceivedSpan]:
        """Every span so far (a copy)."""
        with self._lock:
            return list(self.spans)

    def summary(self) -> dict[str, Any]:
        """What arrived, for an assertion message."""
        with self._lock:
            return {"paths": [p for p, _ in self.requests], "spans": [s.name for s in self.spans],
                    "logs": [r["body"] for r in self.log_records][:20], "metrics": sorted(set(self.metric_names))}


def dumps(spans: list[ReceivedSpan]) -> str:
    """The spans as readable JSON (for an assertion message)."""
    return json.dumps([s.__dict__ for s in spans], indent=1, default=str)[:20000]
