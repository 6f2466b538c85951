"""Reading a graph document leniently, and its pydantic errors as `schema` violations.

The graph rules must judge a document the schema rejects, so nodes and edges are read as
far as they are readable (`_read_nodes`, `_read_edges`); each pydantic error becomes one
`schema` violation that names the field path, its line and the valid keys or values
(worded by `agentbox.core.validation`, as for config files and replies).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentbox.core.errors import Violation
from agentbox.core.graph.model import Graph
from agentbox.core.validation import problems
from agentbox.core.yaml_io import position

_EDGE_KEYS = ("from", "to", "condition", "fail_reason", "kind")
_LIKELY_SLIPS = {
    "edgeKind": "kind",
    "edge_kind": "kind",
    "failReason": "fail_reason",
    "nodeName": "name",
    "systemAgentId": "role",
    "source": "from",
    "target": "to",
}
"""Key names people carry over from JSON graph APIs (camelCase, source/target) → this format's names."""


@dataclass(frozen=True)
class _Node:
    """A node as far as the graph rules need it (read leniently from the document)."""

    name: str
    role: str | None
    line: int | None
    role_line: int | None


@dataclass(frozen=True)
class _Edge:
    """An edge as far as the graph rules need it (read leniently from the document)."""

    source: str | None
    target: str | None
    condition: str | None
    reason: str | None
    kind: str | None
    line: int | None
    from_line: int | None
    to_line: int | None

    def describe(self) -> str:
        label = str(self.condition) if self.reason is None else f"{self.condition}: {self.reason}"
        if self.kind == "backward":
            label += ", backward"
        return f"{self.source} -> {self.target} ({label})"


def _read_nodes(document: dict[str, Any]) -> tuple[list[_Node], bool]:
    """The nodes whose name is a string; complete when every node has one."""
    raw = document.get("nodes")
    if not isinstance(raw, list):
        return [], False
    nodes: list[_Node] = []
    complete = True
    for index, item in enumerate(raw):
        name = item.get("name") if isinstance(item, dict) else None
        if not isinstance(name, str):
            complete = False
            continue
        role = item.get("role")
        nodes.append(
            _Node(
                name=str(name),
                role=str(role) if isinstance(role, str) else None,
                line=position(document, ("nodes", index))[0],
                role_line=position(document, ("nodes", index, "role"))[0],
            )
        )
    return nodes, complete


def _read_edges(document: dict[str, Any]) -> tuple[list[_Edge], bool]:
    """The edges with their ends as far as readable; complete when every edge is usable."""
    raw = document.get("edges", [])
    if raw is None:
        raw = []
    if not isinstance(raw, list):
        return [], False
    edges: list[_Edge] = []
    complete = True
    for index, item in enumerate(raw):
        if not isinstance(item, dict):
            complete = False
            continue
        source, target = item.get("from"), item.get("to")
        condition, reason = item.get("condition"), item.get("fail_reason")
        kind = item.get("kind", "forward")
        usable = (
            isinstance(source, str)
            and isinstance(target, str)
            and condition in ("success", "fail")
            and kind in ("forward", "backward")
            and (reason is None or (isinstance(reason, str) and reason != ""))
            and all(key in _EDGE_KEYS for key in item)
        )
        complete = complete and usable
        edges.append(
            _Edge(
                source=str(source) if isinstance(source, str) else None,
                target=str(target) if isinstance(target, str) else None,
                condition=str(condition) if isinstance(condition, str) else None,
                reason=str(reason) if isinstance(reason, str) and condition == "fail" else None,
                kind=str(kind) if isinstance(kind, str) else None,
                line=position(document, ("edges", index))[0],
                from_line=position(document, ("edges", index, "from"))[0],
                to_line=position(document, ("edges", index, "to"))[0],
            )
        )
    return edges, complete


def schema_violations(errors: Sequence[Mapping[str, Any]], document: Any) -> list[Violation]:
    """pydantic's errors of a Graph as `schema` violations: `edges[2].kind: invalid value ...`."""
    return [
        Violation("schema", f"{problem.path or 'graph'}: {problem.message}", position(document, problem.loc)[0])
        for problem in problems(Graph, errors, _LIKELY_SLIPS)
    ]


def _type_name(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, int | float):
        return "a number"
    return type(value).__name__
