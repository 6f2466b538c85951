"""The only module that knows where agentbox's files live.

System level: `AGENT_BOX_HOME` (default `~/.agent-box`, the variable agent-box v1 used)
holds `profiles/<name>/`, `sessions/<profile>/` for invocations outside a project and
v1's `agent-box.db`. Project level: the nearest `.agent-box/` above the working
directory, found like git finds `.git/`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from agentbox.core.errors import ProjectNotFoundError

PROJECT_DIR_NAME = ".agent-box"
PROFILE_FILE = "profile.yaml"
CREW_FILE = "crew.yaml"

PACKAGE_DIR = Path(__file__).resolve().parent.parent
"""The `agentbox` package itself: files of agentbox's own code are named from here, so a
module may move inside the package without its file references changing."""

#: The repository root (or installed tree) that ships `profiles/` and `.agent-box.example/`.
_DATA = PACKAGE_DIR / "data"
"""Shipped data: links to the repository's `profiles/` and `.agent-box.example/`, which a
built wheel carries as real directories (so a plain `pip install` finds them too)."""


def agent_box_home() -> Path:
    """The system-level directory: `$AGENT_BOX_HOME`, else `~/.agent-box`."""
    env = os.environ.get("AGENT_BOX_HOME")
    return Path(env).expanduser().absolute() if env else Path.home() / ".agent-box"


def profiles_dir() -> Path:
    """Where user profiles live: `$AGENT_BOX_HOME/profiles`."""
    return agent_box_home() / "profiles"


def v1_database() -> Path:
    """agent-box v1's SQLite file, whose `profiles` table may name a profile's tool."""
    return agent_box_home() / "agent-box.db"


def global_sessions_dir() -> Path:
    """Session history of invocations made outside a project, per profile."""
    return agent_box_home() / "sessions"


def bundled_profiles_dir() -> Path:
    """The profile templates shipped with agentbox (`profiles/` in the repository)."""
    return (_DATA / "profiles").resolve()


def example_project_dir() -> Path:
    """The sample project that `agentbox init` copies (`.agent-box.example/`)."""
    return (_DATA / "example-project").resolve()


@dataclass(frozen=True)
class ProjectPaths:
    """Every path inside one project's `.agent-box/` directory."""

    root: Path
    """The repository directory that contains `.agent-box/`."""

    @property
    def box(self) -> Path:
        """The `.agent-box/` directory itself."""
        return self.root / PROJECT_DIR_NAME

    @property
    def crew_file(self) -> Path:
        """`crew.yaml`: roles, mode and limits (human-owned)."""
        return self.box / CREW_FILE

    @property
    def knowledge_dir(self) -> Path:
        """Shared markdown context given to every role."""
        return self.box / "knowledge"

    @property
    def graphs_dir(self) -> Path:
        """Work graphs for graph mode."""
        return self.box / "graphs"

    @property
    def runs_dir(self) -> Path:
        """One directory per run."""
        return self.box / "runs"

    @property
    def sessions_dir(self) -> Path:
        """Per-role session history."""
        return self.box / "sessions"

    def run_dir(self, run_id: str) -> Path:
        """The directory of one run."""
        return self.runs_dir / run_id


def _refuse_linked_box(root: Path) -> None:
    """A `.agent-box` that is a symlink is refused: a cloned repository could point it
    anywhere on the host (`~/.ssh`), and every file agentbox reads for the crew must lie
    inside the project's own `.agent-box/` directory."""
    box = root / PROJECT_DIR_NAME
    if box.is_symlink():
        raise ProjectNotFoundError(
            f"{box} is a symlink (to {box.resolve()}); agentbox does not follow it",
            f"make {PROJECT_DIR_NAME}/ a real directory of the project",
        )


def find_project(start: Path | None = None) -> ProjectPaths:
    """Walk up from `start` (default: cwd) to the nearest directory holding `.agent-box/`."""
    here = (start or Path.cwd()).absolute()
    for candidate in (here, *here.parents):
        if (candidate / PROJECT_DIR_NAME).is_dir():
            _refuse_linked_box(candidate)
            return ProjectPaths(candidate)
    raise ProjectNotFoundError(
        f"no {PROJECT_DIR_NAME}/ directory in {here} or any parent",
        "run `agentbox init` to create one here, or pass --project DIR",
    )


def project_at(directory: Path) -> ProjectPaths:
    """The project rooted at `directory` (as given by `--project`); it must hold `.agent-box/`."""
    root = directory.expanduser().absolute()
    if root.name == PROJECT_DIR_NAME:
        root = root.parent
    if not (root / PROJECT_DIR_NAME).is_dir():
        raise ProjectNotFoundError(
            f"{root} has no {PROJECT_DIR_NAME}/ directory",
            f"run `agentbox init` in {root} first",
        )
    _refuse_linked_box(root)
    return ProjectPaths(root)
