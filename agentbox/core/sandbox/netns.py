"""Listening sockets made inside a sandbox's network namespace, held by the host.

`listen_in(pid, addresses)` makes a listening TCP socket at each address in the network
namespace of the sandbox whose first process is `pid`. A socket keeps the namespace it was
made in: the host's egress proxy accepts the sandbox's connections on them and connects out
from the host's own namespace, with no process of agentbox inside the sandbox. The sandbox
cannot close or replace them (they are the host's descriptors, and a taken address cannot be
bound again there: no `SO_REUSEADDR`/`SO_REUSEPORT`).

Who joins the namespace to make them:
- as root, bwrap makes no user namespace and the network namespace is owned by ours: a new
  thread of this process joins it (`setns` changes the calling thread's network namespace
  alone, and is allowed in a process with other threads), makes the sockets and ends, so no
  other thread ever runs in the sandbox's network and nothing has to switch back;
- when bwrap made a user namespace (an unprivileged user), joining it is allowed only to a
  single-threaded process: a forked child of this process joins the user namespace that owns
  the network one (`NS_GET_USERNS`), then the network namespace, makes the sockets, sends
  them back over a socketpair and exits. The fork is the costly part in a large process (its
  page tables are copied), and the child's exit is reaped by a thread after the sockets are
  back, so the sandbox does not wait for it.

The child runs between fork and `_exit` with other threads' locks possibly held, so it only
calls what needs none: setns through the libc loaded before the fork, socket calls, sendmsg.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import socket
import threading
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
            if join_user:
                return _forked(libc, user_fd, net_fd, addresses)
        finally:
            os.close(user_fd)
        return _threaded(libc, net_fd, addresses)
    finally:
        os.close(net_fd)


def _threaded(libc: ctypes.CDLL, net_fd: int, addresses: Sequence[Address]) -> list[socket.socket | None]:
    """The listeners, made by a new thread that joins the network namespace and then ends."""
    outcome: list[tuple[list[int], str] | BaseException] = []

    def join_and_listen() -> None:
        try:
            if libc.setns(net_fd, CLONE_NEWNET) != 0:
                raise _StepError(ctypes.get_errno(), "setns net")
            outcome.append(_listen(addresses))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            outcome.append(exc)

    joiner = threading.Thread(target=join_and_listen, name="agentbox-netns-join", daemon=True)
    joiner.start()
    joiner.join()
    result = outcome[0] if outcome else _StepError(errno.EIO, "the joining thread")
    if isinstance(result, _StepError):
        raise _failed(result.errno or errno.EIO, result.step)
    if isinstance(result, BaseException):
        raise result
    made, present = result
    return _sockets(made, present)


class _StepError(OSError):
    """A failed step of joining and listening, named for the error message."""

    def __init__(self, code: int, step: str) -> None:
        super().__init__(code, step)
        self.step = step


def _failed(code: int, step: str) -> OSError:
    return OSError(code, f"cannot listen in the sandbox's network namespace ({step}): {os.strerror(code)}")


def _sockets(made: list[int], present: str) -> list[socket.socket | None]:
    given = iter(made)
    return [socket.socket(fileno=next(given)) if flag == "1" else None for flag in present]


def _listen(addresses: Sequence[Address]) -> tuple[list[int], str]:
    """A listening socket at each address of the calling thread's network namespace: (their fds, one
    flag per address, "0" where the family is missing). _StepError when one cannot be made (the
    fds made so far are closed)."""
    made: list[int] = []
    flags = ""
    try:
        for family, host, port in addresses:
            step = f"listen {host}:{port}"
            try:
                listener = socket.socket(family, socket.SOCK_STREAM)
            except OSError as exc:
                raise _StepError(exc.errno or errno.EIO, step) from None
            try:
                if family == socket.AF_INET6:
                    listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                    listener.setsockopt(socket.IPPROTO_IPV6, _IPV6_FREEBIND, 1)
                else:  # bwrap may not have brought lo up yet: bind its address all the same
                    listener.setsockopt(socket.IPPROTO_IP, _IP_FREEBIND, 1)
                listener.bind((host, port))
                listener.listen(128)
            except OSError as exc:
                listener.close()
                if family == socket.AF_INET6:
                    flags += "0"  # no IPv6 loopback here: 127.0.0.1 alone
                    continue
                raise _StepError(exc.errno or errno.EIO, step) from None
            made.append(listener.detach())
            flags += "1"
    except BaseException:
        for fd in made:
            os.close(fd)
        raise
    return made, flags


def _forked(libc: ctypes.CDLL, user_fd: int, net_fd: int, addresses: Sequence[Address]) -> list[socket.socket | None]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with ours, theirs:
        child = os.fork()
        if child == 0:  # pragma: no cover - the forked child (its outcome is what the parent reads)
            _child(libc, user_fd, net_fd, addresses, theirs)
        theirs.close()
        try:
            message, fds, _flags, _address = socket.recv_fds(ours, 256, MAX_LISTENERS)
        except BaseException:
            os.waitpid(child, 0)
            raise
    # the child exits on its own once it has sent: its exit (a large process's page tables torn
    # down) is waited for beside the sandbox, not before it runs
    threading.Thread(target=os.waitpid, args=(child, 0), name="agentbox-netns-reap", daemon=True).start()
    if not message.startswith(b"ok "):
        for fd in fds:
            os.close(fd)
        code = int(message.split(b" ")[1]) if message.startswith(b"error ") else errno.EIO
        step = message.split(b" ", 2)[2].decode(errors="replace") if message.count(b" ") >= 2 else "the helper"
        raise _failed(code, step)
    return _sockets(fds, message[3:].decode())


def _child(libc: ctypes.CDLL, user_fd: int, net_fd: int, addresses: Sequence[Address], channel: socket.socket) -> None:
    step = "setns user"
    try:
        if libc.setns(user_fd, CLONE_NEWUSER) != 0:
            raise _StepError(ctypes.get_errno(), step)
        step = "setns net"
        if libc.setns(net_fd, CLONE_NEWNET) != 0:
            raise _StepError(ctypes.get_errno(), step)
        made, flags = _listen(addresses)
        socket.send_fds(channel, [b"ok " + flags.encode()], made)
    except _StepError as exc:
        with contextlib.suppress(OSError):
            channel.send(f"error {exc.errno or errno.EIO} {exc.step}".encode())
    except OSError as exc:
        with contextlib.suppress(OSError):
            channel.send(f"error {exc.errno or errno.EIO} {step}".encode())
    except BaseException:  # noqa: BLE001 - nothing may unwind into the parent's code in the child
        pass
    os._exit(0)
