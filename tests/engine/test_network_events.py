"""A run's event log says what a turn's network was refused (the person sees it in `status` and the TUI)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from agentbox.core import runs
from tests.engine.support import create, events, of_type, setup_crew, work_rule

pytestmark = pytest.mark.bwrap

KNOCK = (f"{sys.executable} -c \"import os,socket;h,p=os.environ['HTTPS_PROXY'].rsplit(':',1);"
         "s=socket.create_connection((h.split('//')[1],int(p)));"
         "s.sendall(b'CONNECT 127.0.0.1:9 HTTP/1.1\\r\\n\\r\\n');print(s.recv(100))\"")
"""What a worker runs: a CONNECT to a host loopback port no profile allows."""


@pytest.mark.local_runner("the agent's shell command is refused the network by the sandbox")
async def test_a_refused_connection_becomes_an_event_of_the_run(project: Path) -> None:
    paths = setup_crew(project, mode="sequential", sequential={"steps": ["builder"]},
                       worker=[work_rule(run=KNOCK)])
    profile = Path(os.environ["AGENT_BOX_HOME"]) / "profiles" / "t-worker" / "profile.yaml"
    document = json.loads(profile.read_text())
    document["sandbox"] = {"network": True}
    profile.write_text(json.dumps(document))
    run_id = create(paths, mode="sequential")
    run = await runs.execute(paths, run_id)
    assert run.status == "done", run.status_reason
    (refused,) = of_type(events(paths, run_id), "network")
    assert refused["task"] == "step1-builder" and refused["role"] == "builder"
    assert "1 connection(s) refused" in refused["what"] and "127.0.0.1:9" in refused["what"]
    assert refused["session"] == run.tasks["step1-builder"].session_id
