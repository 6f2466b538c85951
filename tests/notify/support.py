"""Helpers of the notification tests: the user's config.yaml, a recording hook, a local webhook receiver."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from agentbox.core.engine.models import EngineHolder, Run
from agentbox.core.engine.run_store import RunStore
from agentbox.core.paths import ProjectPaths

RECORDER = """\
import json, os, sys, time
payload = json.load(sys.stdin)
env = {k: v for k, v in os.environ.items() if k.startswith("AGENTBOX_")}
with open(sys.argv[1], "a") as out:
    out.write(json.dumps({"payload": payload, "env": env, "at": time.time()}) + "\\n")
"""
"""A hook that appends what it received (stdin JSON and AGENTBOX_* variables) to the file in argv[1]."""


def write_config(text: str) -> Path:
    """Write the test's $AGENT_BOX_HOME/config.yaml."""
    path = Path(os.environ["AGENT_BOX_HOME"]) / "config.yaml"
    path.write_text(text)
    return path


def recorder(directory: Path) -> tuple[list[str], Path]:
    """A recording hook's argv and the JSON-lines file it appends to."""
    script = directory / "record_hook.py"
    script.write_text(RECORDER)
    log = directory / "hook-calls.jsonl"
    return [sys.executable, str(script), str(log)], log


def calls(log: Path) -> list[dict[str, Any]]:
    """What a recording hook received, oldest first."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def wait_for(predicate: Callable[[], Any], timeout: float = 30, what: str = "condition") -> Any:
    """Poll until `predicate()` is truthy; its value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def notifiable_ids(project: ProjectPaths, run_id: str) -> list[str]:
    """The ids of every notification the run's log calls for, in order."""
    from agentbox.core.engine.notify import notice_kind

    log, _ = RunStore(project).events(run_id)
    return [f"{run_id}:{e['seq']}" for e in log if notice_kind(e) is not None]


def live(run: Run) -> Run:
    """Mark `run` as executed by this process (what the engine does while it holds the run)."""
    run.engine = EngineHolder(pid=os.getpid(), started=time.time())
    return run


class Receiver:
    """A webhook receiver on 127.0.0.1: records each POST; answers `statuses` in turn, then 200."""

    def __init__(self, statuses: list[int] | None = None) -> None:
        self.posts: list[dict[str, Any]] = []
        self.statuses = list(statuses or [])
        received = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                received.posts.append({"path": self.path, "headers": dict(self.headers), "body": json.loads(body)})
                status = received.statuses.pop(0) if received.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def receiver(statuses: list[int] | None = None) -> Iterator[Receiver]:
    """A `Receiver` for the length of a test (use as a fixture body)."""
    with Receiver(statuses) as running:
        yield running
