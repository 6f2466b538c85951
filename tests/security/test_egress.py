"""A sandbox with network reaches only its allowlist: attacks on the host's loopback from inside.

The scripted probe agent (a real process in the real bwrap sandbox built by `invoke()`)
tries to reach services on the host's 127.0.0.1 — a toy TCP server, an HTTP port like
`agentbox mcp --http` — directly, through its proxy settings by CONNECT and by a plain
HTTP request; the host side counts what arrived. Runs as root and, through
`test_unprivileged_pass.py`, as an unprivileged user.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentbox.core.paths import ProjectPaths
from tests.conftest import run_cli as cli_run
from tests.sandbox_support import ask, make_profile, write_crew

pytestmark = pytest.mark.bwrap

CLIENT = r'''
import json, os, socket, sys, urllib.request
host, port = "127.0.0.1", int(sys.argv[1])
out = {"proxy": os.environ.get("HTTPS_PROXY")}
def attempt(name, fn):
    try:
        out[name] = fn()
    except Exception as exc:
        out[name] = "error: " + type(exc).__name__ + ": " + str(exc)
def direct():
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        return s.recv(200).decode(errors="replace")
def connect():
    proxy = os.environ["HTTPS_PROXY"].rsplit(":", 1)
    with socket.create_connection((proxy[0].split("//")[1], int(proxy[1])), timeout=10) as s:
        s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        reply = s.recv(200).decode(errors="replace")
        if " 200 " in reply.split("\r\n")[0]:
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            reply += s.recv(200).decode(errors="replace")
        return reply
def plain():
    os.environ["no_proxy"] = os.environ["NO_PROXY"] = ""  # a tool that sends loopback to its proxy too
    handler = urllib.request.ProxyHandler({"http": os.environ["HTTP_PROXY"]})
    try:
        return urllib.request.build_opener(handler).open(f"http://{host}:{port}/mcp", timeout=10).read().decode()
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}: {exc.read().decode(errors='replace')}"
attempt("direct", direct)
if out["proxy"]:
    attempt("connect", connect)
    attempt("plain", plain)
print(json.dumps(out))
'''


class ToyServer:
    """A TCP server on the host's 127.0.0.1 that answers every connection with a banner and counts them."""

    def __init__(self, banner: bytes) -> None:
        self.banner = banner
        self.accepted = 0
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self.accepted += 1
            with contextlib.suppress(OSError), conn:
                conn.recv(1024)
                conn.sendall(self.banner)

    @contextlib.contextmanager
    def running(self) -> Iterator[ToyServer]:
        self._thread.start()
        try:
            yield self
        finally:
            self._sock.close()
            self._thread.join(5)


@pytest.fixture
def net_project(project: Path, agent_box_home: Path) -> Iterator[tuple[ProjectPaths, Path]]:
    """A project with the probe client script, and a toy server and an HTTP-like port on the host's loopback."""
    (project / "client.py").write_text(CLIENT)
    return write_crew(project, {"probe": {"profile": "probe"}}), agent_box_home  # type: ignore[return-value]


def probe(home: Path, policy: Any) -> None:
    make_profile(home, "probe", sandbox_policy=policy)


async def attempts(proj: ProjectPaths, port: int) -> tuple[dict[str, str], Any]:
    """What the probe's client got trying `127.0.0.1:port` every way, and the turn's result."""
    result = await ask(proj, "probe", f"run {sys.executable} client.py {port}")
    assert result.ok, result.error
    status, _, output = result.text.partition("|")
    assert status == "0", output
    return json.loads(output.strip().splitlines()[-1]), result


async def test_a_loopback_service_is_unreachable_from_a_sandbox_with_network(net_project) -> None:  # type: ignore[no-untyped-def]
    proj, home = net_project
    probe(home, {"network": True})
    with ToyServer(b"toy-banner\n").running() as toy:
        seen, result = await attempts(proj, toy.port)
    assert toy.accepted == 0, seen
    assert "toy-banner" not in json.dumps(seen)
    assert seen["proxy"], "the sandbox got no proxy settings"
    assert seen["direct"].startswith("error:"), seen
    assert "403" in seen["connect"] and "403" in seen["plain"], seen
    network = result.network
    assert network["mode"] == "proxy" and network["connections"] == 0
    assert network["denied_total"] == 2
    assert network["denied"] == [{"target": f"127.0.0.1:{toy.port}", "count": 2, "reason": "not in the allowlist"}]


async def test_an_allowlisted_loopback_port_is_reachable_and_no_other(net_project) -> None:  # type: ignore[no-untyped-def]
    proj, home = net_project
    with ToyServer(b"toy-banner\n").running() as toy, ToyServer(b"other-banner\n").running() as other:
        probe(home, {"network": True, "allow": [f"127.0.0.1:{toy.port}"]})
        seen, result = await attempts(proj, toy.port)
        other_seen, other_result = await attempts(proj, other.port)
    assert "toy-banner" in seen["direct"], seen  # the tool that bypasses its proxy for loopback
    assert "toy-banner" in seen["connect"], seen  # and the one that uses it
    assert toy.accepted >= 2
    assert result.network["connections"] >= 2 and result.network["denied_total"] == 0
    assert other.accepted == 0 and "other-banner" not in json.dumps(other_seen), other_seen
    assert other_result.network["denied_total"] == 2


async def test_an_mcp_like_http_port_is_refused_and_the_refusal_recorded(net_project) -> None:  # type: ignore[no-untyped-def]
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    hits: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            hits.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"invoke_role ok")

        def log_message(self, *args: object) -> None:
            pass

    proj, home = net_project
    probe(home, {"network": True, "allow": ["api.example.com"]})
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        seen, result = await attempts(proj, server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
    assert hits == [], seen
    assert "invoke_role ok" not in json.dumps(seen)
    assert "403" in seen["plain"] and "allowlist" in seen["plain"], seen
    port = server.server_address[1]
    assert {d["target"] for d in result.network["denied"]} == {f"127.0.0.1:{port}"}
    assert "api.example.com:443,api.example.com:80 (sandbox.allow)" not in result.network["allowed"]
    assert "api.example.com:443,api.example.com:80" in result.network["allowed"]
    # the session history keeps it, and a person is told (`sessions show`)
    from agentbox.core.agents import resolve as services

    agent = services.role_agent(proj, "probe")
    recorded = agent.sessions.turns(agent.sessions.find(result.session_id))[-1]
    assert recorded["network"]["denied_total"] == 2
    shown = cli_run("sessions", "show", result.session_id, cwd=proj.root)
    assert shown.code == 0, shown.err
    assert f"network: 2 connection(s) refused by the sandbox's allowlist: 127.0.0.1:{port}" in shown.out


async def test_network_host_is_the_old_shared_network(net_project) -> None:  # type: ignore[no-untyped-def]
    proj, home = net_project
    probe(home, {"network": "host"})
    with ToyServer(b"toy-banner\n").running() as toy:
        seen, result = await attempts(proj, toy.port)
    assert "toy-banner" in seen["direct"], seen
    assert result.network is None and seen["proxy"] is None


async def test_no_network_reaches_nothing_and_has_no_proxy(net_project) -> None:  # type: ignore[no-untyped-def]
    proj, home = net_project
    probe(home, {"network": False})
    with ToyServer(b"toy-banner\n").running() as toy:
        seen, result = await attempts(proj, toy.port)
    assert toy.accepted == 0 and seen["direct"].startswith("error:"), seen
    assert result.network is None


def test_nothing_of_the_proxy_outlives_its_turn(net_project) -> None:  # type: ignore[no-untyped-def]
    """The proxy's thread, the thread that held the sandbox and the listeners made in it end with the
    turn (a blocking turn, as the CLI runs it)."""
    import os

    from agentbox.core.agents import resolve as services
    from agentbox.core.agents.invoke import invoke_sync

    proj, home = net_project
    probe(home, {"network": True})
    before, fds_before = {t.name for t in threading.enumerate()}, set(os.listdir("/proc/self/fd"))
    result = invoke_sync(services.role_agent(proj, "probe"), "run true")
    assert result.ok, result.error
    assert result.network is not None and result.network["mode"] == "proxy" and "error" not in result.network
    assert {t.name for t in threading.enumerate()} - before == set()
    sockets = {fd for fd in set(os.listdir("/proc/self/fd")) - fds_before
               if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")}
    assert sockets == set()


INSIDE = r'''
import errno, json, os, socket, sys
port = int(os.environ["HTTPS_PROXY"].rsplit(":", 1)[1])
out = {"procs": [], "held": [], "binds": {}}
for pid in sorted((p for p in os.listdir("/proc") if p.isdigit()), key=int):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            out["procs"].append(f.read().replace(b"\0", b" ").decode(errors="replace").strip())
        out["held"] += [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    except OSError:
        pass
with open("/proc/net/tcp") as f:
    rows = [line.split() for line in f.read().splitlines()[1:]]
out["listening"] = [(r[1], r[9]) for r in rows if r[3] == "0A"]
for name, host, opts in (("plain", "127.0.0.1", ()), ("reuse", "127.0.0.1", ("SO_REUSEADDR", "SO_REUSEPORT")),
                         ("any", "0.0.0.0", ("SO_REUSEADDR", "SO_REUSEPORT"))):
    s = socket.socket()
    for opt in opts:
        s.setsockopt(socket.SOL_SOCKET, getattr(socket, opt), 1)
    try:
        s.bind((host, port))
        s.listen(1)
        out["binds"][name] = "bound"
    except OSError as exc:
        out["binds"][name] = errno.errorcode.get(exc.errno, str(exc.errno))
    s.close()
with socket.create_connection(("127.0.0.1", port), timeout=10) as s:  # still the proxy, after all that
    target = sys.argv[1]
    s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    reply = s.recv(200).decode(errors="replace")
    if " 200 " in reply:
        s.sendall(b"hi\n")
        reply += s.recv(200).decode(errors="replace")
    out["through"] = reply
print(json.dumps(out))
'''


async def test_no_process_of_agentbox_runs_in_the_sandbox_and_its_listener_is_the_hosts_alone(net_project) -> None:  # type: ignore[no-untyped-def]
    """The proxy listens in the sandbox's own network namespace from the host: inside, only the tool
    and what it runs (no bridge); no process inside holds the listener; its address cannot be
    taken over (plain, SO_REUSEADDR/SO_REUSEPORT, the wildcard); the host's own 127.0.0.1:3128 is
    never used — a server there sees nothing while the turn goes out through the proxy."""
    proj, home = net_project
    (proj.root / "inside.py").write_text(INSIDE)
    try:
        host_3128 = socket.create_server(("127.0.0.1", 3128))
    except OSError as exc:
        pytest.fail(f"the host's 127.0.0.1:3128 is taken ({exc}): this test needs it free to watch it")
    host_3128.settimeout(0)
    with host_3128, ToyServer(b"toy-banner\n").running() as toy:
        probe(home, {"network": True, "allow": [f"127.0.0.1:{toy.port}"]})
        result = await ask(proj, "probe", f"run {sys.executable} inside.py 127.0.0.1:{toy.port}")
        with pytest.raises(BlockingIOError):
            host_3128.accept()
    assert result.ok, result.error
    status, _, output = result.text.partition("|")
    assert status == "0", output
    seen = json.loads(output.strip().splitlines()[-1])
    procs = seen["procs"]
    assert procs[0].split()[0].endswith("bwrap"), procs  # bwrap's init, pid 1
    assert not [p for p in procs if "egress" in p], procs  # the bridge was `python ... import egress_bridge`
    assert len(procs) == 4, procs  # bwrap, the tool (the scripted agent), its shell, this script
    assert any("inside.py" in p for p in procs)
    listening = {address: inode for address, inode in seen["listening"]}
    assert "0100007F:0C38" in listening, seen["listening"]  # 127.0.0.1:3128, in the sandbox's namespace
    assert f"socket:[{listening['0100007F:0C38']}]" not in seen["held"]  # held by the host alone
    assert seen["binds"] == {"plain": "EADDRINUSE", "reuse": "EADDRINUSE", "any": "EADDRINUSE"}, seen["binds"]
    assert "toy-banner" in seen["through"] and toy.accepted == 1, seen["through"]
    assert result.network["connections"] == 1 and result.network["denied_total"] == 0


def test_an_attached_session_gets_the_same_network(net_project) -> None:  # type: ignore[no-untyped-def]
    """`agentbox launch` (a person at the keyboard) runs under the same proxy and allowlist as a turn."""
    proj, home = net_project
    with ToyServer(b"toy-banner\n").running() as toy, ToyServer(b"other-banner\n").running() as other:
        probe(home, {"network": True, "allow": [f"127.0.0.1:{toy.port}"]})
        typed = f"run {sys.executable} client.py {toy.port}\nrun {sys.executable} client.py {other.port}\n/exit\n"
        result = cli_run("launch", "probe", cwd=proj.root, stdin=typed)
    assert result.code == 0, result.err
    assert "toy-banner" in result.out and toy.accepted >= 1, result.out
    assert other.accepted == 0 and "other-banner" not in result.out


def test_profile_test_names_what_the_allowlist_refused(agent_box_home: Path) -> None:
    from agentbox.core.admin.profile_check import check_profile

    knock = (f"{sys.executable} -c \"import os,socket;h,p=os.environ['HTTPS_PROXY'].rsplit(':',1);"
             "s=socket.create_connection((h.split('//')[1],int(p)));"
             "s.sendall(b'CONNECT models.corp.example:443 HTTP/1.1\\r\\n\\r\\n');s.recv(100)\"")
    directory = agent_box_home / "profiles" / "lost"
    directory.mkdir(parents=True)
    (directory / "scenario.json").write_text(json.dumps(
        {"rules": [], "fallback": {"run": knock, "fail": "exit", "exit_code": 1, "stderr": "request failed"}}))
    (directory / "profile.yaml").write_text(json.dumps(
        {"name": "lost", "runtime": {"tool": "scripted", "scenario": "scenario.json"}, "sandbox": {"network": True}}))
    report = check_profile("lost", timeout_s=60)
    assert not report.ok and report.problem == "network_refused", report
    assert "models.corp.example:443" in report.diagnosis and "sandbox.allow" in report.diagnosis
