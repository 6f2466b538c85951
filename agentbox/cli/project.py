"""`agentbox init`, `role list|add|rm` and `schema`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agentbox.cli.common import print_json, print_table, project_from
from agentbox.core.errors import UsageError
from agentbox.core.termtext import for_terminal


def init(args: argparse.Namespace) -> int:
    """Create .agent-box/ from the example project."""
    from agentbox.core.config import project

    root = Path(args.project or args.directory)
    created = project.init(root)
    box = root.absolute() / ".agent-box"
    print(f"created {box} with {len(created)} files:")
    for path in created:
        print(f"  {path.relative_to(box)}")
    if any((parent / ".git").exists() for parent in (root.absolute(), *root.absolute().parents)):
        print("commit it with your project, so the crew's runs start from it:")
        print("  git add .agent-box && git commit -m 'Add the agentbox crew'")
    print("next: `agentbox doctor`, then `agentbox run \"a goal\"` or `agentbox` for the dashboard")
    return 0


def role_list(args: argparse.Namespace) -> int:
    """Print the crew's roles."""
    from agentbox.core.config import project

    paths = project_from(args)
    loaded = project.load_crew(paths)
    crew = loaded.crew
    if args.json:
        print_json({name: role.model_dump() for name, role in crew.roles.items()})
        return 0
    rows = []
    for name, role in crew.roles.items():
        writes = "read-only" if role.read_only else ("whole project" if role.writes is None else ", ".join(role.writes))
        rows.append([name, role.profile, writes, role.instructions or ""])
    print_table(["role", "profile", "writes", "instructions"], rows)
    problems = project.check_references(paths, loaded)
    for problem in problems:
        print(for_terminal(f"warning: {problem.message}" + (f" ({problem.hint})" if problem.hint else "")), file=sys.stderr)
    return 0


def role_add(args: argparse.Namespace) -> int:
    """Add a role to crew.yaml."""
    from agentbox.core.config import project

    if args.read_only and args.writes:
        raise UsageError("--read-only and --writes contradict each other", "give one of them")
    paths = project_from(args)
    writes = [] if args.read_only else args.writes
    project.add_role(paths, args.name, args.profile, instructions=args.instructions, writes=writes)
    print(f"added role {args.name!r} (profile {args.profile!r}) to {paths.crew_file}")
    return 0


def role_rm(args: argparse.Namespace) -> int:
    """Remove a role from crew.yaml."""
    from agentbox.core.config import project

    paths = project_from(args)
    project.remove_role(paths, args.name, force=args.force)
    print(f"removed role {args.name!r} from {paths.crew_file}")
    return 0


def schema(args: argparse.Namespace) -> int:
    """Print a JSON Schema."""
    from agentbox.core.admin.schemas import json_schema

    print_json(json_schema(args.kind))
    return 0
