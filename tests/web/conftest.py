"""A real `agentbox serve` process on a free loopback port, over a fixture run waiting on the human."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentbox.core.paths import ProjectPaths
from tests.tui.builders import build_run, copy_example


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Served:
    """One running server: where it is, its token, the project it shows."""

    base: str
    token: str
    project: ProjectPaths
    process: subprocess.Popen[str]
    stderr_path: Path

    def get(self, path: str, *, cookie: str | None = None) -> tuple[int, dict[str, str], str]:
        """One GET without following redirects: (status, headers, body)."""
        request = urllib.request.Request(self.base + path, headers={"Cookie": cookie} if cookie else {})
        opener = urllib.request.build_opener(_NoRedirect)
        try:
            with opener.open(request, timeout=20) as response:
                return response.status, dict(response.headers), response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, dict(error.headers), error.read().decode()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def start_server(project: ProjectPaths, tmp_path: Path, *extra: str) -> Served:
    port = free_port()
    stderr_path = tmp_path / f"serve-{port}.err"
    process = subprocess.Popen([sys.executable, "-m", "agentbox", "--project", str(project.root), "serve",
                                "--port", str(port), *extra], stdout=subprocess.DEVNULL,
                               stderr=stderr_path.open("w"), text=True, start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        text = stderr_path.read_text()
        if "?token=" in text:
            token = text.split("?token=", 1)[1].split()[0]
            return Served(f"http://127.0.0.1:{port}", token, project, process, stderr_path)
        if process.poll() is not None:
            raise AssertionError(f"agentbox serve ended: {text}")
        time.sleep(0.1)
    stop_server(process)
    raise AssertionError(f"agentbox serve printed no address: {stderr_path.read_text()}")


def stop_server(process: subprocess.Popen[str]) -> None:
    """SIGTERM the server and everything it started (the dashboards of open tabs)."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # a dashboard left behind by a tab


@pytest.fixture
def waiting_project(tmp_path: Path) -> ProjectPaths:
    project = copy_example(tmp_path / "project")
    build_run(project, "waiting")
    return project


@pytest.fixture
def served(waiting_project: ProjectPaths, tmp_path: Path) -> Iterator[Served]:
    server = start_server(waiting_project, tmp_path)
    try:
        yield server
    finally:
        stop_server(server.process)
