"""The stats screen: reached by a key and the palette, sparklines per run, figures with their health lines.

The project holds the demo run as the engine's own code drives it (`builders.build_run`) and
two earlier copies of it under other ids, one costing twice as much and one whose `greet`
task passed its first review (its rejection taken out of the copy's log), so both lines move.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable, Sparkline

from agentbox.core.engine.run_store import RunStore
from agentbox.core.paths import ProjectPaths
from agentbox.tui.app import AgentboxApp
from agentbox.tui.commands import dashboard_commands
from agentbox.tui.screens.stats import StatsScreen
from tests.tui.builders import RUN_ID, T0, build_run, copy_example
from tests.tui.conftest import dashboard_loaded, frozen_app, wait_for

EARLIER = [("run-20251230-120000-c0c0", 2 * 86400, 2.0, True), ("run-20251231-120000-d1d1", 86400, 1.0, False)]
"""(id, how long before the demo run it started, its cost against the demo run's, its greet rejected)."""


def project_with_history(root: Path) -> ProjectPaths:
    """The demo run, done, after two earlier copies of it."""
    project = copy_example(root)
    build_run(project, "done")
    store = RunStore(project)
    done = store.load(RUN_ID)
    log = store.events(RUN_ID)[0]
    for run_id, before, factor, rejected in EARLIER:
        tasks = {key: task.model_copy(update={"cost_usd": None if task.cost_usd is None else task.cost_usd * factor})
                 for key, task in done.tasks.items()}
        copy = done.model_copy(update={"id": run_id, "created": T0 - before, "updated": T0 - before + 90,
                                       "finished": T0 - before + 90, "tasks": tasks, "engine": None, "outbox": []})
        store.create(copy)
        kept = [e for e in log if rejected or not (e["type"] == "task.reject" and e.get("task") == "greet")]
        store.events_path(run_id).write_text("".join(json.dumps({**e, "run": run_id}) + "\n" for e in kept))
    return project


async def stats_open(pilot: Pilot[None]) -> None:
    """The dashboard, then `i`, until the figures are in."""
    await dashboard_loaded(pilot)
    await pilot.press("i")
    app = pilot.app
    await wait_for(pilot, lambda: isinstance(app.screen, StatsScreen) and app.screen.stats is not None, "the stats")
    await pilot.pause()


def test_the_stats_screen_opens_by_key_and_palette_and_plots_each_run(tmp_path: Path) -> None:
    project = project_with_history(tmp_path / "repo")

    async def run() -> None:
        app = frozen_app(project)
        async with app.run_test(size=(140, 40)) as pilot:
            assert isinstance(app, AgentboxApp) and app.dashboard is not None
            await stats_open(pilot)
            titles = [title for title, _, _ in dashboard_commands(app.dashboard)]
            assert "Stats across runs" in titles
            screen = app.screen
            assert isinstance(screen, StatsScreen) and screen.stats is not None
            assert screen.stats.runs == 3
            costs = [p.cost_usd for p in screen.stats.timeline]
            assert costs[0] == pytest.approx(2 * costs[2]) and costs[1] == pytest.approx(costs[2])
            rates = [p.first_pass_rate for p in screen.stats.timeline]
            assert rates == pytest.approx([2 / 3, 1.0, 2 / 3])
            assert list(screen.query_one("#first-pass-spark", Sparkline).data) == pytest.approx([200 / 3, 100, 200 / 3])
            table = screen.query_one(DataTable)
            assert table.row_count == len(screen.stats.groups) + 1
            await pilot.press("escape")
            assert not isinstance(app.screen, StatsScreen)

    asyncio.run(run())


def test_stats_screen_snapshot(tmp_path: Path, snap_compare: Callable[..., bool]) -> None:
    """Cost and first-pass sparklines over three runs, the figures by role and model, each run's role costs."""
    assert snap_compare(frozen_app(project_with_history(tmp_path / "repo")), terminal_size=(140, 40),
                        run_before=stats_open)


def test_the_header_shows_a_live_runs_projected_cost_and_first_pass_rate(tmp_path: Path) -> None:
    """Waiting on a question, two of three tasks approved (one after a rework): projected from the burn so far."""
    from agentbox.tui import model

    project = copy_example(tmp_path / "repo")
    run = build_run(project, "waiting")
    approved = [t for t in run.tasks.values() if t.state == "approved"]
    assert len(approved) == 2 and run.totals.cost_usd is not None
    projected = run.totals.cost_usd * 3 / 2
    assert model.health_line(run) == f"health: projected {model.cost(projected)} · first pass 50%"
    run.status = "done"
    assert model.health_line(run) == ""
