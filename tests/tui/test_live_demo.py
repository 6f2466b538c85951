"""The TUI driving real scripted agents under bubblewrap: the demo run end to end, and talking to a member."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from textual.message import Message
from textual.widgets import Input

from agentbox.core import runs
from agentbox.core.admin.demo import DEMO_GOAL
from agentbox.core.agents.sessions import SessionStore
from agentbox.core.config import project as project_mod
from agentbox.core.engine.models import TERMINAL_RUN_STATES
from agentbox.core.paths import ProjectPaths
from agentbox.tui import messages as msg
from agentbox.tui.factory import make_app
from agentbox.tui.screens.dashboard import DashboardScreen
from agentbox.tui.screens.modals import AnswerDialog, StartRunDialog
from agentbox.tui.screens.sessions import SessionHistoryScreen
from agentbox.tui.screens.talk import TalkScreen
from agentbox.tui.widgets.members import MembersTable
from tests.tui.conftest import dashboard_loaded, log_text, plain, queue_states, record, wait_for

pytestmark = pytest.mark.bwrap


def stop_engine(project: ProjectPaths, run_id: str) -> None:
    """Cancel the run if a failed test left it going, and wait for its engine to let go."""
    if runs.load(project, run_id).status not in TERMINAL_RUN_STATES:
        runs.send_command(project, run_id, {"action": "cancel_run", "note": "test teardown"})
    deadline = time.monotonic() + 10
    while runs.engine_alive(project, run_id) and time.monotonic() < deadline:
        time.sleep(0.1)


async def test_start_the_demo_run_and_watch_it_reach_done(project: ProjectPaths) -> None:
    app = make_app(project, sample_interval_s=0.3)
    async with app.run_test(size=(160, 48)) as pilot:
        await dashboard_loaded(pilot)
        board = app.dashboard
        assert board is not None and board.run is None
        seen: list[Message] = record(board)
        await pilot.press("n")
        await wait_for(pilot, lambda: isinstance(app.screen, StartRunDialog), "the start-run dialog")
        app.screen.query_one("#goal", Input).value = DEMO_GOAL
        await pilot.press("enter")
        await wait_for(pilot, lambda: any(isinstance(m, msg.RunStarted) for m in seen), "the run to start")
        run_id = next(m for m in seen if isinstance(m, msg.RunStarted)).run_id
        try:
            states_seen: set[tuple[str, str]] = set()
            members = board.query_one(MembersTable)

            def question_open() -> bool:
                states_seen.update((row.role, row.state) for row in members.rows_shown)
                return bool(board.run and any(c.status == "open" for c in board.run.checkpoints.values()))

            await wait_for(pilot, question_open, "the builder's question", timeout=40)
            assert any(isinstance(m, msg.CheckpointOpened) for m in seen)
            assert ("builder", "running") in states_seen and ("reviewer", "running") in states_seen
            await wait_for(pilot, lambda: members.row_of("builder") and members.row_of("builder").state == "waiting",
                           "the builder shown as waiting")
            await pilot.press("a")
            await wait_for(pilot, lambda: isinstance(app.screen, AnswerDialog), "the answer dialog")
            app.screen.query_one("#answer", Input).value = "English, please"
            await pilot.press("enter")
            await wait_for(pilot, lambda: board.run is not None and board.run.status == "done", "the run to finish",
                           timeout=40)
            await wait_for(pilot, lambda: "run done" in log_text(board), "the end of the decision log")
            assert queue_states(board) == {"greet": "approved", "tests": "approved", "docs": "approved"}
            greet = board.run.tasks["greet"]
            assert [v.verdict for v in greet.verdicts] == ["reject", "approve"] and greet.attempts == 2
            await wait_for(pilot, lambda: any(e["path"].endswith("synthesis.md") for e in board.manifest),
                           "the synthesis in the artifacts")
            await wait_for(pilot, lambda: all(r.state == "idle" for r in members.rows_shown), "every member idle")
            assert "usage.md" in str([n.label for n in board.query_one("#artifact-tree").root.children[0].children]) \
                or any(e["path"].endswith("docs/usage.md") for e in board.manifest)

            board.action_history("lead")
            await wait_for(pilot, lambda: isinstance(app.screen, SessionHistoryScreen), "the lead's history")
            history = app.screen
            assert isinstance(history, SessionHistoryScreen)
            await wait_for(pilot, lambda: len(history.turns) == 2, "the plan and synthesis turns")
            assert "[agentbox:synthesis" in plain(history.query_one("#turn-text"))
        finally:
            stop_engine(project, run_id)


SLOW_PROFILE = """\
name: slowpoke
runtime: {tool: scripted, scenario: scenario.yaml}
sandbox: {network: false}
"""
SLOW_SCENARIO = """\
fallback:
  delay_s: 1.5
  reply: "Hello, I am slow but I answer: {prompt}"
"""


async def test_talk_to_a_member(project: ProjectPaths, agent_box_home: Path) -> None:
    """A member that takes 1.5 s to answer: the UI stays live, the answer lands when it comes."""
    profile_dir = agent_box_home / "profiles" / "slowpoke"
    profile_dir.mkdir(parents=True)
    (profile_dir / "profile.yaml").write_text(SLOW_PROFILE)
    (profile_dir / "scenario.yaml").write_text(SLOW_SCENARIO)
    project_mod.add_role(project, "slow", "slowpoke", writes=[])
    app = make_app(project, sample_interval_s=0.3)
    async with app.run_test(size=(120, 36)) as pilot:
        await dashboard_loaded(pilot)
        board = app.dashboard
        assert board is not None
        board.action_talk("slow")
        await wait_for(pilot, lambda: isinstance(app.screen, TalkScreen) and app.screen.is_running, "the talk screen")
        talk = app.screen
        assert isinstance(talk, TalkScreen)
        replies: list[Message] = record(talk)
        await pilot.press(*"hello")
        await pilot.press("enter")
        await wait_for(pilot, lambda: board.query_one(MembersTable).row_of("slow").state == "running",
                       "the member shown running while it thinks")
        assert talk.busy
        await pilot.press("escape")  # the UI stays live while the member thinks
        assert isinstance(app.screen, DashboardScreen)
        assert not any(isinstance(m, msg.MemberReplied) for m in replies)
        await wait_for(pilot, lambda: any(isinstance(m, msg.MemberReplied) for m in replies), "the answer",
                       timeout=30)
        result = next(m for m in replies if isinstance(m, msg.MemberReplied)).result
        assert result.ok and "I am slow but I answer: hello" in result.text
        assert not talk.busy and talk.session_id == result.session_id
        await wait_for(pilot, lambda: any(n.title == "talk" for n in app._notifications), "the 'answered' notice")
        board.action_talk("slow")
        await wait_for(pilot, lambda: app.screen is talk, "back on the same conversation")
        transcript = "\n".join(plain(entry) for entry in talk.query(".talk-entry"))
        assert "hello" in transcript and "I am slow but I answer" in transcript
        recorded = SessionStore(project.sessions_dir).list("slow")
        assert [r.id for r in recorded] == [result.session_id] and recorded[0].turns == 1
        await wait_for(pilot, lambda: board.sessions.get(result.session_id), "the dashboard to see the new session")

    again = make_app(project, sample_interval_s=None)  # a new dashboard: the talk opens with the session so far
    async with again.run_test(size=(120, 36)) as pilot:
        await dashboard_loaded(pilot)
        assert again.dashboard is not None
        again.dashboard.action_talk("slow")
        await wait_for(pilot, lambda: isinstance(again.screen, TalkScreen) and again.screen.is_running, "the talk")
        reopened = again.screen
        assert isinstance(reopened, TalkScreen) and reopened.session_id == result.session_id
        await wait_for(pilot, lambda: len(reopened.query(".talk-past")) == 2, "the session's past turn")
        past = [plain(entry) for entry in reopened.query(".talk-past")]
        assert past[0].startswith("you") and "hello" in past[0]
        assert past[1].startswith("slow") and "I am slow but I answer: hello" in past[1]
