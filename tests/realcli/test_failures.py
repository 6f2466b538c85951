"""A model API error (HTTP 400 from the fake) through each real CLI: `agentbox invoke`
exits 1 with the adapter's error kind, prints its JSON result, never a traceback."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.realcli.conftest import Box, FakeView

pytestmark = [pytest.mark.realcli, pytest.mark.bwrap]

#: What the adapters make of the 400 (see tests/fakes/NOTES.md, "Failure output"):
#: claude prints is_error (exit 1); codex prints error + turn.failed (exit 1); opencode an
#: error event (exit 1); hermes -z exits **0** and only its usage file says failed:true.
EXPECTED_EXIT = {"claude": 1, "codex": 1, "opencode": 1, "hermes": 0}


@pytest.mark.parametrize("tool", ["claude", "codex", "opencode", "hermes"])
def test_api_error_is_a_tool_error(tool: str, make_profile, fake: FakeView, workdir: Path) -> None:
    name = make_profile(tool)
    tag = uuid.uuid4().hex[:8]
    fake.enqueue({"error": {"status": 400, "message": f"fake bad request {tag}"}, "times": -1,
                  "match": {"contains": tag}})
    box = Box(workdir)

    turn = box.invoke(f"profile:{name}", f"please fail {tag}")
    result = turn.result
    assert turn.code == 1, str(turn)
    assert result["status"] == "error"
    assert result["error_kind"] == "tool_error", str(turn)
    assert result["exit_code"] == EXPECTED_EXIT[tool], str(turn)
    assert "fake bad request" in (result["error"] or ""), str(turn)
    assert "error: tool_error" in turn.cli.err
    assert any(r.get("reply", {}).get("kind") == "error" for r in fake.model_requests())

    shown = box.session(result["session_id"])
    assert shown["session"]["last_status"] == "error"
    assert shown["session"]["last_error_kind"] == "tool_error"
    assert shown["turns"][-1]["error_kind"] == "tool_error"


@pytest.mark.parametrize("tool", ["claude", "codex"])
def test_session_continues_after_a_failed_first_turn(tool: str, make_profile, fake: FakeView, workdir: Path) -> None:
    """The failed turn's native session is kept, so the retry resumes instead of clashing
    (claude refuses a --session-id it has seen: "Session ID … is already in use")."""
    name = make_profile(tool)
    tag = uuid.uuid4().hex[:8]
    fake.enqueue({"error": {"status": 400, "message": "fake bad request"}, "match": {"contains": tag}})
    box = Box(workdir)

    failed = box.invoke(f"profile:{name}", f"first {tag}")
    assert failed.result["error_kind"] == "tool_error", str(failed)
    retry = box.invoke(f"profile:{name}", f"again {tag}", "--continue")
    assert retry.code == 0, str(retry)
    assert retry.result["session_id"] == failed.result["session_id"]
    assert f"echo: again {tag}" in retry.result["text"]
    assert retry.result["native_id"]
    if tool == "claude":
        assert retry.result["native_id"] == failed.result["session_id"]
