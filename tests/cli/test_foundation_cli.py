"""The foundation commands through the real entry point, in a temp AGENT_BOX_HOME and project."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentbox import __version__
from agentbox.core.paths import example_project_dir
from tests.conftest import CliResult, bwrap_works, run_cli


def tree_hashes(root: Path) -> dict[str, str]:
    """Every path under `root` with the hash of its content ('dir' for directories)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(root.rglob("*"))
    }


def crew_text(project: Path) -> str:
    return (project / ".agent-box" / "crew.yaml").read_text(encoding="utf-8")


def role_json(project: Path) -> dict[str, Any]:
    result = run_cli("role", "list", "--json", cwd=project)
    assert result.code == 0, result.err
    return json.loads(result.out)


def assert_usage_error(result: CliResult, *fragments: str) -> None:
    """Exit 2, `error:` first on stderr, no traceback, and every fragment mentioned."""
    assert result.code == 2, (result.code, result.out, result.err)
    assert result.err.startswith("error: "), result.err
    assert "Traceback" not in result.err + result.out
    for fragment in fragments:
        assert fragment in result.err, f"{fragment!r} not in {result.err!r}"


# ----------------------------------------------------------------------------- entry points


def test_help_lists_the_commands() -> None:
    result = run_cli("--help")
    assert result.code == 0 and result.err == ""
    for command in ("init", "profile", "role", "schema", "doctor", "invoke", "run"):
        assert command in result.out
    assert "--project" in result.out


def test_version_from_module_and_console_script() -> None:
    result = run_cli("--version")
    assert (result.code, result.out.strip()) == (0, f"agentbox {__version__}")
    script = Path(sys.executable).parent / "agentbox"
    assert script.is_file(), "the console script is installed with the package (pip install -e .)"
    proc = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout.strip()) == (0, f"agentbox {__version__}")


# ----------------------------------------------------------------------------- init


def test_init_creates_the_project_and_lists_it(tmp_path: Path) -> None:
    result = run_cli("init", cwd=tmp_path)
    assert result.code == 0, result.err
    box = tmp_path / ".agent-box"
    example_files = sorted(
        str(p.relative_to(example_project_dir())) for p in example_project_dir().rglob("*") if p.is_file()
    )
    assert sorted(str(p.relative_to(box)) for p in box.rglob("*") if p.is_file()) == example_files
    assert str(box) in result.out
    for relative in example_files:
        assert f"  {relative}\n" in result.out
    assert (box / "crew.yaml").read_bytes() == (example_project_dir() / "crew.yaml").read_bytes()
    assert not list(tmp_path.glob(".agent-box.*")), "no staging dir left behind"


def test_init_refuses_a_second_time_and_changes_nothing(tmp_path: Path) -> None:
    assert run_cli("init", cwd=tmp_path).code == 0
    crew = tmp_path / ".agent-box" / "crew.yaml"
    crew.write_text(crew.read_text() + "# my edit\n")
    before = tree_hashes(tmp_path)
    result = run_cli("init", cwd=tmp_path)
    assert_usage_error(result, "already exists")
    assert result.out == ""
    assert tree_hashes(tmp_path) == before


def test_init_into_a_file_is_a_clean_error(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    assert_usage_error(run_cli("init", "afile", cwd=tmp_path), "is not a directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_init_in_a_git_repository_suggests_committing_the_crew(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "sub").mkdir()
    result = run_cli("init", "sub", cwd=tmp_path)
    assert result.code == 0, result.err
    assert "git add .agent-box && git commit" in result.out
    outside = tmp_path.parent / f"{tmp_path.name}-nogit"
    outside.mkdir()
    result = run_cli("init", cwd=outside)
    assert result.code == 0, result.err
    assert "git add" not in result.out


def test_init_into_a_named_directory(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    result = run_cli("init", str(target), cwd=tmp_path)
    assert result.code == 0, result.err
    assert (target / ".agent-box" / "crew.yaml").is_file()
    assert not (tmp_path / ".agent-box").exists()


# ----------------------------------------------------------------------------- profiles


def test_profile_add_list_show_rm(agent_box_home: Path, tmp_path: Path) -> None:
    added = run_cli("profile", "add", "alice", "--from", "claude", cwd=tmp_path)
    assert added.code == 0, added.err
    directory = agent_box_home / "profiles" / "alice"
    assert "created profile 'alice' (claude)" in added.out
    assert (directory / "profile.yaml").is_file() and (directory / "dot-claude").is_dir()

    table = run_cli("profile", "list", cwd=tmp_path)
    assert table.code == 0, table.err
    rows = {line.split()[0]: line.split() for line in table.out.splitlines()[1:]}
    assert rows["alice"][1:3] == ["claude", "user"]
    assert rows["scripted"][1:3] == ["scripted", "bundled"]

    listed = run_cli("profile", "list", "--json", cwd=tmp_path)
    data = json.loads(listed.out)
    by_name = {p["name"]: p for p in data["profiles"]}
    assert data["errors"] == []
    assert (by_name["alice"]["tool"], by_name["alice"]["source"]) == ("claude", "user")
    assert by_name["alice"]["config_dir"] == str(directory / "dot-claude")
    assert {"claude", "codex", "opencode", "hermes", "scripted"} <= set(by_name)

    shown = run_cli("profile", "show", "alice", cwd=tmp_path)
    assert shown.code == 0 and "claude" in shown.out and str(directory) in shown.out
    shown_json = json.loads(run_cli("profile", "show", "alice", "--json", cwd=tmp_path).out)
    assert shown_json["name"] == "alice" and shown_json["sandbox"] == {"network": True, "ro_binds": [], "rw_binds": []}

    again = run_cli("profile", "add", "alice", "--from", "codex", cwd=tmp_path)
    assert_usage_error(again, "'alice' already exists")

    refused = run_cli("profile", "rm", "alice", cwd=tmp_path, stdin="")
    assert_usage_error(refused, "without --yes")
    assert directory.is_dir()

    removed = run_cli("profile", "rm", "alice", "--yes", cwd=tmp_path)
    assert removed.code == 0, removed.err
    assert not directory.exists()
    assert_usage_error(run_cli("profile", "show", "alice", cwd=tmp_path), "unknown profile 'alice'", "hint: available profiles")


def test_profile_errors_are_clean(tmp_path: Path) -> None:
    assert_usage_error(run_cli("profile", "add", "bob", "--from", "gpt", cwd=tmp_path), "unknown template 'gpt'")
    assert_usage_error(run_cli("profile", "add", "bad name", "--from", "claude", cwd=tmp_path), "invalid profile name")
    assert_usage_error(run_cli("profile", "rm", "scripted", "--yes", cwd=tmp_path), "bundled template")
    assert_usage_error(run_cli("profile", "rm", "../x", "--yes", cwd=tmp_path), "invalid profile name")
    assert_usage_error(run_cli("profile", "adopt", "ghost", cwd=tmp_path), "no profile directory")


def test_profile_adopt_through_the_cli(agent_box_home: Path, tmp_path: Path) -> None:
    v1 = agent_box_home / "profiles" / "legacy"
    (v1 / "dot-codex").mkdir(parents=True)
    (v1 / "meta.yaml").write_text("agent_type: codex\n")
    listed = json.loads(run_cli("profile", "list", "--json", cwd=tmp_path).out)
    assert {"name": "legacy", "source": "v1"}.items() <= {p["name"]: p for p in listed["profiles"]}["legacy"].items()
    result = run_cli("profile", "adopt", "legacy", cwd=tmp_path)
    assert result.code == 0, result.err
    assert "no file moved" in result.out
    shown = json.loads(run_cli("profile", "show", "legacy", "--json", cwd=tmp_path).out)
    assert (shown["source"], shown["tool"]) == ("user", "codex")


# ----------------------------------------------------------------------------- roles


def test_role_add_list_rm(project: Path, agent_box_home: Path) -> None:
    assert run_cli("profile", "add", "alice", "--from", "claude", cwd=project).code == 0
    original = crew_text(project)

    added = run_cli("role", "add", "builder2", "--profile", "alice", cwd=project)
    assert added.code == 0, added.err
    roles = role_json(project)
    assert list(roles)[-1] == "builder2"
    assert roles["builder2"]["profile"] == "alice"
    assert roles["builder2"]["writes"] is None, "a plain writer may write the whole project"

    read_only = run_cli("role", "add", "auditor", "--profile", "scripted", "--read-only", cwd=project)
    assert read_only.code == 0, read_only.err
    scoped = run_cli(
        "role", "add", "docs", "--profile", "scripted", "--writes", "docs/**", "--writes", "README.md", cwd=project
    )
    assert scoped.code == 0, scoped.err
    roles = role_json(project)
    assert roles["auditor"]["writes"] == []
    assert roles["docs"]["writes"] == ["docs/**", "README.md"]
    assert list(roles)[-3:] == ["builder2", "auditor", "docs"]

    table = run_cli("role", "list", cwd=project)
    assert table.code == 0
    assert any(line.split()[:3] == ["auditor", "scripted", "read-only"] for line in table.out.splitlines())

    # every original line is still there, in order
    lines = crew_text(project).splitlines()
    assert [line for line in lines if line in original.splitlines()] == original.splitlines()

    for name in ("docs", "auditor", "builder2"):
        removed = run_cli("role", "rm", name, cwd=project)
        assert removed.code == 0, removed.err
    assert crew_text(project) == original


def test_role_add_with_an_unknown_profile_lists_the_available_ones(project: Path) -> None:
    assert run_cli("profile", "add", "alice", "--from", "codex", cwd=project).code == 0
    before = crew_text(project)
    result = run_cli("role", "add", "x", "--profile", "nope", cwd=project)
    assert_usage_error(result, "unknown profile 'nope'", "available profiles:", "alice", "scripted", "claude")
    assert crew_text(project) == before


def test_role_errors_are_clean(project: Path) -> None:
    before = crew_text(project)
    assert_usage_error(
        run_cli("role", "add", "y", "--profile", "scripted", "--read-only", "--writes", "src/**", cwd=project),
        "--read-only and --writes",
    )
    assert_usage_error(run_cli("role", "add", "lead", "--profile", "scripted", cwd=project), "already exists")
    assert_usage_error(run_cli("role", "add", "bad name", "--profile", "scripted", cwd=project), "invalid role name")
    assert_usage_error(run_cli("role", "rm", "ghost", cwd=project), "no role 'ghost'", "lead")
    assert crew_text(project) == before


# ----------------------------------------------------------------------------- schema


def resolve_ref(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref is None:
        return node
    target: Any = schema
    for part in ref.removeprefix("#/").split("/"):
        target = target[part]
    return target


def undocumented_fields(schema: dict[str, Any]) -> list[str]:
    """Every property (in the schema and its $defs) with no description, directly or via $ref."""
    missing = []
    objects = [("", schema), *((f"$defs.{k}", v) for k, v in schema.get("$defs", {}).items())]
    for where, obj in objects:
        for name, prop in obj.get("properties", {}).items():
            if "description" not in prop and "description" not in resolve_ref(schema, prop):
                missing.append(f"{where}.{name}")
    return missing


@pytest.mark.parametrize("kind", ["profile", "crew", "graph"])
def test_schema_is_json_with_described_fields(kind: str) -> None:
    result = run_cli("schema", kind)
    assert result.code == 0, result.err
    schema = json.loads(result.out)
    assert schema["type"] == "object" and schema["properties"]
    assert undocumented_fields(schema) == []
    if kind == "profile":
        tool = schema["$defs"]["Runtime"]["properties"]["tool"]
        assert set(tool["enum"]) == {"claude", "codex", "opencode", "hermes", "scripted"}
        assert schema["$defs"]["Runtime"]["additionalProperties"] is False
    if kind == "crew":
        assert "roles" in schema["required"]
        assert schema["additionalProperties"] is False


# ----------------------------------------------------------------------------- doctor


def doctor_json(project: Path) -> tuple[int, dict[str, Any], dict[str, dict[str, Any]]]:
    result = run_cli("doctor", "--json", cwd=project)
    assert "Traceback" not in result.err
    report = json.loads(result.out)
    return result.code, report, {check["name"]: check for check in report["checks"]}


def test_doctor_in_a_good_project(project: Path, agent_box_home: Path) -> None:
    code, report, checks = doctor_json(project)
    assert {"bwrap", "home", "profiles", "project", "claude", "codex", "opencode", "hermes"} <= set(checks)
    assert checks["bwrap"]["status"] in ("ok", "fail") and checks["bwrap"]["required"] is True
    assert checks["home"]["status"] == "ok"
    assert checks["project"]["status"] == "ok", checks["project"]
    assert str(project) in checks["project"]["detail"]
    assert report["environment"]["AGENT_BOX_HOME"] == str(agent_box_home)
    # healthy exactly when bubblewrap can create a sandbox here (it is the only other required check)
    assert report["healthy"] is bwrap_works()
    assert code == (0 if report["healthy"] else 1)


def test_doctor_fails_when_the_crew_references_a_missing_profile(project: Path) -> None:
    crew = project / ".agent-box" / "crew.yaml"
    text = crew.read_text()
    first_profile = next(line for line in text.splitlines() if line.strip().startswith("profile: "))
    crew.write_text(text.replace(first_profile, first_profile.split("profile:")[0] + "profile: ghost-profile", 1))

    code, report, checks = doctor_json(project)
    assert code == 1 and report["healthy"] is False
    assert checks["project"]["status"] == "fail"
    assert "unknown profile 'ghost-profile'" in checks["project"]["detail"]
    assert "available profiles" in (checks["project"]["hint"] or "")

    human = run_cli("doctor", cwd=project)
    assert human.code == 1
    assert "FAIL" in human.out and "ghost-profile" in human.out


def test_doctor_outside_a_project_is_not_a_failure_of_the_project(tmp_path: Path) -> None:
    _, _, checks = doctor_json(tmp_path)
    assert checks["project"]["status"] == "warn" and checks["project"]["required"] is False
    assert "agentbox init" in checks["project"]["hint"]


# ----------------------------------------------------------------------------- project discovery


def test_project_override_and_walking_up(project: Path, tmp_path: Path) -> None:
    deep = project / "src" / "pkg" / "deep"
    deep.mkdir(parents=True)
    from_subdir = run_cli("role", "list", "--json", cwd=deep)
    assert from_subdir.code == 0, from_subdir.err
    roles = json.loads(from_subdir.out)
    assert "lead" in roles

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    overridden = run_cli("--project", str(project), "role", "list", "--json", cwd=elsewhere)
    assert overridden.code == 0, overridden.err
    assert json.loads(overridden.out) == roles
    via_box = run_cli("--project", str(project / ".agent-box"), "role", "list", "--json", cwd=elsewhere)
    assert json.loads(via_box.out) == roles

    # --project wins over the project found by walking up
    other = tmp_path / "other"
    assert run_cli("init", str(other), cwd=tmp_path).code == 0
    added = run_cli("--project", str(other), "role", "add", "solo", "--profile", "scripted", cwd=deep)
    assert added.code == 0, added.err
    assert "solo" in json.loads(run_cli("role", "list", "--json", cwd=other).out)
    assert "solo" not in role_json(project)


def test_commands_outside_a_project_say_how_to_make_one(tmp_path: Path) -> None:
    for argv in (("role", "list"), ("role", "add", "x", "--profile", "scripted"), ("role", "rm", "x")):
        result = run_cli(*argv, cwd=tmp_path)
        assert_usage_error(result, "no .agent-box/ directory", "agentbox init")
        assert result.out == ""
    missing = tmp_path / "not-a-project"
    missing.mkdir()
    result = run_cli("--project", str(missing), "role", "list", cwd=tmp_path)
    assert_usage_error(result, f"{missing} has no .agent-box/ directory", "agentbox init")
