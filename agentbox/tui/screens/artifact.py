"""One artifact, full screen, syntax-highlighted, with who made it."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from agentbox.core.engine.records import ArtifactEntry
from agentbox.core.termtext import safe_text
from agentbox.tui import loaders
from agentbox.tui import messages as msg
from agentbox.tui.widgets.artifacts import display_path, highlighted, provenance


class ArtifactScreen(Screen[None]):
    """A file the crew made."""

    BINDINGS = [Binding("escape", "app.pop_screen", "back"), Binding("e", "edit", "edit in $EDITOR")]

    def __init__(self, entry: ArtifactEntry, root: Path) -> None:
        super().__init__()
        self.entry = entry
        self.root = root

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="artifact-view"):
            yield Static(Text("reading…", style="dim"), id="artifact-body")
        yield Footer()

    def on_mount(self) -> None:
        """Read the file in a worker."""
        view = self.query_one("#artifact-view")
        view.border_title = safe_text(display_path(self.entry, self.root), single_line=True)  # type: ignore[assignment]
        if self.entry.get("role"):
            view.border_subtitle = Text(provenance(self.entry).plain)  # type: ignore[assignment]
        self.run_worker(partial(self._read, str(self.entry["path"])), thread=True, exit_on_error=False)

    def _read(self, path: str) -> None:
        self.post_message(loaders.read_text(path))

    def on_text_loaded(self, message: msg.TextLoaded) -> None:
        """Show it highlighted."""
        body = self.query_one("#artifact-body", Static)
        if message.error:
            body.update(safe_text(f"cannot show {message.path}: {message.error}", style="red"))
            return
        body.update(highlighted(message))

    def action_edit(self) -> None:
        """Open it in $VISUAL / $EDITOR."""
        self.post_message(msg.ActionRequested("edit_artifact", str(self.entry["path"]), then=self._reload))

    def _reload(self) -> None:
        """Read the file again (after the editor, which runs while the app is suspended)."""
        self.run_worker(partial(self._read, str(self.entry["path"])), thread=True, exit_on_error=False)
