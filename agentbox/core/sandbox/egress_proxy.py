"""The egress proxy: the one way out of a sandbox's network namespace, run on the host per turn.

It serves listening TCP sockets made inside the sandbox's own network namespace
(`agentbox.core.sandbox.netns`) and held by the host, so no process of agentbox runs in
the sandbox: the tool's connections to its loopback arrive here directly, and the proxy
connects out from the host's namespace. It speaks
`CONNECT host:port` (HTTPS and any TCP) and plain HTTP requests in absolute form
(`GET http://host:port/path`), and connects only where the turn's allowlist says
(`agentbox.core.sandbox.egress`). A listener with a fixed target (an allowlisted port of the
host's loopback, seen at the same port of the sandbox's) carries each connection there as
a CONNECT would, so a tool that never uses a proxy for loopback reaches its local model
server all the same. A name that is not a loopback entry never reaches loopback:
its resolved addresses are checked before connecting. What it refuses is answered with
403 (a fixed-target connection is closed) and counted for the turn's record. It runs on its own asyncio loop in a thread, so a
blocking turn and the engine's loop use it alike, and `stop` tears down every connection.
Listeners are handed over with `adopt` (connections wait in their backlog until it serves).
A blocking caller (the CLI, which has not loaded asyncio) starts it with `defer_s`: the
thread imports asyncio only once `begin()` says the tool's process has been spawned (or
after `defer_s`), so that import, the proxy's largest cost, never delays the spawn.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentbox.core.sandbox.egress import Allowlist, Rule, is_ip, is_loopback, never_reached

if TYPE_CHECKING:
    import asyncio

MAX_HEAD = 64 * 1024
"""Longest request or response head the proxy reads (a longer one is refused)."""
HEAD_TIMEOUT_S = 60.0
"""How long a client may take to send its request head."""
CONNECT_TIMEOUT_S = 30.0
MAX_CONNECTIONS = 256
"""Connections one sandbox may hold open through the proxy at once."""
DEFER_S = 0.5
"""Longest a deferred proxy waits for `begin()` before it serves all the same."""
MAX_DENIED_KINDS = 32
"""Distinct refused targets kept per turn (the count goes on)."""
CHUNK = 64 * 1024
_HOST_TEXT = re.compile(r"[A-Za-z0-9._\-]{1,253}|[0-9A-Fa-f:.]{2,45}")


@dataclass
class Denied:
    """A target the proxy refused, how often, and why."""

    target: str
    reason: str
    count: int = 0


@dataclass
class Summary:
    """What a turn's network did through the proxy."""

    connections: int = 0
    """Connections the proxy made for the agent."""
    denied: dict[str, Denied] = field(default_factory=dict)
    denied_total: int = 0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (the turn record's `network`)."""
        return {"mode": "proxy", "connections": self.connections, "denied_total": self.denied_total,
                "denied": [{"target": d.target, "count": d.count, "reason": d.reason} for d in self.denied.values()]}


class _Refused(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


Listener = tuple[socket.socket, "tuple[str, int] | None"]
"""A listening socket and its fixed target (None: it speaks the proxy protocol)."""


class EgressProxy:
    """One turn's proxy: serving the listeners it adopts from `start()` until `stop()`."""

    def __init__(self, rules: Allowlist) -> None:
        self.rules = rules
        self.summary = Summary()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._stop_asked = False
        self._go = threading.Event()
        self._pending: list[Listener] = []
        self._adopted: list[socket.socket] = []
        self._serve_new: Any = None
        self.failure: str | None = None
        """Why the proxy stopped serving before `stop()` (its connections were refused), if it did."""

    # ----------------------------------------------------------------------- lifecycle

    def start(self, defer_s: float = 0.0) -> None:
        """Start the proxy's thread; with `defer_s`, its loop starts at `begin()` or after that many
        seconds, whichever comes first (adopted listeners keep their connections meanwhile)."""
        if not defer_s:
            self._go.set()
        self._thread = threading.Thread(target=self._serve, args=(defer_s,), name="agentbox-egress", daemon=True)
        self._thread.start()

    def adopt(self, listeners: list[Listener]) -> None:
        """Serve these listening sockets too (the proxy owns and closes them from now on)."""
        with self._lock:
            stopped = self._stop_asked
            if not stopped:
                self._adopted += [listener for listener, _target in listeners]
                loop, serve_new = self._loop, self._serve_new
                if loop is None or serve_new is None:  # the loop serves them when it starts
                    self._pending += listeners
                    return
        if stopped:
            for listener, _target in listeners:
                listener.close()
        elif loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop ended: `stop` closes them
                loop.call_soon_threadsafe(serve_new, listeners)

    def begin(self) -> None:
        """Serve now (the tool's process has been spawned: the import no longer delays it)."""
        self._go.set()

    def stop(self) -> None:
        """Close the listeners and every connection; wait for the thread."""
        self._go.set()
        with self._lock:
            self._stop_asked = True
            loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(stopping.set)
        if self._thread is not None:
            self._thread.join(10)
        with self._lock:
            adopted, self._adopted = self._adopted, []
        for listener in adopted:
            listener.close()

    def _serve(self, defer_s: float) -> None:
        try:
            self._go.wait(defer_s)
            import asyncio

            asyncio.run(self._main())
        except Exception as exc:  # noqa: BLE001 - the turn goes on; its connections were refused
            self.failure = f"{type(exc).__name__}: {exc}"

    async def _main(self) -> None:
        import asyncio

        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, _context: None)  # nothing of the proxy reaches a terminal
        slots = asyncio.Semaphore(MAX_CONNECTIONS)
        tasks: set[asyncio.Task[None]] = set()
        servers: list[asyncio.AbstractServer] = []
        tasks_started: set[asyncio.Future[None]] = set()
        stopping = asyncio.Event()

        def handler(target: tuple[str, int] | None) -> Any:
            async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                task = asyncio.current_task()
                assert task is not None
                tasks.add(task)
                try:
                    if slots.locked():
                        if target is None:
                            await _reply(writer, 503, "too many connections through this sandbox's proxy")
                        return
                    async with slots:
                        if target is None:
                            await self._handle(reader, writer)
                        else:
                            await self._carry(reader, writer, *target)
                except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
                    pass
                except asyncio.CancelledError:  # stop(): the task ends quietly (a cancelled one is reported)
                    pass
                finally:
                    tasks.discard(task)
                    writer.close()

            return accepted

        def serve_new(listeners: list[Listener]) -> None:
            for listener, target in listeners:
                task = asyncio.ensure_future(started(listener, target))
                tasks_started.add(task)
                task.add_done_callback(tasks_started.discard)

        async def started(listener: socket.socket, target: tuple[str, int] | None) -> None:
            servers.append(await asyncio.start_server(handler(target), sock=listener, limit=MAX_HEAD))

        with self._lock:
            if self._stop_asked:
                return
            self._loop, self._stopping, self._serve_new = loop, stopping, serve_new
            pending, self._pending = self._pending, []
        serve_new(pending)
        try:
            await stopping.wait()
        finally:
            with self._lock:
                self._serve_new = None
            for server in servers:
                server.close()
            for task in list(tasks):
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    # ----------------------------------------------------------------------- one connection

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        import asyncio

        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
        request_line, *header_lines = head.decode("latin-1").split("\r\n")
        parts = request_line.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            await _reply(writer, 400, "not an HTTP/1 proxy request")
            return
        method, target, _version = parts
        try:
            if method.upper() == "CONNECT":
                host, port = _host_port(target, None)
                upstream = await self._open(host, port)
                writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                await _pipe(reader, writer, *upstream)
                return
            host, port, path = _absolute(target)
            upstream = await self._open(host, port)
        except _Refused as refused:
            await _reply(writer, refused.status, refused.reason)
            return
        up_reader, up_writer = upstream
        headers = [line for line in header_lines if line and line.split(":", 1)[0].strip().lower()
                   not in ("proxy-connection", "proxy-authorization", "connection", "keep-alive")]
        up_writer.write(f"{method} {path} HTTP/1.1\r\n".encode("latin-1")
                        + "".join(f"{line}\r\n" for line in headers).encode("latin-1")
                        + b"Connection: close\r\n\r\n")
        await _pipe(reader, writer, up_reader, up_writer, rewrite_response=True)

    async def _carry(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str, port: int) -> None:
        """A fixed-target listener's connection: to `host:port` as a CONNECT would go (refused: closed)."""
        try:
            upstream = await self._open(host, port)
        except _Refused:
            return
        await _pipe(reader, writer, *upstream)

    async def _open(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to an allowed `host:port`, or _Refused (403 logged, 502 when it fails)."""
        import asyncio

        if not _HOST_TEXT.fullmatch(host):  # never recorded or shown: it may hold terminal escapes
            raise _Refused(400, "the target is not a host name or IP address")
        rule = self.rules.permits(host, port)
        target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if rule is None:
            self._deny(target, "not in the allowlist")
            raise _Refused(403, f"{target} is not in this sandbox's allowlist (add it to the profile's sandbox.allow)")
        addresses = await self._addresses(host, port, rule)
        if not addresses:
            self._deny(target, "resolves to loopback")
            raise _Refused(403, f"{target} resolves to this machine's loopback, which only a loopback entry opens")
        last: OSError | None = None
        for address in addresses:
            try:
                opened = await asyncio.wait_for(asyncio.open_connection(address, port, limit=MAX_HEAD),
                                                CONNECT_TIMEOUT_S)
            except (OSError, TimeoutError) as exc:
                last = exc if isinstance(exc, OSError) else OSError(f"no answer in {CONNECT_TIMEOUT_S:g} s")
                continue
            with self._lock:
                self.summary.connections += 1
            return opened
        raise _Refused(502, f"cannot connect to {target}: {last}")

    async def _addresses(self, host: str, port: int, rule: Rule) -> list[str]:
        """Where to connect for `host`; a non-loopback rule's name resolving to loopback gives none."""
        if rule.loopback:  # the rule's own address; `localhost` (or either of the usual two) is both
            if rule.host in ("127.0.0.1", "::1") or not is_ip(rule.host):
                first = "::1" if host.strip("[]") == "::1" else "127.0.0.1"
                return [first, "127.0.0.1" if first == "::1" else "::1"]
            return [rule.host]
        if is_ip(host):
            return [] if is_loopback(host) or never_reached(host) else [host.strip("[]")]
        assert self._loop is not None
        try:
            infos = await self._loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise _Refused(502, f"cannot resolve {host}: {exc}") from None
        found = list(dict.fromkeys(str(info[4][0]) for info in infos))
        if any(never_reached(a) for a in found):
            return []
        return found

    def _deny(self, target: str, reason: str) -> None:
        with self._lock:
            self.summary.denied_total += 1
            denied = self.summary.denied.get(target)
            if denied is None and len(self.summary.denied) < MAX_DENIED_KINDS:
                denied = self.summary.denied[target] = Denied(target, reason)
            if denied is not None:
                denied.count += 1

    def snapshot(self) -> dict[str, Any]:
        """The summary so far, JSON-ready."""
        with self._lock:
            return {**self.summary.as_dict(), **({"error": self.failure} if self.failure else {})}


def _host_port(authority: str, default: int | None) -> tuple[str, int]:
    if authority.startswith("["):
        host, _, rest = authority[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port_text = authority.rpartition(":") if ":" in authority else (authority, "", "")
    if not port_text and default is not None:
        return host, default
    if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise _Refused(400, f"{authority!r} is not host:port")
    return host, int(port_text)


def _absolute(target: str) -> tuple[str, int, str]:
    """(host, port, origin-form path) of an absolute-URI plain-HTTP request target."""
    if not target.lower().startswith("http://"):
        raise _Refused(400, "only CONNECT and absolute http:// requests go through this proxy")
    rest = target[len("http://"):]
    authority, slash, path = rest.partition("/")
    authority = authority.rpartition("@")[2]
    host, port = _host_port(authority, 80)
    return host, port, "/" + path if slash else "/"


async def _reply(writer: asyncio.StreamWriter, status: int, reason: str) -> None:
    phrase = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway", 503: "Service Unavailable"}[status]
    body = f"agentbox egress proxy: {reason}\n".encode()
    writer.write(f"HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
                 "Connection: close\r\n\r\n".encode() + body)
    with contextlib.suppress(OSError):
        await writer.drain()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, up_reader: asyncio.StreamReader,
                up_writer: asyncio.StreamWriter, *, rewrite_response: bool = False) -> None:
    """Copy both ways until both sides are done (a side's end is passed on as a half-close)."""
    import asyncio

    async def copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await source.read(CHUNK):
                sink.write(data)
                await sink.drain()
            if sink.can_write_eof():
                sink.write_eof()

    async def response() -> None:
        if rewrite_response:  # the upstream closes after one response: tell the client so
            with contextlib.suppress(OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                while True:
                    head = await up_reader.readuntil(b"\r\n\r\n")
                    status_line, *lines = head.decode("latin-1").split("\r\n")
                    informational = status_line[9:10] == "1"
                    if not informational:
                        lines = [line for line in lines if line and line.split(":", 1)[0].strip().lower()
                                 not in ("connection", "keep-alive")] + ["Connection: close", ""]
                    writer.write(("\r\n".join([status_line, *lines]) + ("\r\n" if not informational else "")).encode("latin-1"))
                    if not informational:
                        break
        await copy(up_reader, writer)

    try:
        await asyncio.gather(copy(reader, up_writer), response())
    finally:
        up_writer.close()
