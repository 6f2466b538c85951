"""`agentbox shell TASK`: the person's shell in a task's place is held by the task's sandbox.

Programs an agent wrote are what a person runs there (its tests, its scripts), so the
shell gets the same walls as the task's turns: writes only inside the task's scope, the
project's .agent-box and the host read-only, the home hidden, no tool credentials. Runs
as root and, through `test_unprivileged_pass.py`, as an ordinary user.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from agentbox.core import paths
from tests.conftest import run_cli
from tests.engine.support import setup_crew, task

pytestmark = pytest.mark.bwrap


def test_a_shell_cannot_write_outside_the_tasks_scope_or_read_the_profiles(project: Path) -> None:
    setup_crew(project, tasks=[task("t1", "builder", writes=["src/**"])])
    done = run_cli("run", "build it", "--quiet", cwd=project, timeout=180)
    assert done.code == 0, done.err
    secret = f"canary-{uuid.uuid4().hex}"
    credentials = paths.agent_box_home() / "profiles" / "t-worker" / "dot-scripted" / "credentials"
    credentials.parent.mkdir(parents=True, exist_ok=True)
    credentials.write_text(secret)
    tag = uuid.uuid4().hex[:8]
    outside = Path("/tmp") / f"agentbox-shell-{tag}"
    probe = run_cli("shell", "t1", cwd=project, stdin=(
        f"echo in > src/in-{tag}.txt && echo in_rc=0\n"
        f"echo x > out-{tag}.txt; echo root_rc=$?\n"
        "echo x >> .agent-box/crew.yaml; echo box_rc=$?\n"
        f"echo x > {outside}; echo tmp_rc=$?\n"
        f"cat {credentials} ~/.scripted/credentials; echo cat_rc=$?\n"
        f"grep -r {secret} ~ /root /home 2>/dev/null; echo grep_done\n"
        "env\n"))
    assert probe.code == 0, probe.err
    assert "in_rc=0" in probe.out and (project / "src" / f"in-{tag}.txt").read_text() == "in\n"
    for name in ("root", "box", "cat"):
        assert f"{name}_rc=0" not in probe.out, probe.out
    assert not (project / f"out-{tag}.txt").exists()
    assert "x" not in (project / ".agent-box" / "crew.yaml").read_text().splitlines()
    assert not outside.exists()  # the sandbox's /tmp is its own
    assert secret not in probe.out and "grep_done" in probe.out
    assert "AGENT_BOX_HOME" not in probe.out and "SCRIPTED_HOME" not in probe.out
