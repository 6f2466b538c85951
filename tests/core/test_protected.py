"""Protected paths as text: their shapes, the load-time refusals, and which write scopes reach into them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentbox.core.config.project import load_crew
from agentbox.core.errors import ConfigError
from agentbox.core.paths import ProjectPaths
from agentbox.core.sandbox import protected
from agentbox.core.sandbox.scopes import protected_problem


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
    from agentbox.core.config.models import Crew

    schema = json.dumps(Crew.model_json_schema())
    assert "Paths no role may write in any turn" in schema


def test_a_protected_pattern_matching_too_many_files_is_refused_with_a_hint(tmp_path: Path) -> None:
    from agentbox.core.errors import SandboxError
    from agentbox.core.sandbox import scopes

    (tmp_path / "snaps").mkdir()
    for index in range(scopes.MAX_SEALED_ENTRIES + 1):
        (tmp_path / "snaps" / f"{index}.snap").write_text("")
    with pytest.raises(SandboxError, match="too many to bind") as caught:
        scopes.plan(tmp_path, ["src/**"], tmp_path / "stage", ("snaps/*.snap",))
    assert "snaps/**" in str(caught.value.hint)


def test_a_turn_plan_binds_protected_paths_and_pins_their_parents(tmp_path: Path) -> None:
    from agentbox.core.sandbox import scopes

    (tmp_path / "src" / "contracts").mkdir(parents=True)
    (tmp_path / "SPEC.md").write_text("spec")
    plan = scopes.plan(tmp_path, None, None, ("src/contracts/**", "tests/acceptance/**", "SPEC.md"))
    assert set(plan.protected) == {tmp_path / "src" / "contracts", tmp_path / "tests" / "acceptance",
                                   tmp_path / "SPEC.md"}
    assert set(plan.pinned) == {tmp_path / "src", tmp_path / "tests"}
    assert (tmp_path / "tests" / "acceptance").is_dir()  # made, so it can be bound read-only
    scopes.finish(plan, tmp_path / "discarded")
    assert (tmp_path / "tests" / "acceptance").is_dir()  # and kept: another turn may be bound there


def test_pinned_parents_keep_their_access_and_come_before_what_is_bound_in_them() -> None:
    from agentbox.core.sandbox.bwrap import SandboxSpec, bwrap_argv

    root = Path("/work/proj")
    spec = SandboxSpec(project_root=root, writable=(root / "src", root / "tests" / "unit"),
                       protected=(root / "src" / "api" / "contracts", root / "tests" / "acceptance"),
                       pinned=(root / "src", root / "src" / "api", root / "tests"), extra_rw=(), homes=(),
                       hidden=(), ro_binds=())
    argv = bwrap_argv(spec, ["true"])
    pairs = [(argv[i], argv[i + 1]) for i in range(len(argv) - 1) if argv[i] in ("--bind", "--ro-bind")]
    assert ("--bind", str(root / "src" / "api")) in pairs  # inside a writable scope: still writable
    assert ("--ro-bind", str(root / "tests")) in pairs  # outside every scope: read-only, as it was
    assert pairs.count(("--bind", str(root / "src"))) == 1  # a scope is a mount point already
    order = [p for _, p in pairs]
    assert order.index(str(root / "tests")) < order.index(str(root / "tests" / "unit"))
    assert order.index(str(root / "src" / "api")) < order.index(str(root / "src" / "api" / "contracts"))
