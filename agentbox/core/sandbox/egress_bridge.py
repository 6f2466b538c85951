"""The sandbox's side of the egress proxy: TCP on the sandbox's loopback to the proxy's UNIX socket.

Run inside the sandbox, before the tool, by the host's Python as a plain script
(`python -I -S egress_bridge.py SOCKET PROXY_PORT LOOPBACK_PORTS -- COMMAND...`). It
imports only modules built into the interpreter (no `socket`, `os` or `threading`: the
tool waits for the bridge's start-up, so it stays a few milliseconds) and nothing of
agentbox. It listens on 127.0.0.1 (and ::1) of the sandbox's own network namespace at
PROXY_PORT, which the tool's HTTP(S)_PROXY names, and at each of LOOPBACK_PORTS
(comma-separated), the allowlisted ports of the host's loopback: a connection to one of
those is sent through the proxy as `CONNECT 127.0.0.1:PORT`, so a tool that never uses a
proxy for loopback reaches its local model server all the same. Then it leaves a detached
process serving and execs COMMAND in its own place: the tool keeps the bridge's pid, stdin
and stdout, and the sandbox's end (its pid namespace) ends the bridge.
"""

import _socket
import _thread
import posix
import select
import sys

MAX_CONNECTIONS = 128
"""Connections the bridge carries at once (more are closed at once)."""
MAX_REPLY_HEAD = 8192
CHUNK = 65536
_IPPROTO_TCP, _TCP_NODELAY = 6, 1


def main(argv):
    """Listen, leave the server running, exec the command (returns only when that fails)."""
    if len(argv) < 6 or argv[4] != "--":
        print("usage: egress_bridge.py SOCKET PROXY_PORT LOOPBACK_PORTS -- COMMAND...", file=sys.stderr)
        return 125
    socket_path, proxy_port = argv[1], int(argv[2])
    loopback_ports = [int(p) for p in argv[3].split(",") if p]
    command = argv[5:]
    listeners = []
    for port, transparent in [(proxy_port, False)] + [(p, True) for p in loopback_ports]:
        for family, host in ((_socket.AF_INET, "127.0.0.1"), (_socket.AF_INET6, "::1")):
            try:
                listener = _socket.socket(family, _socket.SOCK_STREAM)
                if family == _socket.AF_INET6:
                    listener.setsockopt(_socket.IPPROTO_IPV6, _socket.IPV6_V6ONLY, 1)
                listener.bind((host, port))
                listener.listen(128)
            except OSError as exc:
                if family == _socket.AF_INET6:
                    continue  # no IPv6 loopback here: 127.0.0.1 alone
                print(f"agentbox egress bridge: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
                return 125
            target = (f"[{host}]:{port}" if ":" in host else f"{host}:{port}") if transparent else None
            listeners.append((listener, target))
    child = posix.fork()
    if child == 0:  # detach twice: the server is nobody's child but the sandbox's init
        if posix.fork() == 0:
            _serve(listeners, socket_path)
        posix._exit(0)
    posix.waitpid(child, 0)
    for listener, _target in listeners:
        listener.close()
    try:
        posix.execv(_find(command[0]), command)
    except OSError as exc:
        print(f"agentbox egress bridge: cannot run {command[0]}: {exc.strerror or exc}", file=sys.stderr)
    return 127


def _find(name):
    """`name` looked up on PATH, as execvp would (a name with a slash is used as it is)."""
    if "/" in name:
        return name
    for directory in posix.environ.get(b"PATH", b"/usr/bin:/bin").decode(errors="surrogateescape").split(":"):
        candidate = f"{directory or '.'}/{name}"
        if posix.access(candidate, posix.X_OK):
            return candidate
    return name


def _serve(listeners, socket_path):
    try:
        posix.setsid()  # no terminal signal (an attached session's Ctrl-C) reaches the bridge
        null = posix.open("/dev/null", posix.O_RDWR)
        for fd in (0, 1, 2):
            posix.dup2(null, fd)
        poller = select.poll()
        by_fd = {}
        for listener, target in listeners:
            poller.register(listener.fileno(), select.POLLIN)
            by_fd[listener.fileno()] = (listener, target)
        active = [0]
        lock = _thread.allocate_lock()
        while True:
            for fd, _events in poller.poll():
                listener, target = by_fd[fd]
                try:
                    client = _socket.socket(fileno=listener._accept()[0])
                except OSError:
                    continue
                with lock:
                    if active[0] >= MAX_CONNECTIONS:
                        client.close()
                        continue
                    active[0] += 1
                _thread.start_new_thread(_carry, (client, target, socket_path, active, lock))
    finally:
        posix._exit(0)


def _carry(client, target, socket_path, active, lock):
    upstream = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        client.setsockopt(_IPPROTO_TCP, _TCP_NODELAY, 1)
        upstream.connect(socket_path)
        if target is not None and not _tunnel(upstream, client, target):
            return
        done = _thread.allocate_lock()
        done.acquire()
        _thread.start_new_thread(_copy, (upstream, client, done))
        _copy(client, upstream, None)
        done.acquire()  # the other direction has finished too
    except OSError:
        pass
    finally:
        client.close()
        upstream.close()
        with lock:
            active[0] -= 1


def _tunnel(upstream, client, target):
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


def _copy(source, sink, done):
    try:
        while True:
            data = source.recv(CHUNK)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    try:  # noqa: SIM105 - contextlib is not loaded here (start-up time)
        sink.shutdown(_socket.SHUT_WR)
    except OSError:
        pass
    if done is not None:
        done.release()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
