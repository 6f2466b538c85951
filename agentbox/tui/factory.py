"""make_app: the one way the CLI (and tests) build the TUI."""

from __future__ import annotations

import time
from collections.abc import Callable

from agentbox.core.paths import ProjectPaths
from agentbox.tui.app import AgentboxApp


def make_app(project: ProjectPaths | None, *, demo: bool = False, run_id: str | None = None,
             clock: Callable[[], float] = time.time, live: bool = True,
             sample_interval_s: float | None = 1.0,
             engine_probe: Callable[[ProjectPaths, str], bool] | None = None) -> AgentboxApp:
    """The TUI on `project` (None: outside a project); `clock`, `live` and `engine_probe` (whether an
    engine holds a run: its engine lock, by default) are seams for tests."""
    return AgentboxApp(project, run_id=run_id, demo=demo, clock=clock, live=live, sample_interval_s=sample_interval_s,
                       engine_probe=engine_probe)
