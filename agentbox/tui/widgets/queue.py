"""The task queue grouped by state, with assignee, dependencies, attempts and the latest verdict."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import var
from textual.widgets.tree import TreeNode

from agentbox.core.engine.models import Run, Task
from agentbox.core.tasks import TERMINAL_STATES
from agentbox.tui import model
from agentbox.tui.widgets.tree import QuietTree

GROUP_PREFIX = "state:"
SHOWN_PER_GROUP = 100
"""Tasks listed under one state; the rest are counted (every task stays reachable from the palette)."""


def task_label(task: Task) -> Text:
    """`greet  builder  ⇠ tests  #2  ✗ reject by reviewer`."""
    label = Text.assemble((task.id, "bold"), "  ", (task.assignee, "cyan"))
    if task.depends_on:
        label.append(f"  ⇠ {', '.join(task.depends_on)}", style="dim")
    if task.attempts > 1:
        label.append(f"  #{task.attempts}", style="yellow")
    if task.verdicts:
        verdict = task.verdicts[-1]
        good = verdict.verdict == "approve"
        label.append(f"  {'✓' if good else '✗'} {verdict.by}", style="green" if good else "red")
    return label


class QueueTree(QuietTree[str]):
    """Tasks by state; a task node's data is its id, a group node's is `state:<state>`."""

    run: var[Run | None] = var(None, always_update=True)
    """The tree repaints the groups whose tasks changed, nothing when none did."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__("tasks", **kwargs)  # type: ignore[arg-type]
        self.show_root = False
        self.guide_depth = 2
        self._groups: dict[str, TreeNode[str]] = {}
        self._signatures: dict[str, tuple[object, ...]] = {}
        self._collapsed: set[str] = {"cancelled"}
        self._run_id: str | None = None

    @property
    def selected_task(self) -> str | None:
        """The id of the task under the cursor, if the cursor is on a task."""
        node = self.cursor_node
        if node is None or node.data is None or node.data.startswith(GROUP_PREFIX):
            return None
        return node.data

    def watch_run(self, run: Run | None) -> None:
        """Update only the groups whose tasks changed; the cursor stays on its task."""
        selected = self.selected_task
        if run is None or run.id != self._run_id:
            self._rebuild_groups([])
            self._run_id = run.id if run else None
            selected = None
        grouped = model.queue_groups(run)
        order = [state for state, _ in grouped]
        if order != list(self._groups):
            self._rebuild_groups(order)
        for state, tasks in grouped:
            signature = tuple((t.id, t.assignee, tuple(t.depends_on), t.attempts, len(t.verdicts)) for t in tasks)
            if self._signatures.get(state) == signature:
                continue
            self._signatures[state] = signature
            node = self._groups[state]
            node.set_label(Text.assemble((f"{state} ", model.STATE_STYLE.get(state) or "bold"),
                                         (f"({len(tasks)})", "dim")))
            node.remove_children()
            shown = sorted(tasks, key=lambda t: -t.updated)[:SHOWN_PER_GROUP] if state in TERMINAL_STATES \
                else tasks[:SHOWN_PER_GROUP]
            for task in shown:
                node.add_leaf(task_label(task), data=task.id)
            if len(tasks) > len(shown):
                node.add_leaf(Text(f"… {len(tasks) - len(shown):,} more (ctrl+p: Task detail)", style="dim italic"))
        if selected is not None and selected != self.selected_task:
            self.call_after_refresh(self._select_task, selected)

    def _rebuild_groups(self, order: list[str]) -> None:
        """Group nodes in state order; collapsed groups stay collapsed."""
        for state, node in self._groups.items():
            if node.is_expanded:
                self._collapsed.discard(state)
            else:
                self._collapsed.add(state)
        self.clear()
        self._signatures = {}
        self._groups = {state: self.root.add(state, data=f"{GROUP_PREFIX}{state}", expand=state not in self._collapsed)
                        for state in order}

    def _select_task(self, task_id: str) -> None:
        for group in self._groups.values():
            for node in group.children:
                if node.data == task_id:
                    if not group.is_expanded:
                        group.expand()
                    self.move_cursor(node)
                    return

    def select_task(self, task_id: str) -> None:
        """Move the cursor to a task (after the tree has been laid out)."""
        self.call_after_refresh(self._select_task, task_id)
