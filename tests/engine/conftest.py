"""The engine tests drive the loop in-process: an engine built in a test runs its turns in `InProcessRunner`.

Wherever a test builds an engine without naming its runner (`drive`, `Engine.open`), the
engine asks `configured_runner()` for one at its first turn; here that gives a fresh
`InProcessRunner` (tests/engine/inprocess.py) while the user's config.yaml names the default
local runner. A config.yaml that names another runner, or other admission limits, keeps
what it names. A test that needs a real process or the sandbox (a shell command, a stream,
a crash, kill -9, write scopes, the worktree's bind layout, a real CLI) says so with
`@pytest.mark.local_runner("why")` and keeps the local runner under bwrap; the in-process
runner refuses such a turn with `NeedsAProcess`, so a test that lacks the mark fails
naming the scenario rather than passing on something else. An engine started as its own
process (`start_engine`, the CLI) is untouched: it always runs the local runner.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentbox.core.engine import runners
from agentbox.core.engine.runners.base import TurnRunner
from tests.engine.inprocess import InProcessRunner

OWN_RUNNER = ("test_door.py",)
"""Test files that keep the engine's own runner (another engineer's area; they name what they need)."""


@pytest.fixture(autouse=True)
def in_process_turns(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Engines built in this test run their turns in-process, unless the test is marked `local_runner`."""
    mark = request.node.get_closest_marker("local_runner")
    if mark is not None:
        why = mark.args[0] if mark.args else mark.kwargs.get("why")
        assert isinstance(why, str) and why.strip(), f"{request.node.nodeid}: local_runner needs a reason"
        yield
        return
    if request.node.path.name in OWN_RUNNER:
        yield
        return
    original = runners.configured_runner

    def in_process() -> TurnRunner:
        from agentbox.core.config.user_config import Runner, load_user_config

        if load_user_config().runner != Runner():
            return original()
        return InProcessRunner()

    monkeypatch.setattr(runners, "configured_runner", in_process)
    yield
