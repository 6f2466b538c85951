"""`agentbox serve` over real HTTP: the token gate, the cookie, the websocket's rules, the bind rules."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import aiohttp

from agentbox.core.paths import ProjectPaths
from tests.cli.test_foundation_cli import assert_usage_error
from tests.conftest import run_cli
from tests.web.conftest import Served, free_port, start_server, stop_server


def _cookie(served: Served) -> str:
    status, headers, _ = served.get(f"/?token={served.token}")
    assert status == 303 and headers["Location"] == "/"  # the token leaves the address bar
    set_cookie = headers["Set-Cookie"]
    assert "HttpOnly" in set_cookie and "SameSite=Strict" in set_cookie
    assert served.token not in set_cookie, "the browser keeps a value derived from the token, not the token"
    return set_cookie.split(";", 1)[0]


def test_every_request_needs_the_token_then_its_cookie(served: Served, agent_box_home: Path) -> None:
    token_file = agent_box_home / "serve-token"
    assert stat.S_IMODE(os.stat(token_file).st_mode) == 0o600
    assert token_file.read_text().strip() == served.token
    for path in ("/", "/static/js/textual.js", "/ws", f"/?token={served.token[:-1]}x", "/?token="):
        status, _, body = served.get(path)
        assert status == 401, path
        assert "needs the token" in body
    cookie = _cookie(served)
    status, _, page = served.get("/", cookie=cookie)
    assert status == 200 and "textual.js" in page
    assert served.get("/static/js/textual.js", cookie=cookie)[0] == 200
    assert served.get("/", cookie=cookie.replace("=", "=0", 1))[0] == 401  # a forged cookie


def test_the_websocket_needs_the_cookie_and_the_page_s_origin(served: Served) -> None:
    cookie = _cookie(served)

    async def attempt(headers: dict[str, str]) -> int:
        async with aiohttp.ClientSession() as session:
            try:
                async with session.ws_connect(served.base.replace("http", "ws") + "/ws", headers=headers):
                    return 101
            except aiohttp.WSServerHandshakeError as error:
                return error.status

    assert asyncio.run(attempt({})) == 401
    assert asyncio.run(attempt({"Cookie": cookie, "Origin": "http://evil.example"})) == 403


def test_a_new_token_locks_out_the_old_one(waiting_project: ProjectPaths, tmp_path: Path) -> None:
    first = start_server(waiting_project, tmp_path)
    old_cookie = _cookie(first)
    stop_server(first.process)
    second = start_server(waiting_project, tmp_path, "--new-token")
    try:
        assert second.token != first.token
        assert "a new token" in second.stderr_path.read_text()
        assert second.get(f"/?token={first.token}")[0] == 401
        assert second.get("/", cookie=old_cookie)[0] == 401
        assert second.get(f"/?token={second.token}")[0] == 303
    finally:
        stop_server(second.process)


def test_beyond_loopback_needs_tls_or_says_why_not(waiting_project: ProjectPaths, tmp_path: Path) -> None:
    root = str(waiting_project.root)
    refused = run_cli("--project", root, "serve", "--host", "0.0.0.0", "--port", str(free_port()), timeout=30)
    assert_usage_error(refused, "needs TLS")
    assert "--tls-cert" in refused.err
    half = run_cli("--project", root, "serve", "--host", "0.0.0.0", "--tls-cert", str(tmp_path / "c.pem"), timeout=30)
    assert_usage_error(half, "go together")
    missing = run_cli("--project", root, "serve", "--host", "0.0.0.0", "--tls-cert", str(tmp_path / "c.pem"),
                      "--tls-key", str(tmp_path / "k.pem"), timeout=30)
    assert_usage_error(missing, "no such file")
    server = start_server(waiting_project, tmp_path, "--host", "127.0.0.1", "--insecure-http")  # loopback: no warning
    stop_server(server.process)
    assert "clear text" not in server.stderr_path.read_text()


def test_insecure_http_beyond_loopback_prints_why_not(waiting_project: ProjectPaths, tmp_path: Path) -> None:
    port = free_port()
    err = tmp_path / "insecure.err"
    import subprocess
    import sys
    import time

    process = subprocess.Popen([sys.executable, "-m", "agentbox", "--project", str(waiting_project.root), "serve",
                                "--host", "0.0.0.0", "--port", str(port), "--insecure-http"],
                               stdout=subprocess.DEVNULL, stderr=err.open("w"), start_new_session=True, text=True)
    try:
        deadline = time.monotonic() + 30
        while "?token=" not in err.read_text() and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.1)
        text = err.read_text()
        assert "clear text" in text and "--tls-cert" in text
    finally:
        stop_server(process)


def test_bad_arguments_are_clear_errors(waiting_project: ProjectPaths) -> None:
    root = str(waiting_project.root)
    assert_usage_error(run_cli("--project", root, "serve", "--port", "0", timeout=30), "is not a port")
    assert_usage_error(run_cli("--project", root, "serve", "--max-sessions", "0", timeout=30), "at least 1")


def test_tls_serves_https_with_the_same_gate(waiting_project: ProjectPaths, tmp_path: Path) -> None:
    import ssl
    import subprocess
    import urllib.error
    import urllib.request

    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True, timeout=60)
    server = start_server(waiting_project, tmp_path, "--tls-cert", str(cert), "--tls-key", str(key))
    try:
        assert server.stderr_path.read_text().count("https://127.0.0.1:") == 1
        https = server.base.replace("http://", "https://")
        context = ssl.create_default_context(cafile=str(cert))
        context.check_hostname = False
        try:
            urllib.request.urlopen(https + "/", context=context, timeout=20)
            raise AssertionError("no token, yet the page was served")
        except urllib.error.HTTPError as error:
            assert error.code == 401
        opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context),
                                             type("NoRedirect", (urllib.request.HTTPRedirectHandler,),
                                                  {"redirect_request": lambda *a, **k: None})())
        try:
            opener.open(f"{https}/?token={server.token}", timeout=20)
            raise AssertionError("expected the redirect that sets the cookie")
        except urllib.error.HTTPError as error:
            assert error.code == 303 and "Secure" in error.headers["Set-Cookie"]
    finally:
        stop_server(server.process)
