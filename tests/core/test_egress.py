"""The network allowlist (pure), the egress proxy on real sockets, where the rules come from, and bwrap held
for the proxy's listeners."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agentbox.core.agents import egress_turn
from agentbox.core.errors import ConfigError
from agentbox.core.sandbox.egress import allowlist, parse_entry, rule_for_url
from agentbox.core.sandbox.egress_proxy import EgressProxy

# ----------------------------------------------------------------------------- entries


@pytest.mark.parametrize(("entry", "host", "ports"), [
    ("api.example.com", "api.example.com", (443, 80)),
    ("API.Example.com:8443", "api.example.com", (8443,)),
    ("*.example.com", "*.example.com", (443, 80)),
    ("10.0.0.5:11434", "10.0.0.5", (11434,)),
    ("127.0.0.1:8080", "127.0.0.1", (8080,)),
    ("[::1]:8080", "::1", (8080,)),
    ("localhost:11434", "localhost", (11434,)),
])
def test_an_entry_is_a_host_and_its_ports(entry: str, host: str, ports: tuple[int, ...]) -> None:
    rule = parse_entry(entry)
    assert (rule.host, rule.ports) == (host, ports)


@pytest.mark.parametrize(("entry", "says"), [
    ("", "empty"),
    ("https://api.example.com", "no scheme"),
    ("api.example.com/v1", "no scheme, path"),
    ("api.example.com:0", "valid port"),
    ("api.example.com:http", "valid port"),
    ("bad host", "spaces"),
    ("*", "not a host"),
    ("0.0.0.0:80", "everything"),
    ("127.0.0.1", "name the one port"),
    ("localhost", "name the one port"),
    ("-bad-.com", "not a host"),
])
def test_a_bad_entry_says_why(entry: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_entry(entry)


def test_rules_match_host_port_and_loopback_only_by_a_loopback_rule() -> None:
    rules = allowlist([parse_entry("api.example.com"), parse_entry("*.corp.example:8443"),
                       parse_entry("127.0.0.1:8080")])
    assert rules.permits("api.example.com", 443) and rules.permits("API.EXAMPLE.COM.", 80)
    assert not rules.permits("api.example.com", 22)
    assert not rules.permits("evil.api.example.com", 443)
    assert rules.permits("git.corp.example", 8443) and not rules.permits("corp.example", 8443)
    assert rules.permits("127.0.0.1", 8080) and rules.permits("::1", 8080) and rules.permits("localhost", 8080)
    assert not rules.permits("127.0.0.1", 8081)  # the MCP port next door stays closed
    assert rules.loopback_ports == (8080,)


def test_a_base_url_becomes_a_rule_for_its_port() -> None:
    assert str(rule_for_url("http://127.0.0.1:9000/v1", "x")) == "127.0.0.1:9000"
    assert str(rule_for_url("https://api.example.com/v1", "x")) == "api.example.com:443"
    assert str(rule_for_url("http://[::1]:9/", "x")) == "[::1]:9"
    assert rule_for_url("not a url", "x") is None and rule_for_url("file:///etc", "x") is None


def test_a_bad_allow_entry_names_file_line_and_field(tmp_path: Path) -> None:
    from agentbox.core.config.models import Profile, load_model

    path = tmp_path / "profile.yaml"
    path.write_text("name: p\nruntime:\n  tool: claude\nsandbox:\n  network: true\n  allow:\n"
                    "    - api.example.com\n    - https://evil.example/x\n")
    with pytest.raises(ConfigError) as caught:
        load_model(Profile, path)
    error = caught.value
    assert error.file == path and error.line == 8 and error.field == "sandbox.allow.1"
    assert "no scheme" in error.message


def test_network_host_is_a_choice_and_other_words_are_not(tmp_path: Path) -> None:
    from agentbox.core.config.models import Profile, load_model

    path = tmp_path / "profile.yaml"
    path.write_text("name: p\nruntime:\n  tool: claude\nsandbox:\n  network: host\n")
    assert load_model(Profile, path).sandbox.network == "host"  # type: ignore[union-attr]
    path.write_text("name: p\nruntime:\n  tool: claude\nsandbox:\n  network: shared\n")
    with pytest.raises(ConfigError) as caught:
        load_model(Profile, path)
    assert caught.value.line == 5 and caught.value.field == "sandbox.network"


# ----------------------------------------------------------------------------- derived endpoints


def _profile(agent_box_home: Path, tool: str, policy: dict | None = None, env: dict | None = None):  # type: ignore[no-untyped-def]
    from agentbox.core.config.profiles import resolve

    directory = agent_box_home / "profiles" / f"p-{tool}"
    (directory / f"dot-{tool}").mkdir(parents=True)
    document = {"name": f"p-{tool}", "runtime": {"tool": tool, "env": env or {}},
                "sandbox": policy or {"network": True}}
    (directory / "profile.yaml").write_text(json.dumps(document))
    return resolve(f"p-{tool}"), directory / f"dot-{tool}"


def test_the_model_endpoint_comes_from_env_config_or_the_vendor(agent_box_home: Path) -> None:
    claude, _ = _profile(agent_box_home, "claude", env={"ANTHROPIC_BASE_URL": "http://127.0.0.1:7001"})
    assert [str(r) for r in egress_turn.model_rules(claude, {"ANTHROPIC_BASE_URL": "http://127.0.0.1:7001"})] \
        == ["127.0.0.1:7001"]
    assert [r.host for r in egress_turn.model_rules(claude, {})][0] == "api.anthropic.com"  # the vendor's default
    codex, config = _profile(agent_box_home, "codex")
    (config / "config.toml").write_text('model_provider = "x"\n# base_url = "http://127.0.0.1:1/v1"\n'
                                        '[model_providers.x]\nbase_url = "http://127.0.0.1:7002/v1"\n')
    assert [str(r) for r in egress_turn.model_rules(codex, {})] == ["127.0.0.1:7002"]  # the comment is no endpoint
    opencode, config = _profile(agent_box_home, "opencode")
    (config / "opencode.json").write_text(json.dumps({"provider": {"f": {"options": {"baseURL": "https://llm.corp.example/v1"}}}}))
    assert [str(r) for r in egress_turn.model_rules(opencode, {})] == ["llm.corp.example:443"]
    hermes, config = _profile(agent_box_home, "hermes", policy={"network": True, "allow": ["github.com"]})
    (config / "config.yaml").write_text("model:\n  provider: custom\n  base_url: http://localhost:7003/v1\n")
    rules = egress_turn.profile_rules(hermes, {})
    assert [str(r) for r in rules.rules] == ["localhost:7003", "github.com:443,github.com:80"]
    assert rules.loopback_ports == (7003,)


def test_the_proxy_port_inside_steers_clear_of_allowlisted_loopback_ports(agent_box_home: Path) -> None:
    info, _ = _profile(agent_box_home, "claude", policy={"network": True, "allow": ["127.0.0.1:3128"]})
    plan = egress_turn.plan(info, {})
    assert plan.proxy_port == 3129 and plan.env["HTTPS_PROXY"] == "http://127.0.0.1:3129"
    assert plan.rules.loopback_ports == (3128,)  # served as a fixed-target listener in the sandbox


# ----------------------------------------------------------------------------- the proxy


class Upstream:
    """A host TCP server that records what it got and answers with a fixed reply."""

    def __init__(self, reply: bytes) -> None:
        self.reply = reply
        self.got: list[bytes] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = conn.recv(65536)
                self.got.append(data)
                conn.sendall(self.reply)


class HostProxy(EgressProxy):
    """The proxy serving a listener on the host's loopback (a sandbox's listeners are made in its namespace)."""

    address: tuple[str, int]
    listener: socket.socket


@contextlib.contextmanager
def proxy_for(_tmp_path: Path, *entries: str, target: tuple[str, int] | None = None) -> Iterator[HostProxy]:
    proxy = HostProxy(allowlist(parse_entry(e) for e in entries))
    proxy.listener = socket.create_server(("127.0.0.1", 0))
    proxy.address = proxy.listener.getsockname()
    proxy.start()
    proxy.adopt([(proxy.listener, target)])
    try:
        yield proxy
    finally:
        proxy.stop()


def connected(proxy: HostProxy) -> socket.socket:
    client = socket.create_connection(proxy.address, timeout=10)
    return client


def exchange(proxy: HostProxy, *messages: bytes) -> bytes:
    with connected(proxy) as client:
        received = b""
        for message in messages:
            client.sendall(message)
            received += client.recv(65536)
        client.shutdown(socket.SHUT_WR)
        while data := client.recv(65536):
            received += data
        return received


def test_connect_to_an_allowed_port_is_a_tunnel(tmp_path: Path) -> None:
    upstream = Upstream(b"pong")
    with proxy_for(tmp_path, f"127.0.0.1:{upstream.port}") as proxy:
        got = exchange(proxy, f"CONNECT 127.0.0.1:{upstream.port} HTTP/1.1\r\n\r\n".encode(), b"ping")
    assert got.startswith(b"HTTP/1.1 200") and got.endswith(b"pong")
    assert upstream.got == [b"ping"]
    assert proxy.snapshot()["connections"] == 1 and proxy.snapshot()["denied_total"] == 0


def test_a_plain_request_is_rewritten_and_closes_after_its_answer(tmp_path: Path) -> None:
    upstream = Upstream(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok")
    with proxy_for(tmp_path, f"127.0.0.1:{upstream.port}") as proxy:
        got = exchange(proxy, f"GET http://127.0.0.1:{upstream.port}/v1/models HTTP/1.1\r\n"
                              f"Host: 127.0.0.1:{upstream.port}\r\nProxy-Connection: keep-alive\r\n\r\n".encode())
    request = upstream.got[0].decode()
    assert request.startswith("GET /v1/models HTTP/1.1\r\n")
    assert "Proxy-Connection" not in request and "Connection: close" in request
    assert got.startswith(b"HTTP/1.1 200 OK") and b"Connection: close" in got and b"keep-alive" not in got
    assert got.endswith(b"ok")


def test_what_the_allowlist_lacks_is_refused_and_counted(tmp_path: Path) -> None:
    upstream = Upstream(b"secret")
    with proxy_for(tmp_path, "api.example.com") as proxy:
        for _ in range(3):
            got = exchange(proxy, f"CONNECT 127.0.0.1:{upstream.port} HTTP/1.1\r\n\r\n".encode())
            assert got.startswith(b"HTTP/1.1 403") and b"secret" not in got
        got = exchange(proxy, b"GET http://api.example.com:22/ HTTP/1.1\r\n\r\n")
        assert got.startswith(b"HTTP/1.1 403")
        escape = exchange(proxy, b"CONNECT \x1b]52;c;x\x07:443 HTTP/1.1\r\n\r\n")
        assert escape.startswith(b"HTTP/1.1 400")
    assert upstream.got == []
    summary = proxy.snapshot()
    assert summary["denied_total"] == 4  # the malformed target is refused, never recorded
    assert summary["denied"] == [
        {"target": f"127.0.0.1:{upstream.port}", "count": 3, "reason": "not in the allowlist"},
        {"target": "api.example.com:22", "count": 1, "reason": "not in the allowlist"}]


def test_an_allowed_name_that_resolves_to_loopback_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    upstream = Upstream(b"secret")

    async def rebinding(self, host, port, type=0):  # type: ignore[no-untyped-def]  # noqa: A002
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]

    monkeypatch.setattr("asyncio.base_events.BaseEventLoop.getaddrinfo", rebinding)
    with proxy_for(tmp_path, f"models.example.com:{upstream.port}") as proxy:
        got = exchange(proxy, f"CONNECT models.example.com:{upstream.port} HTTP/1.1\r\n\r\n".encode())
    assert got.startswith(b"HTTP/1.1 403") and b"loopback" in got
    assert upstream.got == []


def test_a_fixed_target_listener_carries_to_its_target_only_when_allowlisted(tmp_path: Path) -> None:
    """An allowlisted loopback port seen in the sandbox: its connections go there as a CONNECT would,
    with no proxy protocol; the same listener for a port the allowlist lacks closes and counts them."""
    upstream = Upstream(b"banner")
    with proxy_for(tmp_path, f"127.0.0.1:{upstream.port}", target=("127.0.0.1", upstream.port)) as proxy:
        assert exchange(proxy, b"hello") == b"banner"
    assert upstream.got == [b"hello"] and proxy.snapshot()["connections"] == 1
    with proxy_for(tmp_path, "api.example.com", target=("127.0.0.1", upstream.port)) as proxy:
        with connected(proxy) as client:
            client.sendall(b"again")
            try:
                closed = client.recv(100)
            except ConnectionResetError:  # closed with "again" unread
                closed = b""
        assert closed == b""
    assert upstream.got == [b"hello"]
    assert proxy.snapshot()["denied"] == [{"target": f"127.0.0.1:{upstream.port}", "count": 1,
                                           "reason": "not in the allowlist"}]


def test_stop_ends_open_tunnels_and_closes_its_listeners(tmp_path: Path) -> None:
    upstream = Upstream(b"")
    with proxy_for(tmp_path, f"127.0.0.1:{upstream.port}") as proxy:
        client = connected(proxy)
        client.sendall(f"CONNECT 127.0.0.1:{upstream.port} HTTP/1.1\r\n\r\n".encode())
        assert client.recv(100).startswith(b"HTTP/1.1 200")
    with client:
        assert client.recv(100) == b""  # closed by stop(), not left open
    assert proxy.listener.fileno() == -1
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(proxy.address, timeout=5).close()
    assert not [t for t in threading.enumerate() if t.name == "agentbox-egress"]


# ----------------------------------------------------------------------------- doctor


def test_doctor_flags_a_profile_that_shares_the_hosts_network(agent_box_home: Path) -> None:
    from agentbox.core.admin.doctor import check_network

    _profile(agent_box_home, "claude")
    assert check_network().status == "ok"
    _profile(agent_box_home, "codex", policy={"network": "host"})
    check = check_network()
    assert check.status == "warn" and "p-codex" in check.detail and "p-claude" not in check.detail
    assert "sandbox.allow" in (check.hint or "")


def test_the_profile_schema_documents_the_network_fields() -> None:
    from agentbox.core.admin.schemas import json_schema

    policy = json_schema("profile")["$defs"]["SandboxPolicy"]["properties"]
    assert {"const": "host", "type": "string"} in policy["network"]["anyOf"]
    assert "egress proxy" in policy["network"]["description"]
    assert "host:port" in policy["allow"]["description"] and policy["allow"]["items"] == {"type": "string"}


def test_stopping_with_a_connection_still_open_prints_nothing(tmp_path: Path, capfd: pytest.CaptureFixture[str],
                                                              caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("WARNING", logger="asyncio")
    upstream = Upstream(b"")
    with proxy_for(tmp_path, f"127.0.0.1:{upstream.port}") as proxy:
        clients = []
        for _ in range(3):
            client = connected(proxy)
            client.sendall(f"CONNECT 127.0.0.1:{upstream.port} HTTP/1.1\r\n\r\n".encode())
            clients.append(client)
        for client in clients:
            client.settimeout(10)
            assert client.recv(100).startswith(b"HTTP/1.1 200")
    for client in clients:
        client.close()
    captured = capfd.readouterr()
    assert captured.err == "" and captured.out == ""
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []  # logged is printed, in a CLI


def test_a_loopback_rule_opens_its_own_address_only(tmp_path: Path) -> None:
    """`127.0.0.1:PORT` never reaches a service another loopback address (127.0.0.2) serves at PORT."""
    other = socket.create_server(("127.0.0.2", 0))
    port = other.getsockname()[1]
    with other, proxy_for(tmp_path, f"127.0.0.1:{port}") as proxy:
        got = exchange(proxy, f"CONNECT 127.0.0.2:{port} HTTP/1.1\r\n\r\n".encode())
        other.settimeout(0.2)
        with pytest.raises(TimeoutError):
            other.accept()
    assert got.startswith(b"HTTP/1.1 502")  # 127.0.0.1:PORT was tried, and nothing listens there


@pytest.mark.parametrize("tool", sorted(egress_turn.CONFIG_FILES))
def test_no_turn_can_write_a_file_the_allowlist_is_read_from(tool: str) -> None:
    from agentbox.core.runtimes import adapter_for

    assert set(egress_turn.CONFIG_FILES[tool]) <= set(adapter_for(tool).loaded_config)


@pytest.mark.parametrize(("address", "refused"), [
    ("127.0.0.1", True), ("::1", True), ("::ffff:127.0.0.1", True), ("::ffff:7f00:1", True),
    ("169.254.169.254", True), ("fe80::1", True), ("::ffff:169.254.169.254", True), ("64:ff9b::7f00:1", True),
    ("2002:7f00:1::", True), ("0.0.0.0", True), ("::", True),
    ("93.184.215.14", False), ("2606:2800:21f:cb07:6820:80da:af6b:8b2c", False), ("10.1.2.3", False),
])
def test_names_never_resolve_into_this_machine_or_the_metadata_service(address: str, refused: bool) -> None:
    from agentbox.core.sandbox.egress import never_reached

    assert never_reached(address) is refused


# ----------------------------------------------------------------------------- bwrap held for the listeners


def _held(tmp_path: Path, before_exec: Callable[[int], None], command: str) -> subprocess.CompletedProcess[str]:
    from agentbox.core.sandbox.bwrap import launch

    bwrap = shutil.which("bwrap")
    assert bwrap is not None
    argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--unshare-net",
            "--die-with-parent", "--", "/bin/sh", "-c", command]
    with launch(argv, before_exec=before_exec) as launched:
        return subprocess.run(launched.argv, pass_fds=launched.pass_fds, capture_output=True, text=True, timeout=60)


@pytest.mark.bwrap
def test_the_command_runs_only_after_before_exec_returned(tmp_path: Path) -> None:
    mark = tmp_path / "mark"
    seen: list[int] = []

    def before_exec(pid: int) -> None:
        time.sleep(0.3)  # the command would already have run, were it not held
        seen.append(pid)
        mark.write_text("made before the command\n")

    proc = _held(tmp_path, before_exec, f"cat {mark}")
    assert proc.returncode == 0 and proc.stdout == "made before the command\n", proc
    assert len(seen) == 1 and seen[0] > 1


@pytest.mark.bwrap
def test_a_failing_before_exec_kills_the_sandbox_before_its_command(tmp_path: Path) -> None:
    def before_exec(_pid: int) -> None:
        raise OSError("no listeners")

    proc = _held(tmp_path, before_exec, "echo ran")
    assert proc.returncode != 0 and proc.stdout == "", proc
