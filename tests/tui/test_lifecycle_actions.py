"""The dashboard's run lifecycle: attach from the palette, a run whose engine is gone, discard."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from agentbox.core.paths import ProjectPaths
from agentbox.tui.factory import make_app
from tests.conftest import TOOLS_BIN, run_cli
from tests.tui.builders import copy_example
from tests.tui.conftest import dashboard_loaded, wait_for


def _notes(app: object) -> list[str]:
    return [f"{n.title}: {n.message}" for n in app._notifications]  # type: ignore[attr-defined]


@pytest.mark.bwrap
@pytest.mark.realcli
async def test_attach_from_the_palette_to_claude_with_two_project_folders(
        project: ProjectPaths, agent_box_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{TOOLS_BIN}:{__import__('os').environ['PATH']}")
    assert run_cli("profile", "add", "cl", "--from", "claude").code == 0
    for other in ("-home-someone-one", "-home-someone-two"):
        (agent_box_home / "profiles" / "cl" / "dot-claude" / "projects" / other).mkdir(parents=True)
    added = run_cli("--project", str(project.root), "role", "add", "clauder", "--profile", "cl")
    assert added.code == 0, added.err
    app = make_app(project, live=False, sample_interval_s=None)
    async with app.run_test(size=(140, 40)) as pilot:
        await dashboard_loaded(pilot)
        board = app.dashboard
        await pilot.press("ctrl+p")
        await pilot.pause(0.2)
        await pilot.press(*"Attach to clauder")
        await pilot.pause(0.5)
        await pilot.press("enter")
        # the headless driver cannot hand the terminal over: the dashboard says so and stays
        await wait_for(pilot, lambda: any("cannot suspend" in n for n in _notes(app)), "the suspend notice")
        assert app.is_running and app.screen is board
    assert list((project.sessions_dir / "clauder").glob("*.json")), "the attached session was recorded"


@pytest.mark.bwrap
async def test_the_dashboard_offers_resume_for_a_run_whose_engine_is_gone(tmp_path: Path) -> None:
    from agentbox.core.engine.run_store import RunStore
    from agentbox.tui import action_table
    from agentbox.tui.commands import dashboard_commands
    from agentbox.tui.widgets.header import RunHeader
    from tests.engine.lifecycle_support import dead_engine_run, engines_stopped

    project = copy_example(tmp_path / "repo")
    run_id = dead_engine_run(project.root)
    with engines_stopped(project.root):
        app = make_app(project, sample_interval_s=None)
        async with app.run_test(size=(160, 40)) as pilot:
            await dashboard_loaded(pilot)
            board = app.dashboard
            assert board is not None and board.run is not None and board.run.id == run_id
            await wait_for(pilot, lambda: board.engine == "stopped", "the dead engine noticed")
            header = str(board.query_one(RunHeader).render().renderables[1])  # type: ignore[attr-defined]
            assert "engine not running" in header and "R: resume" in header and "waiting_user" in header
            assert board.check_action("resume_engine", ()) and action_table.enabled("resume_engine", board.run, "stopped")
            titles = [title for title, _, _ in dashboard_commands(board)]
            assert "Resume the engine of the run" in titles
            # an answer while no engine runs is kept, and the dashboard says the engine must go on
            (cp,) = board.run.open_checkpoints()
            board.send("answer", cp.id, checkpoint=cp.id, text="approve")
            await wait_for(pilot, lambda: any("press R" in n for n in _notes(app)), "the answer's notice")
            await pilot.press("R")
            await wait_for(pilot, lambda: any("runs again (pid" in n for n in _notes(app)), "the resume's notice")
            await wait_for(pilot, lambda: RunStore(project).load(run_id).status == "done", "the resumed run's end",
                           timeout=60)
            await wait_for(pilot, lambda: board.engine == "ended", "the ended run")
            assert not board.check_action("resume_engine", ())


@pytest.mark.bwrap
async def test_discard_from_the_palette_asks_then_removes_the_run(tmp_path: Path) -> None:
    from agentbox.tui.screens.modals import ConfirmDialog
    from tests.cli.test_worktree_cli import finished_run
    from tests.engine.test_worktree_runs import git

    project = copy_example(tmp_path / "repo")
    root = project.root
    run_id = finished_run(root)
    app = make_app(project, sample_interval_s=None)
    async with app.run_test(size=(160, 40)) as pilot:
        await dashboard_loaded(pilot)
        board = app.dashboard
        assert board is not None and board.run_id == run_id
        await pilot.press("ctrl+p")
        await pilot.pause(0.2)
        await pilot.press(*"Discard run")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmDialog), "the confirmation")
        shown = str(app.screen.question)  # type: ignore[attr-defined]
        assert f"branch      agentbox/{run_id}" in shown and f"runs/{run_id}" in shown
        await pilot.press("y")
        await wait_for(pilot, lambda: any(n.startswith(f"discard: discarded run {run_id}") for n in _notes(app)),
                       "the discard's notice")
        await wait_for(pilot, lambda: board.run_id is None and board.run_ids == (), "the run gone from the dashboard")
    assert not (root / ".agent-box" / "runs" / run_id).exists()
    assert git(root, "for-each-ref", f"refs/heads/agentbox/{run_id}") == ""


async def test_a_run_discarded_elsewhere_does_not_break_the_engine_probe(
        project_at: Callable[[str], ProjectPaths]) -> None:
    from agentbox.core.admin import discard
    from tests.tui.builders import RUN_ID

    project = project_at("waiting")  # a run no engine drives
    app = make_app(project, live=False, sample_interval_s=None)
    async with app.run_test(size=(140, 40)) as pilot:
        await dashboard_loaded(pilot)
        board = app.dashboard
        assert board is not None
        await wait_for(pilot, lambda: board.engine == "stopped", "the missing engine noticed")
        discard.discard(project, RUN_ID)  # another terminal throws it away
        board._check_engine()  # the next tick's probe, before the runs are listed again
        await pilot.pause(0.1)
        assert app.is_running
