"""Small helpers shared by the CLI commands: the project, JSON output, tables."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from agentbox.core.paths import ProjectPaths, find_project, project_at
from agentbox.core.termtext import for_line, json_for_terminal


def project_from(args: argparse.Namespace) -> ProjectPaths:
    """The project named by `--project`, else the nearest `.agent-box/` above the cwd."""
    directory: str | None = getattr(args, "project", None)
    return project_at(Path(directory)) if directory else find_project()


def maybe_project(args: argparse.Namespace) -> ProjectPaths | None:
    """The active project, or None when there is none (for commands that work anywhere)."""
    from agentbox.core.errors import ProjectNotFoundError

    try:
        return project_from(args)
    except ProjectNotFoundError:
        if getattr(args, "project", None):
            raise
        return None


def print_json(data: Any) -> None:
    """Print JSON for scripts (stable key order, UTF-8): every string exact, and none a terminal obeys."""
    sys.stdout.write(json_for_terminal(json.dumps(data, indent=2, ensure_ascii=False, default=str)))
    sys.stdout.write("\n")


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    """A plain aligned table (no rich import: this is on the fast path); each cell shown as one line."""
    rows = [[for_line(cell) for cell in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in rows:
        for index, cell in enumerate(row):
            widths[index] = max(widths[index], len(cell))
    line = "  ".join(h.upper().ljust(widths[i]) for i, h in enumerate(headers))
    print(line.rstrip())
    for row in rows:
        print("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
