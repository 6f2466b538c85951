"""A pytest plugin that counts which turn runner each test's engines used (`-p bench.runner_tally`).

Every turn an engine in the pytest process runs goes through `Turns.runner`; the plugin
notes the runner's class per test and, at the end, writes to $RUNNER_TALLY (JSON) each
test's runners: `InProcessRunner`, `LocalRunner`, `RayRunner`…, or none (the test ran no
turn in this process: no engine loop, or the engine ran as a child process).
"""

from __future__ import annotations

import json
import os
from collections.abc import Generator
from typing import Any

import pytest

from agentbox.core.engine.turns import Turns

_seen: dict[str, set[str]] = {}
_current: list[str] = [""]


def pytest_configure(config: pytest.Config) -> None:
    original = Turns.runner

    def counted(self: Turns) -> Any:
        runner = original.fget(self)  # type: ignore[attr-defined]
        _seen.setdefault(_current[0], set()).add(type(runner).__name__)
        return runner

    Turns.runner = property(counted)  # type: ignore[assignment,method-assign]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    _current[0] = item.nodeid
    _seen.setdefault(item.nodeid, set())
    yield
    _current[0] = ""


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    target = os.environ.get("RUNNER_TALLY")
    if target:
        with open(target, "w", encoding="utf-8") as out:
            json.dump({k: sorted(v) for k, v in sorted(_seen.items()) if k}, out, indent=1)
