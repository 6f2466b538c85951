"""Work graphs: loading them, and the helpers the engine runs on.

Validation (schema, references and the five path rules) lives in
`agentbox.core.graph.rules`; its public names are re-exported here, so
`from agentbox.core.graph.load import check_graph_file` keeps working.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Collection
from pathlib import Path

from agentbox.core.errors import ConfigError, GraphError, NotFoundError
from agentbox.core.graph.model import Condition, Edge, Graph, Node
from agentbox.core.graph.rules import RULES, check_graph_file, check_graph_text, validate_graph
from agentbox.core.paths import ProjectPaths

# ------------------------------------------------------------------------------ loading


def load_graph(path: Path, roles: Collection[str] | None = None) -> Graph:
    """The validated graph at `path`; raises GraphError listing every violation."""
    graph, violations = check_graph_file(path, roles)
    if violations or graph is None:
        raise GraphError(path, violations)
    return graph


def resolve_graph(ref: str, project: ProjectPaths | None) -> Path:
    """A graph given as a path relative to `.agent-box/` (as crew.yaml's `graph.file`), a
    name in the project's `.agent-box/graphs/` (`build` or `build.yaml`), or a file path.

    The project's own graphs come first, and one found there must stay inside `.agent-box/`
    once symlinks are followed (a cloned repository could link it to any host file, whose
    text would go to the model as node briefs); a path the person gives is read as given.
    """
    if project is not None and not Path(ref).is_absolute() and ".." not in Path(ref).parts:
        found = _project_graph(ref, project)
        if found is not None:
            return found
    given = Path(ref).expanduser()
    if given.is_file() or (os.path.lexists(given) and not given.is_dir()):
        return given
    available = list_graphs(project) if project is not None else []
    hint = (
        f"graphs in {project.graphs_dir}: {', '.join(available)}"
        if project is not None and available
        else "give the path of a graph file, or the name of one in .agent-box/graphs/"
    )
    where = f" nor a graph in {project.graphs_dir}" if project is not None else ""
    raise NotFoundError(f"no work graph {ref!r}: not a file{where}", hint)


def _project_graph(ref: str, project: ProjectPaths) -> Path | None:
    """The graph `ref` names in the project (`.agent-box/REF`, `.agent-box/graphs/REF[.yaml]`),
    refused when it leads outside `.agent-box/`; None when there is none."""
    candidates = [project.box / ref]
    if "/" not in ref:
        suffixes = [""] if ref.endswith((".yaml", ".yml")) else [".yaml", ".yml"]
        candidates.extend(project.graphs_dir / f"{ref}{suffix}" for suffix in suffixes)
    box = project.box.resolve()
    for candidate in candidates:
        if not os.path.lexists(candidate):
            continue
        real = candidate.resolve()
        if not real.is_relative_to(box):
            raise ConfigError(
                f"leads outside {project.box} (to {real})", file=candidate, line=1,
                hint="a project's work graph is a regular file inside .agent-box/",
            )
        if not candidate.is_dir() or candidate.suffix in (".yaml", ".yml"):
            return candidate  # a directory or FIFO named like a graph is reported by the reader
    return None


def list_graphs(project: ProjectPaths) -> list[str]:
    """Names of the graphs in the project's `.agent-box/graphs/`."""
    folder = project.graphs_dir
    if not folder.is_dir():
        return []
    return sorted(p.stem for p in folder.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())


# ----------------------------------------------------------------------------- helpers


def get_node(graph: Graph, name: str) -> Node:
    """The node called `name`; KeyError when there is none."""
    for node in graph.nodes:
        if node.name == name:
            return node
    raise KeyError(name)


def entry(graph: Graph) -> str:
    """The entry: the one node without a forward in-edge (ValueError if not exactly one)."""
    entered = {e.to for e in graph.edges if e.kind == "forward"}
    candidates = [n.name for n in graph.nodes if n.name not in entered]
    if len(candidates) != 1:
        raise ValueError(f"expected exactly one entry node, found {candidates or 'none'}")
    return candidates[0]


def forward_successors(graph: Graph, node: str, condition: Condition = "success") -> list[Edge]:
    """The forward edges leaving `node` with `condition`, in file order (parallel branches)."""
    return [
        e
        for e in graph.edges
        if e.from_ == node and e.condition == condition and e.kind == "forward"
    ]


def fail_edge(graph: Graph, node: str, reason: str | None) -> Edge | None:
    """The edge a failure of `node` takes: the exact `fail_reason`, else the fallback, else None.

    None means the node is blocked. Both forward and backward fail edges are candidates.
    """
    fails = [e for e in graph.edges if e.from_ == node and e.condition == "fail"]
    if reason is not None:
        for edge in fails:
            if edge.fail_reason == reason:
                return edge
    return next((e for e in fails if e.fail_reason is None), None)


def forward_predecessors(graph: Graph, node: str) -> list[str]:
    """The nodes with a forward edge (any condition) into `node`, without repeats, in file order."""
    seen: dict[str, None] = {}
    for edge in graph.edges:
        if edge.to == node and edge.kind == "forward":
            seen.setdefault(edge.from_, None)
    return list(seen)


def topological_order(graph: Graph) -> list[str]:
    """The nodes ordered along forward edges, ties broken by file order (ValueError on a cycle)."""
    index = {n.name: i for i, n in enumerate(graph.nodes)}
    successors: dict[str, list[str]] = {name: [] for name in index}
    indegree = dict.fromkeys(index, 0)
    for edge in graph.edges:
        if edge.kind == "forward" and edge.from_ in index and edge.to in index:
            successors[edge.from_].append(edge.to)
            indegree[edge.to] += 1
    ready = [(i, name) for name, i in index.items() if indegree[name] == 0]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        _, name = heapq.heappop(ready)
        order.append(name)
        for target in successors[name]:
            indegree[target] -= 1
            if indegree[target] == 0:
                heapq.heappush(ready, (index[target], target))
    if len(order) != len(index):
        stuck = [name for name in index if name not in order]
        raise ValueError(f"forward edges form a cycle through {', '.join(stuck)}")
    return order


__all__ = [
    "RULES",
    "check_graph_file",
    "check_graph_text",
    "entry",
    "fail_edge",
    "forward_predecessors",
    "forward_successors",
    "get_node",
    "list_graphs",
    "load_graph",
    "resolve_graph",
    "topological_order",
    "validate_graph",
]
