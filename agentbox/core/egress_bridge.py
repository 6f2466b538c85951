"""The sandbox's side of the egress proxy: TCP on the sandbox's loopback to the proxy's UNIX socket.

Run inside the sandbox, before the tool, by the host's Python as a plain script
(`python -I -S egress_bridge.py SOCKET PROXY_PORT LOOPBACK_PORTS -- COMMAND...`; stdlib
only, nothing of agentbox imported). It listens on 127.0.0.1 (and ::1) of the sandbox's own
network namespace at PROXY_PORT, which the tool's HTTP(S)_PROXY names, and at each of
LOOPBACK_PORTS (comma-separated), the allowlisted ports of the host's loopback: a
connection to one of those is sent through the proxy as `CONNECT 127.0.0.1:PORT`, so a tool
that never uses a proxy for loopback reaches its local model server all the same. Then it
leaves a detached process serving and execs COMMAND in its own place: the tool keeps the
bridge's pid, stdin and stdout, and the sandbox's end (its pid namespace) ends the bridge.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import sys
import threading

MAX_CONNECTIONS = 128
"""Connections the bridge carries at once (more are closed at once)."""
MAX_REPLY_HEAD = 8192
CHUNK = 65536


def main(argv: list[str]) -> int:
    """Listen, leave the server running, exec the command (returns only when that fails)."""
    if len(argv) < 6 or argv[4] != "--":
        print("usage: egress_bridge.py SOCKET PROXY_PORT LOOPBACK_PORTS -- COMMAND...", file=sys.stderr)
        return 125
    socket_path, proxy_port = argv[1], int(argv[2])
    loopback_ports = [int(p) for p in argv[3].split(",") if p]
    command = argv[5:]
    listeners: list[tuple[socket.socket, str | None]] = []
    for port, transparent in [(proxy_port, False), *((p, True) for p in loopback_ports)]:
        for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
            try:
                listener = socket.socket(family, socket.SOCK_STREAM)
                if family == socket.AF_INET6:
                    listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                listener.bind((host, port))
                listener.listen(128)
            except OSError as exc:
                if family == socket.AF_INET6:
                    continue  # no IPv6 loopback here: 127.0.0.1 alone
                print(f"agentbox egress bridge: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
                return 125
            target = (f"[{host}]:{port}" if ":" in host else f"{host}:{port}") if transparent else None
            listeners.append((listener, target))
    child = os.fork()
    if child == 0:  # detach twice: the server is nobody's child but the sandbox's init
        if os.fork() == 0:
            _serve(listeners, socket_path)
        os._exit(0)
    os.waitpid(child, 0)
    for listener, _target in listeners:
        listener.close()
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"agentbox egress bridge: cannot run {command[0]}: {exc.strerror or exc}", file=sys.stderr)
    return 127


def _serve(listeners: list[tuple[socket.socket, str | None]], socket_path: str) -> None:
    os.setsid()  # no terminal signal (an attached session's Ctrl-C) reaches the bridge
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
    selector = selectors.DefaultSelector()
    for listener, target in listeners:
        selector.register(listener, selectors.EVENT_READ, target)
    try:
        while True:
            for key, _events in selector.select():
                listener = key.fileobj
                assert isinstance(listener, socket.socket)
                try:
                    client, _address = listener.accept()
                except OSError:
                    continue
                if not slots.acquire(blocking=False):
                    client.close()
                    continue
                threading.Thread(target=_carry, args=(client, key.data, socket_path, slots), daemon=True).start()
    finally:
        os._exit(0)


def _carry(client: socket.socket, target: str | None, socket_path: str, slots: threading.BoundedSemaphore) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        upstream.connect(socket_path)
        if target is not None and not _tunnel(upstream, client, target):
            return
        other = threading.Thread(target=_copy, args=(upstream, client), daemon=True)
        other.start()
        _copy(client, upstream)
        other.join()
    except OSError:
        pass
    finally:
        client.close()
        upstream.close()
        slots.release()


def _tunnel(upstream: socket.socket, client: socket.socket, target: str) -> bool:
    """Ask the proxy for `target`; True once it said 200 (what followed its reply goes to the client)."""
    upstream.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    reply = b""
    while b"\r\n\r\n" not in reply:
        data = upstream.recv(MAX_REPLY_HEAD)
        if not data or len(reply) + len(data) > MAX_REPLY_HEAD:
            return False
        reply += data
    head, _, rest = reply.partition(b"\r\n\r\n")
    if head.split(b" ", 2)[1:2] != [b"200"]:
        return False  # refused: the client sees its connection closed
    if rest:
        client.sendall(rest)
    return True


def _copy(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(CHUNK):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
