"""`agentbox serve`: the dashboard in a browser, behind a token (and TLS beyond loopback)."""

from __future__ import annotations

import argparse
import ipaddress
import ssl
import sys
from pathlib import Path

from agentbox.cli.common import project_from
from agentbox.core.errors import UsageError

TOKEN_FILE = "serve-token"
"""`$AGENT_BOX_HOME/serve-token`: the dashboard's token (0600)."""

INSECURE_WHY = ("warning: --insecure-http: the token and everything the dashboard shows cross the network "
                "in clear text; anyone on the path can read them and drive the crew. Use --tls-cert/--tls-key.")


def is_loopback(host: str) -> bool:
    """Whether `host` names this machine only (localhost, 127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def tls_context(cert: str | None, key: str | None) -> ssl.SSLContext | None:
    """The server's TLS context from a certificate and key file (both or neither)."""
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        raise UsageError("--tls-cert and --tls-key go together", "give both files (PEM)")
    for label, path in (("--tls-cert", cert), ("--tls-key", key)):
        if not Path(path).is_file():
            raise UsageError(f"{label} {path}: no such file", "give the PEM file's path")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as exc:
        raise UsageError(f"cannot use {cert} / {key} for TLS: {exc}", "give a PEM certificate and its key") from None
    return context


def serve(args: argparse.Namespace) -> int:
    """Serve the project's dashboard until ctrl+c."""
    from agentbox.core.config import access_tokens

    project = project_from(args)
    if not 0 < args.port < 65536:
        raise UsageError(f"--port {args.port} is not a port", "pick a free port between 1 and 65535")
    if args.max_sessions < 1:
        raise UsageError(f"--max-sessions {args.max_sessions} must be at least 1", "the default is 4")
    context = tls_context(args.tls_cert, args.tls_key)
    if not is_loopback(args.host) and context is None:
        if not args.insecure_http:
            raise UsageError(f"--host {args.host} reaches beyond this machine, so the dashboard needs TLS",
                             "give --tls-cert FILE --tls-key FILE (or, knowing why not, --insecure-http)")
        print(INSECURE_WHY, file=sys.stderr)
    token = access_tokens.token(TOKEN_FILE, rotate=args.new_token)
    if args.new_token:
        print("agentbox serve: a new token; every browser must open the new address", file=sys.stderr)
    from agentbox.web.server import DashboardServer

    server = DashboardServer(project.root, host=args.host, port=args.port, token=token,
                             max_sessions=args.max_sessions, ssl_context=context, public_url=args.public_url)
    server.serve()
    return 0
