"""The agentbox TUI application: routing only (screens do the work; CSS in app.tcss)."""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.text import Text
from textual.app import App
from textual.binding import Binding
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.worker import Worker, WorkerState

from agentbox.core.paths import ProjectPaths
from agentbox.core.termtext import for_line, for_terminal
from agentbox.tui import gc_tuning, model
from agentbox.tui import messages as msg
from agentbox.tui.commands import AgentboxCommands
from agentbox.tui.screens.dashboard import DashboardScreen
from agentbox.tui.screens.modals import ConfirmDialog

TOASTS_SHOWN = 2
"""Notifications shown at once (the newest); older ones stay in the event log, not over it."""

DEMO_HINT = ("This is the demo crew at work. The builder will ask you a question: "
             "press a to answer it. ctrl+p lists every action.")


class AgentboxApp(App[None]):
    """The dashboard inside a project; the profiles and how to init outside one."""

    CSS_PATH = "app.tcss"
    TITLE = "agentbox"
    COMMANDS = App.COMMANDS | {AgentboxCommands}
    BINDINGS = [
        Binding("q", "quit", "quit"),
        Binding("question_mark", "toggle_keys", "keys", show=False),
    ]

    def __init__(self, project: ProjectPaths | None, *, run_id: str | None = None, demo: bool = False,
                 clock: Callable[[], float] = time.time, live: bool = True,
                 sample_interval_s: float | None = 1.0,
                 engine_probe: Callable[[ProjectPaths, str], bool] | None = None) -> None:
        super().__init__()
        self.engine_probe = engine_probe
        self.project = project
        self.run_id = run_id
        self.demo = demo
        self.clock = clock
        self.live = live
        self.sample_interval_s = sample_interval_s

    def get_default_screen(self) -> Screen[None]:
        """The dashboard, or the profiles with the way to create a project."""
        if self.project is None:
            from agentbox.tui.screens.profiles import ProfilesScreen  # outside a project only

            return ProfilesScreen(intro=True)
        return DashboardScreen(self.project, run_id=self.run_id, clock=self.clock, live=self.live,
                               sample_interval_s=self.sample_interval_s, engine_probe=self.engine_probe)

    def on_mount(self) -> None:
        """Tune the collector for redraws; greet the demo's viewer."""
        gc_tuning.tune()
        if self.demo:
            self.notify(DEMO_HINT, title="agentbox demo", timeout=8)

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = False) -> None:
        """Every toast (each widget's `notify` comes here) shows its text as written: never as
        markup, escape sequences made visible, since a message may quote what an agent wrote."""
        super().notify(for_terminal(message), title=for_line(title), severity=severity, timeout=timeout,
                       markup=False)

    def _refresh_notifications(self) -> None:
        """Show only the newest few notifications, so they never stack down over the events panel."""
        from textual.app import ScreenStackError
        from textual.css.query import NoMatches
        from textual.notifications import Notifications
        from textual.widgets._toast import ToastRack

        try:
            rack = self.screen.get_child_by_type(ToastRack)
        except (ScreenStackError, NoMatches):  # no screen yet, or one without toasts
            return
        newest = Notifications()
        for notification in list(self._notifications)[-TOASTS_SHOWN:]:
            newest.add(notification)
        self.call_later(rack.show, newest)

    @property
    def dashboard(self) -> DashboardScreen | None:
        """The dashboard screen (None outside a project)."""
        return next((s for s in self.screen_stack if isinstance(s, DashboardScreen)), None)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A worker that failed becomes a notification, never a traceback."""
        if event.state == WorkerState.ERROR:
            error = event.worker.error
            self.notify(f"{type(error).__name__}: {error}", title=event.worker.name or "error", severity="error",
                        timeout=15)

    async def on_action_requested(self, message: msg.ActionRequested) -> None:
        """A screen opened from the dashboard asks it to act: the dashboard runs the action."""
        board = self.dashboard
        if board is not None:
            await board.run_action(message.call)
        if message.then is not None:
            message.then()

    async def action_quit(self) -> None:
        """Quit; with a finished run whose work is not merged yet, ask first."""
        board = self.dashboard
        run = board.run if board is not None else None
        if run is None or not model.can_merge(run) or isinstance(self.screen, ConfirmDialog):
            self.exit()
            return
        where = run.git.integration_branch if run.git is not None else "its branch"
        question = Text.assemble(
            ("Quit with the run's work not merged?\n\n", "bold"),
            (f"{run.id} approved work that is only on {where}. ", ""),
            ("Quitting removes the demo project, and that work with it." if self.demo else
             "It stays there: `agentbox merge` brings it in later, `agentbox diff` shows it."),
            ("\n\nPress n to go back, then m to merge.", "dim"))

        def chosen(yes: bool | None) -> None:
            if yes:
                self.exit()

        self.push_screen(ConfirmDialog(question, yes_label="quit"), chosen)

    def action_toggle_keys(self) -> None:
        """Show or hide the list of every key."""
        if self.screen.query("HelpPanel"):
            self.action_hide_help_panel()
        else:
            self.action_show_help_panel()
