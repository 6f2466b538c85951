"""Health checks behind `agentbox doctor`: sandbox, agent CLIs, home, project."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from agentbox.core import paths

Status = Literal["ok", "warn", "fail"]

#: Agent CLIs and the argument that prints their version.
AGENT_CLIS: dict[str, list[str]] = {
    "claude": ["--version"],
    "codex": ["--version"],
    "opencode": ["--version"],
    "hermes": ["--version"],
}


@dataclass(frozen=True)
class Check:
    """One line of the doctor's report."""

    name: str
    status: Status
    detail: str
    required: bool = True
    hint: str | None = None

    def as_dict(self) -> dict[str, object]:
        """The check as JSON-ready data."""
        return asdict(self)


def check_bwrap() -> Check:
    """bwrap is installed and can create a sandbox with the namespaces agentbox uses."""
    binary = shutil.which("bwrap")
    if binary is None:
        return Check("bwrap", "fail", "bubblewrap is not installed",
                     hint="install it: `apt-get install bubblewrap` (or dnf/pacman install bubblewrap)")
    argv = [binary, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
            "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent", "true"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("bwrap", "fail", f"{binary} could not run: {exc}")
    if proc.returncode != 0:
        return Check("bwrap", "fail", f"{binary} cannot create a sandbox here: {proc.stderr.strip()}",
                     hint="user namespaces may be disabled (sysctl kernel.unprivileged_userns_clone=1)")
    version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()
    return Check("bwrap", "ok", f"{version} at {binary}: sandbox created")


def _tool_version(tool: str) -> Check:
    from agentbox.core.runtimes import find_executable

    binary = find_executable(tool)
    if binary is None:
        return Check(tool, "warn", "not on PATH", required=False,
                     hint="profiles using this tool cannot run; scripts/install-clis.sh installs pinned versions")
    try:
        proc = subprocess.run([str(binary), *AGENT_CLIS[tool]], capture_output=True, text=True,
                              timeout=30, stdin=subprocess.DEVNULL)
        version = (proc.stdout.strip() or proc.stderr.strip()).splitlines()[0] if proc.returncode == 0 else f"exit {proc.returncode}"
    except (OSError, subprocess.TimeoutExpired, IndexError) as exc:
        version = f"version unknown ({exc.__class__.__name__})"
    return Check(tool, "ok", f"{version} at {binary}", required=False)


def check_home() -> Check:
    """AGENT_BOX_HOME exists (or can be created) and is writable."""
    home = paths.agent_box_home()
    try:
        home.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=home, prefix=".doctor-"):
            pass
    except OSError as exc:
        return Check("home", "fail", f"{home} is not writable: {exc}",
                     hint="set AGENT_BOX_HOME to a writable directory")
    return Check("home", "ok", f"{home} is writable")


def check_profiles() -> Check:
    """Every profile in AGENT_BOX_HOME loads."""
    from agentbox.core import profiles
    from agentbox.core.errors import ConfigError

    errors: list[ConfigError] = []
    infos = profiles.all_profiles(errors)
    if errors:
        return Check("profiles", "warn", "; ".join(str(e) for e in errors), required=False)
    return Check("profiles", "ok", f"{len(infos)} usable: {', '.join(i.name for i in infos)}", required=False)


def check_project(start: Path | None) -> Check:
    """The active project and whether its crew is valid."""
    from agentbox.core import project
    from agentbox.core.errors import AgentboxError, ProjectNotFoundError

    try:
        found = paths.project_at(start) if start else paths.find_project()
    except ProjectNotFoundError as exc:
        if start:
            return Check("project", "fail", exc.message, hint=exc.hint)
        return Check("project", "warn", "no project here", required=False, hint="`agentbox init` creates one")
    try:
        loaded = project.load_crew(found)
    except AgentboxError as exc:
        return Check("project", "fail", f"{found.root}: {exc.message}", hint=exc.hint)
    problems = project.check_references(found, loaded)
    if problems:
        return Check("project", "fail", f"{found.root}: " + "; ".join(p.message for p in problems),
                     hint=problems[0].hint)
    crew = loaded.crew
    return Check("project", "ok", f"{found.root}: crew of {len(crew.roles)} ({', '.join(crew.roles)}), mode {crew.mode}")


def run_checks(project_dir: Path | None = None) -> list[Check]:
    """All checks; the slow ones (bwrap, tool versions) run in parallel threads."""
    with ThreadPoolExecutor(max_workers=6) as pool:
        bwrap = pool.submit(check_bwrap)
        tools = [pool.submit(_tool_version, tool) for tool in AGENT_CLIS]
        home = check_home()
        profiles_check = check_profiles()
        project_check = check_project(project_dir)
        return [bwrap.result(), home, profiles_check, project_check, *(t.result() for t in tools)]


def healthy(checks: list[Check]) -> bool:
    """False when a required check failed."""
    return not any(c.status == "fail" and c.required for c in checks)


def environment_summary() -> dict[str, str]:
    """Facts printed with the report."""
    return {"AGENT_BOX_HOME": str(paths.agent_box_home()), "uid": str(os.getuid())}
