"""A Ray cluster speaking TLS, and agentbox's turns on it through config.yaml's `runner.tls`.

The certificates are made here with openssl (a CA, and one certificate for 127.0.0.1 that
every process of the cluster uses, as Ray's mutual TLS wants). The cluster runs in a process
of its own with RAY_USE_TLS and the certificate variables set (as `ray start` would be on a
node); agentbox runs as another process whose environment has none of them: only its
config.yaml names the certificates. A secret the profile takes from the head's environment
reaches the node for the turn and is then on none of the node's files (Ray's session dir and
logs, the session's logs kept on the head, the node's turn home) nor in any Ray process.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from agentbox.core.engine.runners.ray_runner import tool_resource
from tests.conftest import REPO
from tests.engine.support import write_profile

pytestmark = pytest.mark.bwrap

HELPER = Path(__file__).with_name("ray_tls_cluster.py")
DRIVER = """
import asyncio, json, sys
from pathlib import Path
from agentbox.core.agents import resolve as services
from agentbox.core.engine.runners import configured_runner
from agentbox.core.engine.runners.base import Turn
from agentbox.core.agents.invoke import new_session_id

agent = services.profile_agent("t-secret", Path(sys.argv[1]), None)
sid = new_session_id()
done = asyncio.run(configured_runner().run(Turn(job_id=sid, run_id="r", task_id=None, agent=agent, prompt="show",
                                                session_id=sid, resume=False, timeout_s=60)))
print(json.dumps({"ok": done.result.ok, "text": done.result.text, "error": done.result.error, "node": done.node_id}))
"""


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certificates(where: Path) -> dict[str, Path]:
    """A CA and a certificate for 127.0.0.1 signed by it."""
    (where / "san.cnf").write_text("subjectAltName = IP:127.0.0.1, DNS:localhost\n")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
            "-subj", "/CN=agentbox-test-ca", cwd=where)
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
            "-subj", "/CN=127.0.0.1", cwd=where)
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.crt", "-days", "2", "-extfile", "san.cnf", cwd=where)
    return {"ca_cert": where / "ca.crt", "server_cert": where / "server.crt", "server_key": where / "server.key"}


def cluster_processes(temp_dir: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if str(temp_dir) in " ".join(proc.info["cmdline"] or []):
                found.append(proc)
    return found


@pytest.fixture(scope="module")
def tls_cluster() -> Iterator[tuple[dict[str, Path], dict[str, str], Path]]:
    """The certificates, the cluster's address and worker node, and its temp dir."""
    temp_dir = Path(tempfile.mkdtemp(prefix="abtls-"))
    certs = make_certificates(temp_dir)
    env = {**os.environ, "RAY_USE_TLS": "1", "RAY_TLS_CA_CERT": str(certs["ca_cert"]),
           "RAY_TLS_SERVER_CERT": str(certs["server_cert"]), "RAY_TLS_SERVER_KEY": str(certs["server_key"])}
    helper = subprocess.Popen([sys.executable, str(HELPER), str(temp_dir / "ray"),
                               json.dumps({tool_resource("scripted"): 4})],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    try:
        line = helper.stdout.readline() if helper.stdout else ""
        assert line, helper.stderr.read() if helper.stderr else ""
        yield certs, json.loads(line), temp_dir
    finally:
        with contextlib.suppress(Exception):
            if helper.stdin:
                helper.stdin.close()
            helper.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError):
            helper.kill()
        for proc in cluster_processes(temp_dir):  # nothing of the cluster outlives the test
            with contextlib.suppress(psutil.Error):
                proc.kill()
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_turns_run_on_a_tls_cluster_and_leave_no_secret_on_the_node(
        tls_cluster: tuple[dict[str, Path], dict[str, str], Path], agent_box_home: Path, tmp_path: Path) -> None:
    certs, cluster, temp_dir = tls_cluster
    host, _, port = cluster["address"].rpartition(":")
    handshake = subprocess.run(  # the head's GCS speaks TLS, with a certificate of the test's CA
        ["openssl", "s_client", "-connect", f"{host}:{port}", "-CAfile", str(certs["ca_cert"]),
         "-cert", str(certs["server_cert"]), "-key", str(certs["server_key"]), "-verify_return_error", "-brief"],
        input="", capture_output=True, text=True, timeout=30)
    assert "Verification: OK" in handshake.stderr and "Peer certificate: CN = 127.0.0.1" in handshake.stderr, \
        handshake.stderr

    secret = "tls-secret-" + os.urandom(8).hex()
    write_profile("t-secret", [{"id": "show", "when": {"prompt_contains": "show"},
                                "do": {"run": f'printf "%s" "$AB_TOKEN" | wc -c; key={certs["server_key"]}; '
                                              '[ -e "$key" ] && echo masked; cat "$key" 2>/dev/null',
                                       "reply": "length {run_output}"}}])
    profile = agent_box_home / "profiles" / "t-secret" / "profile.yaml"
    profile.write_text(profile.read_text().replace('"runtime": {', '"runtime": {"env": {"AB_TOKEN": "${AB_TLS_SECRET}"}, '))
    tls = "".join(f"    {key}: {path}\n" for key, path in certs.items())
    (agent_box_home / "config.yaml").write_text(
        f"runner:\n  kind: ray\n  address: {cluster['address']}\n  tls:\n{tls}")
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}  # only config.yaml names TLS
    env.update(AB_TLS_SECRET=secret, AGENT_BOX_HOME=str(agent_box_home), RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
               PYTHONPATH=str(REPO))
    driven = subprocess.run([sys.executable, "-c", DRIVER, str(work)], env=env, capture_output=True, text=True,
                            timeout=180)
    assert driven.returncode == 0, driven.stderr[-3000:]
    done = json.loads(driven.stdout.strip().splitlines()[-1])
    assert done["ok"] and done["text"].split() == ["length", str(len(secret)), "masked"], done  # the node's key
    assert done["node"] == cluster["node"]

    found = []
    for root in (temp_dir, agent_box_home, work, Path("/dev/shm")):
        for path in root.rglob("*"):
            with contextlib.suppress(OSError):
                if path.is_file() and not path.is_symlink() and secret.encode() in path.read_bytes():
                    found.append(path)
    assert found == []  # not in Ray's session dir (its logs, spilled objects), the session's logs, nor a turn home
    assert list((agent_box_home / "sessions").rglob("turn-1.log"))  # the node's session logs came back, and were read
    for proc in cluster_processes(temp_dir):
        with contextlib.suppress(psutil.Error):
            assert secret not in json.dumps(proc.environ())
