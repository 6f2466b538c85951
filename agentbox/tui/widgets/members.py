"""The crew at work: one row per member with its state, task, session, tokens and process load."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import events
from textual.reactive import var
from textual.widgets import DataTable

from agentbox.core.engine.models import Run
from agentbox.core.termtext import for_line
from agentbox.tui import model
from agentbox.tui.model import CrewInfo, MemberRow

if TYPE_CHECKING:
    from agentbox.core.agents.sessions import SessionRecord
    from agentbox.core.reports.monitor import ProcessSample

WIDE_COLUMNS = ("role", "profile", "tool", "state", "task", "session", "tokens", "cpu", "mem")
NARROW_COLUMNS = ("role", "profile", "state", "task", "session", "tokens", "cpu", "mem")


class MembersTable(DataTable[Any]):
    """Members of the crew; the highlighted row is the target of talk, history and attach."""

    # inputs of the rows, not of the paint: a change schedules one rebuild, which repaints
    # only when the rows it makes differ from the ones shown
    run: var[Run | None] = var(None, always_update=True)
    crew: var[CrewInfo | None] = var(None, always_update=True)
    sessions: var[dict[str, SessionRecord]] = var(dict, always_update=True)
    samples: var[dict[str, ProcessSample]] = var(dict, always_update=True)
    narrow: var[bool] = var(False)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)
        self.rows_shown: list[MemberRow] = []
        self._columns: tuple[str, ...] = ()
        self._widths: tuple[int, ...] = ()
        self._scheduled = False
        self._user_chose = False

    @property
    def selected_role(self) -> str | None:
        """The role of the highlighted row."""
        if not self.rows_shown:
            return None
        return self.rows_shown[min(self.cursor_row, len(self.rows_shown) - 1)].role

    def row_of(self, role: str) -> MemberRow | None:
        """The row shown for `role`."""
        return next((r for r in self.rows_shown if r.role == role), None)

    def _chose(self) -> None:
        self._user_chose = True

    def action_cursor_up(self) -> None:
        """Move up; from now on the highlight follows this member across updates."""
        self._chose()
        super().action_cursor_up()

    def action_cursor_down(self) -> None:
        """Move down; from now on the highlight follows this member across updates."""
        self._chose()
        super().action_cursor_down()

    async def _on_click(self, event: events.Click) -> None:
        self._chose()
        await super()._on_click(event)

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            self.call_after_refresh(self._rebuild)

    watch_run = watch_crew = watch_sessions = watch_samples = watch_narrow = lambda self, _value: self._schedule()  # noqa: E731

    def _rebuild(self) -> None:
        self._scheduled = False
        rows = model.member_rows(self.crew, self.run, self.sessions, self.samples)
        columns = member_columns(rows, narrow=self.narrow)
        if rows == self.rows_shown and columns == self._columns:
            return
        # until the person picks a member the top row (the busiest) stays highlighted, so
        # what is highlighted never depends on the order in which the first reads landed
        selected = self.selected_role if self._user_chose else None
        cells = [self._cells(row) for row in rows]
        # the columns are sized here, from the rows about to be shown, rather than by the
        # table when the app is next idle: a frame painted in between would show the
        # header and the rows at different widths
        widths = tuple(max([len(name)] + [line[name].cell_len for line in cells]) for name in columns)
        if (columns, widths) != (self._columns, self._widths):
            self.clear(columns=True)
            for name, width in zip(columns, widths, strict=True):
                self.add_column(name, key=name, width=width)
            self._columns, self._widths = columns, widths
        else:
            self.clear()
        for line, row in zip(cells, rows, strict=True):
            self.add_row(*(line[c] for c in columns), key=row.role)
        self.rows_shown = rows
        index = next((i for i, r in enumerate(rows) if r.role == selected), 0) if selected else 0
        self.move_cursor(row=index, animate=False)

    @staticmethod
    def _cells(row: MemberRow) -> dict[str, Text]:
        return {
            "role": Text(for_line(row.role), style="bold"), "profile": Text(for_line(row.profile)),
            "tool": Text(for_line(row.tool)),
            "state": Text(row.state, style=model.MEMBER_STATE_STYLE.get(row.state, "")), "task": Text(for_line(row.task)),
            "session": Text(row.session), "tokens": Text(row.tokens, justify="right"),
            "cpu": Text(row.cpu, justify="right"), "mem": Text(row.memory, justify="right"),
            "node": Text(for_line(row.node or "—")),
        }


def member_columns(rows: list[MemberRow], *, narrow: bool) -> tuple[str, ...]:
    """The table's columns: a `node` column only once a member's turns run on a cluster."""
    columns = NARROW_COLUMNS if narrow else WIDE_COLUMNS
    return (*columns, "node") if any(row.node for row in rows) else columns
