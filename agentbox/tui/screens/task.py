"""One task in detail: brief, acceptance, write scope, attempts, verdicts, failures, its diff and its events."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from agentbox.core import runs
from agentbox.core.engine.models import Run, Task
from agentbox.core.engine.records import Event
from agentbox.core.tasks import TERMINAL_STATES
from agentbox.core.termtext import for_line, for_terminal, safe_text
from agentbox.tui import loaders, model
from agentbox.tui import messages as msg
from agentbox.tui.view import view_node
from agentbox.tui.widgets.diff_view import DiffView
from agentbox.tui.widgets.events import event_line

EVENTS_SHOWN = loaders.TASK_EVENTS_SHOWN
"""Most decision-log records of the task kept on screen."""


if TYPE_CHECKING:
    from agentbox.tui.view import DashboardView


def section(title: str) -> Text:
    """A section heading."""
    return Text(f"\n{title}", style="bold underline")


def ladder_section(task: Task) -> list[Any]:
    """Where the task stands on the failure ladder, and each move it made."""
    state = task.ladder
    parts: list[Any] = [section(f"Failure ladder: {state.label}")]
    facts = f"  counted failures {state.counted_failures} · brief rewrites {state.rewrites_total}"
    if state.escape_hatches_used:
        facts += " · escape hatches " + ", ".join(state.escape_hatches_used)
    parts.append(Text(facts, style="dim"))
    if state.waiting_on:
        parts.append(Text(f"  waits for the human: {state.waiting_on}", style="yellow"))
    for move in state.history[-10:]:
        parts.append(Text.assemble((f"  {move.from_level} {move.from_mode} → {move.to_level} {move.to_mode}  ", "bold"),
                                   for_terminal(move.why)))
    return parts


def task_summary(task: Task) -> Group:
    """Everything about a task except its events."""
    head = Text.assemble((task.id, "bold"), "  ", (for_line(task.assignee), "cyan"), "  ",
                         (task.state_label, model.STATE_STYLE.get(task.state_label) or "bold"),
                         f"  · attempts {task.attempts} · round {task.round} · tokens ",
                         model.tokens(task.tokens, task.unknown_usage_turns), f" · {model.cost(task.cost_usd, task.unknown_cost_turns)}")
    parts: list[Any] = [head, section("Brief"), safe_text(task.brief)]
    parts.append(section("Acceptance criteria"))
    for criterion in task.acceptance:
        parts.append(Text.assemble((f"  {for_line(criterion.id)}  ", "bold"), for_terminal(criterion.criterion)))
    if not task.acceptance:
        parts.append(Text("  none", style="dim"))
    scope = for_line(", ".join(task.writes) or "nothing (read-only)")
    parts += [section("Scope"), Text.assemble(("  writes      ", "dim"), scope),
              Text.assemble(("  depends on  ", "dim"), ", ".join(task.depends_on) or "—"),
              Text.assemble(("  sessions    ", "dim"), f"work {model.short_id(task.session_id)} · "
                            f"review {model.short_id(task.review_session_id)}")]
    if task.note:
        parts.append(Text.assemble(("  next note   ", "dim"), for_terminal(task.note),
                                   (f"  (from {for_line(task.note_by)})", "dim")))
    if task.ladder.label != "-":
        parts += ladder_section(task)
    parts.append(section(f"Verdicts ({len(task.verdicts)})"))
    if task.verdicts:
        table = Table(box=None, padding=(0, 1), show_edge=False, expand=True)
        for column in ("#", "verdict", "by", "at", "conf.", "issues / note"):
            table.add_column(column, overflow="fold")
        for index, verdict in enumerate(task.verdicts, 1):
            issues = "; ".join(f"[{b.acceptance_id or '-'}] {b.detail}" for b in verdict.blocking_issues)
            failing = [c.acceptance_id for c in verdict.checklist if not c.pass_]
            detail = issues or verdict.note or "; ".join(verdict.evidence[:2])
            if failing:
                detail += f" (failing: {', '.join(str(f) for f in failing)})"
            table.add_row(str(index), Text(verdict.verdict, style="green" if verdict.verdict == "approve" else "red"),
                          safe_text(verdict.by, single_line=True), model.clock_time(verdict.at),
                          "-" if verdict.confidence is None else f"{verdict.confidence:.2f}", safe_text(detail))
        parts.append(table)
    else:
        parts.append(Text("  not reviewed yet", style="dim"))
    if task.panel is not None:
        decided = task.panel.outcome or f"waiting for {len(task.panel.reviewers) - len(task.panel.verdicts)} review(s)"
        parts.append(Text.assemble(("  two reviews ", "dim"), (" + ".join(task.panel.reviewers), "cyan"), " → ",
                                   (decided, "bold"), (f"  {task.panel.reason}" if task.panel.reason else "", "dim")))
    parts += check_parts(task)
    parts.append(section(f"Failures ({len(task.failures)})"))
    if task.failures:
        table = Table(box=None, padding=(0, 1), show_edge=False, expand=True)
        for column in ("at", "kind", "fingerprint", "message"):
            table.add_column(column, overflow="fold")
        for failure in task.failures:
            table.add_row(model.clock_time(failure.at), safe_text(failure.kind, single_line=True),
                          safe_text(failure.fingerprint[:12], single_line=True), safe_text(failure.message[:400]))
        parts.append(table)
    else:
        parts.append(Text("  none", style="dim"))
    return Group(*parts)


CHECK_TAIL_LINES = 15
"""Lines of a red check's output shown under it (its log holds the whole)."""


def check_parts(task: Task) -> list[Any]:
    """The checks crew.yaml's gates ran on the task: result, commit, exit status, duration, log; a red one's output."""
    if not task.checks:
        return []  # a crew without gates shows nothing of them
    parts: list[Any] = [section(f"Checks ({len(task.checks)})  (l: the log)")]
    table = Table(box=None, padding=(0, 1), show_edge=False, expand=True)
    for column in ("check", "stage", "commit", "result", "exit", "time", "log"):
        table.add_column(column, overflow="fold")
    for check in task.checks:
        word = "passed" if check.passed else ("could not run" if check.status == "error" else "failed")
        word += " (flaky)" if check.flaky else ""
        table.add_row(Text(check.name), check.stage, (check.commit or "live tree")[:10],
                      Text(word, style="green" if check.passed else "red"),
                      "-" if check.exit_status is None else str(check.exit_status), f"{check.duration_s:.1f} s",
                      Text(check.log))
    parts.append(table)
    last = task.checks[-1]
    if not last.passed and last.tail:
        tail = "\n".join(last.tail.rstrip().splitlines()[-CHECK_TAIL_LINES:])
        parts += [Text(f"  the end of {last.name}'s output:", style="dim"), Text(tail, style="red")]
    return parts


def diff_heading(task: Task) -> Text:
    """The diff's section heading: branch, files and lines changed, where it was merged."""
    heading = section("Changes")
    if task.branch:
        heading.append(f"  {for_line(task.branch)}", "not underline cyan")
    if task.changed_files:
        added = sum(c.added or 0 for c in task.changed_files)
        removed = sum(c.removed or 0 for c in task.changed_files)
        heading.append(f"  {len(task.changed_files) + task.changed_more} file(s) ", "not underline")
        if task.changed_more:
            heading.append(f"(lines of the first {len(task.changed_files)}) ", "not underline dim")
        heading.append(f"+{added}", "not underline green")
        heading.append(f" −{removed}", "not underline red")
    if task.merged:
        heading.append(f"  merged {task.merged[:10]}", "not underline green")
    return heading


def diff_note(run: Run, task: Task, project_root: Path) -> str | None:
    """Why the task has no diff to show, or None when git has one."""
    if not model.is_worktree_run(run):
        return model.live_tree_note(project_root)
    if task.branch is None:
        return "no branch: this task writes nothing" if not task.writes else "no branch yet: its work has not started"
    if task.base is None or task.head is None or task.base == task.head:
        return "no commits yet: its work turns have changed nothing so far"
    return None


class TaskDetailScreen(Screen[None]):
    """A task, live: re-rendered whenever the run changes."""

    BINDINGS = [
        Binding("escape", "app.pop_screen", "back"),
        Binding("y", "approve", "approve"),
        Binding("w", "rework", "rework"),
        Binding("c", "cancel_task", "cancel task"),
        Binding("s", "history", "sessions"),
        Binding("t", "talk", "talk"),
        Binding("l", "check_log", "check log", show=False),  # said in the checks section, shown only when there are checks
        Binding("right_square_bracket", "next_file", "next file", key_display="]"),
        Binding("left_square_bracket", "previous_file", "previous file", key_display="["),
        Binding("right_curly_bracket", "next_page", "next files", key_display="}"),
        Binding("left_curly_bracket", "previous_page", "previous files", key_display="{"),
    ]

    def __init__(self, dashboard: DashboardView, task_id: str) -> None:
        super().__init__()
        self.dashboard = dashboard
        self.task_id = task_id
        self._events_for: float | None = None
        self.events_shown: list[Event] = []
        self._follower: runs.RunFollower | None = None
        """Where this screen is in the run's log: its records about the task (through the door's follower)."""
        self._reads = loaders.Coalescer()
        self._diff_for: tuple[str | None, str | None] | None = None
        self._diff_page = 0
        """The page of the diff's files shown (a flood of changes is read a page at a time)."""
        self._diff_more = False
        self._file_index = -1

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="task-body"):
            yield Static(id="task-info")
            yield DiffView(id="task-diff")
            yield Static(id="task-events")
        yield Footer()

    def on_mount(self) -> None:
        """Follow the dashboard's run."""
        self.query_one("#task-body").border_title = f"task {self.task_id}"
        self.watch(view_node(self.dashboard), "run", self._show, init=True)

    @property
    def shown_task(self) -> Task | None:
        """The task as last loaded."""
        run = self.dashboard.run
        return run.tasks.get(self.task_id) if run else None

    def _show(self, run: Run | None) -> None:
        task = run.tasks.get(self.task_id) if run else None
        if task is None:
            self.query_one("#task-info", Static).update(Text(f"no task {self.task_id} in this run", style="dim"))
            return
        self.query_one("#task-info", Static).update(task_summary(task))
        if run is not None:
            self._show_diff(run, task)
        if task.updated != self._events_for and run is not None:
            self._events_for = task.updated
            if self._follower is None or self._follower.run_id != run.id:
                self._follower = runs.RunFollower(self.dashboard.project, run.id, events="all", task=self.task_id,
                                                  tail=EVENTS_SHOWN)
                self.events_shown = []
            if self._reads.request("events"):
                self._read_task_events()
        self.refresh_bindings()

    def _show_diff(self, run: Run, task: Task) -> None:
        """The one-line reason there is no diff, or the diff read from git (again when the branch moved)."""
        view = self.query_one(DiffView)
        note = diff_note(run, task, self.dashboard.project.root)
        if note is not None:
            self._diff_for = None
            view.show_note(diff_heading(task), note)
            return
        commits = (task.base, task.head)
        if commits == self._diff_for:
            view.update_heading(diff_heading(task))
            return
        if self._diff_for is not None:
            self._diff_page = 0  # the branch moved: its diff starts again at its first files
        self._diff_for = commits
        if not view.file_paths:
            view.show_note(diff_heading(task), "reading the diff from git…")
        self._request_diff(run)

    def _request_diff(self, run: Run) -> None:
        self.run_worker(partial(self._read_diff, run, self._diff_page), thread=True, exclusive=True,
                        group="task-diff", exit_on_error=False)

    def _read_diff(self, run: Run, page: int) -> None:
        self.post_message(loaders.task_diff(self.dashboard.project, run, self.task_id, page))

    def on_task_diff_loaded(self, message: msg.TaskDiffLoaded) -> None:
        """Show the diff that was read (unless the branch has moved on meanwhile: that read is under way)."""
        task = self.shown_task
        if task is None or message.commits != self._diff_for or message.page != self._diff_page:
            return
        view = self.query_one(DiffView)
        self._diff_more = message.more_pages
        if message.error:
            view.show_note(diff_heading(task), f"git could not show it: {message.error}")
        else:
            heading = diff_heading(task)
            if message.page or message.more_pages:
                heading.append(f"  files {message.first + 1}–{message.first + len(message.files)}"
                               + ("  } next" if message.more_pages else "") + ("  { previous" if message.page else ""),
                               "not underline dim")
            view.show_files(heading, message.files, truncated=message.truncated, full_command=message.full_command)
            self._file_index = -1
        self.refresh_bindings()

    def _read_task_events(self) -> None:
        """Read what the log gained about the task, in a thread (one read at a time: one asked for
        meanwhile starts when it is over, from where it ended)."""
        assert self._follower is not None
        self.run_worker(partial(self._read_events, self._follower.reader("events")), thread=True,
                        group="task-events", exit_on_error=False)

    def _read_events(self, reader: Callable[[], runs.RunLook]) -> None:
        try:
            message = loaders.follow_read(reader, self.task_id)
        except Exception:  # an unreadable log shows no events; the read is still over
            message = msg.TaskEventsLoaded(self.task_id)
        self.post_message(message)

    def on_task_events_loaded(self, message: msg.TaskEventsLoaded) -> None:
        """Show the task's part of the decision log (read once, then followed from where it stopped)."""
        taken = message.look is not None and self._follower is not None and self._follower.take(message.look)
        if self._reads.finished("events"):
            self._read_task_events()
        if not taken:
            return  # another run's (the dashboard switched runs meanwhile): the next read is this run's
        self.events_shown = (self.events_shown + message.records)[-EVENTS_SHOWN:]
        lines = [section(f"Events ({len(self.events_shown)})")] + [event_line(r) for r in self.events_shown]
        self.query_one("#task-events", Static).update(Group(*lines))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Approve and rework only for a task in review."""
        task = self.shown_task
        if action in ("approve", "rework"):
            return task is not None and task.state == "reviewing"
        if action == "cancel_task":
            return task is not None and task.state not in TERMINAL_STATES
        if action in ("next_file", "previous_file"):
            return bool(self.query_one(DiffView).file_paths)
        if action == "next_page":
            return self._diff_more
        if action == "previous_page":
            return self._diff_page > 0
        return True

    def action_next_page(self) -> None:
        """Show the diff's next page of files."""
        self._turn_page(+1)

    def action_previous_page(self) -> None:
        """Show the diff's previous page of files."""
        self._turn_page(-1)

    def _turn_page(self, step: int) -> None:
        run = self.dashboard.run
        if run is None or self._diff_for is None or (step > 0 and not self._diff_more):
            return
        self._diff_page = max(0, self._diff_page + step)
        self._request_diff(run)

    def action_next_file(self) -> None:
        """Scroll the next file of the diff to the top."""
        self._jump(+1)

    def action_previous_file(self) -> None:
        """Scroll the previous file of the diff to the top."""
        self._jump(-1)

    def _jump(self, step: int) -> None:
        headings = self.query_one(DiffView).file_headings()
        if not headings:
            return
        self._file_index = max(0, min(len(headings) - 1, self._file_index + step))
        self.query_one("#task-body").scroll_to_widget(headings[self._file_index], top=True, animate=False)

    def action_approve(self) -> None:
        """Approve this task."""
        self.post_message(msg.ActionRequested("approve", self.task_id))

    def action_rework(self) -> None:
        """Send this task back."""
        self.post_message(msg.ActionRequested("rework", self.task_id))

    def action_cancel_task(self) -> None:
        """Cancel this task."""
        self.post_message(msg.ActionRequested("cancel_task", self.task_id))

    def action_history(self) -> None:
        """The assignee's session history."""
        if self.shown_task is not None:
            self.post_message(msg.ActionRequested("history", self.shown_task.assignee))

    def action_check_log(self) -> None:
        """The log of the task's latest check (a red one's, when there is one), in the viewer."""
        task = self.shown_task
        if task is None or not task.checks:
            self.notify("no check has run for this task", severity="warning")
            return
        latest = next((c for c in reversed(task.checks) if not c.passed), task.checks[-1])
        self.post_message(msg.ActionRequested("view_artifact", latest.log))

    def action_talk(self) -> None:
        """Talk to the assignee in this task's session."""
        if self.shown_task is not None:
            self.post_message(msg.ActionRequested("talk", self.shown_task.assignee, self.shown_task.session_id))
