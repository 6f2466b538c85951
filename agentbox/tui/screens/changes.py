"""What a worktree run changed: the files of each task, grouped by role, and the run's total stat.

The files come from the run's state (git counted them after each work turn); the stat
of the run's branch is read from git in a worker, again whenever a task's work is
merged into it. Enter on a task or a file opens the task's diff.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import Footer, Static, Tree

from agentbox.core.engine.models import ChangedPath, Run
from agentbox.core.reports import changes as run_changes
from agentbox.core.termtext import for_line, for_terminal
from agentbox.tui import action_table, loaders, model
from agentbox.tui import messages as msg
from agentbox.tui.diffs import CHANGE_STYLE

if TYPE_CHECKING:
    from agentbox.tui.view import DashboardView


def lines_changed(files: list[ChangedPath]) -> Text:
    """`3 files +12 −4` (binary files count as files, not lines)."""
    added = sum(f.added or 0 for f in files)
    removed = sum(f.removed or 0 for f in files)
    return Text.assemble(f"{len(files)} file{'s' if len(files) != 1 else ''} ", (f"+{added}", "green"),
                         (f" −{removed}", "red"))


def run_summary(run: Run, stat: str | None, error: str | None) -> Text:
    """The run's branch, where it goes, whether it was merged, and its stat."""
    assert run.git is not None
    into = for_line(run.git.branch or "a branch of yours (the run started on a detached HEAD)")
    text = Text.assemble((run.id, "bold"), "  ", (run.status, model.RUN_STATUS_STYLE.get(run.status, "")),
                         "  from ", (run.git.base[:10], "cyan"), (" (your uncommitted changes)" if run.git.dirty else ""),
                         "\n", (for_line(run.git.integration_branch), "cyan"), " → ", (into, "bold"))
    if run.git.delivered:
        text.append(f"  merged ({run.git.delivered[:10]})", "bold green")
    elif model.can_merge(run):
        text.append("  not merged yet: press m to merge", "bold yellow")
    else:
        text.append("  not merged yet", "yellow")
    text.append("\n")
    if error:
        text.append(f"git could not give the stat: {for_terminal(error)}", "red")
    elif stat is None:
        text.append("reading the stat from git…", "dim")
    else:
        text.append(for_terminal(stat.rstrip("\n")) or "no changes on the run's branch yet", "" if stat.strip() else "dim")
    return text


class ChangesScreen(Screen[None]):
    """A worktree run's changed files by role and task, live, with the run's stat."""

    BINDINGS = [
        Binding("escape", "app.pop_screen", "back"),
        Binding("m", "merge", "merge"),
    ]

    def __init__(self, dashboard: DashboardView) -> None:
        super().__init__()
        self.dashboard = dashboard
        self._tree_for: object = None
        self._stat_for: object = None
        self._stat: str | None = None
        self._stat_error: str | None = None
        self._summary: Text | None = None
        self._mergeable: bool | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="changes-body"):
            yield Static(id="changes-summary")
            tree: Tree[str] = Tree("changes", id="changes-tree")
            tree.show_root = False
            tree.guide_depth = 3
            yield tree
        yield Footer()

    def on_mount(self) -> None:
        """Follow the dashboard's run."""
        body = self.query_one("#changes-body")
        body.border_title = "changes"
        body.border_subtitle = "enter opens the selected task: brief, verdicts, diff"
        self.watch(self.dashboard, "run", self._show, init=True)
        self.query_one(Tree).focus()

    def _summarise(self, text: Text) -> None:
        """Show the summary line, repainting only when it says something new (a run saves often)."""
        if text != self._summary:
            self._summary = text
            self.query_one("#changes-summary", Static).update(text)

    def _show(self, run: Run | None) -> None:
        if run is None or not model.is_worktree_run(run):
            self._summarise(Text(model.live_tree_note(self.dashboard.project.root), style="dim"))
            self.query_one(Tree).clear()
            self._tree_for = None
            return
        assert run.git is not None
        stat_key = (run.id, run.git.delivered, tuple(t.merged for t in run.tasks.values()))
        if stat_key != self._stat_for:  # the run's branch moves only when a task's work is merged
            self._stat_for, self._stat, self._stat_error = stat_key, None, None
            self.run_worker(partial(self._read_stat, run), thread=True, exclusive=True, group="run-stat",
                            exit_on_error=False)
        self._summarise(run_summary(run, self._stat, self._stat_error))
        self._fill(run)
        mergeable = action_table.enabled("merge", run)
        if mergeable != self._mergeable:  # the merge key comes and goes with it
            self._mergeable = mergeable
            self.refresh_bindings()

    def _read_stat(self, run: Run) -> None:
        self.post_message(loaders.run_stat(self.dashboard.project, run))

    def on_run_stat_read(self, message: msg.RunStatRead) -> None:
        """The run's stat came from git."""
        run = self.dashboard.run
        if run is None or run.id != message.run_id or not model.is_worktree_run(run):
            return
        self._stat, self._stat_error = message.stat, message.error
        self._summarise(run_summary(run, self._stat, self._stat_error))

    def _fill(self, run: Run) -> None:
        """The tree: role → task → file (rebuilt only when what it shows changed)."""
        changes = run_changes.task_changes(run)
        key = tuple((c.task, c.role, c.state, c.head, c.merged, tuple(c.files)) for c in changes)
        if key == self._tree_for:
            return
        self._tree_for = key
        by_role: dict[str, list[run_changes.TaskChanges]] = {}
        for change in changes:
            by_role.setdefault(change.role, []).append(change)
        tree: Tree[str] = self.query_one(Tree)
        tree.clear()
        if not changes:
            tree.root.add_leaf(Text("no task has a branch yet", style="dim"))
        for role, tasks in by_role.items():
            files = [f for c in tasks for f in c.files]
            role_node = tree.root.add(Text.assemble((for_line(role), "bold"), "  ", (f"{len(tasks)} task(s) · ", "dim"),
                                                    lines_changed(files)), expand=True)
            for change in tasks:
                label = Text.assemble((change.task, "bold"), "  ",
                                      (change.state, model.STATE_STYLE.get(change.state) or ""), "  ")
                if change.files:
                    label.append_text(lines_changed(change.files))
                else:  # nothing to merge: a merged sha here would only name the integration head
                    label.append("changed nothing" if change.merged or change.state == "approved"
                                 else "no commits yet", "dim")
                if change.merged and change.files:
                    label.append(f"  merged {change.merged[:10]}", "green")
                label.append(f"  {for_line(change.branch)}", "dim")
                task_node = role_node.add(label, data=change.task, expand=True, allow_expand=bool(change.files))
                for file in change.files:
                    line = Text.assemble((f" {file.change} ", CHANGE_STYLE.get(file.change, "bold")), " ")
                    if file.old_path:
                        line.append(f"{for_line(file.old_path)} → ", "dim")
                    line.append(for_line(file.path))
                    line.append("  binary" if file.added is None else f"  +{file.added} −{file.removed}", "dim")
                    task_node.add_leaf(line, data=change.task)
                if change.more:
                    task_node.add_leaf(Text(f" … {change.more} more file(s): the task's diff pages through them all",
                                            "dim"), data=change.task)

    @on(Tree.NodeSelected, "#changes-tree")
    def _chosen(self, event: Tree.NodeSelected[str]) -> None:
        if event.node.data:
            self.post_message(msg.ActionRequested("task_detail", event.node.data))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Merge only when the run's branch is ready to be merged."""
        if action == "merge":
            return action_table.enabled("merge", self.dashboard.run)
        return True

    def action_merge(self) -> None:
        """Merge the run's branch into the person's (the dashboard asks first, showing the stat)."""
        self.post_message(msg.ActionRequested("merge"))
