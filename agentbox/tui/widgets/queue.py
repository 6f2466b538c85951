"""The task queue grouped by state, with assignee, dependencies, attempts and the latest verdict.

Every task of the run is listed, however many: the list is virtual (a Line API widget),
so only the rows in view are rendered, each row's strip is cached by what it shows, and
a cursor move, a focus switch or a run saved again re-renders only the rows that changed.
It looks and answers keys like Textual's tree (same guides, icons, component classes).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, NamedTuple

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.cache import LRUCache
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import var
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Tree

from agentbox.core.engine.models import Run, Task
from agentbox.core.tasks import TERMINAL_STATES
from agentbox.core.termtext import for_line
from agentbox.tui import model
from agentbox.tui.widgets.tree import TREE_PARTS, StyleMemo

GROUP_PREFIX = "state:"
GUIDE_WIDTH = 2
"""Cells of the guide in front of a task (`├ `)."""

GroupLook = tuple[Literal["group"], str, int, bool]
"""A group header's row: its state, how many tasks, expanded."""
TaskLook = tuple[Literal["task"], str, str, tuple[str, ...], int, tuple[str, str] | None,
                 *tuple[tuple[str, str] | str, ...]]
"""A task's row: id, assignee, depends_on, attempts, (verdict, by) | None, then ("ladder", level)
and "checking" or why its turn is held, when they apply."""
Look = GroupLook | TaskLook
"""Everything a row's text is made of (a key of the width cache: plain tuples)."""


class Row(NamedTuple):
    """One line of the queue."""

    key: str
    """The task id, or GROUP_PREFIX + state for a group's header."""
    group: str
    """The state of the group the row is in."""
    look: Look
    last: bool
    """The last task of its group (its guide turns the corner)."""
    header: int
    """The index of its group's header row."""


def task_look(task: Task, checking: bool = False, held: str | None = None) -> Look:
    """What the row of `task` shows (`checking`: crew.yaml's checks are judging its work; `held`:
    why its turn waits for the machine's room, "waiting for memory")."""
    verdict = (task.verdicts[-1].verdict, task.verdicts[-1].by) if task.verdicts else None
    look: TaskLook = ("task", task.id, task.assignee, tuple(task.depends_on), task.attempts, verdict)
    if task.ladder.label != "-":  # on the failure ladder: its level
        look = (*look, ("ladder", task.ladder.label))
    return (*look, "checking") if checking else (*look, held) if held else look


def _label_parts(look: Look) -> list[tuple[str, str]]:
    if look[0] == "group":
        _, state, count, _expanded = look
        return [(f"{state} ", model.STATE_STYLE.get(str(state)) or "bold"), (f"({count})", "dim")]
    _, task_id, assignee, depends_on, attempts, verdict, *rest = look
    ladder = next((str(r[1]) for r in rest if isinstance(r, tuple)), None)
    mark = [r for r in rest if isinstance(r, str)]
    parts = [(str(task_id), "bold"), ("  ", ""), (for_line(assignee), "cyan")]
    if ladder:
        parts.append((f"  ▲ {ladder}", "magenta"))
    if mark == ["checking"]:
        parts.append(("  ⧗ checking", "yellow"))
    elif mark:
        parts.append((f"  ⏸ {mark[0]}", "yellow"))
    if depends_on:
        parts.append((f"  ⇠ {', '.join(depends_on)}", "dim"))
    if int(attempts) > 1:
        parts.append((f"  #{attempts}", "yellow"))
    if verdict:
        good = verdict[0] == "approve"
        parts.append((f"  {'✓' if good else '✗'} {for_line(verdict[1])}", "green" if good else "red"))
    return parts


def label(look: Look) -> Text:
    """`greet  builder  ⇠ tests  #2  ✗ reviewer` for a task, `executing (3)` for a group."""
    return Text.assemble(*_label_parts(look))


def _line_width(look: Look) -> int:
    """Cells of the row (guide or icon included) without building its text."""
    return GUIDE_WIDTH + sum(cell_len(text) for text, _ in _label_parts(look))


def queue_rows(run: Run | None, collapsed: set[str]) -> list[Row]:
    """The rows of the queue: each state group (most urgent first) with its tasks under it,
    finished groups most recently updated first; a collapsed group shows its header only."""
    rows: list[Row] = []
    checking = run.checking() if run is not None else {}
    held = {job.task: job.data.held.split(":")[0] for job in (run.pending_jobs() if run is not None else [])
            if job.task and job.data.held}
    for state, tasks in model.queue_groups(run):
        state = str(state)
        if state in TERMINAL_STATES:
            tasks = sorted(tasks, key=lambda t: -t.updated)
        expanded = state not in collapsed
        header = len(rows)
        rows.append(Row(GROUP_PREFIX + state, state, ("group", state, len(tasks), expanded), False, header))
        if expanded:
            last = len(tasks) - 1
            rows.extend(Row(task.id, state, task_look(task, task.id in checking, held.get(task.id)), index == last, header)
                        for index, task in enumerate(tasks))
    return rows


class QueueList(ScrollView, can_focus=True):
    """Tasks by state; the cursor is on a task or on a group's header."""

    COMPONENT_CLASSES: ClassVar[set[str]] = set(TREE_PARTS)
    DEFAULT_CSS = Tree.DEFAULT_CSS.replace("Tree", "QueueList")
    """Textual's tree's, so the queue looks like one."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("shift+left", "cursor_parent", "Cursor to group", show=False),
        Binding("shift+right", "cursor_parent_next_sibling", "Cursor to next group", show=False),
        Binding("shift+up", "cursor_previous_sibling", "Cursor to previous sibling", show=False),
        Binding("shift+down", "cursor_next_sibling", "Cursor to next sibling", show=False),
        Binding("enter", "select_cursor", "Select", show=False),
        Binding("space", "toggle_node", "Toggle", show=False),
        Binding("shift+space", "toggle_expand_all", "Expand or collapse all", show=False),
        Binding("up", "cursor_up", "Cursor Up", show=False),
        Binding("down", "cursor_down", "Cursor Down", show=False),
    ]

    run: var[Run | None] = var(None, always_update=True)
    """The rows are worked out again; only those whose text changed are rendered again."""
    cursor_row: var[int] = var(-1, always_update=True)
    hover_row: var[int] = var(-1)

    class TaskChosen(Message):
        """The person chose a task (enter or a click on it)."""

        def __init__(self, queue: QueueList, task_id: str) -> None:
            super().__init__()
            self.queue = queue
            self.task_id = task_id

        @property
        def control(self) -> QueueList:
            """The queue the task was chosen in."""
            return self.queue

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rows: list[Row] = []
        self._collapsed: set[str] = {"cancelled"}
        self._run_id: str | None = None
        self._widths: dict[Look, int] = {}
        self._strips: LRUCache[tuple[object, ...], Strip] = LRUCache(1024)
        self._style_memo = StyleMemo()
        self._pseudo_state: object = None

    # ------------------------------------------------------------------ what is shown
    @property
    def selected_task(self) -> str | None:
        """The id of the task under the cursor, if the cursor is on a task."""
        row = self._row(self.cursor_row)
        return None if row is None or row.key.startswith(GROUP_PREFIX) else row.key

    @property
    def groups(self) -> dict[str, list[str]]:
        """State → the ids of its tasks in the queue's order (a collapsed group's too)."""
        shown: dict[str, list[str]] = {}
        for row in self._all_rows():
            if row.key.startswith(GROUP_PREFIX):
                shown[row.group] = []
            else:
                shown[row.group].append(row.key)
        return shown

    @property
    def last_row(self) -> int:
        """The index of the last row."""
        return len(self.rows) - 1

    def _row(self, index: int) -> Row | None:
        return self.rows[index] if 0 <= index < len(self.rows) else None

    def watch_run(self, run: Run | None) -> None:
        """Work the rows out again; the cursor stays on its task (or group)."""
        if run is None or run.id != self._run_id:
            self._run_id = run.id if run else None
            self.cursor_row = -1
        self._set_rows(queue_rows(run, self._collapsed))

    def _set_rows(self, rows: list[Row]) -> None:
        """Show `rows`: repaint the rows in view whose look or place changed, keep the cursor's row."""
        before, cursor = self.rows, self._row(self.cursor_row)
        self.rows = rows
        widths = {row.look: self._widths.get(row.look) or _line_width(row.look) for row in rows}
        self._widths = widths
        width = max(widths.values(), default=0)
        repaint_all = len(rows) < len(before) or width != self.virtual_size.width  # rows are padded to it
        self.virtual_size = Size(width, len(rows))
        if cursor is not None:
            index = next((i for i, row in enumerate(rows) if row.key == cursor.key), -1)
            if index == -1 and not cursor.key.startswith(GROUP_PREFIX):  # the task left the queue
                index = min(self.cursor_row, len(rows) - 1)
            moved = index != self.cursor_row
            self.set_reactive(QueueList.cursor_row, index)
            if moved and index >= 0:  # its task changed group: follow it
                self.scroll_to_row(index)
        top = round(self.scroll_y)
        changed = [y for y in range(top, min(len(rows), top + self.size.height))
                   if y >= len(before) or before[y] != rows[y]]
        if repaint_all or len(changed) > 3:
            self.refresh()
        else:
            for y in changed:
                self._refresh_row(y)

    def select_task(self, task_id: str) -> None:
        """Move the cursor to a task (after the list has been laid out), opening its group."""
        self.call_after_refresh(self._select_task, task_id)

    def _select_task(self, task_id: str) -> None:
        row = next((r for r in self.rows if r.key == task_id), None)
        if row is None:
            group = next((r.group for r in self._all_rows() if r.key == task_id), None)
            if group is None:
                return
            self._collapsed.discard(group)
            self._set_rows(queue_rows(self.run, self._collapsed))
        self._move_to(next(i for i, r in enumerate(self.rows) if r.key == task_id))

    def _all_rows(self) -> list[Row]:
        return queue_rows(self.run, set())

    # ------------------------------------------------------------------ cursor and keys
    def watch_cursor_row(self, previous: int, row: int) -> None:
        for index in {previous, row}:
            self._refresh_row_and_group(index)

    def watch_hover_row(self, previous: int, row: int) -> None:
        for index in {previous, row}:
            self._refresh_row_and_group(index)

    def _refresh_row(self, index: int) -> None:
        self.refresh(Region(0, index - round(self.scroll_y), self.size.width, 1))

    def _refresh_row_and_group(self, index: int) -> None:
        """Repaint a row and, for a group's header, the rows of its tasks (their guides follow it)."""
        row = self._row(index)
        if row is None:
            return
        self._refresh_row(index)
        if row.key.startswith(GROUP_PREFIX):
            top = round(self.scroll_y)
            for y in range(max(index + 1, top), min(len(self.rows), top + self.size.height)):
                if self.rows[y].group != row.group:
                    break
                self._refresh_row(y)

    def _move_to(self, index: int, animate: bool = False) -> None:
        if not self.rows:
            return
        self.cursor_row = max(0, min(index, len(self.rows) - 1))
        self.scroll_to_row(self.cursor_row, animate=animate)

    def scroll_to_row(self, index: int, animate: bool = False) -> None:
        """Scroll so that the label of row `index` is in view."""
        row = self._row(index)
        if row is not None:
            x = 0 if row.key.startswith(GROUP_PREFIX) else GUIDE_WIDTH
            region = Region(x, index, self._widths.get(row.look, 0) - x, 1)
            self.scroll_to_region(region, animate=animate, force=True, origin_visible=False)

    def action_cursor_up(self) -> None:
        """Move the cursor up one row."""
        self._move_to(self.last_row if self.cursor_row == -1 else self.cursor_row - 1)

    def action_cursor_down(self) -> None:
        """Move the cursor down one row."""
        self._move_to(0 if self.cursor_row == -1 else self.cursor_row + 1)

    def action_page_down(self) -> None:
        """Move the cursor down a page."""
        self._move_to(max(self.cursor_row, 0) + self.scrollable_content_region.height - 1)

    def action_page_up(self) -> None:
        """Move the cursor up a page."""
        start = self.last_row if self.cursor_row == -1 else self.cursor_row
        self._move_to(start - (self.scrollable_content_region.height - 1))

    def action_scroll_home(self) -> None:
        """Move the cursor to the first row."""
        self._move_to(0)

    def action_scroll_end(self) -> None:
        """Move the cursor to the last row."""
        self._move_to(self.last_row)

    def action_select_cursor(self) -> None:
        """A task is chosen; a group's header opens or closes."""
        row = self._row(self.cursor_row)
        if row is None:
            return
        if row.key.startswith(GROUP_PREFIX):
            self._toggle(row.group)
        else:
            self.post_message(self.TaskChosen(self, row.key))

    def action_toggle_node(self) -> None:
        """Open or close the group the cursor is on."""
        row = self._row(self.cursor_row)
        if row is not None and row.key.startswith(GROUP_PREFIX):
            self._toggle(row.group)

    def action_toggle_expand_all(self) -> None:
        """Open every group, or close them all when all are open."""
        states = {row.group for row in self.rows}
        self._collapsed = set() if self._collapsed & states else states
        self._set_rows(queue_rows(self.run, self._collapsed))

    def _toggle(self, state: str) -> None:
        self._collapsed ^= {state}
        self._set_rows(queue_rows(self.run, self._collapsed))

    def _group_rows(self) -> list[int]:
        return [i for i, row in enumerate(self.rows) if row.key.startswith(GROUP_PREFIX)]

    def action_cursor_parent(self) -> None:
        """Move the cursor to the header of its group."""
        self._move_to(max((i for i in self._group_rows() if i <= self.cursor_row), default=self.cursor_row))

    def action_cursor_parent_next_sibling(self) -> None:
        """Move the cursor to the next group's header."""
        self._move_to(min((i for i in self._group_rows() if i > self.cursor_row), default=self.cursor_row))

    def action_cursor_previous_sibling(self) -> None:
        """The previous task of the group (or its header), or the previous group's header."""
        row = self._row(self.cursor_row)
        if row is None:
            return
        if row.key.startswith(GROUP_PREFIX):
            self._move_to(max((i for i in self._group_rows() if i < self.cursor_row), default=self.cursor_row))
        else:
            self.action_cursor_up()

    def action_cursor_next_sibling(self) -> None:
        """The next task of the group, or the next group's header."""
        row, below = self._row(self.cursor_row), self._row(self.cursor_row + 1)
        if row is None:
            return
        if row.key.startswith(GROUP_PREFIX):
            self.action_cursor_parent_next_sibling()
        elif below is not None and below.group == row.group:
            self.action_cursor_down()

    async def _on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        index = round(self.scroll_y) + offset.y
        row = self._row(index)
        if row is None:
            return
        on_icon = row.key.startswith(GROUP_PREFIX) and round(self.scroll_x) + offset.x < GUIDE_WIDTH
        if on_icon:
            self._toggle(row.group)
        else:
            self.cursor_row = index
            self.action_select_cursor()

    def _on_mouse_move(self, event: events.MouseMove) -> None:
        offset = event.get_content_offset(self)
        index = -1 if offset is None else round(self.scroll_y) + offset.y
        self.hover_row = index if self._row(index) is not None else -1

    def _on_leave(self, _: events.Leave) -> None:
        self.hover_row = -1

    # ------------------------------------------------------------------ rendering
    def notify_style_update(self) -> None:
        """Repaint; the cached rows are dropped at the paint only if their styles really changed."""
        super().notify_style_update()
        self.refresh()

    def render_lines(self, crop: Region) -> list[Strip]:
        self._pseudo_state = self.get_pseudo_class_state()
        if self._style_memo.stale_for(self, self._pseudo_state):
            self._strips.clear()
        return super().render_lines(crop)

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.size.width
        index = scroll_y + y
        row = self._row(index)
        if row is None:
            return Strip.blank(width, self.rich_style)
        return self._row_strip(index, row, width).crop(scroll_x, scroll_x + width)

    def _row_strip(self, index: int, row: Row, width: int) -> Strip:
        """The whole row, as Textual's tree draws a line (cached by what it shows)."""
        group_row = row.header
        focused = self.has_focus
        group_hover = self.hover_row == group_row
        hover = self.hover_row >= 0 and (self.hover_row == index or group_hover)
        group_selected = self.cursor_row == group_row and focused
        pad_width = max(self.virtual_size.width, width)
        key = (row.look, row.last, pad_width, self.cursor_row == index, self.hover_row == index, hover, group_hover,
               group_selected, self._pseudo_state)
        strip = self._strips.get(key)
        if strip is None:
            strip = self._strips[key] = self._render_row(row, pad_width, hover, group_hover, group_selected,
                                                         cursor=self.cursor_row == index,
                                                         highlight=self.hover_row == index)
        return strip

    def _render_row(self, row: Row, pad_width: int, hover: bool, group_hover: bool, group_selected: bool, *,
                    cursor: bool, highlight: bool) -> Strip:
        base_style = self.rich_style
        line_style = self.get_component_rich_style("tree--highlight-line") if hover else base_style
        line = Text(style=line_style)
        if not row.key.startswith(GROUP_PREFIX):
            guide_style = self.get_component_rich_style("tree--guides", partial=True)
            hidden = self.get_component_styles("tree--guides").color.a == 0
            if group_hover:
                guide_style += self.get_component_rich_style("tree--guides-hover", partial=True)
                hidden = self.get_component_styles("tree--guides-hover").color.a == 0
            if group_selected:
                guide_style = self.get_component_rich_style("tree--guides", partial=True) + \
                    self.get_component_rich_style("tree--guides-selected", partial=True)
                hidden = self.get_component_styles("tree--guides-selected").color.a == 0
            line.append(_guide(guide_style, hidden, row.last), style=guide_style)
        label_style = self.get_component_rich_style("tree--label", partial=True)
        if highlight:
            label_style += self.get_component_rich_style("tree--highlight", partial=True)
        if cursor:
            label_style += self.get_component_rich_style("tree--cursor", partial=False)
        text = label(row.look)
        text.stylize(label_style)
        if row.key.startswith(GROUP_PREFIX):
            icon = Tree.ICON_NODE_EXPANDED if row.look[3] else Tree.ICON_NODE
            text = Text.assemble((icon, line_style), text)
        line.append(text)
        segments = list(line.render(self.app.console))
        if pad_width > line.cell_len:
            segments.append(Segment(" " * (pad_width - line.cell_len), line_style))
        return Strip(segments)


def _guide(style: Style, hidden: bool, last: bool) -> str:
    """The guide in front of a task, as Textual's tree draws it at a guide depth of 2."""
    if hidden:
        return "  "
    lines = Tree.LINES["bold"] if style.bold else Tree.LINES["double"] if style.underline2 else Tree.LINES["default"]
    terminator, cross = lines[2], lines[3]
    return f"{(terminator if last else cross)[0]} "
