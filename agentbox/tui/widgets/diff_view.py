"""A task's diff on screen: a heading, then each file's heading and its highlighted lines.

The lines are highlighted in a worker (`agentbox.tui.diffs`); this widget only mounts
what it is given, a file heading and a body per file, so the screen around it scrolls
through the files and can jump from one heading to the next.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.containers import Vertical
from textual.widgets import Static

from agentbox.core.termtext import for_line, safe_text
from agentbox.tui.diffs import RenderedFile, file_heading

FILES_SHOWN = 200
"""Most files drawn (each is two widgets); the rest are named with the command showing them."""


class DiffView(Vertical):
    """A heading and a line of explanation, or the files of a diff."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.file_paths: tuple[str, ...] = ()
        """The files shown, in order (what tests and the file jumps read)."""
        self._shown: object = None

    def show_note(self, heading: Text, note: str) -> None:
        """No diff to show: the heading and one line saying why."""
        self._replace((heading, note), [Static(heading, classes="diff-heading"),
                                        Static(safe_text(f"  {note}", style="dim"), classes="diff-note")])
        self.file_paths = ()

    def show_files(self, heading: Text, files: list[RenderedFile], *, truncated: bool, full_command: str) -> None:
        """Each file's heading and lines; the command that shows the whole diff when it was cut."""
        shown = files[:FILES_SHOWN]
        widgets = [Static(heading, classes="diff-heading")]
        if not files:
            widgets.append(Static(Text("  no changes: the branch's commits cancel out", style="dim"),
                                  classes="diff-note"))
        for rendered in shown:
            widgets.append(Static(file_heading(rendered.file), classes="diff-file-heading"))
            widgets.append(Static(rendered.body, classes="diff-file-body"))
        cut = []
        if len(files) > len(shown):
            cut.append(f"{len(files) - len(shown)} more file(s) not drawn")
        if truncated:
            cut.append("the diff is cut here")
        if cut:
            widgets.append(Static(Text.assemble(("  " + "; ".join(cut) + ". The whole diff: ", "dim italic"),
                                                (for_line(full_command), "bold")), classes="diff-note"))
        self._replace(None, widgets)  # a diff arrives only when its commits changed: always drawn
        self.file_paths = tuple(r.file.path for r in shown)

    def update_heading(self, heading: Text) -> None:
        """A new heading over the same diff (the task was merged meanwhile, say)."""
        for widget in self.query(".diff-heading").results(Static):
            if widget.content != heading:
                widget.update(heading)

    def file_headings(self) -> list[Static]:
        """The heading widget of each file, in order."""
        return list(self.query(".diff-file-heading").results(Static))

    def _replace(self, key: object, widgets: list[Static]) -> None:
        """Show `widgets`, unless they are the note already shown under `key` (None: always)."""
        if key is not None and key == self._shown:  # the same note again
            return
        self._shown = key
        with self.app.batch_update():
            self.remove_children()
            self.mount_all(widgets)
