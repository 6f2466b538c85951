"""What screens opened from the dashboard may read of it: the project and the live snapshots.

Sub-screens follow the dashboard's reactive `run` and `sessions` (`self.watch(view, "run", …)`)
and ask it to act by posting `ActionRequested`; they never import the dashboard, so the
screens do not form an import circle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from textual.dom import DOMNode

from agentbox.core.engine.models import Run
from agentbox.core.paths import ProjectPaths

if TYPE_CHECKING:
    from agentbox.core.agents.sessions import SessionRecord


class DashboardView(Protocol):
    """The dashboard as its sub-screens see it."""

    project: ProjectPaths
    run: Run | None
    sessions: dict[str, SessionRecord]


def view_node(view: DashboardView) -> DOMNode:
    """The dashboard screen behind `view`, as the node textual's `watch` follows."""
    assert isinstance(view, DOMNode), view
    return view
