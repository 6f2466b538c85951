"""A tree that repaints, instead of laying the screen out again, when only its style changed."""

from __future__ import annotations

from typing import TypeVar

from textual.widgets import Tree

DataT = TypeVar("DataT")


class QuietTree(Tree[DataT]):
    """Textual's tree, minus the rebuild and screen layout on every restyle.

    Textual's tree answers any style update by rebuilding its lines and asking for a layout
    of the whole screen. Focus moving into or out of it is such an update (the cursor and
    the border change colour), so every Tab across the dashboard laid the screen out again.
    Colours never change the tree's size: here a restyle only re-renders the visible lines
    (its line cache is keyed by the node versions bumped below).
    """

    def notify_style_update(self) -> None:
        """Drop the rendered lines; keep the tree's lines and size."""
        super(Tree, self).notify_style_update()
        self._line_cache.clear()
        self._updates += 1
        self.refresh()
