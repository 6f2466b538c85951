"""The command palette: every action of the TUI, with its target spelled out (task, role, run...)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import TYPE_CHECKING

from textual.command import DiscoveryHit, Hit, Hits, Provider

from agentbox.core.tasks import TERMINAL_STATES
from agentbox.core.termtext import for_line
from agentbox.tui import model
from agentbox.tui.action_table import enabled
from agentbox.tui.widgets.artifacts import display_path

if TYPE_CHECKING:
    from agentbox.tui.screens.dashboard import DashboardScreen

Command = tuple[str, Callable[[], object], str]
DISCOVERY_LIMIT = 300
"""Commands listed before anything is typed (a run of thousands of tasks has thousands)."""


def dashboard_commands(board: DashboardScreen) -> Iterator[Command]:
    """(title, callback, help) of every action the dashboard can do now."""
    run = board.run
    yield "Start a run…", board.action_start_run, "a goal and a mode; the engine runs in the background"
    yield ("Ask the liaison where things stand…", board.action_ask,
           "a read-only turn answering from the run's state, with the time of its data")
    if run is not None:
        if enabled("resume_engine", run, board.engine):
            yield ("Resume the engine of the run", board.action_resume_engine,
                   f"{run.id}: its engine is not running (interrupted, killed or a restart)")
        if enabled("resume", run):
            yield "Resume the run", board.action_resume, f"resume {run.id}"
        if enabled("pause", run):
            yield "Pause the run", board.action_pause, "running turns finish, nothing new starts"
        if enabled("cancel_run", run):
            yield "Cancel the run…", board.action_cancel_run, f"cancel {run.id}"
        if enabled("answer", run):
            for cp in model.open_checkpoints(run):
                yield (f"Answer {cp.id}: {cp.question.strip().splitlines()[0][:70]}",
                       partial(board.action_answer, cp.id), f"{cp.kind} checkpoint")
        if enabled("approve", run):
            for task in model.tasks_in(run, "reviewing"):
                yield f"Approve task {task.id}…", partial(board.action_approve, task.id), task.brief[:80]
                yield (f"Send task {task.id} back for rework…", partial(board.action_rework, task.id),
                       task.brief[:80])
        if enabled("cancel_task", run):
            for task in run.tasks.values():
                if task.state not in TERMINAL_STATES:
                    yield f"Cancel task {task.id}…", partial(board.action_cancel_task, task.id), task.brief[:80]
        if enabled("merge", run) and run.git is not None:
            yield (f"Merge the run into {run.git.branch or 'your branch'}…", board.action_merge,
                   f"{run.git.integration_branch}: the stat is shown before anything is merged")
        if enabled("changes", run):
            yield "Changes of the run", board.action_changes, "the files each task changed, by role, and the run's stat"
    if run is not None:
        yield (f"Discard run {run.id}…", board.action_discard,
               "stop it if it runs; remove its worktrees, branches and state (shows what first)")
        for task in run.tasks.values():
            yield f"Task detail: {task.id}", partial(board.action_task_detail, task.id), f"{task.state} · {task.brief[:70]}"
            yield (f"Shell in task {task.id}'s worktree", partial(board.action_shell, task.id),
                   "in its role's sandbox (`agentbox shell --host` for your own)")
    roles = [r.role for r in board.crew.roles] if board.crew else []
    for role in roles:
        yield f"Talk to {role}", partial(board.action_talk, role), "a prompt box resuming its latest session"
        yield f"Session history of {role}", partial(board.action_history, role), "sessions → turns → prompt and result"
        yield f"Attach to {role}", partial(board.action_attach, role), "run its tool interactively, then come back"
        yield f"Watch {role} live", partial(board.action_live, role), "its running turn's text, tool calls and results"
    for run_id in reversed(board.run_ids):
        if run is None or run_id != run.id:
            yield f"Switch to run {run_id}", partial(board.action_switch_run, run_id), "show another run"
    if len(board.run_ids) > 1:
        yield "Switch run…", board.action_switch_run, "pick a run from the list"
    seen: set[str] = set()
    for entry in reversed(board.manifest):
        shown = display_path(entry, board.project.root)
        if shown in seen:
            continue
        seen.add(shown)
        yield f"View artifact {shown}", partial(board.action_view_artifact, entry["path"]), f"by {entry.get('role')}"
        yield f"Edit artifact {shown} in $EDITOR", partial(board.action_edit_artifact, entry["path"]), "then come back"
    yield "Profiles", board.action_profiles, "the profiles agentbox knows"
    yield ("Stats across runs", board.action_stats,
           "cost and first-pass rate per run, figures by role and model against their health lines")


class AgentboxCommands(Provider):
    """Commands of the dashboard (targets listed by name) for the palette."""

    def _commands(self) -> list[Command]:
        """The commands, their titles and help as the palette shows them: it reads both as markup, and
        they quote briefs, questions and file names an agent wrote."""
        from textual.markup import escape

        board = getattr(self.app, "dashboard", None)
        if board is None:
            return []
        return [(escape(for_line(title)), callback, escape(for_line(help_text)))
                for title, callback, help_text in dashboard_commands(board)]

    async def discover(self) -> Hits:
        """The first commands when nothing is typed yet (typing searches all of them)."""
        for title, callback, help_text in self._commands()[:DISCOVERY_LIMIT]:
            yield DiscoveryHit(title, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        """Fuzzy match on the titles."""
        matcher = self.matcher(query)
        for title, callback, help_text in self._commands():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), callback, text=title, help=help_text)
