"""Where the MCP face sits: a face like the CLI and the TUI, which the core never imports."""

from __future__ import annotations

from tests.core.test_import_contracts import GRAPH


def _imports(importers: str, forbidden: tuple[str, ...]) -> list[str]:
    return sorted(f"{name} imports {target}" for name, targets in GRAPH.items() if name.startswith(importers)
                  for target in targets if target.startswith(forbidden))


def test_the_core_never_imports_the_mcp_face() -> None:
    assert "agentbox.mcp.server" in GRAPH
    assert _imports("agentbox.core", ("agentbox.mcp",)) == []


def test_the_mcp_face_uses_the_core_only() -> None:
    assert _imports("agentbox.mcp", ("agentbox.tui", "agentbox.cli")) == []
