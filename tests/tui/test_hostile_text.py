"""What agents write reaches the dashboard as text: no escape sequence gets to the terminal, no markup works.

A run whose lead planned a brief, whose worker asked a question, wrote a file (content
and name) and replied with escape sequences and markup, all made by the engine's own code
(tests/tui/builders.py). Every screen that shows them is rendered and its cells read:
no ESC, BEL or C1 character is among them, the sequences are shown (`␛]52;…`), and the
markup is shown as the text it is.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot

from agentbox.core.paths import ProjectPaths
from agentbox.tui.app import AgentboxApp
from tests.tui.builders import RunBuilder, approve, copy_example
from tests.tui.conftest import dashboard_loaded, frozen_app, wait_for

OSC52 = "\x1b]52;c;SGVsbG8=\x07"
HOSTILE = f"{OSC52}\x1b[2J\x9b6n[bold red]MARKUP[/] [@click=app.quit]click[/]\rend\n12:00:00 forged line"
FILE_NAME = "src/evil\x1b[2J.py"


def hostile_run(root: Path) -> ProjectPaths:
    """The demo crew's run, with what its agents said made hostile; a question waits."""
    project = copy_example(root)
    with pytest.MonkeyPatch.context() as monkeypatch:
        b = RunBuilder(project, monkeypatch)
        b.engine.mode.start()
        b.settle()
        plan = {"notes": HOSTILE, "tasks": [
            {"id": "evil", "assignee": "builder", "brief": f"brief {HOSTILE}",
             "acceptance": [{"id": "a1", "criterion": f"criterion {HOSTILE}"}], "writes": ["src/**"]},
            {"id": "ask", "assignee": "tester", "brief": "ask something", "writes": ["tests/**"],
             "acceptance": [{"id": "a1", "criterion": "asked"}]}]}
        b.finish(b.start("plan"), plan)
        evil = b.start("work", "evil")
        ask = b.start("work", "ask")
        (project.root / "src").mkdir()
        (project.root / FILE_NAME).write_text(f"# made by an agent\nVALUE = '{HOSTILE}'\n")
        b.finish(evil, {"summary": f"summary {HOSTILE}", "artifacts": [FILE_NAME], "evidence": [HOSTILE]})
        b.finish(b.start("review", "evil"), {**approve("evil"), "checklist": [
            {"item": HOSTILE, "acceptance_id": "a1", "pass": True, "evidence": HOSTILE}]})
        b.finish(ask, {"summary": "a decision", "question": f"question {HOSTILE}"})
    return project


def screen_cells(app: AgentboxApp) -> str:
    """Every character the current screen would send to the terminal, styles aside."""
    return "\n".join("".join(segment.text for segment in strip) for strip in app.screen._compositor.render_strips())


def assert_shown_not_obeyed(cells: str, *expected: str) -> None:
    raw = sorted({c for c in cells if ord(c) < 0x20 and c != "\n" or 0x7F <= ord(c) < 0xA0})
    assert raw == [], f"raw control characters on screen: {raw!r}"
    for text in expected:
        assert text in cells, f"{text!r} is not on screen:\n{cells}"


async def test_no_escape_sequence_reaches_the_terminal(tmp_path: Path) -> None:
    app = frozen_app(hostile_run(tmp_path / "repo"))
    async with app.run_test(size=(200, 60), notifications=True) as pilot:
        await dashboard_loaded(pilot)
        board = app.dashboard
        assert board is not None
        await wait_for(pilot, lambda: "made by an agent" in screen_cells(app), "the artifact preview")
        assert_shown_not_obeyed(screen_cells(app), "␛]52;c;SGVsbG8=␇", "evil␛[2J.py", "WAITING ON YOU")

        board.action_task_detail("evil")
        await wait_for(pilot, lambda: getattr(app.screen, "events_shown", None) is not None, "the task's events")
        await pilot.pause()
        assert_shown_not_obeyed(screen_cells(app), "brief ␛]52;c;", "[bold red]MARKUP[/]", "criterion ␛]52;c;")
        app.pop_screen()

        board.action_history("builder")
        await wait_for(pilot, lambda: getattr(app.screen, "turns", None), "the builder's turns")
        await pilot.pause()
        assert_shown_not_obeyed(screen_cells(app), "␛]52;c;")
        app.pop_screen()

        board.action_answer()
        await pilot.pause()
        await pilot.pause()
        assert_shown_not_obeyed(screen_cells(app), "question ␛]52;c;", "[@click=app.quit]click[/]")
        await pilot.press("escape")

        app.notify(f"a toast {HOSTILE}")
        await wait_for(pilot, lambda: "a toast" in screen_cells(app), "the toast")
        assert_shown_not_obeyed(screen_cells(app), "a toast ␛]52;c;")
        assert app.is_running  # no markup's action ran


def test_hostile_dashboard_snapshot(tmp_path: Path, snap_compare: Callable[..., bool]) -> None:
    """The dashboard showing what hostile agents wrote: visible sequences, literal markup."""

    async def loaded(pilot: Pilot[None]) -> None:
        await dashboard_loaded(pilot)
        await wait_for(pilot, lambda: "made by an agent" in screen_cells(pilot.app), "the artifact preview")  # type: ignore[arg-type]

    assert snap_compare(frozen_app(hostile_run(tmp_path / "repo")), terminal_size=(160, 44), run_before=loaded)


def test_a_patch_is_drawn_with_its_escapes_visible() -> None:
    from agentbox.tui.diffs import file_heading, render_patch

    patch = ("diff --git a/src/x.py b/src/x.py\nindex 1111111..2222222 100644\n--- a/src/x.py\n+++ b/src/x.py\n"
             f"@@ -1 +1 @@ def f(): {OSC52}\n-OLD = 1\n+VALUE = '{OSC52}\x1b[2J\r'\n")
    rendered = render_patch(patch)
    assert [r.file.path for r in rendered] == ["src/x.py"]
    drawn = file_heading(rendered[0].file).plain + "\n" + rendered[0].body.plain
    assert_shown_not_obeyed(drawn, "def f(): ␛]52;c;SGVsbG8=␇", "VALUE = '␛]52;c;SGVsbG8=␇␛[2J␍'")
