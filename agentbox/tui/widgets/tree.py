"""A tree whose restyles are cheap: focus in and out repaints from its line cache, no screen layout."""

from __future__ import annotations

from typing import Any, TypeVar

from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Tree

DataT = TypeVar("DataT")
TREE_PARTS = tuple(sorted(Tree.COMPONENT_CLASSES))
"""The component classes a tree line is drawn with."""


class StyleMemo:
    """Which styles a widget's cached lines were drawn with, per pseudo-class state (focus, hover).

    Textual tells a widget its style changed without saying what changed. Focus moving in
    or out is such a change, and it happens on every Tab; a theme change is another. A
    widget whose line cache is keyed by its pseudo-class state only has to throw the cache
    away when the styles it sees in a state differ from those it drew that state with
    before, which is what `stale` answers. It must be asked at every paint, so that no
    line is cached in a state the memo has not seen.
    """

    def __init__(self) -> None:
        self._seen: dict[object, tuple[object, ...]] = {}

    def stale(self, state: object, styles: tuple[object, ...]) -> bool:
        """True when lines were drawn in `state` with other styles (then every state is forgotten)."""
        seen = self._seen.get(state)
        if seen == styles:
            return False
        if seen is None:  # nothing was ever drawn in this state since the cache was last dropped
            self._seen[state] = styles
            return False
        self._seen = {state: styles}
        return True

    def stale_for(self, widget: Widget, state: object) -> bool:
        """`stale` for the styles a tree line of `widget` is drawn with now: theme, own style, TREE_PARTS."""
        styles = (widget.app.theme, widget.rich_style,
                  *(widget.get_component_rich_style(part, partial=True) for part in TREE_PARTS))
        return self.stale(state, styles)


class QuietTree(Tree[DataT]):
    """Textual's tree, minus the rebuild and screen layout on every restyle.

    Textual's tree answers any style update by rebuilding its lines and asking for a layout
    of the whole screen, and every Tab is such an update. Colours never change the tree's
    size, and its line cache is keyed by the focus state: so a restyle only drops the cache
    when the styles really changed (a new theme), and otherwise just repaints.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._style_memo = StyleMemo()

    def notify_style_update(self) -> None:
        """Repaint; whether the lines must be drawn again is decided at the paint (below), once
        the part styles (cursor, guides) have been worked out too."""
        super(Tree, self).notify_style_update()
        self.refresh()

    def render_lines(self, crop: Region) -> list[Strip]:
        """The lines in `crop`; the line cache is dropped first if the styles really changed."""
        if self._style_memo.stale_for(self, self.get_pseudo_class_state()):
            self._line_cache.clear()
            self._updates += 1
        return super().render_lines(crop)
