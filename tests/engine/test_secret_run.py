"""A key a profile takes from the environment never lands on disk or on screen, even when the agent prints it.

A whole hierarchical run: the workers' profile gets `${AB_RUN_SECRET}` and every worker
reply carries it in its summary. The engine, the run state, the decision log, the
session history, the turn logs and `status --json` must all hold `****` instead.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from agentbox.core.paths import ProjectPaths
from tests.conftest import run_cli
from tests.engine.support import create, drive, setup_crew, work_rule

pytestmark = pytest.mark.bwrap


def _holding(root: Path, needle: bytes) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and not p.is_symlink() and needle in p.read_bytes()]


@pytest.mark.local_runner("the key is in the agent process's environment")
async def test_a_key_the_agent_prints_is_masked_everywhere(project: Path, agent_box_home: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    secret = f"sk-test-{uuid.uuid4().hex}"
    monkeypatch.setenv("AB_RUN_SECRET", secret)
    leak = work_rule(reply_json={"summary": "did {task} with key {env[AB_RUN_KEY]}", "artifacts": [],
                                 "evidence": ["echoed {env[AB_RUN_KEY]}"]})
    proj: ProjectPaths = setup_crew(project, worker=[leak])
    worker = agent_box_home / "profiles" / "t-worker" / "profile.yaml"
    document = json.loads(worker.read_text())
    document["runtime"]["env"] = {"AB_RUN_KEY": "${AB_RUN_SECRET}"}
    worker.write_text(json.dumps(document))

    run_id = create(proj)
    run = await drive(proj, run_id)
    assert run.status == "done", run.status
    summaries = [t.submission.summary for t in run.tasks.values() if t.submission]
    assert summaries and all("key ****" in s for s in summaries), summaries  # the agent did print it
    status = run_cli("status", run_id, "--json", cwd=project)
    assert status.code == 0 and "****" in status.out and secret not in status.out + status.err
    assert _holding(project, secret.encode()) == []
    # the tool's own session store (the scripted agent's, like claude's transcripts) keeps what
    # the model said: that is the tool's state in its config dir, not a record agentbox writes
    tools_own = [p for p in _holding(agent_box_home, secret.encode()) if "/dot-scripted/sessions/" in p]
    assert sorted(_holding(agent_box_home, secret.encode())) == sorted(tools_own)
