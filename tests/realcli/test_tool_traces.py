"""The real claude and codex CLIs' own telemetry lands under their turn's span.

A one-role crew (claude against the fake model server, in bwrap with its own network) runs with
tracing on, pointed at a local OTLP receiver. agentbox hands the turn `TRACEPARENT` (the id of the
turn span it exports once the turn ends), resource attributes and the collector's address, and lets
the sandbox reach that collector (only it) through the egress proxy. Measured with claude 2.1.197:
it sends its `claude_code.interaction` span (child of the turn span) with `claude_code.llm_request`
spans under it, its events as OTLP logs (`claude_code.user_prompt`, `api_request` with `cost_usd`)
and its metrics (`claude_code.token.usage`, `claude_code.cost.usage`), all with agentbox's resource
attributes.

codex 0.171.0 takes no OTEL_* endpoint variable (its exporters are config keys: agentbox gives them
as `-c otel.trace_exporter=…` / `-c otel.exporter=…`) but honours `TRACEPARENT` and
`OTEL_RESOURCE_ATTRIBUTES`: its `codex.exec` span is a child of the turn span, with a few hundred
spans under it; a few of its spans (`auth`, `session_loop`, `get_model_info`) start traces of their own.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentbox.core.telemetry.model import trace_id_for
from tests.conftest import run_cli
from tests.fakes.otlp_receiver import OtlpReceiver, dumps
from tests.realcli.conftest import TURN_TIMEOUT_S, Box, FakeView, write_project

pytestmark = [pytest.mark.realcli, pytest.mark.bwrap]


@pytest.fixture
def collector(monkeypatch: pytest.MonkeyPatch) -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"x-collector-token={TOKEN}")
        yield receiver


TOKEN = "collector-s3cret"


def _token_holders(receiver: OtlpReceiver) -> tuple[list[str], list[str]]:
    """User agents of the exports that carried the collector's token, and of those that did not."""
    carried, bare = [], []
    for _, headers in receiver.requests:
        agent = next((v for k, v in headers.items() if k.lower() == "user-agent"), "")
        token = next((v for k, v in headers.items() if k.lower() == "x-collector-token"), None)
        (carried if token == TOKEN else bare).append(agent)
    return carried, bare


def test_claudes_spans_land_under_its_turn_span(make_profile, fake: FakeView, tmp_path: Path,
                                                collector: OtlpReceiver) -> None:
    name = make_profile("claude")
    root = write_project(tmp_path / "proj", {"writer": {"profile": name}})
    result = run_cli("run", "say hello", "--quiet", cwd=root, timeout=TURN_TIMEOUT_S + 60)
    assert "Traceback" not in result.err, result.err
    run_id = next((root / ".agent-box" / "runs").iterdir()).name

    spans = collector.received()
    shown = dumps(spans) + str(collector.summary())
    ours = [s for s in spans if s.scope == "agentbox"]
    turns = [s for s in ours if s.name == "work writer" or s.attributes.get("agentbox.role") == "writer"
             and "agentbox.turn.kind" in s.attributes]
    assert turns, shown
    turn = turns[0]
    assert turn.attributes["agentbox.tool"] == "claude" and turn.trace_id == trace_id_for(run_id)
    interactions = [s for s in spans if s.name == "claude_code.interaction"]
    assert interactions, shown
    interaction = interactions[0]
    assert interaction.trace_id == turn.trace_id and interaction.parent_id == turn.span_id, shown
    assert interaction.resource["service.name"] == "claude-code"
    assert interaction.resource["agentbox.run.id"] == run_id
    assert interaction.resource["agentbox.session.id"] == turn.attributes["agentbox.session.id"]
    requests = [s for s in spans if s.name == "claude_code.llm_request" and s.parent_id == interaction.span_id]
    assert requests and requests[0].attributes["gen_ai.system"] == "anthropic", shown
    # its events go to the same collector, tied to its interaction span
    prompts = [r for r in collector.log_records if r["body"] == "claude_code.user_prompt"]
    assert prompts and prompts[0]["trace_id"] == turn.trace_id, collector.summary()
    # the sandbox reached the collector through the proxy, and only the collector and the model
    network = [t.get("network") for t in _turns(root) if t.get("network")]
    assert network and all(n["denied_total"] == 0 for n in network), network
    assert any(str(collector.port) in rule for n in network for rule in n["allowed"]), network
    # the collector's credentials went with agentbox's own exports only, never into the sandbox
    carried, bare = _token_holders(collector)
    assert carried and all("Python" in agent for agent in carried), (carried, bare)
    assert bare, (carried, bare)


def _turns(root: Path) -> list[dict]:
    import json

    found = []
    for path in (root / ".agent-box" / "sessions").rglob("*.turns.jsonl"):
        found += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return found


def test_codexs_spans_land_under_the_invoke_span(make_profile, fake: FakeView, workdir: Path,
                                                 collector: OtlpReceiver) -> None:
    name = make_profile("codex")
    turn = Box(workdir).invoke(f"profile:{name}", "say hello")
    assert turn.code == 0 and turn.result["status"] == "ok", str(turn)
    spans = collector.received()
    (ours,) = [s for s in spans if s.scope == "agentbox"]
    assert ours.attributes["agentbox.tool"] == "codex" and ours.parent_id == ""
    assert ours.attributes["agentbox.native_session.id"] == turn.result["native_id"]
    execs = [s for s in spans if s.name == "codex.exec"]
    assert execs and execs[0].trace_id == ours.trace_id and execs[0].parent_id == ours.span_id, collector.summary()
    assert execs[0].resource["agentbox.profile"] == name
    in_trace = [s for s in spans if s.trace_id == ours.trace_id]
    assert len(in_trace) > 10  # its turn, sampling and tool spans are in the same trace
    network = turn.result["network"]  # codex also tries a few of its vendor's hosts: those stay refused
    assert f"127.0.0.1:{collector.port}" in network["allowed"], network
    assert not [d for d in network["denied"] if str(collector.port) in d["target"]], network
