"""hermes pays nothing extra for the proxy settings of a sandbox with its own network.

With `network: true` hermes gets HTTP_PROXY, HTTPS_PROXY and ALL_PROXY (agentbox's egress
proxy) and NO_PROXY for loopback. Every httpx client it builds then makes a transport per
proxy variable, and each transport parsed the CA bundle: two more clients a turn (its probe
of a local model server) made the turn ~120 ms longer than with `network: host`, although
the model's loopback endpoint never uses those transports. The adapter's launcher makes
httpx share its default SSL context, so the CA bundle is parsed as often either way. Counted,
not timed: loads of the bundle (inotify on a copy named by SSL_CERT_FILE, which the sandbox
passes through) in a real turn, and SSLContext loads in hermes's own interpreter.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import ssl
import struct
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from agentbox.core.agents.egress_turn import plan_for
from agentbox.core.runtimes.base import TurnRequest
from agentbox.core.runtimes.hermes import HermesAdapter, python_of
from agentbox.core.sandbox.egress import allowlist
from tests.conftest import TOOLS_BIN
from tests.realcli.conftest import Box, FakeView

pytestmark = [pytest.mark.realcli]

IN_OPEN, IN_CLOSE_NOWRITE, IN_NONBLOCK = 0x20, 0x10, 0o4000
"""inotify(7): a file opened, a file closed (unwritten: the next open is not merged into this one)."""


@contextmanager
def opens_of(path: Path) -> Iterator[list[int]]:
    """The number of times `path` is opened in the block, by any process on the machine
    (inotify watches the inode, so opens through a sandbox's bind mount count too)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(IN_NONBLOCK)
    assert fd >= 0, os.strerror(ctypes.get_errno())
    found = [0]
    try:
        assert libc.inotify_add_watch(fd, os.fsencode(path), IN_OPEN | IN_CLOSE_NOWRITE) >= 0
        yield found
        while True:
            try:
                events = os.read(fd, 1 << 16)
            except BlockingIOError:
                break
            offset = 0
            while offset < len(events):
                _wd, mask, _cookie, length = struct.unpack_from("iIII", events, offset)
                offset += 16 + length
                found[0] += bool(mask & IN_OPEN)
    finally:
        os.close(fd)


def _set_network(name: str, network: object) -> None:
    from agentbox.core.yaml_io import load_yaml, write_yaml

    path = Path(os.environ["AGENT_BOX_HOME"]) / "profiles" / name / "profile.yaml"
    document = load_yaml(path)
    document["sandbox"]["network"] = network
    write_yaml(path, document)


@pytest.mark.bwrap
def test_a_turn_through_the_proxy_loads_the_ca_bundle_as_often_as_one_on_the_hosts_network(
        make_profile, fake: FakeView, workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bundle = workdir / "ca-bundle.pem"  # the project is seen at its path in the sandbox
    shutil.copy(ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt", bundle)
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    proxied, shared = make_profile("hermes", "rc-hermes-proxy"), make_profile("hermes", "rc-hermes-host")
    _set_network(shared, "host")
    box = Box(workdir)
    loads: dict[str, int] = {}
    for name in (proxied, shared):
        with opens_of(bundle) as opened:
            turn = box.invoke(f"profile:{name}", f"count the loads {name}")
        assert turn.code == 0 and turn.result["text"].startswith("echo: "), str(turn)
        loads[name] = opened[0]
    assert turn.result["network"] is None  # the host's network: no proxy
    assert loads[shared] >= 1, loads  # hermes does read the bundle SSL_CERT_FILE names (else this proves nothing)
    assert loads[proxied] <= loads[shared], loads  # the old launcher: 21 against 9


STAND_IN = """\
import json, os, ssl, sys
loads = []
load = ssl.SSLContext.load_verify_locations
def counted(self, *args, **kwargs):
    loads.append(args or kwargs)
    return load(self, *args, **kwargs)
ssl.SSLContext.load_verify_locations = counted
import httpx
os.environ.update(json.loads(os.environ["PROXY_ENV"]))
clients = [httpx.Client(), httpx.Client(timeout=2.0), httpx.AsyncClient()]
shared = len(loads)
unverified = httpx.Client(verify=False)
own, again = httpx.create_ssl_context(), httpx.create_ssl_context()
print(json.dumps({"shared": shared, "all": len(loads), "proxied": len(clients[0]._mounts),
                  "own_is_new": own is not again}))
"""
"""An entry script in hermes's interpreter: its httpx clients with a sandbox's proxy settings."""


def test_the_launcher_gives_hermes_httpx_one_default_ssl_context(tmp_path: Path) -> None:
    python = python_of(str(TOOLS_BIN / "hermes"))
    assert python is not None, "hermes's entry point is not a Python script"
    script = tmp_path / "bin" / "hermes"
    script.parent.mkdir()
    script.write_text(f"#!{' '.join(python)}\n{STAND_IN}")
    script.chmod(0o755)
    (tmp_path / "scratch").mkdir()
    request = TurnRequest(prompt="hi", session_id="s", native_id=None, first_turn=True, instructions=None,
                          model=None, extra_args=(), read_only=False, cwd=tmp_path, home=tmp_path,
                          scratch=tmp_path / "scratch", executable=str(script), config_dir=tmp_path)
    command = HermesAdapter().build(request)
    proxy_env = plan_for(allowlist([])).env
    env = {"PATH": os.environ["PATH"], "PROXY_ENV": json.dumps(proxy_env)}
    done = subprocess.run(command.argv, input=command.stdin, env=env, cwd=tmp_path, capture_output=True,
                          text=False, timeout=60, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    seen = json.loads(done.stdout)
    assert seen["proxied"] >= 3, seen  # HTTP_PROXY, HTTPS_PROXY, ALL_PROXY: a transport each (+ NO_PROXY's)
    assert seen["shared"] == 1, seen  # three clients, four transports each: one CA bundle parsed (was 12)
    # what is not the default case is made as httpx makes it: verify=False loads nothing, and
    # httpx.create_ssl_context() (a context the caller may change) is a new one each time
    assert seen["all"] == 3 and seen["own_is_new"], seen
