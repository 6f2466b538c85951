"""The dashboard's run lifecycle: attach from the palette, a run whose engine is gone, discard."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentbox.core.paths import ProjectPaths
from agentbox.tui.factory import make_app
from tests.conftest import TOOLS_BIN, run_cli
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
