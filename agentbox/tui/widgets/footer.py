"""The key footer, rebuilt only when the keys it shows change."""

from __future__ import annotations

from typing import Any

from textual.screen import Screen
from textual.widgets import Footer


class KeyFooter(Footer):
    """Textual's footer, minus the rebuild on every focus change.

    Textual's footer replaces all its key widgets whenever the screen's bindings may have
    changed, which happens on every focus switch (several times for one Tab) and on every
    `refresh_bindings`. On the dashboard the keys shown rarely change, and rebuilding them
    (mounting a dozen widgets, restyling them and laying the screen out again) was most of
    what a Tab cost. This footer compares what it would show with what it shows first.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._shown: tuple[object, ...] | None = None
        self._check_pending = False

    def bindings_changed(self, screen: Screen[object]) -> None:
        """Schedule one check of the keys after the refresh (many calls collapse into one)."""
        self._bindings_ready = True
        if not screen.app.app_focus:
            return
        if self.is_attached and screen is self.screen and not self._check_pending:
            self._check_pending = True
            self.call_after_refresh(self._recompose_if_changed)

    async def _recompose_if_changed(self) -> None:
        self._check_pending = False
        if not self.is_attached:
            return
        shown = self._keys_shown()
        if shown != self._shown:
            self._shown = shown
            await self.recompose()

    def _keys_shown(self) -> tuple[object, ...]:
        """Everything `Footer.compose` reads from the bindings: key, action, labels, enabled."""
        palette = self.app.COMMAND_PALETTE_BINDING if self.show_command_palette else None
        return tuple((key, b.binding.action, b.binding.description, b.binding.tooltip, b.tooltip, b.enabled,
                      b.binding.group)
                     for key, b in self.screen.active_bindings.items() if b.binding.show or key == palette)
