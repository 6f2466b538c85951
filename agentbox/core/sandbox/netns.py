"""Listening sockets made inside a sandbox's network namespace, held by the host.

`listen_in(pid, addresses)` forks a single-threaded child of this process that joins the
network namespace of the sandbox whose first process is `pid` — first the user namespace
that owns it (`NS_GET_USERNS`) when bwrap made one, as it does for an unprivileged user; as
root there is none and only the network namespace is joined, makes a listening TCP socket at
each address there, sends them back over a socketpair and exits. A socket keeps the
namespace it was made in: the host's egress proxy accepts the sandbox's connections on them
and connects out from the host's own namespace, with no process of agentbox inside the
sandbox. The sandbox cannot close or replace them (they are the host's descriptors, and a
taken address cannot be bound again there: no `SO_REUSEADDR`/`SO_REUSEPORT`).

The child runs between fork and `_exit` with other threads' locks possibly held, so it only
calls what needs none: setns through the libc loaded before the fork, socket calls, sendmsg.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import socket
from collections.abc import Sequence

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
NS_GET_USERNS = 0xB701
"""ioctl on a namespace's fd: a new fd of the user namespace that owns it."""
_IP_FREEBIND = 15
_IPV6_FREEBIND = 78
MAX_LISTENERS = 64

Address = tuple[socket.AddressFamily, str, int]
"""(family, host, port) of one listener (127.0.0.1 or ::1 of the sandbox)."""

_libc: ctypes.CDLL | None = None


def _setns_function() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def listen_in(pid: int, addresses: Sequence[Address]) -> list[socket.socket | None]:
    """A listener at each address in `pid`'s network namespace (None where the family is missing
    there: no IPv6). OSError when the namespace cannot be joined or an IPv4 address not bound."""
    if len(addresses) > MAX_LISTENERS:
        raise ValueError("too many listeners")
    import fcntl

    libc = _setns_function()
    net_fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        # the user namespace that owns the network one (not the process's own: bwrap may nest a
        # second one in it, which has no say over the network)
        user_fd = fcntl.ioctl(net_fd, NS_GET_USERNS)
        try:
            join_user = os.fstat(user_fd).st_ino != os.stat("/proc/self/ns/user").st_ino
            return _forked(libc, user_fd if join_user else -1, net_fd, addresses)
        finally:
            os.close(user_fd)
    finally:
        os.close(net_fd)


def _forked(libc: ctypes.CDLL, user_fd: int, net_fd: int, addresses: Sequence[Address]) -> list[socket.socket | None]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with ours, theirs:
        child = os.fork()
        if child == 0:  # pragma: no cover - the forked child (its outcome is what the parent reads)
            _child(libc, user_fd, net_fd, addresses, theirs)
        theirs.close()
        try:
            message, fds, _flags, _address = socket.recv_fds(ours, 256, MAX_LISTENERS)
        finally:
            os.waitpid(child, 0)
    if not message.startswith(b"ok "):
        for fd in fds:
            os.close(fd)
        code = int(message.split(b" ")[1]) if message.startswith(b"error ") else errno.EIO
        step = message.split(b" ", 2)[2].decode(errors="replace") if message.count(b" ") >= 2 else "the helper"
        raise OSError(code, f"cannot listen in the sandbox's network namespace ({step}): {os.strerror(code)}")
    present = message[3:].decode()
    given = iter(fds)
    return [socket.socket(fileno=next(given)) if flag == "1" else None for flag in present]


def _child(libc: ctypes.CDLL, user_fd: int, net_fd: int, addresses: Sequence[Address], channel: socket.socket) -> None:
    step = "setns user"
    try:
        if user_fd >= 0 and libc.setns(user_fd, CLONE_NEWUSER) != 0:
            raise OSError(ctypes.get_errno(), step)
        step = "setns net"
        if libc.setns(net_fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), step)
        made: list[int] = []
        flags = ""
        for family, host, port in addresses:
            step = f"listen {host}:{port}"
            listener = socket.socket(family, socket.SOCK_STREAM)
            try:
                if family == socket.AF_INET6:
                    listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                    listener.setsockopt(socket.IPPROTO_IPV6, _IPV6_FREEBIND, 1)
                else:  # bwrap may not have brought lo up yet: bind its address all the same
                    listener.setsockopt(socket.IPPROTO_IP, _IP_FREEBIND, 1)
                listener.bind((host, port))
                listener.listen(128)
            except OSError:
                listener.close()
                if family == socket.AF_INET6:
                    flags += "0"  # no IPv6 loopback here: 127.0.0.1 alone
                    continue
                raise
            made.append(listener.detach())
            flags += "1"
        socket.send_fds(channel, [b"ok " + flags.encode()], made)
    except OSError as exc:
        with contextlib.suppress(OSError):
            channel.send(f"error {exc.errno or errno.EIO} {step}".encode())
    except BaseException:  # noqa: BLE001 - nothing may unwind into the parent's code in the child
        pass
    os._exit(0)
