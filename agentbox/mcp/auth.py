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

import contextlib
import hmac
import os
import re
import secrets
import stat
import tempfile
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

from agentbox.core import store
from agentbox.core.errors import StateError
from agentbox.core.paths import agent_box_home
from agentbox.core.safe_io import read_bounded

TOKEN_FILE = "mcp-token"
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{32,256}$")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


def token_path() -> Path:
    """`$AGENT_BOX_HOME/mcp-token`."""
    return agent_box_home() / TOKEN_FILE


def http_token() -> str:
    """The token HTTP clients must send; made (and stored 0600) when there is none yet."""
    path = token_path()
    token = _read(path)
    if token is not None:
        return token
    with store.locked(path):  # two first uses at once agree on one token
        token = _read(path)
        if token is None:
            token = secrets.token_urlsafe(32)
            _write(path, token)
    return token


def _read(path: Path) -> str | None:
    try:
        data = read_bounded(path, max_bytes=4096)
        mode = os.stat(path, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StateError(f"{path}: {exc.strerror or exc}", "delete it: a new token is made on next use") from None
    if stat.S_IMODE(mode) & 0o077:
        raise StateError(f"{path} can be read by other users (mode {stat.S_IMODE(mode):03o}): the token may be known",
                         "delete it (a new token is made on next use) and register the server again")
    token = data.decode("ascii", "replace").strip()
    if not _TOKEN.match(token):
        raise StateError(f"{path} does not hold a token agentbox made",
                         "delete it: a new token is made on next use")
    return token


def _write(path: Path, token: str) -> None:
    """The token file, created 0600 under its final name only once complete."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(token + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


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
