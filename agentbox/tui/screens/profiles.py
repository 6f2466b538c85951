"""The profiles agentbox can use; outside a project, also how to create one."""

from __future__ import annotations

from functools import partial
from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from agentbox.core.termtext import for_line, for_terminal
from agentbox.tui import loaders
from agentbox.tui import messages as msg

NO_PROJECT = """\
## No project here

agentbox works on a **project**: a `.agent-box/` directory in a repository (like `.git/`)
that says who is on the crew and how they work together.

* `agentbox init` creates one here from the example crew (scripted agents, no API key needed)
* `agentbox demo` runs the demo crew in a throw-away project and opens this dashboard on it
* `agentbox profile add NAME --from claude` makes a profile for a real agent

These are the profiles agentbox knows:
"""


class ProfilesScreen(Screen[None]):
    """Every profile: user, agent-box v1 and bundled templates."""

    BINDINGS = [Binding("escape", "back", "back")]

    def __init__(self, *, intro: bool = False) -> None:
        super().__init__()
        self.intro = intro
        self.profiles: dict[str, Any] = {}

    def compose(self) -> ComposeResult:
        with Vertical(id="profiles"):
            if self.intro:
                # markdown-it and its friends (2 MB) are loaded only outside a project
                from textual.widgets import Markdown

                yield Markdown(NO_PROJECT, id="no-project")
            yield DataTable(id="profile-list", cursor_type="row")
            yield Static(id="profile-detail")
        yield Footer()

    def on_mount(self) -> None:
        """Columns, then read the profiles in a worker."""
        table = self.query_one(DataTable)
        table.border_title = "profiles"
        for column in ("name", "source", "tool", "model", "sandbox"):
            table.add_column(column, key=column)
        table.focus()
        self.reload()

    def reload(self) -> None:
        """Read the profiles again (called when the profiles directory changes)."""
        self.run_worker(partial(self._read), thread=True, exclusive=True, group="profiles", exit_on_error=False)

    def _read(self) -> None:
        self.post_message(loaders.list_profiles())

    def on_profiles_loaded(self, message: msg.ProfilesLoaded) -> None:
        """Fill the table."""
        table = self.query_one(DataTable)
        table.clear()
        self.profiles = {info.name: info for info in message.profiles}
        for info in message.profiles:
            profile = info.profile
            sandbox = profile.sandbox if isinstance(profile.sandbox, str) else \
                ("bwrap + network" if profile.sandbox.network else "bwrap, no network")
            table.add_row(Text(for_line(info.name), style="bold"), Text(info.source), Text(for_line(info.tool)),
                          Text(for_line(profile.runtime.model or "—")), Text(sandbox), key=info.name)
        for error in message.errors:
            self.notify(error, title="profile", severity="error", timeout=12)

    @on(DataTable.RowHighlighted, "#profile-list")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        info = self.profiles.get(str(event.row_key.value))
        if info is None:
            return
        profile = info.profile
        detail = Text.assemble((for_line(profile.display_name or info.name), "bold"), "\n",
                               (for_terminal(profile.description or "no description"), "italic"), "\n",
                               ("directory ", "dim"),
                               "bundled with agentbox" if info.source == "bundled" else for_line(info.directory))
        self.query_one("#profile-detail", Static).update(detail)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """No way back when this is the first screen (outside a project)."""
        if action == "back":
            return len(self.app.screen_stack) > 1
        return True

    def action_back(self) -> None:
        """Back to the dashboard (outside a project there is nothing to go back to)."""
        if len(self.app.screen_stack) > 1:
            self.app.pop_screen()
