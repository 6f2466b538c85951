"""The key footer is rebuilt when the keys it shows change, and only then."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import Button
from textual.widgets._footer import FooterKey

from agentbox.tui.widgets.footer import KeyFooter


class FooterApp(App[None]):
    BINDINGS = [Binding("p", "pause", "pause"), Binding("r", "resume", "resume")]

    def __init__(self) -> None:
        super().__init__()
        self.paused = False

    def compose(self) -> ComposeResult:
        yield Button("one")
        yield Button("two")
        yield KeyFooter()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "pause":
            return not self.paused
        if action == "resume":
            return self.paused
        return True

    def action_pause(self) -> None:
        self.paused = True
        self.refresh_bindings()


def shown(app: App[None]) -> list[tuple[str, bool]]:
    return [(key.description, key.has_class("-disabled")) for key in app.query(FooterKey)]


async def test_focus_switches_keep_the_footer_and_a_change_of_keys_rebuilds_it() -> None:
    app = FooterApp()
    async with app.run_test() as pilot:
        await pilot.pause()
        keys = list(app.query(FooterKey))
        assert ("pause", False) in shown(app) and ("resume", False) not in shown(app)
        await pilot.press("tab")
        await pilot.press("tab")
        await pilot.pause()
        assert list(app.query(FooterKey)) == keys  # the same widgets: nothing was rebuilt
        app.action_pause()
        await pilot.pause()
        await pilot.pause()
        assert ("resume", False) in shown(app) and ("pause", False) not in shown(app)
