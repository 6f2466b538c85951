"""The bearer token of `agentbox mcp --http`, and the gate that checks it on every request.

Anything on the machine can open a connection to a loopback port, an agent with network
included; the token is what tells the person's MCP client apart. It is made on first use
(`secrets.token_urlsafe`, 256 bits), kept in `$AGENT_BOX_HOME/mcp-token` (mode 0600,
written atomically, never followed through a symlink) and printed by `agentbox mcp
--print-config CLIENT --http PORT` inside the registration. A request without
`Authorization: Bearer <token>`, or with another token, gets 401 and never reaches the
server; the comparison takes the same time whatever the token sent.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

from agentbox.core.config import access_tokens

TOKEN_FILE = "mcp-token"

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


def token_path() -> Path:
    """`$AGENT_BOX_HOME/mcp-token`."""
    return access_tokens.token_path(TOKEN_FILE)


def http_token() -> str:
    """The token HTTP clients must send; made (and stored 0600) when there is none yet."""
    return access_tokens.token(TOKEN_FILE)


def authorized(header: bytes | None, token: str) -> bool:
    """Whether an `Authorization` header carries `token` (compared in constant time)."""
    return hmac.compare_digest(header or b"", b"Bearer " + token.encode("ascii"))


class BearerGate:
    """ASGI middleware: HTTP and WebSocket requests pass only with the bearer token (else 401)."""

    def __init__(self, app: App, token: str) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):  # the lifespan of the server itself
            await self.app(scope, receive, send)
            return
        header = next((value for name, value in scope.get("headers", ()) if name.lower() == b"authorization"), None)
        if authorized(header, self.token):
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
        else:
            body = b'{"error": "unauthorized: send Authorization: Bearer <token> (agentbox mcp --print-config)"}'
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                    (b"www-authenticate", b'Bearer realm="agentbox"')]})
            await send({"type": "http.response.body", "body": body})
