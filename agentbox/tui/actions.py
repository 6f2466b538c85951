"""The dashboard's run actions: ask the person what is needed, then call a core service in a worker.

Every state change goes through `agentbox.core.runs` (the engine's inbox, or the run
applied directly when no engine holds it); the dashboard then sees the result on disk
like any other change.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual.app import App

from agentbox.core.engine.models import Run
from agentbox.core.engine.records import ArtifactEntry
from agentbox.core.errors import AgentboxError
from agentbox.core.paths import ProjectPaths
from agentbox.core.termtext import for_line, for_terminal, safe_text
from agentbox.tui import action_table, loaders, model
from agentbox.tui import messages as msg
from agentbox.tui.model import CrewInfo
from agentbox.tui.screens.modals import (
    AnswerDialog,
    ConfirmDialog,
    MergeDialog,
    NoteDialog,
    PickDialog,
    StartRunDialog,
)

if TYPE_CHECKING:  # the command models load with the first command sent
    from agentbox.core.agents.sessions import SessionRecord
    from agentbox.core.config.models import Mode
    from agentbox.core.engine.commands import Command

COMMAND_TITLES = {"deliver": "merge"}
"""How a command's outcome is titled when its name is not what the person pressed."""


class RunActions:
    """Mixed into the dashboard screen: actions of the footer and the command palette.

    What it needs of its screen is declared below (no import of the dashboard); screens
    opened from the dashboard reach these actions by posting `ActionRequested`.
    """

    project: ProjectPaths
    run: Run | None
    run_id: str | None
    run_ids: tuple[str, ...]
    engine: str
    crew: CrewInfo | None
    sessions: dict[str, SessionRecord]
    manifest: tuple[ArtifactEntry, ...]
    _wanted_run: str | None
    app: App[Any]
    if TYPE_CHECKING:  # read-only on the screen: properties of what its widgets show

        @property
        def selected_role(self) -> str | None: ...
        @property
        def selected_task(self) -> str | None: ...
        @property
        def selected_artifact(self) -> ArtifactEntry | None: ...
    notify: Callable[..., None]
    run_worker: Callable[..., Any]
    post_message: Callable[[Any], bool]
    refresh: Callable[..., Any]
    _request: Callable[..., None]

    _offers_for: tuple[Run | None, str] | None = None
    _offers: frozenset[str] = frozenset()

    # ------------------------------------------------------------------ footer state
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Hide the actions that make no sense for the run as it is now.

        Textual asks this for every binding on every focus change; the answers are worked
        out once per run snapshot (a big run has thousands of tasks to look through).
        """
        return action not in action_table.CONTEXT_ACTIONS or action in self.offered_actions()

    def offered_actions(self) -> frozenset[str]:
        """The run-dependent actions offered for the shown run (worked out once per run snapshot)."""
        key = (self.run, self.engine)
        if self._offers_for is None or self._offers_for[0] is not key[0] or self._offers_for[1] != key[1]:
            self._offers_for, self._offers = key, action_table.offered(self.run, self.engine)
        return self._offers

    # ------------------------------------------------------------------ commands to the run
    def send(self, command: Command, target: str | None = None) -> None:
        """Send one command to the shown run (in a thread: a busy engine may take a moment to acknowledge)."""
        if self.run_id is None:
            self.notify("no run is open", severity="warning")
            return
        self.run_worker(partial(self._send_now, self.run_id, command, target), thread=True, group="commands",
                        name=f"command {command.action}", exit_on_error=False)

    def _send_now(self, run_id: str, command: Command, target: str | None) -> None:
        from agentbox.core import runs

        try:
            ok, message = runs.send_command(self.project, run_id, command)
        except AgentboxError as exc:
            ok, message = False, exc.message
        self.post_message(msg.CommandApplied(command.action, ok, message, target))

    def on_command_applied(self, message: msg.CommandApplied) -> None:
        """Say how the command went (and, for a run no engine drives, that it must be resumed)."""
        text = message.message
        if message.ok and self.engine == "stopped" and message.action != "resume_engine":
            text += " · the engine is not running: press R (or the palette's resume) to go on"
        self.notify(text, title=COMMAND_TITLES.get(message.action, message.action.replace("_", " ")),
                    severity="information" if message.ok else "error", timeout=6 if message.ok else 12)

    def action_pause(self) -> None:
        """Pause the run: running turns finish, nothing new starts."""
        from agentbox.core.engine import commands

        self.send(commands.Pause())

    def action_resume(self) -> None:
        """Resume a paused run."""
        from agentbox.core.engine import commands

        self.send(commands.Resume())

    def action_resume_engine(self) -> None:
        """Start the engine of the shown run again (it was interrupted, killed, or the machine restarted)."""
        if self.run_id is None:
            self.notify("no run is open", severity="warning")
            return
        self.run_worker(partial(self._resume_engine_now, self.run_id), thread=True, group="commands",
                        name="resume the engine", exit_on_error=False)

    def _resume_engine_now(self, run_id: str) -> None:
        from agentbox.core import runs

        try:
            pid = runs.resume_engine(self.project, run_id)
            ok, message = True, f"the engine of {run_id} runs again (pid {pid})"
        except AgentboxError as exc:
            ok, message = False, exc.message
        self.post_message(msg.CommandApplied("resume_engine", ok, message, None))

    def action_discard(self) -> None:
        """Throw the shown run away: what it removes is read first, then shown to confirm."""
        if self.run_id is None:
            self.notify("no run is open", severity="warning")
            return
        self.run_worker(partial(self._plan_discard, self.run_id), thread=True, group="discard",
                        name="read what a discard removes", exclusive=True, exit_on_error=False)

    def _plan_discard(self, run_id: str) -> None:
        from agentbox.core.admin import discard

        try:
            self.post_message(msg.DiscardPlanned(run_id, discard.plan(self.project, run_id).lines()))
        except AgentboxError as exc:
            self.post_message(msg.DiscardPlanned(run_id, [], exc.message))

    def on_discard_planned(self, message: msg.DiscardPlanned) -> None:
        """Ask, with everything the discard removes, before removing anything."""
        if message.error:
            self.notify(message.error, title="discard", severity="error", timeout=12)
            return
        question = Text.assemble((f"Discard run {message.run_id}?", "bold"), " This removes, for good:\n\n",
                                 "\n".join(message.lines))

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.run_worker(partial(self._discard_now, message.run_id), thread=True, group="discard",
                                name="discard the run", exit_on_error=False)

        self.app.push_screen(ConfirmDialog(question, yes_label="discard"), confirmed)

    def _discard_now(self, run_id: str) -> None:
        from agentbox.core.admin import discard

        try:
            removed = discard.discard(self.project, run_id)
            ok, text = True, f"discarded run {run_id}: " + "; ".join(" ".join(line.split())
                                                                    for line in removed.lines())[:600]
        except AgentboxError as exc:
            ok, text = False, exc.message
        self.post_message(msg.CommandApplied("discard", ok, text, None))

    def action_cancel_run(self) -> None:
        """Cancel the whole run (asks first)."""
        if self.run_id is None:
            return

        from agentbox.core.engine import commands

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.send(commands.CancelRun(note="cancelled from the dashboard"))

        self.app.push_screen(ConfirmDialog(f"Cancel run {self.run_id}? Running turns are stopped."), confirmed)

    def action_cancel_task(self, task_id: str | None = None) -> None:
        """Cancel one task (asks first)."""
        task_id = task_id or self.selected_task
        if task_id is None:
            self.notify("select a task in the queue first", severity="warning")
            return

        from agentbox.core.engine import commands

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.send(commands.CancelTask(task=task_id), task_id)

        self.app.push_screen(ConfirmDialog(f"Cancel task {task_id}?"), confirmed)

    def _with_task(self, task_id: str | None, verb: str, then: Callable[[str], None]) -> None:
        """Run `then` on the given task, the selected one in review, the only one in review, or a chosen one."""
        if task_id:
            then(task_id)
            return
        reviewing = model.tasks_in(self.run, "reviewing")
        selected = self.selected_task
        if selected and any(t.id == selected for t in reviewing):
            then(selected)
        elif len(reviewing) == 1:
            then(reviewing[0].id)
        elif not reviewing:
            self.notify("no task is in review", severity="warning")
        else:
            options = [(t.id, Text.assemble((t.id, "bold"), for_line(f"  {t.assignee}  {t.brief[:60]}")))
                       for t in reviewing]
            self.app.push_screen(PickDialog(f"{verb} which task?", options),
                                 lambda chosen: then(chosen) if chosen else None)

    def action_approve(self, task_id: str | None = None) -> None:
        """Approve a task in review, with a note (the evidence of a human approval)."""
        from agentbox.core.engine import commands

        def ask(task: str) -> None:
            dialog = NoteDialog(f"Approve {task}", "Your note is recorded as the approval's evidence."
                                + model.changes_summary(self.run, task),
                                required=False, value="approved from the dashboard", ok_label="approve")
            self.app.push_screen(dialog, lambda note: self.send(commands.Approve(task=task, note=note), task)
                                 if note is not None else None)

        self._with_task(task_id, "Approve", ask)

    def action_rework(self, task_id: str | None = None) -> None:
        """Send a task in review back to its worker, with a note saying what to fix."""
        from agentbox.core.engine import commands

        def ask(task: str) -> None:
            dialog = NoteDialog(f"Send {task} back for rework", "Say what to fix: the worker gets your note."
                                + model.changes_summary(self.run, task),
                                required=True, placeholder="what to fix", ok_label="send back")
            self.app.push_screen(dialog, lambda note: self.send(commands.Rework(task=task, note=note), task)
                                 if note else None)

        self._with_task(task_id, "Send back", ask)

    def action_answer(self, checkpoint_id: str | None = None) -> None:
        """Answer a checkpoint (the only open one, or a chosen one)."""
        from agentbox.core.engine import commands

        waiting = model.open_checkpoints(self.run)
        if checkpoint_id:
            waiting = [c for c in waiting if c.id == checkpoint_id]
        if not waiting:
            self.notify("nothing waits on you", severity="warning")
            return

        def ask(cp_id: str | None) -> None:
            cp = next((c for c in waiting if c.id == cp_id), None)
            if cp is not None:
                self.app.push_screen(AnswerDialog(cp), lambda text: self.send(commands.Answer(checkpoint=cp.id, text=text),
                                                                               cp.id) if text else None)

        if len(waiting) == 1:
            ask(waiting[0].id)
            return
        options = [(c.id, Text.assemble((c.id, "bold"), for_line(f"  {c.kind}  {c.question.strip()[:60]}")))
                   for c in waiting]
        self.app.push_screen(PickDialog("Answer which checkpoint?", options), ask)

    # ------------------------------------------------------------------ worktree runs
    def action_changes(self) -> None:
        """The files each task of a worktree run changed, by role, with the run's stat."""
        from agentbox.tui.screens.changes import ChangesScreen

        if not model.is_worktree_run(self.run):
            self.notify(model.live_tree_note(self.project.root), severity="warning")
            return
        self.app.push_screen(ChangesScreen(self))

    def action_merge(self) -> None:
        """Merge the run's branch into the person's: the stat is read from git first, then shown to confirm."""
        if not action_table.enabled("merge", self.run):
            self.notify("nothing to merge: the run has not ended, was merged already, or approved no work",
                        severity="warning")
            return
        assert self.run is not None
        self.run_worker(partial(self._read_merge_stat, self.run), thread=True, group="merge-stat",
                        name="read the run's stat", exclusive=True, exit_on_error=False)

    def _read_merge_stat(self, run: Run) -> None:
        self.post_message(loaders.run_stat(self.project, run))

    def on_run_stat_read(self, message: msg.RunStatRead) -> None:
        """Ask, with the stat of what the merge brings, before merging."""
        run = self.run
        if run is None or run.id != message.run_id or run.git is None:
            return
        if message.error:
            self.notify(message.error, title="merge", severity="error", timeout=12)
            return
        into = run.git.branch or "your branch"
        question = Text.assemble(("Merge ", "bold"), (for_line(run.git.integration_branch), "bold cyan"),
                                 (" into ", "bold"), (for_line(into), "bold"), ("?\n\n", "bold"),
                                 for_terminal(model.short_stat(message.stat)) or "(no changes)",
                                 ("\n\nmerge: a merge commit on your branch; squash: one commit with the "
                                  "run's changes. Your uncommitted changes are never overwritten (the merge "
                                  "is refused instead).", "dim"))

        from agentbox.core.engine import commands

        def chosen(how: str | None) -> None:
            if how is not None:
                self.send(commands.Deliver(into=None, squash=how == "squash"))

        self.app.push_screen(MergeDialog(question), chosen)

    # ------------------------------------------------------------------ runs
    def action_start_run(self) -> None:
        """Start a run: a goal and a mode; the engine runs in the background."""
        from agentbox.core.config.models import MODES

        modes: list[str] = list(MODES)
        default = self.crew.mode if self.crew else "hierarchical"
        self.app.push_screen(StartRunDialog(modes, default),
                             lambda chosen: self.start_run(*chosen) if chosen else None)

    def start_run(self, goal: str, mode: Mode | None = None) -> None:
        """Create the run and start its engine, in a thread."""
        self.run_worker(partial(self._start_run_now, goal, mode), thread=True, group="start-run",
                        name="start run", exit_on_error=False)

    def _start_run_now(self, goal: str, mode: Mode | None) -> None:
        from agentbox.core import runs

        try:  # the dialog offers only the modes of `config.Mode`, which create_run checks again
            run = runs.create_run(self.project, goal, mode)
            pid = runs.detach(self.project, run.id)
        except AgentboxError as exc:
            self.post_message(msg.ActionFailed("start a run", exc.message + (f"\n{exc.hint}" if exc.hint else "")))
            return
        self.post_message(msg.RunStarted(run.id, pid))

    def on_run_started(self, message: msg.RunStarted) -> None:
        """Show the new run."""
        self._wanted_run = message.run_id
        self.run_id = message.run_id
        self._request("runs")
        self.notify(f"run {message.run_id} started (engine pid {message.pid})")

    def action_switch_run(self, run_id: str | None = None) -> None:
        """Show another run (asks which when none is given)."""
        if run_id:
            self._wanted_run = run_id
            self.run_id = run_id
            return
        if not self.run_ids:
            self.notify("no run yet: press n to start one", severity="warning")
            return
        self._request("summaries")

    def on_run_summaries_loaded(self, message: msg.RunSummariesLoaded) -> None:
        """Let the person pick a run."""
        options = [(s["id"], Text.assemble((s["id"], "bold"), "  ", (s["status"], model.RUN_STATUS_STYLE.get(s["status"], "")),
                                           f"  {s['mode']}  {s['tasks']} task(s)  ", (for_line(s["goal"][:60]), "italic")))
                   for s in message.summaries]
        self.app.push_screen(PickDialog("Switch to run", options, highlighted=self.run_id),
                             lambda chosen: self.action_switch_run(chosen) if chosen else None)

    # ------------------------------------------------------------------ members
    def latest_session(self, role: str) -> str | None:
        """The most recently used session of `role`."""
        records = [r for r in self.sessions.values() if r.role == role]
        return max(records, key=lambda r: r.updated).id if records else None

    def _role(self, role: str | None) -> str | None:
        role = role or self.selected_role
        if role is None:
            self.notify("the crew has no member", severity="warning")
        return role

    def action_talk(self, role: str | None = None, session_id: str | None = None) -> None:
        """Talk to a member: a prompt box resuming its latest session (or `session_id`)."""
        from agentbox.tui.screens.talk import TalkScreen

        role = self._role(role)
        if role is None:
            return
        name = f"talk-{role}"
        if not self.app.is_screen_installed(name):
            self.app.install_screen(TalkScreen(self.project, role, session_id or self.latest_session(role)), name)
        screen = self.app.get_screen(name)
        if session_id and isinstance(screen, TalkScreen):
            screen.use_session(session_id)
        self.app.push_screen(name)

    def action_ask(self) -> None:
        """Ask the liaison a question about the run shown (answered from its state, read-only)."""

        def asked(question: str | None) -> None:
            if question:
                self.notify("the liaison is reading the run's state…", title="ask", timeout=4)
                self.run_worker(self._ask(question, self.run.id if self.run else None), group="ask",
                                name="ask the liaison", exit_on_error=False)

        self.app.push_screen(NoteDialog("Ask the liaison", "Where things stand, answered from the run's files "
                                        "(with the time of the data). It costs a turn and changes nothing.",
                                        required=True, placeholder="where are we? what is blocked?", ok_label="ask"),
                             asked)

    async def _ask(self, question: str, run_id: str | None) -> None:
        from agentbox.core.reports import liaison

        try:
            answer = await liaison.ask(self.project, question, run_id)
        except AgentboxError as exc:
            self.post_message(msg.ActionFailed("ask the liaison", exc.message))
            return
        self.post_message(msg.LiaisonAnswered(question, answer))

    def on_liaison_answered(self, message: msg.LiaisonAnswered) -> None:
        """Show the answer under the time of its data."""
        from agentbox.core.reports import liaison

        answer = message.answer
        head = Text.assemble(("liaison", "bold cyan"), (f" · data as of {liaison.stamp(answer.as_of)}", "dim"),
                             ("\n\n", ""))
        body = safe_text(answer.text if answer.ok else f"the liaison's turn failed: {answer.error}",
                         "" if answer.ok else "red")
        tokens = "unknown" if answer.tokens is None else str(answer.tokens)
        foot = Text(f"\n\n{tokens} tokens · session {answer.session_id[:8]}", style="dim")
        self.app.push_screen(ConfirmDialog(Text.assemble(head, body, foot), yes_label="ok"))

    def action_history(self, role: str | None = None) -> None:
        """A member's session history."""
        from agentbox.tui.screens.sessions import SessionHistoryScreen

        role = self._role(role)
        if role is not None:
            self.app.push_screen(SessionHistoryScreen(self, role))

    def action_live(self, role: str | None = None) -> None:
        """Watch a member work: the live output of its running (else last) turn."""
        from agentbox.tui.screens.live import LiveScreen

        role = self._role(role)
        if role is not None:
            self.app.push_screen(LiveScreen(self.project, role))

    def action_attach(self, role: str | None = None, session_id: str | None = None) -> None:
        """Suspend the dashboard and run the member's tool interactively, resuming its session."""
        from agentbox.core.agents import resolve as services

        role = self._role(role)
        if role is None:
            return
        try:
            agent = services.role_agent(self.project, role)
            with services.interactive_session(agent, session_id or self.latest_session(role)) as command:
                self._suspended_call(command.argv, command.env,
                                     f"attached to {role} · session {command.session_id} — exit the tool to come back",
                                     command.pass_fds)
        except AgentboxError as exc:
            self.notify(exc.message, title=f"attach to {role}", severity="error")

    def action_shell(self, task_id: str | None = None) -> None:
        """Suspend the dashboard and open a shell in the task's worktree, in its role's sandbox."""
        from agentbox.core.admin.task_shell import sandboxed_shell, shell_argv, task_place

        task_id = task_id or self.selected_task
        if task_id is None:
            self.notify("select a task in the queue first", severity="warning")
            return
        try:
            place = task_place(self.project, task_id, self.run_id)
            with sandboxed_shell(place.agent, shell_argv(None, host=False)) as command:
                self._suspended_call(command.argv, command.env,
                                     f"shell in {place.agent.label}'s sandbox · {place.what} — exit to come back",
                                     command.pass_fds)
        except AgentboxError as exc:
            self.notify(exc.message, title=f"shell in {task_id}", severity="error")

    def _suspended_call(self, argv: list[str], env: dict[str, str] | None, banner: str,
                        pass_fds: tuple[int, ...] = ()) -> None:
        from textual.app import SuspendNotSupported

        try:
            with self.app.suspend():
                print(f"[agentbox] {banner}", file=sys.stderr)
                with contextlib.suppress(OSError):
                    subprocess.call(argv, env=env, cwd=str(self.project.root), pass_fds=pass_fds)
        except SuspendNotSupported:
            self.notify("this terminal cannot suspend the dashboard", severity="error")
            return
        self.refresh(layout=True)

    # ------------------------------------------------------------------ tasks and artifacts
    def action_task_detail(self, task_id: str | None = None) -> None:
        """A task's brief, acceptance, verdicts, failures and events."""
        from agentbox.tui.screens.task import TaskDetailScreen

        task_id = task_id or self.selected_task
        if task_id is None:
            self.notify("select a task in the queue first", severity="warning")
            return
        self.app.push_screen(TaskDetailScreen(self, task_id))

    def _artifact(self, path: str | None) -> ArtifactEntry | None:
        if path:
            return next((e for e in reversed(self.manifest) if e["path"] == path), ArtifactEntry(path=path))
        entry = self.selected_artifact
        if entry is None:
            self.notify("no artifact selected", severity="warning")
        return entry

    def action_view_artifact(self, path: str | None = None) -> None:
        """The artifact in a full-screen viewer."""
        from agentbox.tui.screens.artifact import ArtifactScreen

        entry = self._artifact(path)
        if entry is not None:
            self.app.push_screen(ArtifactScreen(entry, self.project.root))

    def action_edit_artifact(self, path: str | None = None) -> None:
        """Open the artifact in $VISUAL / $EDITOR, then come back."""
        entry = self._artifact(path)
        if entry is None:
            return
        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
        self._suspended_call([*shlex.split(editor), str(entry["path"])], None, f"editing {entry['path']}")

    def action_stats(self) -> None:
        """How the crew does across runs: cost and first-pass sparklines, figures by role and model."""
        from agentbox.tui.screens.stats import StatsScreen

        self.app.push_screen(StatsScreen(self.project, self.run))

    def action_profiles(self) -> None:
        """The profiles agentbox knows."""
        from agentbox.tui.screens.profiles import ProfilesScreen

        self.app.push_screen(ProfilesScreen())
