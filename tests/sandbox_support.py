"""The probe agent the sandbox tests attack from: a scripted profile that writes, reads and runs on request."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentbox.core.agents import resolve as services
from agentbox.core.agents.invoke import InvokeResult, invoke
from agentbox.core.paths import ProjectPaths

PROBE_SCENARIO = {
    "defaults": {"usage": {"input_tokens": 10, "output_tokens": 5}},
    "rules": [
        {"id": "write", "when": {"prompt_regex": r"^write (?P<path>\S+)$"},
         "do": {"write": {"{path}": "written by {role}"}, "reply": "wrote {path}"}},
        {"id": "read", "when": {"prompt_regex": r"^read (?P<path>\S+)$"},
         "do": {"read": "{path}", "reply": "{reads}"}},
        {"id": "run", "when": {"prompt_regex": r"^run (?P<cmd>.+)$"},
         "do": {"run": "{cmd}", "reply": "{run_status}|{run_output}"}},
    ],
}


def make_profile(home: Path, name: str, *, sandbox_policy: Any = None, env: dict[str, str] | None = None) -> Path:
    """A user profile in AGENT_BOX_HOME running the probe scenario (JSON is valid YAML)."""
    directory = home / "profiles" / name
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "scenario.json").write_text(json.dumps(PROBE_SCENARIO))
    runtime: dict[str, Any] = {"tool": "scripted", "scenario": "scenario.json"}
    if env:
        runtime["env"] = env
    profile = {"name": name, "runtime": runtime,
               "sandbox": {"network": False} if sandbox_policy is None else sandbox_policy}
    (directory / "profile.yaml").write_text(json.dumps(profile))
    return directory


def write_crew(project: Path, roles: dict[str, dict[str, Any]]) -> ProjectPaths:
    """Replace the example crew by `roles` (no instructions files needed)."""
    crew = {"mode": "sequential", "roles": roles, "limits": {"task_timeout_s": 60}}
    (project / ".agent-box" / "crew.yaml").write_text(json.dumps(crew))
    return ProjectPaths(project)


async def ask(proj: ProjectPaths, role: str, prompt: str) -> InvokeResult:
    return await invoke(services.role_agent(proj, role), prompt)
