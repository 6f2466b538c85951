"""Work graph validation: five path rules, plus schema and reference checks.

Validation reports *every* violation as `Violation(rule, detail, line)`:

- `schema`: malformed YAML, a wrong key, type or value (every pydantic error, with its
  field path and line);
- `reference`: an edge naming an unknown node, a node naming an unknown role (when the
  crew's roles are given), a node name used twice, a success edge written twice;
- `acyclic`: the forward edges form no cycle (each cycle is named `a -> b -> a`);
- `single-entry`: exactly one node has no forward in-edge;
- `reachable`: every node is reachable from the entry along forward edges;
- `backward-labeled`: an edge that points back (its target comes before its source along
  forward edges) must be `kind: backward`, and a `backward` edge must close a loop;
- `fail-fallback-edge`: a node with fail edges has exactly one fail edge without a
  `fail_reason` (its fallback), and no two of its fail edges share a reason.

Rules that cannot be judged because of earlier problems are skipped, not guessed: the
graph rules need every node's name and every edge's from/to/condition/kind/fail_reason
to be well formed; single-entry, reachable and backward-labeled also need every edge to
name known nodes. The other rules still run.

"Points back" does not depend on which topological order is picked: a forward edge
points back when it closes a forward cycle (it is the edge a depth-first search from the
entry, in file order, meets on its way back); a backward edge `u -> v` is right exactly
when `v` is `u` itself (a retry) or an ancestor of `u` — `v` comes before `u` in every
topological order of the forward edges.

Reading the document leniently lives in `agentbox.core.graph.schema`; pydantic's errors
are worded by `agentbox.core.validation`, as for config files and replies.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agentbox.core.errors import ConfigError, NotFoundError, Violation
from agentbox.core.graph.model import Graph
from agentbox.core.graph.schema import (
    _Edge,
    _Node,
    _read_edges,
    _read_nodes,
    _type_name,
    schema_violations,
)
from agentbox.core.validation import NAME_PATTERN
from agentbox.core.yaml_io import parse_yaml, plain, read_yaml_text

RULES: tuple[str, ...] = (
    "schema",
    "reference",
    "acyclic",
    "single-entry",
    "reachable",
    "backward-labeled",
    "fail-fallback-edge",
)
"""Every rule name a violation can carry, in the order they are reported."""


# ----------------------------------------------------------------------------- validation


def validate_graph(
    document: Any, file: Path | str, roles: Collection[str] | None = None
) -> list[Violation]:
    """Every violation of a parsed graph document (round-trip YAML keeps the lines).

    `file` is where the document came from (for the caller's messages); `roles` are the
    crew's role names, or None to skip the unknown-role check.
    """
    return _check(document, roles)[1]


def check_graph_text(
    text: str, file: Path | str, roles: Collection[str] | None = None
) -> tuple[Graph | None, list[Violation]]:
    """Parse and validate graph YAML; the Graph is returned only when nothing is violated."""
    try:
        document = parse_yaml(text, file)
    except ConfigError as exc:
        return None, [Violation("schema", exc.detail, exc.line)]
    return _check(document, roles)


def check_graph_file(
    path: Path, roles: Collection[str] | None = None
) -> tuple[Graph | None, list[Violation]]:
    """Read, parse and validate a graph file; a missing or unreadable file raises."""
    if not path.exists():
        raise NotFoundError(f"no work graph at {path}")
    try:
        text = read_yaml_text(path)
    except ConfigError as exc:
        if exc.line is None:  # unreadable: not a graph problem
            raise
        return None, [Violation("schema", exc.detail, exc.line)]
    return check_graph_text(text, path, roles)


# ----------------------------------------------------------------------------- internals


def _check(document: Any, roles: Collection[str] | None) -> tuple[Graph | None, list[Violation]]:
    """All violations of one document, and the Graph when there are none."""
    if document is None:
        return None, [
            Violation("schema", "the file is empty: a graph needs `nodes` and `edges`", 1)
        ]
    if not isinstance(document, dict):
        got = _type_name(document)
        return None, [
            Violation(
                "schema", f"expected a mapping with `nodes` and `edges` at the top, got {got}", 1
            )
        ]
    violations: list[Violation] = []
    graph: Graph | None = None
    try:
        graph = Graph.model_validate(plain(document))
    except ValidationError as exc:
        violations.extend(schema_violations(exc.errors(), document))

    nodes, nodes_complete = _read_nodes(document)
    edges, edges_complete = _read_edges(document)
    names = list(dict.fromkeys(n.name for n in nodes))
    violations.extend(_duplicate_nodes(nodes))
    if roles is not None:
        violations.extend(_unknown_roles(nodes, roles))
    dangling: list[Violation] = []
    if nodes_complete:
        dangling = _dangling_edges(edges, names)
        violations.extend(dangling)
    violations.extend(_duplicate_success_edges(edges))
    if nodes_complete and edges_complete:
        violations.extend(_graph_rules(nodes, names, edges, judge_paths=not dangling))
    violations.sort(key=lambda v: (RULES.index(v.rule), v.line if v.line is not None else 1 << 30))
    return (graph if not violations else None), violations


def _graph_rules(
    nodes: list[_Node], names: list[str], edges: list[_Edge], *, judge_paths: bool
) -> list[Violation]:
    """acyclic, single-entry, reachable, backward-labeled and fail-fallback-edge."""
    out: list[Violation] = []
    known = set(names)
    node_line = {}
    for node in nodes:
        node_line.setdefault(node.name, node.line)
    forward = [e for e in edges if e.kind == "forward" and e.source in known and e.target in known]
    successors: dict[str, list[_Edge]] = {name: [] for name in names}
    predecessors: dict[str, list[str]] = {name: [] for name in names}
    for edge in forward:
        assert edge.source is not None and edge.target is not None
        successors[edge.source].append(edge)
        predecessors[edge.target].append(edge.source)
    candidates = [name for name in names if not predecessors[name]]

    # acyclic (and the forward edges that point back, found on the way)
    back_edges = _back_edges(names, candidates, successors)
    for edge, cycle in back_edges:
        out.append(
            Violation(
                "acyclic",
                f"forward edges form a cycle: {' -> '.join(cycle)} (closed by {edge.describe()})",
                edge.line,
            )
        )

    if judge_paths:
        # single-entry
        if not candidates and names:
            first = names[0]
            entered_from = ", ".join(dict.fromkeys(predecessors[first]))
            out.append(
                Violation(
                    "single-entry",
                    f"no entry node: every node has a forward in-edge ({first} is entered from "
                    f"{entered_from}); an edge back to the entry must be kind: backward",
                    node_line[first],
                )
            )
        elif len(candidates) > 1:
            out.append(
                Violation(
                    "single-entry",
                    f"{len(candidates)} entry nodes (no forward in-edge): {', '.join(candidates)}; "
                    "exactly one is allowed, connect the others downstream of the real entry",
                    node_line[candidates[1]],
                )
            )

        # reachable
        if candidates:
            reached = _reach(candidates, lambda n: (e.target for e in successors[n]))
            source = (
                f"the entry {candidates[0]}"
                if len(candidates) == 1
                else f"any entry ({', '.join(candidates)})"
            )
            for name in names:
                if name not in reached:
                    out.append(
                        Violation(
                            "reachable",
                            f"node {name} is not reachable from {source} along forward edges",
                            node_line[name],
                        )
                    )

        # backward-labeled: forward edges that point back ...
        for edge, _cycle in back_edges:
            where = (
                f"to {edge.target} itself"
                if edge.source == edge.target
                else f"to {edge.target}, which comes before {edge.source} along forward edges"
            )
            out.append(
                Violation(
                    "backward-labeled",
                    f"edge {edge.describe()} points back {where}: mark it kind: backward",
                    edge.line,
                )
            )
        # ... and backward edges that close no loop
        below: dict[str, set[str]] = {}

        def descendants(name: str) -> set[str]:
            if name not in below:
                below[name] = _reach([name], lambda n: (str(e.target) for e in successors[n]))
            return below[name]

        for edge in edges:
            if edge.kind != "backward" or edge.source == edge.target:
                continue
            assert edge.source is not None and edge.target is not None
            if edge.source in descendants(edge.target):
                continue
            why = (
                f"{edge.target} comes after {edge.source} along forward edges; make it forward"
                if edge.target in descendants(edge.source)
                else f"there is no forward path {edge.target} -> ... -> {edge.source}"
            )
            out.append(
                Violation(
                    "backward-labeled",
                    f"edge {edge.describe()} is kind: backward but closes no loop: {why}",
                    edge.line,
                )
            )

    # fail-fallback-edge
    fails: dict[str, list[_Edge]] = {}
    for edge in edges:
        if edge.condition == "fail" and edge.source in known:
            assert edge.source is not None
            fails.setdefault(edge.source, []).append(edge)
    for name, group in fails.items():
        fallbacks = [e for e in group if e.reason is None]
        if not fallbacks:
            reasons = ", ".join(str(e.reason) for e in group)
            out.append(
                Violation(
                    "fail-fallback-edge",
                    f"node {name} has fail edges only with a fail_reason ({reasons}) and no "
                    "fallback: add a fail edge without fail_reason, or any other failure "
                    f"leaves {name} blocked",
                    node_line[name],
                )
            )
        elif len(fallbacks) > 1:
            targets = ", ".join(str(e.target) for e in fallbacks)
            out.append(
                Violation(
                    "fail-fallback-edge",
                    f"node {name} has {len(fallbacks)} fallback fail edges (to {targets}); "
                    "keep exactly one fail edge without fail_reason",
                    fallbacks[1].line,
                )
            )
        by_reason: dict[str, list[_Edge]] = {}
        for edge in group:
            if edge.reason is not None:
                by_reason.setdefault(edge.reason, []).append(edge)
        for reason, same in by_reason.items():
            if len(same) > 1:
                targets = ", ".join(str(e.target) for e in same)
                out.append(
                    Violation(
                        "fail-fallback-edge",
                        f"node {name} has {len(same)} fail edges with fail_reason {reason!r} "
                        f"(to {targets}); a reason must route to exactly one edge",
                        same[1].line,
                    )
                )
    return out


def _back_edges(
    names: list[str], candidates: list[str], successors: dict[str, list[_Edge]]
) -> list[tuple[_Edge, list[str]]]:
    """Three-colour DFS (entries first, then file order): each edge closing a cycle, with it."""
    white, grey, black = 0, 1, 2
    colour = dict.fromkeys(names, white)
    found: list[tuple[_Edge, list[str]]] = []
    for start in [*candidates, *(n for n in names if n not in candidates)]:
        if colour[start] != white:
            continue
        colour[start] = grey
        path = [start]
        stack: list[tuple[str, int]] = [(start, 0)]
        while stack:
            node, index = stack[-1]
            if index < len(successors[node]):
                stack[-1] = (node, index + 1)
                edge = successors[node][index]
                target = edge.target
                assert target is not None
                if colour[target] == white:
                    colour[target] = grey
                    path.append(target)
                    stack.append((target, 0))
                elif colour[target] == grey:
                    found.append((edge, [*path[path.index(target) :], target]))
            else:
                colour[node] = black
                path.pop()
                stack.pop()
    return found


def _reach(starts: Iterable[str], step: Callable[[str], Iterable[str]]) -> set[str]:
    """Every node reachable from `starts` (included) by repeatedly applying `step`."""
    seen = set(starts)
    todo = list(seen)
    while todo:
        for nxt in step(todo.pop()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def _duplicate_nodes(nodes: list[_Node]) -> list[Violation]:
    first: dict[str, _Node] = {}
    out: list[Violation] = []
    for node in nodes:
        if node.name in first:
            at = first[node.name].line
            out.append(
                Violation(
                    "reference",
                    f"duplicate node name {node.name!r} (first defined at line {at})",
                    node.line,
                )
            )
        else:
            first[node.name] = node
    return out


def _unknown_roles(nodes: list[_Node], roles: Collection[str]) -> list[Violation]:
    known = sorted(roles)
    out: list[Violation] = []
    for node in nodes:
        role = node.role
        if role is None or not re.match(NAME_PATTERN, role) or role in roles:
            continue
        out.append(
            Violation(
                "reference",
                f"node {node.name}: unknown role {role!r}{_did_you_mean(role, known)}; "
                f"crew roles: {', '.join(known) or '(none)'}",
                node.role_line,
            )
        )
    return out


def _dangling_edges(edges: list[_Edge], names: list[str]) -> list[Violation]:
    known = set(names)
    out: list[Violation] = []
    for edge in edges:
        for end, value, line in (
            ("from", edge.source, edge.from_line),
            ("to", edge.target, edge.to_line),
        ):
            if value is None or value in known:
                continue
            out.append(
                Violation(
                    "reference",
                    f"edge {edge.source or '?'} -> {edge.target or '?'}: {end} names unknown node "
                    f"{value!r}{_did_you_mean(value, names)}; nodes: {', '.join(names)}",
                    line,
                )
            )
    return out


def _duplicate_success_edges(edges: list[_Edge]) -> list[Violation]:
    seen: dict[tuple[str | None, str | None], _Edge] = {}
    out: list[Violation] = []
    for edge in edges:
        if edge.condition != "success" or edge.source is None or edge.target is None:
            continue
        key = (edge.source, edge.target)
        if key in seen:
            out.append(
                Violation(
                    "reference",
                    f"edge {edge.source} -> {edge.target} (success) is written twice "
                    f"(first at line {seen[key].line})",
                    edge.line,
                )
            )
        else:
            seen[key] = edge
    return out


def _did_you_mean(value: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(value, choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
