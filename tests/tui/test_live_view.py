"""The dashboard's live view of a member: follows its turn's live log, bounded, escape-safe."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from textual.widgets import RichLog, Static

from agentbox.core.agents.live import LiveWriter
from agentbox.core.agents.sessions import SessionRecord, SessionStore, now
from agentbox.core.paths import ProjectPaths
from agentbox.core.runtimes.scripted import ScriptedAdapter
from agentbox.tui import messages as msg
from agentbox.tui.factory import make_app
from agentbox.tui.screens.live import MAX_LINES, LiveScreen
from tests.tui.conftest import dashboard_loaded, plain, record, wait_for


def running_turn(project: ProjectPaths, role: str) -> tuple[SessionStore, SessionRecord, LiveWriter]:
    """A session of `role` whose turn 1 is in flight, and the writing end of its live log (as invoke makes it)."""
    store = SessionStore(project.sessions_dir)
    created = now()
    session = SessionRecord(id=str(uuid.uuid4()), owner=role, role=role, profile="demo-worker", tool="scripted",
                            cwd=str(project.root), created=created, updated=created, status="running",
                            running={"turn": 1, "pid": None, "started": created})
    store.save(session)
    return store, session, LiveWriter(store.logs_dir(session) / "turn-1.live", ScriptedAdapter().display)


def lines_of(log: RichLog) -> list[str]:
    return [strip.text for strip in log.lines]


def event(kind: str, text: str, **more: object) -> bytes:
    return (json.dumps({"type": kind, "text": text, **more}) + "\n").encode()


async def test_live_view_follows_the_members_turn(project: ProjectPaths, tmp_path: Path) -> None:
    store, session, writer = running_turn(project, "builder")
    writer.feed_stdout(event("text", "reading the tree") + event("tool", "Bash", input={"command": "ls src"}))
    app = make_app(project, sample_interval_s=None)
    async with app.run_test(size=(120, 30)) as pilot:
        await dashboard_loaded(pilot)
        board = app.dashboard
        assert board is not None
        board.action_live("builder")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, LiveScreen)
        seen = record(screen)
        log = screen.query_one("#live-log", RichLog)
        await wait_for(pilot, lambda: "→ Bash: ls src" in lines_of(log), "the events already written")
        assert lines_of(log)[:2] == ["reading the tree", "→ Bash: ls src"]
        assert "turn 1 · running" in plain(screen.query_one("#live-title", Static))

        # more output while it runs, hostile bytes included: shown as visible escapes
        writer.feed_stdout(event("tool_result", "main.py") + event("text", "now \u001b[2J\u001b[31mred\u0007"))
        await wait_for(pilot, lambda: any("red" in line for line in lines_of(log)), "the new events")
        assert "  ← main.py" in lines_of(log)
        assert "now ␛[2J␛[31mred␇" in lines_of(log)
        assert not any("\x1b" in line or "\x07" in line for line in lines_of(log))

        # a flood: the view keeps MAX_LINES, and arrives in a few reads, not one update per event
        seen.clear()
        for n in range(MAX_LINES + 500):
            writer.feed_stdout(event("text", f"line {n}"))
        writer.end("ok · 12 tokens · 0.5s")
        session.status, session.running = "idle", None
        store.save(session)
        await wait_for(pilot, lambda: lines_of(log)[-1:] == ["— turn ended: ok · 12 tokens · 0.5s"], "the end")
        assert len(log.lines) <= MAX_LINES
        assert lines_of(log)[-2] == f"line {MAX_LINES + 499}"
        reads = [m for m in seen if isinstance(m, msg.LiveOutputRead) and m.events]
        assert 1 <= len(reads) <= 5, len(reads)
        await wait_for(pilot, lambda: "turn 1 · finished" in plain(screen.query_one("#live-title", Static)),
                       "the heading to say it finished")
        await pilot.press("escape")
        assert app.screen is board


async def test_live_view_of_a_member_with_no_turn(project: ProjectPaths) -> None:
    app = make_app(project, sample_interval_s=None)
    async with app.run_test(size=(120, 30)) as pilot:
        await dashboard_loaded(pilot)
        board = app.dashboard
        assert board is not None and board.selected_role is not None
        await pilot.press("l")  # the key opens the highlighted member's live view
        screen = app.screen
        assert isinstance(screen, LiveScreen) and screen.role == board.selected_role
        title = screen.query_one("#live-title", Static)
        await wait_for(pilot, lambda: f"{screen.role} has not run a turn yet" in plain(title), "the empty state")
