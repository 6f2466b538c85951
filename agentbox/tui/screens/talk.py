"""Talk to one member: a prompt box whose turns run through invoke in the member's session.

The turn runs in a worker of this screen, so the dashboard keeps updating while the
member thinks; the screen is kept installed, so leaving it does not stop the turn and
the answer is there when you come back (a notification says when it arrives).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from rich.console import Group
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import Footer, Input, LoadingIndicator, Static

from agentbox.core.errors import AgentboxError
from agentbox.core.paths import ProjectPaths
from agentbox.core.termtext import for_line, safe_text
from agentbox.tui import loaders, model
from agentbox.tui import messages as msg


def reply_block(role: str, result: Any) -> Group:
    """The member's answer (or what went wrong) with its tokens and duration."""
    tokens = result.usage.total_tokens
    meta = f"  {'unknown' if tokens is None else model.count(tokens)} tokens · {result.duration_s:.1f}s"
    if result.ok:
        return Group(Text.assemble((for_line(role), "bold cyan"), (meta, "dim")),
                     safe_text(result.text.strip() or "(empty answer)"))
    return Group(Text.assemble((for_line(role), "bold red"), (f"  {result.error_kind}", "red"), (meta, "dim")),
                 safe_text(str(result.error or result.text or "").strip()))


TURNS_SHOWN = 30
"""Turns of the session so far shown when a talk opens (the newest)."""
TURN_TEXT_SHOWN = 2000
"""Characters of a past prompt or answer shown (the session history screen has them whole)."""


def _clipped(text: str) -> str:
    text = text.strip()
    return text if len(text) <= TURN_TEXT_SHOWN else text[:TURN_TEXT_SHOWN] + " …"


def past_turn_blocks(role: str, turns: list[dict[str, Any]]) -> list[Any]:
    """The session so far, as the talk shows it: your prompt, then the member's answer, per turn."""
    blocks: list[Any] = []
    if len(turns) > TURNS_SHOWN:
        blocks.append(Text(f"… {len(turns) - TURNS_SHOWN} earlier turn(s): the session history (h) has them",
                           style="dim"))
    for turn in turns[-TURNS_SHOWN:]:
        blocks.append(Group(Text("you", style="bold"), safe_text(_clipped(str(turn.get("prompt") or "")))))
        answer = str(turn.get("text") or turn.get("error") or "")
        style = "bold cyan" if turn.get("status") in (None, "ok") else "bold red"
        blocks.append(Group(safe_text(role, style, single_line=True), safe_text(_clipped(answer) or "(empty answer)")))
    return blocks


class TalkScreen(Screen[None]):
    """A conversation with one member, resuming its session."""

    BINDINGS = [Binding("escape", "app.pop_screen", "back"), Binding("ctrl+n", "new_session", "new session")]

    busy: reactive[bool] = reactive(False)

    def __init__(self, project: ProjectPaths, role: str, session_id: str | None) -> None:
        super().__init__()
        self.project = project
        self.role = role
        self.session_id = session_id

    def compose(self) -> ComposeResult:
        yield Static(id="talk-title")
        yield VerticalScroll(id="transcript")
        yield LoadingIndicator(id="talk-busy")
        yield Input(placeholder=f"say something to {self.role} (enter sends)", id="prompt")
        yield Footer()

    def on_mount(self) -> None:
        """Say which session this resumes."""
        self.query_one("#transcript").border_title = safe_text(f"talk to {self.role}", single_line=True)  # type: ignore[assignment]
        self._title()
        self._read_history()
        self.query_one("#prompt", Input).focus()

    def _read_history(self) -> None:
        """Show the session so far (read in a thread)."""
        if self.session_id:
            self.run_worker(partial(self._load_turns, self.session_id), thread=True, exclusive=True,
                            group="talk-history", exit_on_error=False)

    def _load_turns(self, session_id: str) -> None:
        self.post_message(loaders.session_turns_by_id(self.project, session_id))

    def on_turns_loaded(self, message: msg.TurnsLoaded) -> None:
        """The session's past turns arrived: they go above anything said since."""
        if message.session_id != self.session_id or not message.turns:
            return
        transcript = self.query_one("#transcript", VerticalScroll)
        entries = [Static(block, classes="talk-entry talk-past") for block in past_turn_blocks(self.role, message.turns)]
        transcript.mount_all(entries, before=0) if transcript.children else transcript.mount_all(entries)
        transcript.scroll_end(animate=False)

    def _title(self) -> None:
        session = f"resuming session {model.short_id(self.session_id)}" if self.session_id else "a new session"
        self.query_one("#talk-title", Static).update(
            Text.assemble(("talk to ", "dim"), (for_line(self.role), "bold cyan"), (f" · {session}", "dim")))

    def use_session(self, session_id: str) -> None:
        """Continue in another session of this member."""
        if not self.busy and session_id != self.session_id:
            self.session_id = session_id
            self._title()
            for past in self.query(".talk-past"):
                past.remove()
            self._read_history()

    def watch_busy(self, busy: bool) -> None:
        """Show that the member is working on an answer."""
        self.query_one("#talk-busy").display = busy

    def action_new_session(self) -> None:
        """The next prompt starts a new session."""
        if self.busy:
            self.notify("wait for the answer first", severity="warning")
            return
        self.session_id = None
        self._title()

    @on(Input.Submitted, "#prompt")
    def _send(self, event: Input.Submitted) -> None:
        prompt = event.value.strip()
        if not prompt:
            return
        if self.busy:
            self.notify(f"{self.role} is still answering", severity="warning")
            return
        event.input.value = ""
        self._append(Group(Text("you", style="bold"), safe_text(prompt)))
        self.busy = True
        self.run_worker(self._ask(prompt, self.session_id), group="talk", name=f"talk to {self.role}",
                        exit_on_error=False)

    async def _ask(self, prompt: str, session_id: str | None) -> None:
        """One turn through invoke (async: the UI stays live)."""
        from agentbox.core.agents import resolve as services
        from agentbox.core.agents.invoke import invoke

        try:
            agent = services.role_agent(self.project, self.role)
            result = await invoke(agent, prompt, session_id)
        except AgentboxError as exc:
            self.post_message(msg.ActionFailed(f"talk to {self.role}", exc.message))
            return
        self.post_message(msg.MemberReplied(self.role, prompt, result))

    def on_member_replied(self, message: msg.MemberReplied) -> None:
        """Show the answer; continue in its session from now on."""
        self.busy = False
        self.session_id = message.result.session_id or self.session_id
        self._title()
        self._append(reply_block(self.role, message.result))
        if not self.is_current:
            self.app.notify(f"{self.role} answered", title="talk")

    def on_action_failed(self, message: msg.ActionFailed) -> None:
        """The turn could not start (busy session, no sandbox...)."""
        self.busy = False
        self._append(safe_text(f"{message.what}: {message.error}", style="red"))

    def _append(self, renderable: Any) -> None:
        transcript = self.query_one("#transcript", VerticalScroll)
        transcript.mount(Static(renderable, classes="talk-entry"))
        transcript.scroll_end(animate=False)
