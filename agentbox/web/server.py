"""`agentbox serve`: the project's dashboard in a browser, through textual-serve, behind a token.

Each browser tab gets its own dashboard process (textual-serve runs `agentbox tui` under
Textual's web driver per websocket), all watching the same project files, so what a tab
does (answer, approve, merge) goes through the same core services as the terminal.

Every request needs the token: the first visit carries it as `?token=…` and is answered
with an HttpOnly, SameSite=Strict cookie (a value derived from the token, so the token
itself is not kept by the browser) and a redirect that drops the token from the address.
Later requests, the static files and the websocket need that cookie; a websocket from
another origin is refused. A new token (`agentbox serve --new-token`) makes every old
cookie worthless. At most `max_sessions` dashboards run at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import re
import shlex
import signal
import ssl
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.web_runner import GracefulExit
from textual_serve.server import Server

from agentbox.core.config.access_tokens import same

COOKIE = "agentbox_dashboard"
NEEDS_TOKEN = ("agentbox serve: this page needs the token. Open the address `agentbox serve` printed "
               "(it ends in ?token=…); `agentbox serve --new-token` makes a new one.\n")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

log = logging.getLogger("agentbox.serve")


def cookie_value(token: str) -> str:
    """What the browser keeps after the first visit: derived from the token, never the token."""
    return hmac.new(token.encode(), b"agentbox serve dashboard cookie", hashlib.sha256).hexdigest()


def dashboard_command(project_root: Path) -> str:
    """The command each browser tab runs: this Python's agentbox, dashboard of this project."""
    return " ".join(shlex.quote(part) for part in
                    (sys.executable, "-m", "agentbox", "--project", str(project_root), "tui"))


VIEWPORT = '<meta name="viewport" content="width=device-width, initial-scale=1">'
_WEB_FONTS = re.compile(r'<link[^>]*fonts\.googleapis\.com[^>]*>', re.S)


def page_for_any_screen(html: str) -> str:
    """The page, sized to the device (a phone shows the narrow dashboard, not a shrunken wide one)
    and without the web font from a third-party host (the browser asks nobody but this server)."""
    html = _WEB_FONTS.sub("", html)
    return html if "name=\"viewport\"" in html else html.replace("<head>", f"<head>\n    {VIEWPORT}", 1)


def url_host(host: str) -> str:
    """`host` as it goes in a URL (an IPv6 address in brackets)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


class DashboardServer(Server):
    """textual-serve's server with the token gate, a session limit and TLS."""

    def __init__(self, project_root: Path, *, host: str, port: int, token: str, max_sessions: int,
                 ssl_context: ssl.SSLContext | None = None, public_url: str | None = None) -> None:
        scheme = "https" if ssl_context is not None else "http"
        super().__init__(dashboard_command(project_root), host=host, port=port,
                         title=f"agentbox · {project_root.name}",
                         public_url=public_url or f"{scheme}://{url_host(host)}:{port}")
        self.project_root = project_root
        self.ssl_context = ssl_context
        self.max_sessions = max_sessions
        self.open_sessions = 0
        self._cookie = cookie_value(token)
        self._token = token

    @property
    def address(self) -> str:
        """The address to open, token included (printed once at start)."""
        return f"{self.public_url}/?token={self._token}"

    async def _make_app(self) -> web.Application:
        app = await super()._make_app()
        app.middlewares.append(self._gate)
        return app

    @web.middleware
    async def _gate(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Let a request through only with the token (first visit) or the cookie it set."""
        given = request.query.get("token")
        if given is not None:
            if not same(given, self._token):
                return web.Response(status=401, text=NEEDS_TOKEN)
            rest = {key: value for key, value in request.query.items() if key != "token"}
            response = web.HTTPSeeOther(location=str(request.rel_url.with_query(rest)))
            response.set_cookie(COOKIE, self._cookie, httponly=True, samesite="Strict", path="/",
                                secure=self.ssl_context is not None)
            return response
        if not same(request.cookies.get(COOKIE), self._cookie):
            return web.Response(status=401, text=NEEDS_TOKEN)
        if request.path == "/ws" and not self._same_origin(request):
            return web.Response(status=403, text="agentbox serve: a dashboard opens only from its own page\n")
        response = await handler(request)
        if request.path == "/" and isinstance(response, web.Response) and response.text:
            response.text = page_for_any_screen(response.text)
        return response

    def _same_origin(self, request: web.Request) -> bool:
        origin = request.headers.get("Origin")
        return origin is None or origin.rstrip("/") == self.public_url.rstrip("/") or \
            origin.rstrip("/") == f"{request.scheme}://{request.host}"

    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:  # type: ignore[override]
        """One dashboard process per tab, refused past the limit."""
        if self.open_sessions >= self.max_sessions:
            return web.Response(status=503, text=f"agentbox serve: {self.max_sessions} dashboards are open "  # type: ignore[return-value]
                                                 "already; close one (or start with --max-sessions)\n")
        self.open_sessions += 1
        try:
            return await super().handle_websocket(request)
        finally:
            self.open_sessions -= 1

    async def on_startup(self, app: web.Application) -> None:
        """Say where to go (once), instead of textual-serve's banner."""
        print(f"agentbox serve: the dashboard of {self.project_root} at\n  {self.address}\n"
              f"(ctrl+c stops it; at most {self.max_sessions} tabs at once)", file=sys.stderr, flush=True)

    def serve(self, debug: bool = False) -> None:
        """Run until ctrl+c or SIGTERM; no access log (a first visit's address holds the token)."""
        self.debug = debug
        self.initialize_logging()
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self.request_exit)
        with contextlib.suppress(GracefulExit):
            web.run_app(self._make_app(), host=self.host, port=self.port, ssl_context=self.ssl_context,
                        handle_signals=False, loop=loop, access_log=None, print=_quiet)


def _quiet(*_args: Any) -> None:
    """aiohttp's own start-up lines are not shown (agentbox prints the address)."""
