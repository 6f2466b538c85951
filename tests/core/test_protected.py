"""Protected paths as text: their shapes, the load-time refusals, and which write scopes reach into them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentbox.core import protected
from agentbox.core.errors import ConfigError
from agentbox.core.paths import ProjectPaths
from agentbox.core.project import load_crew
from agentbox.core.scopes import protected_problem


@pytest.mark.parametrize(("write", "guarded", "expected"), [
    ("src/**", "src/contracts/**", True),            # a broader scope reaches in
    ("src/contracts/v2/**", "src/contracts/**", True),  # a scope inside it
    ("src/contracts/api.yaml", "src/contracts/**", True),
    ("src/app/**", "src/contracts/**", False),
    ("**", "tests/acceptance/**", True),
    ("tests/unit/**", "tests/acceptance/**", False),
    ("tests/*.py", "tests/acceptance/**", False),     # files of tests/ only, not of its subdirectories
    ("*.md", "SPEC.md", True),
    ("README.md", "SPEC.md", False),
    ("docs/*.md", "docs/*.lock", True),               # two patterns of one dir: cannot tell, refused
    ("docs/a.md", "docs/*.lock", False),
    ("docs/x.lock", "docs/*.lock", True),
    ("docs/**", "docs/*.lock", True),
    ("src/**/*.py", "src/contracts/**", True),       # finer than a mount: counts as its tree
    ("lib/**", "SPEC.md", False),
])
def test_which_write_scopes_reach_a_protected_path(write: str, guarded: str, expected: bool) -> None:
    assert protected.overlaps(write, guarded) is expected


@pytest.mark.parametrize(("pattern", "problem"), [
    ("src/**/*.py", "finer than the sandbox can enforce"),
    ("../x/**", "uses '..'"),
    ("/etc/**", "is absolute"),
    (".git/hooks/**", "names .git/"),
    ("", "an empty protected path"),
])
def test_protected_paths_the_sandbox_cannot_enforce_are_refused(pattern: str, problem: str) -> None:
    assert problem in (protected_problem(pattern) or "")


@pytest.mark.parametrize("pattern", ["contracts/**", "tests/acceptance/", "SPEC.md", "docs/*.lock", "**"])
def test_every_shape_a_mount_can_enforce_is_accepted(pattern: str) -> None:
    assert protected_problem(pattern) is None


def test_crew_yaml_names_the_line_of_a_bad_protected_path(project: Path) -> None:
    crew = project / ".agent-box" / "crew.yaml"
    crew.write_text("mode: hierarchical\nroles:\n  lead: {profile: claude}\nprotected:\n  - contracts/**\n"
                    "  - src/**/*.py\n")
    with pytest.raises(ConfigError) as caught:
        load_crew(ProjectPaths(project))
    assert caught.value.line == 6 and caught.value.field == "protected.1"
    assert "finer than the sandbox can enforce" in caught.value.message


def test_the_schema_documents_protected() -> None:
    from agentbox.core.config import Crew

    schema = json.dumps(Crew.model_json_schema())
    assert "Paths no role may write in any turn" in schema
