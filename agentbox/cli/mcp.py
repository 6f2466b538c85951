"""`agentbox mcp`: serve the project to MCP clients, or print how to register it."""

from __future__ import annotations

import argparse
import sys

from agentbox.cli.common import maybe_project, project_from
from agentbox.core.errors import UsageError


def mcp(args: argparse.Namespace) -> int:
    """Serve over stdio (or streamable HTTP on 127.0.0.1:PORT), or print a client's registration."""
    if args.http is not None and not 0 < args.http < 65536:
        raise UsageError(f"--http {args.http} is not a port", "pick a free port between 1 and 65535")
    if args.print_config:
        from agentbox.mcp.registration import snippet

        text, where = snippet(args.print_config, maybe_project(args), http_port=args.http)
        sys.stdout.write(text)
        print(f"({where})", file=sys.stderr)
        return 0
    project = project_from(args)
    from agentbox.mcp.server import serve

    token = None
    if args.http is not None:
        from agentbox.mcp.auth import http_token, token_path

        token = http_token()  # made before the port opens: a broken token file stops here, exit 2
        print(f"agentbox MCP server for {project.root} on http://127.0.0.1:{args.http}/mcp "
              f"(bearer token in {token_path()}; `agentbox mcp --print-config CLIENT --http {args.http}` "
              "prints a registration with it)", file=sys.stderr)
    serve(project, args.http, token)
    return 0
