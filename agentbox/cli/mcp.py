"""`agentbox mcp`: serve the project to MCP clients, or print how to register it."""

from __future__ import annotations

import argparse
import sys

from agentbox.cli.common import maybe_project, project_from
from agentbox.core.errors import UsageError


def mcp(args: argparse.Namespace) -> int:
    """Serve over stdio (or streamable HTTP on 127.0.0.1:PORT), or print a client's registration."""
    if args.print_config:
        from agentbox.mcp.registration import snippet

        text, where = snippet(args.print_config, maybe_project(args))
        sys.stdout.write(text)
        print(f"({where})", file=sys.stderr)
        return 0
    if args.http is not None and not 0 < args.http < 65536:
        raise UsageError(f"--http {args.http} is not a port", "pick a free port between 1 and 65535")
    project = project_from(args)
    from agentbox.mcp.server import serve

    if args.http is not None:
        print(f"agentbox MCP server for {project.root} on http://127.0.0.1:{args.http}/mcp", file=sys.stderr)
    serve(project, args.http)
    return 0
