"""The plain facts of tracing, shared by `telemetry` and its SDK side: the settings and the ids.

Ids are derived, not drawn: a run's trace id from its run id, each span's id from the run id
and the key of what it records (`telemetry_spans`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass(frozen=True)
class TraceSettings:
    """Where traces go, as the environment or the user's config.yaml says."""

    traces_url: str
    """The OTLP/HTTP URL spans are POSTed to (`…/v1/traces`)."""
    endpoint: str | None
    """The collector's base URL (the tools append their own `/v1/…`); None when only a traces URL was given."""
    source: str
    """What turned tracing on (an environment variable, or config.yaml)."""
    headers: tuple[tuple[str, str], ...] = ()
    """Extra request headers for agentbox's own exports (never handed to a turn)."""
    service_name: str = "agentbox"
    tool_telemetry: bool = True
    """Hand the trace context into claude and codex turns and let them reach the collector."""

    @property
    def collector(self) -> str | None:
        """`host:port` of the collector, for a sandbox's allowlist (None for a URL without a host)."""
        parts = urlsplit(self.endpoint or self.traces_url)
        if not parts.hostname:
            return None
        port = parts.port or (443 if parts.scheme == "https" else 80)
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        return f"{host}:{port}"


def _digest(*parts: str, size: int) -> str:
    raw = hashlib.sha256("\0".join(parts).encode()).digest()[:size]
    if not any(raw):  # an all-zero id is invalid in OpenTelemetry
        raw = b"\x01" + raw[1:]
    return raw.hex()


def trace_id_for(run_id: str) -> str:
    """The run's trace id (32 hex digits), the same on every engine that drives it."""
    return _digest("agentbox-trace", run_id, size=16)


def span_id_for(run_id: str, key: str) -> str:
    """The id (16 hex digits) of the span recording `key` in the run's trace."""
    return _digest("agentbox-span", run_id, key, size=8)


def traceparent(trace_id: str, span_id: str) -> str:
    """A W3C `traceparent` header value naming the span as sampled."""
    return f"00-{trace_id}-{span_id}-01"
