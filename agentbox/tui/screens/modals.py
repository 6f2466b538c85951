"""Small dialogs of the run actions: start a run, a note for approve/rework, an answer, a choice."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, OptionList, Select, Static
from textual.widgets.option_list import Option, OptionDoesNotExist

from agentbox.core.engine.models import Checkpoint
from agentbox.core.termtext import safe_text


class Dialog(ModalScreen[Any]):
    """A centred box; escape cancels (dismisses with None)."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def action_cancel(self) -> None:
        """Close without doing anything."""
        self.dismiss(None)

    @on(Button.Pressed, "#cancel")
    def _cancel_pressed(self) -> None:
        self.action_cancel()


class StartRunDialog(Dialog):
    """Goal and mode of a new run."""

    def __init__(self, modes: list[str], mode: str) -> None:
        super().__init__()
        self.modes = modes
        self.mode = mode

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("Start a run", classes="dialog-title")
            yield Input(placeholder="the goal: what should the crew achieve?", id="goal")
            yield Select([(m, m) for m in self.modes], value=self.mode, allow_blank=False, id="mode")
            with Horizontal(classes="dialog-buttons"):
                yield Button("start", variant="primary", id="ok")
                yield Button("cancel", id="cancel")

    @on(Input.Submitted, "#goal")
    @on(Button.Pressed, "#ok")
    def _submit(self) -> None:
        goal = self.query_one("#goal", Input).value.strip()
        if not goal:
            self.notify("say what the crew should do", severity="warning")
            return
        self.dismiss((goal, str(self.query_one("#mode", Select).value)))


class NoteDialog(Dialog):
    """A title, an explanation and one line of text (approve and rework notes)."""

    def __init__(self, title: str, explanation: str, *, required: bool, placeholder: str = "", value: str = "",
                 ok_label: str = "ok") -> None:
        super().__init__()
        self.title_text = title
        self.explanation = explanation
        self.required = required
        self.placeholder = placeholder
        self.value = value
        self.ok_label = ok_label

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(safe_text(self.title_text, single_line=True), classes="dialog-title")
            yield Static(safe_text(self.explanation), classes="dialog-text")
            yield Input(value=self.value, placeholder=self.placeholder, id="note")
            with Horizontal(classes="dialog-buttons"):
                yield Button(self.ok_label, variant="primary", id="ok")
                yield Button("cancel", id="cancel")

    @on(Input.Submitted, "#note")
    @on(Button.Pressed, "#ok")
    def _submit(self) -> None:
        note = self.query_one("#note", Input).value.strip()
        if self.required and not note:
            self.notify("a note is needed: say what to fix", severity="warning")
            return
        self.dismiss(note)


class AnswerDialog(Dialog):
    """A checkpoint's question, its suggested answers as buttons, and a free answer."""

    def __init__(self, checkpoint: Checkpoint) -> None:
        super().__init__()
        self.checkpoint = checkpoint

    def compose(self) -> ComposeResult:
        cp = self.checkpoint
        with Vertical(classes="dialog"):
            about = f" · {cp.role}" if cp.role else ""
            about += f" on {cp.task}" if cp.task else ""
            yield Label(safe_text(f"{cp.id} · {cp.kind}{about}", single_line=True), classes="dialog-title")
            yield Static(safe_text(cp.question.strip()), classes="dialog-text")
            if cp.options:
                with Horizontal(classes="dialog-options"):
                    for index, option in enumerate(cp.options):
                        yield Button(safe_text(option, single_line=True), id=f"option-{index}", classes="option")
            yield Input(placeholder="your answer", id="answer")
            with Horizontal(classes="dialog-buttons"):
                yield Button("answer", variant="primary", id="ok")
                yield Button("cancel", id="cancel")

    def on_mount(self) -> None:
        """Type the answer straight away."""
        self.query_one("#answer", Input).focus()

    @on(Button.Pressed, ".option")
    def _option(self, event: Button.Pressed) -> None:
        index = int(str(event.button.id).removeprefix("option-"))  # the option as written, not as shown
        self.dismiss(self.checkpoint.options[index])

    @on(Input.Submitted, "#answer")
    @on(Button.Pressed, "#ok")
    def _submit(self) -> None:
        text = self.query_one("#answer", Input).value.strip()
        if not text:
            self.notify("the answer is empty", severity="warning")
            return
        self.dismiss(text)


class ConfirmDialog(Dialog):
    """Yes or no (a long question, such as a diff's stat, scrolls)."""

    BINDINGS = [Binding("y", "yes", "yes"), Binding("n,escape", "cancel", "no")]

    def __init__(self, question: str | Text, *, yes_label: str = "yes") -> None:
        super().__init__()
        self.question = question
        self.yes_label = yes_label

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            with VerticalScroll(classes="dialog-question", can_focus=False):  # the buttons keep the focus
                yield Static(safe_text(self.question) if isinstance(self.question, str) else self.question)
            with Horizontal(classes="dialog-buttons"):
                yield Button(self.yes_label, variant="error", id="yes")
                yield Button("no", id="no")

    def action_yes(self) -> None:
        """Confirmed."""
        self.dismiss(True)

    @on(Button.Pressed, "#yes")
    def _yes(self) -> None:
        self.dismiss(True)

    @on(Button.Pressed, "#no")
    def _no(self) -> None:
        self.dismiss(None)


class MergeDialog(Dialog):
    """Merge the run's branch as a merge commit, or squashed into one commit, or not at all."""

    BINDINGS = [Binding("y,m", "merge", "merge"), Binding("s", "squash", "squash"),
                Binding("n,escape", "cancel", "no")]

    def __init__(self, question: str | Text) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            with VerticalScroll(classes="dialog-question", can_focus=False):
                yield Static(self.question)
            with Horizontal(classes="dialog-buttons"):
                yield Button("merge", variant="error", id="merge")
                yield Button("squash", variant="warning", id="squash")
                yield Button("no", id="no")

    def action_merge(self) -> None:
        """A merge commit."""
        self.dismiss("merge")

    def action_squash(self) -> None:
        """One commit with the run's changes."""
        self.dismiss("squash")

    @on(Button.Pressed, "#merge")
    def _merge(self) -> None:
        self.dismiss("merge")

    @on(Button.Pressed, "#squash")
    def _squash(self) -> None:
        self.dismiss("squash")

    @on(Button.Pressed, "#no")
    def _no(self) -> None:
        self.dismiss(None)


class PickDialog(Dialog):
    """Choose one of a few things (a task, a checkpoint, a run)."""

    def __init__(self, title: str, options: Sequence[tuple[str, Text | str]], highlighted: str | None = None) -> None:
        super().__init__()
        self.title_text = title
        self.options = options
        self.highlighted_value = highlighted

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(safe_text(self.title_text, single_line=True), classes="dialog-title")
            yield OptionList(*(Option(safe_text(label, single_line=True) if isinstance(label, str) else label, id=value)
                               for value, label in self.options), id="choices")

    def on_mount(self) -> None:
        """Start on the current choice."""
        choices = self.query_one(OptionList)
        choices.focus()
        if self.highlighted_value is not None:
            with contextlib.suppress(OptionDoesNotExist):  # an unknown id: keep the first one
                choices.highlighted = choices.get_option_index(self.highlighted_value)

    @on(OptionList.OptionSelected)
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)
