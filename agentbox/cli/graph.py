"""`agentbox graph check FILE`: validate a work graph by the five rules (plus schema, reference)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agentbox.cli.common import maybe_project, print_json
from agentbox.core.errors import AgentboxError, ProjectNotFoundError
from agentbox.core.paths import ProjectPaths, find_project
from agentbox.core.termtext import for_line, for_terminal


def graph_check(args: argparse.Namespace) -> int:
    """Print every violation as `FILE:LINE: [rule] detail` (exit 2), or `ok: ...` (exit 0).

    FILE is a path, or a graph name in the project's `.agent-box/graphs/`. When a project
    is found (`--project`, else the one holding the file, else the one above the cwd), the
    crew's role names are checked too.
    """
    from agentbox.core.graph.load import check_graph_file, entry, resolve_graph

    project = maybe_project(args)
    path = resolve_graph(args.file, project)
    roles = _crew_roles(_roles_project(args, path, project))
    graph, violations = check_graph_file(path, roles)
    shown = str(path)
    if getattr(args, "json", False):
        report: dict[str, object] = {
            "valid": not violations,
            "file": shown,
            "violations": [v.as_dict() for v in violations],
        }
        if graph is not None:
            report.update(entry=entry(graph), nodes=len(graph.nodes), edges=len(graph.edges))
        print_json(report)
        return 0 if graph is not None else 2
    if graph is not None:
        print(for_line(f"ok: {shown} ({len(graph.nodes)} nodes, {len(graph.edges)} edges; entry {entry(graph)})"))
        return 0
    for violation in violations:
        where = f"{shown}:{violation.line}" if violation.line is not None else shown
        print(for_line(f"{where}: [{violation.rule}] {violation.detail}"))
    print(f"{for_line(shown)}: {len(violations)} violation(s)", file=sys.stderr)
    return 2


def _roles_project(
    args: argparse.Namespace, path: Path, project: ProjectPaths | None
) -> ProjectPaths | None:
    """`--project`, else the project holding the graph file, else the cwd's project."""
    if getattr(args, "project", None):
        return project
    try:
        return find_project(path.parent)
    except ProjectNotFoundError:
        return project


def _crew_roles(project: ProjectPaths | None) -> list[str] | None:
    """The crew's role names, or None (no project, or a crew.yaml that does not load)."""
    if project is None or not project.crew_file.is_file():
        return None
    from agentbox.core.config.project import load_crew

    try:
        return list(load_crew(project).crew.roles)
    except AgentboxError as exc:
        print(f"warning: {for_terminal(exc.message)}; role names are not checked", file=sys.stderr)
        return None
