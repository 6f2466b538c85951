"""A role's session history: its sessions, each session's turns, each turn's prompt and result."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from rich.console import Group
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from agentbox.core.agents.sessions import SessionRecord
from agentbox.core.records import TurnRecord
from agentbox.core.runtimes.base import Usage
from agentbox.core.termtext import safe_text
from agentbox.tui import loaders, model
from agentbox.tui import messages as msg
from agentbox.tui.view import view_node

if TYPE_CHECKING:
    from agentbox.tui.view import DashboardView


def turn_tokens(turn: TurnRecord) -> str:
    """A turn's tokens; "unknown" when the tool reported none."""
    tokens = Usage.from_dict(turn.get("usage")).total_tokens
    return "unknown" if tokens is None else model.count(tokens)


def turn_status(turn: TurnRecord) -> Text:
    """ok, or the error kind in red."""
    if turn.get("status") == "ok":
        return Text("ok", style="green")
    return safe_text(turn.get("error_kind") or turn.get("status") or "?", style="red", single_line=True)


def turn_detail(turn: TurnRecord) -> Group:
    """The prompt and what came back."""
    head = Text.assemble((f"turn {turn.get('turn')}", "bold"), "  ", turn_status(turn),
                         f"  · {turn_tokens(turn)} tokens · {float(turn.get('duration_s') or 0):.1f}s · "
                         f"{model.date_time(turn.get('started'))}")
    result = turn.get("text") or turn.get("error") or ""
    return Group(head, Text("\nprompt", style="bold underline"), safe_text(turn.get("prompt") or ""),
                 Text("\nresult", style="bold underline"), safe_text(result))


class SessionHistoryScreen(Screen[None]):
    """Sessions of one role (newest first) → turns → prompt and result; live."""

    BINDINGS = [
        Binding("escape", "app.pop_screen", "back"),
        Binding("r", "resume", "resume (attach)"),
        Binding("t", "talk", "talk in session"),
    ]

    def __init__(self, dashboard: DashboardView, role: str) -> None:
        super().__init__()
        self.dashboard = dashboard
        self.role = role
        self.records: list[SessionRecord] = []
        self.turns: list[TurnRecord] = []
        self._turns_of: tuple[str, float] | None = None

    def compose(self) -> ComposeResult:
        with Horizontal(id="history"):
            yield DataTable(id="session-list", cursor_type="row")
            with Vertical(id="turn-pane"):
                yield DataTable(id="turn-list", cursor_type="row")
                with VerticalScroll(id="turn-detail"):
                    yield Static(Text("no turn selected", style="dim"), id="turn-text")
        yield Footer()

    def on_mount(self) -> None:
        """Columns, titles, and follow the dashboard's sessions."""
        sessions = self.query_one("#session-list", DataTable)
        sessions.border_title = safe_text(f"sessions of {self.role}", single_line=True)
        for column in ("session", "task", "turns", "status", "tokens", "updated"):
            sessions.add_column(column, key=column)
        turns = self.query_one("#turn-list", DataTable)
        turns.border_title = "turns"
        for column in ("turn", "status", "tokens", "time", "started"):
            turns.add_column(column, key=column)
        self.query_one("#turn-detail").border_title = "prompt and result"
        self.watch(view_node(self.dashboard), "sessions", self._sessions_changed, init=True)
        sessions.focus()

    def on_resize(self) -> None:
        """Stack the panes on narrow terminals."""
        self.set_class(self.size.width < 110, "-narrow")

    @property
    def selected(self) -> SessionRecord | None:
        """The highlighted session."""
        table = self.query_one("#session-list", DataTable)
        if not self.records:
            return None
        return self.records[min(table.cursor_row, len(self.records) - 1)]

    def _sessions_changed(self, sessions: dict[str, SessionRecord]) -> None:
        records = sorted((r for r in sessions.values() if r.role == self.role), key=lambda r: r.created, reverse=True)
        table = self.query_one("#session-list", DataTable)
        selected = self.selected.id if self.selected else None
        self.records = records
        table.clear()
        for record in records:
            status = safe_text(record.status, "bold cyan", single_line=True) if record.status == "running" else \
                safe_text(record.last_status or record.status, "green" if record.last_status == "ok" else "red",
                          single_line=True)
            tokens = model.tokens(record.totals.tokens, record.totals.unknown_usage_turns, record.turns)
            table.add_row(safe_text(model.short_id(record.id)), safe_text(record.task_id or "—", single_line=True),
                          str(record.turns), status, tokens,
                          model.month_day_time(record.updated), key=record.id)
        if not records:
            self.query_one("#turn-text", Static).update(safe_text(f"{self.role} has no session yet", "dim"))
            return
        index = next((i for i, r in enumerate(records) if r.id == selected), 0)
        table.move_cursor(row=index, animate=False)
        self._load_turns()

    @on(DataTable.RowHighlighted, "#session-list")
    def _session_highlighted(self) -> None:
        self._load_turns()

    def _load_turns(self) -> None:
        record = self.selected
        if record is None or self._turns_of == (record.id, record.updated):
            return
        self._turns_of = (record.id, record.updated)
        self.run_worker(partial(self._read_turns, record), thread=True, exclusive=True, group="turns",
                        exit_on_error=False)

    def _read_turns(self, record: SessionRecord) -> None:
        self.post_message(loaders.session_turns(self.dashboard.project, record))

    def on_turns_loaded(self, message: msg.TurnsLoaded) -> None:
        """Fill the turns of the highlighted session; show the last one."""
        record = self.selected
        if record is None or record.id != message.session_id:
            return
        self.turns = message.turns
        table = self.query_one("#turn-list", DataTable)
        table.clear()
        for turn in message.turns:
            table.add_row(str(turn.get("turn")), turn_status(turn), turn_tokens(turn),
                          f"{float(turn.get('duration_s') or 0):.1f}s", model.month_day_time(turn.get("started")))
        if message.turns:
            table.move_cursor(row=len(message.turns) - 1, animate=False)
            self._show_turn(len(message.turns) - 1)
        else:
            self.query_one("#turn-text", Static).update(Text("no turn yet", style="dim"))

    @on(DataTable.RowHighlighted, "#turn-list")
    def _turn_highlighted(self, event: DataTable.RowHighlighted) -> None:
        # the table's cursor now, not the event's: a highlight of row 0 posted while the rows were
        # refilled can arrive after the cursor moved to the newest turn
        self._show_turn(event.data_table.cursor_row)

    def _show_turn(self, index: int) -> None:
        if 0 <= index < len(self.turns):
            self.query_one("#turn-text", Static).update(turn_detail(self.turns[index]))

    def action_resume(self) -> None:
        """Attach to the highlighted session (the tool runs interactively, then the dashboard comes back)."""
        if self.selected is not None:
            self.post_message(msg.ActionRequested("attach", self.role, self.selected.id))

    def action_talk(self) -> None:
        """Talk to the member in the highlighted session."""
        self.post_message(msg.ActionRequested("talk", self.role, self.selected.id if self.selected else None))
