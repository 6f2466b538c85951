"""Watch a member work: the live output of its running (else last) turn, as it comes.

A thread worker reads the turn's live log from where it stopped (`core.live.LiveCursor`,
a bounded amount per read) every `POLL_S`, at most one read in flight, and posts what it
read in one message; the handler appends it to a log that keeps `MAX_LINES`. When the
member's turn ends and another one starts, the view moves on to it.
"""

from __future__ import annotations

import time

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, RichLog, Static

from agentbox.core.agents.live import LiveCursor, LiveEvent
from agentbox.core.agents.live_text import render
from agentbox.core.paths import ProjectPaths
from agentbox.core.reports.live_sources import LiveSource, role_source
from agentbox.tui import messages as msg

POLL_S = 0.3
"""How often the live log is read."""
RESOLVE_S = 2.0
"""How often, while nothing new comes, the member's sessions are asked which turn is the one to show."""
MAX_LINES = 2000
"""Lines the view keeps (older ones scroll away)."""
STYLES = {"tool": "bold cyan", "result": "dim", "error": "red", "note": "italic dim", "stderr": "yellow",
          "cut": "bold yellow", "end": "bold"}


def event_text(event: LiveEvent) -> Text:
    """One event as a styled Text (plain text: what an agent wrote is never read as markup)."""
    return Text(render(event), style=STYLES.get(event.kind, ""))


class LiveScreen(Screen[None]):
    """The live output of one member."""

    BINDINGS = [Binding("escape", "app.pop_screen", "back"), Binding("c", "clear", "clear")]

    def __init__(self, project: ProjectPaths, role: str, *, poll_s: float = POLL_S) -> None:
        super().__init__()
        self.project = project
        self.role = role
        self.poll_s = poll_s
        self._source: LiveSource | None = None
        self._cursor: LiveCursor | None = None
        self._reading = False
        self._shown_turn = ""
        self._resolved_at = 0.0

    def compose(self) -> ComposeResult:
        yield Static(Text(f"{self.role}: looking for its turn…", style="dim"), id="live-title")
        yield RichLog(id="live-log", max_lines=MAX_LINES, markup=False, highlight=False, wrap=True)
        yield Footer()

    def on_mount(self) -> None:
        """Start reading."""
        self.query_one("#live-log").border_title = f"live output of {self.role}"
        self._poll()
        self.set_interval(self.poll_s, self._poll)

    def _poll(self) -> None:
        if self._reading:  # one read at a time: the next tick reads what came meanwhile
            return
        self._reading = True
        self.run_worker(self._read, thread=True, group="live-read", exit_on_error=False)

    def _read(self) -> None:
        """Thread body: (re)find the member's turn when needed, read what its live log gained."""
        try:
            switched = False
            now = time.monotonic()
            if self._source is None or self._cursor is None or now - self._resolved_at >= RESOLVE_S:
                self._resolved_at = now
                found = role_source(self.project, self.role)
                if found is not None and (self._source is None or (found.session.id, found.turn) !=
                                          (self._source.session.id, self._source.turn)):
                    self._source, self._cursor, switched = found, LiveCursor(found.directory), True
                elif found is not None:
                    self._source = found
            source, cursor = self._source, self._cursor
            if source is None or cursor is None:
                self.post_message(msg.LiveOutputRead("", f"{self.role} has not run a turn yet"))
                return
            events = cursor.read().events
            if events:
                self._resolved_at = time.monotonic()  # output is coming: this is still the turn to show
            state = "running" if source.running and not cursor.ended else "finished"
            heading = f"{self.role} · session {source.session.id[:8]} · turn {source.turn} · {state}"
            self.post_message(msg.LiveOutputRead(f"{source.session.id}:{source.turn}", heading, events, switched))
        finally:
            self._reading = False

    def on_live_output_read(self, message: msg.LiveOutputRead) -> None:
        """Show the heading; append the new events (a new turn starts under a rule)."""
        self.query_one("#live-title", Static).update(Text(message.heading, style="bold"))
        log = self.query_one("#live-log", RichLog)
        if message.switched and self._shown_turn:
            log.write(Text("─" * 20 + " next turn", style="dim"))
        if message.turn:
            self._shown_turn = message.turn
        for event in message.events:
            log.write(event_text(event))

    def action_clear(self) -> None:
        """Clear what is shown (new output keeps coming)."""
        self.query_one("#live-log", RichLog).clear()
