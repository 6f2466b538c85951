"""The proxy's listeners made in a sandbox's own network namespace, under real bwrap, as root and (through
the unprivileged pass) as a normal user.

As root the network namespace bwrap makes is owned by ours, and a short-lived thread of this process
joins it to make the listeners: nothing is forked, and no thread of this process is left in the
sandbox's network once they are made. A normal user's sandbox has its own user namespace, which only a
single-threaded process may join: a forked child makes them, and its exit is reaped. Either way the
listener is in the sandbox (a client inside reaches it at 127.0.0.1; the host's 127.0.0.1 at that
port is someone else's), and a listener that cannot be made is one clear error.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from agentbox.core.sandbox import netns
from agentbox.core.sandbox.bwrap import launch

pytestmark = pytest.mark.bwrap

CLIENT = """
import socket, sys
with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10) as conn:
    conn.sendall(b"from inside\\n")
    print(conn.recv(64).decode().strip())
"""


def _sandbox(before_exec: Callable[[int], None], *command: str) -> subprocess.CompletedProcess[str]:
    bwrap = shutil.which("bwrap")
    assert bwrap is not None
    argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--unshare-net",
            "--die-with-parent", "--", *command]
    with launch(argv, seccomp_filter=False, before_exec=before_exec) as launched:
        return subprocess.run(launched.argv, pass_fds=launched.pass_fds, capture_output=True, text=True, timeout=60)


def _net_of(path: str) -> int:
    return os.stat(path).st_ino


def test_the_listener_is_in_the_sandbox_and_no_thread_of_ours_stays_there(monkeypatch: pytest.MonkeyPatch) -> None:
    host_side = socket.create_server(("127.0.0.1", 0))  # the host's 127.0.0.1:PORT, a neighbour's service
    port = host_side.getsockname()[1]
    host_side.settimeout(0)
    forks: list[int] = []
    real_fork = os.fork

    def counted_fork() -> int:
        pid = real_fork()
        if pid:
            forks.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", counted_fork)
    held: list[socket.socket] = []
    answered: list[bytes] = []

    def serve(listener: socket.socket) -> None:
        conn, _ = listener.accept()
        with conn:
            answered.append(conn.recv(64))
            conn.sendall(b"held by the host\n")

    def before_exec(pid: int) -> None:
        made = netns.listen_in(pid, [(socket.AF_INET, "127.0.0.1", port), (socket.AF_INET6, "::1", port)])
        held.extend(listener for listener in made if listener is not None)
        threading.Thread(target=serve, args=(held[0],), daemon=True).start()

    own_net = _net_of("/proc/self/ns/net")
    with host_side:
        proc = _sandbox(before_exec, sys.executable, "-I", "-S", "-c", CLIENT, str(port))
        with pytest.raises(BlockingIOError):
            host_side.accept()  # the client inside never reached the host's loopback
    for listener in held:
        listener.close()
    assert proc.returncode == 0 and proc.stdout.strip() == "held by the host", proc
    assert answered == [b"from inside\n"]
    assert {_net_of(f"/proc/self/task/{task}/ns/net") for task in os.listdir("/proc/self/task")} == {own_net}
    assert not [t for t in threading.enumerate() if t.name == "agentbox-netns-join"]
    if os.geteuid() == 0:
        assert forks == []  # a thread joined the sandbox's network: this process was not forked
    else:
        assert len(forks) == 1  # the user namespace bwrap made takes a single-threaded process
        for reaper in [t for t in threading.enumerate() if t.name == "agentbox-netns-reap"]:
            reaper.join(30)
        with pytest.raises(ChildProcessError):
            os.waitpid(forks[0], os.WNOHANG)  # reaped: no zombie left


def test_a_listener_that_cannot_be_made_is_one_clear_error() -> None:
    failures: list[BaseException] = []
    kept: list[socket.socket] = []

    def before_exec(pid: int) -> None:
        address = (socket.AF_INET, "127.0.0.1", 3128)
        kept.extend(s for s in netns.listen_in(pid, [address]) if s is not None)
        try:
            netns.listen_in(pid, [address])  # taken: the sandbox's 127.0.0.1:3128 is ours already
        except OSError as exc:
            failures.append(exc)
            raise

    proc = _sandbox(before_exec, "/bin/echo", "ran")
    for listener in kept:
        listener.close()
    assert proc.returncode != 0 and proc.stdout == "", proc  # the sandbox was killed before its command
    assert len(failures) == 1 and isinstance(failures[0], OSError)
    assert "cannot listen in the sandbox's network namespace (listen 127.0.0.1:3128)" in str(failures[0])
    assert "Address already in use" in str(failures[0])
    assert {_net_of(f"/proc/self/task/{task}/ns/net") for task in os.listdir("/proc/self/task")} == \
        {_net_of("/proc/self/ns/net")}


def test_too_many_listeners_are_refused_before_anything_is_joined(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="too many listeners"):
        netns.listen_in(os.getpid(), [(socket.AF_INET, "127.0.0.1", 1000 + i) for i in range(netns.MAX_LISTENERS + 1)])
