"""The egress proxy: the one way out of a sandbox's network namespace, run on the host per turn.

An HTTP proxy on a UNIX socket that is bound into the sandbox (the sandbox's bridge,
`agentbox.core.sandbox.egress_bridge`, carries the agent's TCP connections to it). It speaks
`CONNECT host:port` (HTTPS and any TCP) and plain HTTP requests in absolute form
(`GET http://host:port/path`), and connects only where the turn's allowlist says
(`agentbox.core.sandbox.egress`). A name that is not a loopback entry never reaches loopback:
its resolved addresses are checked before connecting. What it refuses is answered with
403 and counted for the turn's record. It runs on its own asyncio loop in a thread, so a
blocking turn and the engine's loop use it alike, and `stop` tears down every connection.
The socket listens from `start()` on, and connections wait in the backlog until it serves.
A blocking caller (the CLI, which has not loaded asyncio) starts it with `defer_s`: the
thread imports asyncio only once `begin()` says the tool's process has been spawned (or
after `defer_s`), so that import, the proxy's largest cost, never delays the spawn.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
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


class EgressProxy:
    """One turn's proxy: listening on `socket_path` from `start()` until `stop()`."""

    def __init__(self, socket_path: Path, rules: Allowlist) -> None:
        self.socket_path = socket_path
        self.rules = rules
        self.summary = Summary()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._stop_asked = False
        self._go = threading.Event()
        self.failure: str | None = None
        """Why the proxy stopped serving before `stop()` (its connections were refused), if it did."""

    # ----------------------------------------------------------------------- lifecycle

    def start(self, defer_s: float = 0.0) -> None:
        """Listen now (connections wait in the backlog until the loop takes them); with `defer_s`,
        the loop starts at `begin()` or after that many seconds, whichever comes first."""
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(str(self.socket_path))
            os.chmod(self.socket_path, 0o600)
            listener.listen(128)
        except BaseException:
            listener.close()
            raise
        if not defer_s:
            self._go.set()
        self._thread = threading.Thread(target=self._serve, args=(listener, defer_s), name="agentbox-egress",
                                        daemon=True)
        self._thread.start()

    def begin(self) -> None:
        """Serve now (the tool's process has been spawned: the import no longer delays it)."""
        self._go.set()

    def stop(self) -> None:
        """Close the listener and every connection; wait for the thread."""
        self._go.set()
        with self._lock:
            self._stop_asked = True
            loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(stopping.set)
        if self._thread is not None:
            self._thread.join(10)
        with contextlib.suppress(OSError):
            self.socket_path.unlink()

    def _serve(self, listener: socket.socket, defer_s: float) -> None:
        try:
            self._go.wait(defer_s)
            import asyncio

            asyncio.run(self._main(listener))
        except Exception as exc:  # noqa: BLE001 - the turn goes on; its connections were refused
            self.failure = f"{type(exc).__name__}: {exc}"
        finally:
            listener.close()

    async def _main(self, listener: socket.socket) -> None:
        import asyncio

        with self._lock:
            if self._stop_asked:
                return
            self._loop = asyncio.get_running_loop()
            self._stopping = asyncio.Event()
        self._loop.set_exception_handler(lambda _loop, _context: None)  # nothing of the proxy reaches a terminal
        slots = asyncio.Semaphore(MAX_CONNECTIONS)
        tasks: set[asyncio.Task[None]] = set()

        async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            tasks.add(task)
            try:
                if slots.locked():
                    await _reply(writer, 503, "too many connections through this sandbox's proxy")
                    return
                async with slots:
                    await self._handle(reader, writer)
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
                pass
            except asyncio.CancelledError:  # stop(): the task ends quietly (a cancelled one is reported)
                pass
            finally:
                tasks.discard(task)
                writer.close()

        server = await asyncio.start_unix_server(accepted, sock=listener, limit=MAX_HEAD)
        try:
            await self._stopping.wait()
        finally:
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


@contextlib.contextmanager
def serving(socket_path: Path, rules: Allowlist) -> Iterator[EgressProxy]:
    """A proxy listening on `socket_path` for the block; closed with every connection afterwards."""
    proxy = EgressProxy(socket_path, rules)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()
