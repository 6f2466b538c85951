"""A repository's crew.yaml is untrusted; a profile cannot bind what holds others' secrets.

Scopes and paths are checked as text by the models (the corpus in tests/data/malformed
covers those lines and messages); this file covers what only the disk can tell: symlinks
that lead out of `.agent-box/`, files that are missing or are not regular files, a
symlinked `.agent-box`, and profile binds that depend on where home and AGENT_BOX_HOME are.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentbox.core import paths
from agentbox.core.config import profiles
from agentbox.core.config import project as project_mod
from agentbox.core.config.models import Role
from agentbox.core.errors import ConfigError, ProjectNotFoundError, UsageError
from agentbox.core.graph.load import resolve_graph
from agentbox.core.paths import ProjectPaths
from agentbox.core.sandbox.scopes import scope_problem as write_scope_problem
from tests.conftest import run_cli

SECRET = "BEGIN-FAKE-PRIVATE-KEY-7f3a"

# ----------------------------------------------------------------------------- scopes


@pytest.mark.parametrize(
    "scope", ["**", "*", "*.md", "src/**", "./src/", "docs/", ".", ".github/workflows/ci.yml", ".gitignore", "a.git/x"]
)
def test_scopes_inside_the_project_are_accepted(scope: str) -> None:
    assert write_scope_problem(scope) is None
    assert Role(profile="p", writes=[scope]).writes == [scope]


@pytest.mark.parametrize(
    "scope",
    ["", "   ", "/etc/x", "~/x", "../x", "src/../../x", "src/..", ".git", ".git/**", "./.git/hooks/pre-commit",
     ".agent-box/runs/**", ".hg/x", ".svn", "src/.git/config", ".GIT/hooks", "src/\nx", "a\x00b"],
)
def test_scopes_that_leave_the_project_or_name_metadata_are_refused(scope: str) -> None:
    assert write_scope_problem(scope) is not None
    with pytest.raises(ValueError):
        Role(profile="p", writes=[scope])


# ----------------------------------------------------------------------------- files the crew names


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A host file a hostile crew would like to send to the model provider."""
    path = tmp_path / "home" / ".ssh" / "id_rsa"
    path.parent.mkdir(parents=True)
    path.write_text(SECRET + "\n")
    return path


def _load_error(root: Path) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        project_mod.load_crew(ProjectPaths(root))
    return caught.value


def _instructions_line(root: Path) -> int:
    lines = (root / ".agent-box" / "crew.yaml").read_text().splitlines()
    return next(n for n, line in enumerate(lines, 1) if "instructions: roles/lead.md" in line)


def test_instructions_symlinked_out_of_agent_box_are_refused(project: Path, secret: Path) -> None:
    lead = project / ".agent-box" / "roles" / "lead.md"
    lead.unlink()
    lead.symlink_to(secret)
    error = _load_error(project)
    assert error.file == project / ".agent-box" / "crew.yaml"
    assert error.line == _instructions_line(project) and error.field == "roles.lead.instructions"
    assert "leads outside" in error.message and SECRET not in error.message


def test_instructions_in_a_directory_symlinked_out_are_refused(project: Path, secret: Path) -> None:
    roles = project / ".agent-box" / "roles"
    (secret.parent / "lead.md").write_text(SECRET)
    for file in roles.iterdir():
        file.unlink()
    roles.rmdir()
    roles.symlink_to(secret.parent)
    assert "leads outside" in _load_error(project).message


def test_a_symlink_that_stays_inside_agent_box_is_followed(project: Path) -> None:
    lead = project / ".agent-box" / "roles" / "lead.md"
    shared = project / ".agent-box" / "knowledge" / "lead-shared.txt"
    shared.write_text("You lead.\n")
    lead.unlink()
    lead.symlink_to("../knowledge/lead-shared.txt")
    proj = ProjectPaths(project)
    crew = project_mod.load_crew(proj).crew
    assert project_mod.role_instructions(proj, crew.roles["lead"]) == "You lead.\n"


def test_missing_instructions_are_an_error_at_load(project: Path) -> None:
    (project / ".agent-box" / "roles" / "lead.md").unlink()
    error = _load_error(project)
    assert error.line == _instructions_line(project)
    assert "instructions file roles/lead.md does not exist" in error.message


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_instructions_that_are_not_a_regular_file_are_refused(project: Path, kind: str) -> None:
    lead = project / ".agent-box" / "roles" / "lead.md"
    lead.unlink()
    if kind == "directory":
        lead.mkdir()
    else:
        os.mkfifo(lead)
    error = _load_error(project)
    assert error.field == "roles.lead.instructions"
    assert f"is a {'directory' if kind == 'directory' else 'FIFO'}, not a regular file" in error.message


def test_oversized_instructions_name_the_cap(project: Path) -> None:
    proj = ProjectPaths(project)
    (proj.box / "roles" / "lead.md").write_text("x" * (project_mod.TEXT_MAX_BYTES + 1))
    crew = project_mod.load_crew(proj).crew
    with pytest.raises(ConfigError) as caught:
        project_mod.role_instructions(proj, crew.roles["lead"])
    assert caught.value.file == proj.box / "roles" / "lead.md"
    assert f"{project_mod.TEXT_MAX_BYTES:,} allowed" in caught.value.message


def test_graph_file_symlinked_out_is_refused(project: Path, secret: Path) -> None:
    graph = project / ".agent-box" / "graphs" / "build.yaml"
    graph.unlink()
    graph.symlink_to(secret)
    error = _load_error(project)
    assert error.field == "graph.file" and "leads outside" in error.message
    with pytest.raises(ConfigError, match="leads outside"):
        resolve_graph("build", ProjectPaths(project))


def test_missing_graph_file_is_an_error_at_load(project: Path) -> None:
    (project / ".agent-box" / "graphs" / "build.yaml").unlink()
    error = _load_error(project)
    assert error.field == "graph.file" and "graph file graphs/build.yaml does not exist" in error.message


def test_crew_yaml_symlinked_out_is_refused(project: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "crew.yaml"
    crew = project / ".agent-box" / "crew.yaml"
    elsewhere.write_text(crew.read_text())
    crew.unlink()
    crew.symlink_to(elsewhere)
    error = _load_error(project)
    assert error.file == crew and error.line == 1 and "leads outside" in error.message


def test_knowledge_symlinked_out_is_refused_and_doctor_reports_it(project: Path, secret: Path) -> None:
    proj = ProjectPaths(project)
    (proj.knowledge_dir / "notes.md").symlink_to(secret)
    with pytest.raises(ConfigError, match="leads outside") as caught:
        project_mod.knowledge_text(proj)
    assert caught.value.file == proj.knowledge_dir / "notes.md"
    problems = project_mod.check_references(proj, project_mod.load_crew(proj))
    assert any("leads outside" in p.message for p in problems)
    result = run_cli("invoke", "lead", "hi", cwd=project)
    assert result.code == 2 and f"error: {proj.knowledge_dir / 'notes.md'}:1: leads outside" in result.err
    assert SECRET not in result.out + result.err


def test_knowledge_dir_symlinked_out_is_refused(project: Path, secret: Path) -> None:
    proj = ProjectPaths(project)
    (secret.parent / "notes.md").write_text(SECRET)
    for file in proj.knowledge_dir.iterdir():
        file.unlink()
    proj.knowledge_dir.rmdir()
    proj.knowledge_dir.symlink_to(secret.parent)
    with pytest.raises(ConfigError, match="leads outside"):
        project_mod.knowledge_text(proj)


def test_a_symlinked_agent_box_is_not_a_project(tmp_path: Path, project: Path) -> None:
    clone = tmp_path / "clone"
    clone.mkdir()
    (clone / ".agent-box").symlink_to(project / ".agent-box")
    with pytest.raises(ProjectNotFoundError, match="is a symlink"):
        paths.find_project(clone)
    with pytest.raises(ProjectNotFoundError, match="is a symlink"):
        paths.project_at(clone)
    result = run_cli("role", "list", cwd=clone)
    assert result.code == 2 and "is a symlink" in result.err


def test_role_add_refuses_missing_instructions(project: Path) -> None:
    proj = ProjectPaths(project)
    before = proj.crew_file.read_text()
    with pytest.raises(UsageError, match="does not exist"):
        project_mod.add_role(proj, "extra", "scripted", instructions="roles/nope.md")
    assert proj.crew_file.read_text() == before


def test_invoke_with_instructions_pointing_at_a_secret_never_reads_it(project: Path, secret: Path) -> None:
    lead = project / ".agent-box" / "roles" / "lead.md"
    lead.unlink()
    lead.symlink_to(secret)
    result = run_cli("invoke", "lead", "hi", cwd=project)
    assert result.code == 2 and "roles.lead.instructions" in result.err
    assert SECRET not in result.out + result.err


# ----------------------------------------------------------------------------- profiles


def _profile(home: Path, name: str, extra: str) -> Path:
    directory = home / "profiles" / name
    directory.mkdir(parents=True, exist_ok=True)
    file = directory / "profile.yaml"
    file.write_text(f"name: {name}\nruntime: {{tool: scripted}}\n{extra}")
    return file


@pytest.mark.parametrize(
    "extra",
    [
        "resources: {config_dir: state/dot-scripted}\n",
        "sandbox: {ro_binds: [/opt/tool, ~/.local/share/tool], rw_binds: [/var/cache/tool]}\n",
    ],
)
def test_profile_binds_clear_of_others_are_accepted(agent_box_home: Path, extra: str) -> None:
    _profile(agent_box_home, "mine", extra)
    assert profiles.resolve("mine").name == "mine"


@pytest.mark.parametrize(
    ("extra", "field", "words"),
    [
        ("resources: {config_dir: /}\n", "resources.config_dir", "root of the host filesystem"),
        ("resources: {config_dir: ../other}\n", "resources.config_dir", "another profile's directory"),
        ("resources: {config_dir: ../../sessions}\n", "resources.config_dir", "outside this profile's directory"),
        ("sandbox: {ro_binds: [\"~\"]}\n", "sandbox.ro_binds.0", "your home directory"),
        ("sandbox: {ro_binds: [@USERS@]}\n", "sandbox.ro_binds.0", "contains your home directory"),
        ("sandbox: {rw_binds: [@BOX@]}\n", "sandbox.rw_binds.0", "contains AGENT_BOX_HOME"),
        ("sandbox: {rw_binds: [@BOX@/..]}\n", "sandbox.rw_binds.0", " contains "),
        ("sandbox: {rw_binds: [@BOX@/profiles/other/dot-claude]}\n", "sandbox.rw_binds.0", "another profile's"),
        ("sandbox: {rw_binds: [@BOX@/profiles/mine]}\n", "sandbox.rw_binds.0", "own directory"),
        ("sandbox: {ro_binds: [@BOX@/bundled/claude]}\n", "sandbox.ro_binds.0", "another profile's"),
    ],
)
def test_profile_binds_that_expose_others_are_refused(
    agent_box_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: str, field: str, words: str
) -> None:
    users = tmp_path / "users"
    (users / "me").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(users / "me"))
    extra = extra.replace("@USERS@", str(users)).replace("@BOX@", str(agent_box_home))
    _profile(agent_box_home, "other", "")
    file = _profile(agent_box_home, "mine", extra)
    with pytest.raises(ConfigError) as caught:
        profiles.resolve("mine")
    error = caught.value
    assert error.file == file and error.line == 3 and error.field == field
    assert words in error.message
    errors: list[ConfigError] = []
    names = [info.name for info in profiles.all_profiles(errors)]
    assert "mine" not in names and "other" in names and errors[0].field == field
