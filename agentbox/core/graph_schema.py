"""Reading a graph document leniently, and wording its pydantic errors for people.

The graph rules must judge a document the schema rejects, so nodes and edges are read as
far as they are readable (`_read_nodes`, `_read_edges`); each pydantic error becomes one
`schema` violation that names the field path, its line and the valid keys or values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentbox.core.config import NAME_RULE
from agentbox.core.errors import Violation
from agentbox.core.yaml_io import position

_TOP_KEYS = ("name", "description", "nodes", "edges")
_NODE_KEYS = ("name", "role", "brief")
_EDGE_KEYS = ("from", "to", "condition", "fail_reason", "kind")
_SEED_KEYS = {
    "edgeKind": "kind",
    "edge_kind": "kind",
    "failReason": "fail_reason",
    "nodeName": "name",
    "systemAgentId": "role",
    "source": "from",
    "target": "to",
}
"""Key names of seed 004's JSON API (and other likely slips) → this file format's names."""


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


def _schema_violation(error: Any, document: Any) -> Violation:
    """One pydantic error as a `schema` violation: `edges[2].kind: invalid value ...`."""
    loc = tuple(
        p
        for p in error["loc"]
        if not (isinstance(p, str) and ("[" in p or p.startswith("function-")))
    )
    line = position(document, loc)[0]
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    return Violation("schema", f"{path or 'graph'}: {_describe(error, loc)}", line)


def _describe(error: Any, loc: tuple[str | int, ...]) -> str:
    """A human sentence for one pydantic error, naming the valid keys or values."""
    kind = error["type"]
    ctx = error.get("ctx") or {}
    value = error.get("input")
    if kind == "extra_forbidden":
        key = str(loc[-1]) if loc else "?"
        container = loc[0] if len(loc) > 1 else None
        valid = (
            _NODE_KEYS
            if container == "nodes"
            else _EDGE_KEYS
            if container == "edges"
            else _TOP_KEYS
        )
        hint = f" (did you mean {_SEED_KEYS[key]!r}?)" if key in _SEED_KEYS else ""
        return f"unknown key {key!r}{hint}; valid keys: {', '.join(valid)}"
    if kind == "missing":
        return "required key is missing"
    if kind == "literal_error":
        return f"invalid value {value!r}; allowed: {ctx.get('expected', '')}"
    if kind == "string_pattern_mismatch":
        return f"invalid name {value!r}: {NAME_RULE}"
    if kind == "string_too_short":
        if loc and loc[-1] == "fail_reason":
            return "must not be empty (leave fail_reason out for the fallback edge)"
        return "must not be empty"
    if kind == "too_short" and loc == ("nodes",):
        return "a graph needs at least one node"
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return f"expected a mapping, got {_type_name(value)}"
    if kind == "list_type":
        return f"expected a list, got {_type_name(value)}"
    if kind == "string_type":
        return f"expected a string, got {_type_name(value)}"
    if kind == "value_error":
        return str(error["msg"]).removeprefix("Value error, ")
    return str(error["msg"])


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
