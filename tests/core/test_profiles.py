"""Profiles: bundled templates, user profiles, `add`/`remove`, and agent-box v1 compatibility."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from pathlib import Path

import pytest

from agentbox.core import paths
from agentbox.core.config import profiles
from agentbox.core.config.models import Profile, load_model
from agentbox.core.config.profiles import DEFAULT_CONFIG_DIR
from agentbox.core.errors import AlreadyExistsError, ConfigError, NotFoundError, UsageError

TEMPLATE_DIRS = sorted(p for p in paths.bundled_profiles_dir().iterdir() if p.is_dir())
TEMPLATE_NAMES = [p.name for p in TEMPLATE_DIRS]


def test_every_tool_has_a_bundled_template() -> None:
    tools = {profiles.resolve(name).tool for name in TEMPLATE_NAMES}
    assert tools == {"claude", "codex", "opencode", "hermes", "scripted"}


@pytest.mark.parametrize("template", TEMPLATE_DIRS, ids=TEMPLATE_NAMES)
def test_bundled_template_loads(template: Path) -> None:
    profile = load_model(Profile, template / "profile.yaml")
    assert profile.name == template.name
    assert profile.display_name and profile.description
    info = profiles.resolve(template.name)
    assert info.source == "bundled"
    assert info.directory == template
    # a bundled profile used directly keeps its writable state out of the repository
    assert info.state_dir == paths.agent_box_home() / "bundled" / template.name
    if info.profile.runtime.scenario:
        assert info.scenario_path is not None and info.scenario_path.is_file()


def test_bundled_templates_are_listed(agent_box_home: Path) -> None:
    listed = {info.name: info.source for info in profiles.all_profiles()}
    assert listed == dict.fromkeys(TEMPLATE_NAMES, "bundled")
    assert profiles.available_names() == sorted(TEMPLATE_NAMES)


def test_user_profile_wins_over_bundled_of_the_same_name(agent_box_home: Path) -> None:
    directory = agent_box_home / "profiles" / "claude"
    directory.mkdir(parents=True)
    (directory / "profile.yaml").write_text(
        "name: claude\ndisplay_name: My Claude\nruntime:\n  tool: claude\n  model: opus\n"
    )
    info = profiles.resolve("claude")
    assert (info.source, info.directory, info.profile.display_name) == ("user", directory, "My Claude")
    assert info.profile.runtime.model == "opus"
    listed = [(i.name, i.source) for i in profiles.all_profiles()]
    assert listed.count(("claude", "user")) == 1
    assert ("claude", "bundled") not in listed


# ----------------------------------------------------------------------------- add / remove


@pytest.mark.parametrize("template", TEMPLATE_NAMES)
def test_add_from_each_template(template: str, agent_box_home: Path) -> None:
    info = profiles.add("alice", template)
    target = agent_box_home / "profiles" / "alice"
    assert (info.name, info.source, info.directory) == ("alice", "user", target)
    tool = info.tool
    assert (target / DEFAULT_CONFIG_DIR[tool]).is_dir(), "the tool's empty config dir (v1 layout)"
    assert info.config_dir == target / DEFAULT_CONFIG_DIR[tool]
    text = (target / "profile.yaml").read_text()
    template_text = (paths.bundled_profiles_dir() / template / "profile.yaml").read_text()
    # only the name line changes: the template's comments, order and values stay as written
    expected_lines = ["name: alice" if line == f"name: {template}" else line for line in template_text.splitlines()]
    assert expected_lines != template_text.splitlines()
    assert text.splitlines() == expected_lines
    assert any(line.lstrip().startswith("#") for line in expected_lines)
    assert profiles.resolve("alice").source == "user"
    assert not list((agent_box_home / "profiles").glob(".*")), "no staging dir left behind"
    if tool == "claude":
        assert (target / "dot-claude.json").read_text() == "{}\n"


def test_add_refuses_an_existing_profile(agent_box_home: Path) -> None:
    profiles.add("alice", "claude")
    marker = agent_box_home / "profiles" / "alice" / "dot-claude" / "credentials.json"
    marker.write_text("secret")
    with pytest.raises(AlreadyExistsError, match="'alice' already exists"):
        profiles.add("alice", "codex")
    assert marker.read_text() == "secret"
    assert profiles.resolve("alice").tool == "claude"


def test_add_refuses_an_unknown_template(agent_box_home: Path) -> None:
    with pytest.raises(NotFoundError, match="unknown template 'gpt'") as caught:
        profiles.add("alice", "gpt")
    assert caught.value.hint is not None and "claude" in caught.value.hint
    with pytest.raises(NotFoundError):
        profiles.add("alice", "../profiles/claude")
    assert not (agent_box_home / "profiles" / "alice").exists()


@pytest.mark.parametrize("name", ["bad name", "../escape", "-dash", "", "a/b", "x" * 65])
def test_add_refuses_a_bad_name(name: str, agent_box_home: Path) -> None:
    with pytest.raises(UsageError, match="invalid profile name"):
        profiles.add(name, "claude")
    assert not (agent_box_home / "profiles").exists() or not any((agent_box_home / "profiles").iterdir())


def test_remove_deletes_the_user_profile(agent_box_home: Path) -> None:
    profiles.add("alice", "codex")
    removed = profiles.remove("alice")
    assert removed == agent_box_home / "profiles" / "alice"
    assert not removed.exists()
    assert not list((agent_box_home / "profiles").iterdir())
    with pytest.raises(NotFoundError):
        profiles.resolve("alice")


def test_remove_refuses_bundled_unknown_and_paths(agent_box_home: Path) -> None:
    with pytest.raises(UsageError, match="bundled template"):
        profiles.remove("scripted")
    with pytest.raises(NotFoundError, match="no such profile 'ghost'"):
        profiles.remove("ghost")
    (agent_box_home / "keep").mkdir()
    (agent_box_home / "profiles").mkdir()
    for name in ("..", "../keep"):
        with pytest.raises(UsageError, match="invalid profile name"):
            profiles.remove(name)
    assert (agent_box_home / "keep").is_dir()
    assert paths.bundled_profiles_dir().joinpath("scripted", "profile.yaml").is_file()


def test_resolve_unknown_lists_the_available_profiles() -> None:
    with pytest.raises(NotFoundError, match="unknown profile 'nope'") as caught:
        profiles.resolve("nope")
    assert caught.value.hint is not None
    for name in TEMPLATE_NAMES:
        assert name in caught.value.hint


# ----------------------------------------------------------------------------- v1


def tree_fingerprint(root: Path) -> dict[str, tuple[str, int, int]]:
    """Every file and directory under `root`: content hash, mode and mtime."""
    result: dict[str, tuple[str, int, int]] = {}
    for path in sorted(root.rglob("*")):
        stat = path.stat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
        mtime = stat.st_mtime_ns if path.is_file() else 0  # a dir changes when a file is added
        result[str(path.relative_to(root))] = (digest, stat.st_mode, mtime)
    return result


@pytest.fixture
def v1_home(agent_box_home: Path) -> Path:
    """An AGENT_BOX_HOME as agent-box v1 left it.

    - `old-claude/`: no profile.yaml, the tool named by `meta.yaml` (agent_type);
    - `old-codex/`: no profile.yaml and no meta.yaml, known only from `agent-box.db`;
    - `mystery/`: nothing tells its tool.
    """
    root = agent_box_home / "profiles"
    claude = root / "old-claude"
    (claude / "dot-claude" / "projects").mkdir(parents=True)
    (claude / "dot-claude" / ".credentials.json").write_text('{"token": "t"}\n')
    (claude / "dot-claude" / "CLAUDE.md").write_text("# house rules\n")
    (claude / "dot-claude.json").write_text('{"numStartups": 3}\n')
    (claude / "meta.yaml").write_text(
        "agent_type: claude-code\ndisplay_name: Old Claude\ndescription: from v1\n"
    )
    os.chmod(claude / "dot-claude" / ".credentials.json", 0o600)

    codex = root / "old-codex"
    codex.mkdir(parents=True)
    (codex / "notes.txt").write_text("codex home lives elsewhere in v1\n")

    (root / "mystery").mkdir()
    (root / "mystery" / "README").write_text("?\n")

    with sqlite3.connect(agent_box_home / "agent-box.db") as conn:
        conn.execute(
            "CREATE TABLE profiles (name TEXT PRIMARY KEY, agent_type TEXT, display_name TEXT, description TEXT)"
        )
        conn.execute(
            "INSERT INTO profiles VALUES ('old-codex', 'codex', 'Old Codex', 'known from the db')"
        )
        conn.execute("INSERT INTO profiles VALUES ('gone', 'claude', 'Gone', 'no directory')")
    conn.close()
    return agent_box_home


def test_v1_profiles_are_listed(v1_home: Path) -> None:
    listed = {info.name: info for info in profiles.all_profiles()}
    assert listed["old-claude"].source == "v1"
    assert listed["old-claude"].tool == "claude"
    assert listed["old-claude"].profile.display_name == "Old Claude"
    assert listed["old-codex"].source == "v1"
    assert listed["old-codex"].tool == "codex"
    assert listed["old-codex"].profile.description == "known from the db"
    assert "mystery" not in listed, "a dir whose tool cannot be known is not usable"
    assert "gone" not in listed, "a db row without a directory is not a profile"


def test_v1_profiles_are_resolvable(v1_home: Path) -> None:
    claude = profiles.resolve("old-claude")
    assert (claude.source, claude.tool) == ("v1", "claude")
    assert claude.config_dir == v1_home / "profiles" / "old-claude" / "dot-claude"
    assert claude.state_dir == claude.directory == v1_home / "profiles" / "old-claude"
    codex = profiles.resolve("old-codex")
    assert (codex.source, codex.tool, codex.profile.display_name) == ("v1", "codex", "Old Codex")
    with pytest.raises(NotFoundError):
        profiles.resolve("mystery")


def test_v1_db_is_what_names_the_db_only_profile(v1_home: Path) -> None:
    (v1_home / "agent-box.db").unlink()
    assert "old-codex" not in {info.name for info in profiles.all_profiles()}
    assert profiles.resolve("old-claude").tool == "claude"


@pytest.mark.parametrize("name", ["old-claude", "old-codex"])
def test_adopt_writes_profile_yaml_and_touches_nothing_else(name: str, v1_home: Path) -> None:
    before = tree_fingerprint(v1_home)
    written = profiles.adopt(name)

    directory = v1_home / "profiles" / name
    assert written == directory / "profile.yaml"
    after = tree_fingerprint(v1_home)
    new_entries = set(after) - set(before)
    assert new_entries == {f"profiles/{name}/profile.yaml"}
    assert {key: after[key] for key in before} == before, "no other file moved or changed"

    profile = load_model(Profile, written)
    expected_tool = "claude" if name == "old-claude" else "codex"
    assert (profile.name, profile.runtime.tool) == (name, expected_tool)
    info = profiles.resolve(name)
    assert (info.source, info.directory, info.tool) == ("user", directory, expected_tool)
    assert info.profile.display_name == ("Old Claude" if name == "old-claude" else "Old Codex")


def test_adopt_refuses_twice_unknown_tool_and_missing_dir(v1_home: Path) -> None:
    profiles.adopt("old-claude")
    with pytest.raises(AlreadyExistsError, match="already has a profile.yaml"):
        profiles.adopt("old-claude")
    before = tree_fingerprint(v1_home)
    with pytest.raises(UsageError, match="cannot tell which tool the v1 profile 'mystery' uses") as caught:
        profiles.adopt("mystery")
    assert caught.value.hint is not None
    assert "agent_type" in caught.value.hint and "meta.yaml" in caught.value.hint
    with pytest.raises(NotFoundError):
        profiles.adopt("nowhere")
    assert tree_fingerprint(v1_home) == before


def test_v1_dir_with_an_invalid_name_is_reported_not_crashing(v1_home: Path) -> None:
    bad = v1_home / "profiles" / "my profile"
    bad.mkdir()
    (bad / "meta.yaml").write_text("agent_type: claude\n")
    errors: list[ConfigError] = []
    names = [info.name for info in profiles.all_profiles(errors)]
    assert "old-claude" in names and "my profile" not in names
    assert len(errors) == 1 and "'my profile' is not a valid profile name" in errors[0].message


def test_unreadable_v1_db_is_ignored(v1_home: Path) -> None:
    (v1_home / "agent-box.db").write_bytes(b"not a sqlite file at all")
    names = {info.name for info in profiles.all_profiles()}
    assert "old-claude" in names and "old-codex" not in names


@pytest.mark.parametrize("kind", ["device", "fifo", "directory", "huge", "missing"])
def test_a_scenario_must_be_a_bounded_regular_file(agent_box_home: Path, project: Path, kind: str) -> None:
    from tests.conftest import run_cli

    directory = agent_box_home / "profiles" / "scripty"
    directory.mkdir(parents=True)
    scenario = {"device": "/dev/zero", "fifo": "fifo.json", "directory": ".", "huge": "huge.json",
                "missing": "missing.json"}[kind]
    if kind == "fifo":
        os.mkfifo(directory / "fifo.json")
    elif kind == "huge":
        with open(directory / "huge.json", "wb") as handle:  # sparse: no disk spent
            handle.truncate(profiles.SCENARIO_MAX_BYTES + 1)
    (directory / "profile.yaml").write_text(f"name: scripty\nruntime:\n  tool: scripted\n  scenario: {scenario}\n")
    with pytest.raises(ConfigError) as refused:
        profiles.resolve("scripty")
    assert refused.value.file == directory / "profile.yaml" and refused.value.line == 4
    assert refused.value.field == "runtime.scenario"
    shown = run_cli("profile", "show", "scripty", cwd=project)
    assert shown.code == 2 and "profile.yaml:4" in shown.err and "runtime.scenario" in shown.err
    assert "Traceback" not in shown.err
    doctor = run_cli("doctor", "--json", cwd=project)
    checks = {c["name"]: c for c in json.loads(doctor.out)["checks"]}
    assert checks["profiles"]["status"] != "ok" and "runtime.scenario" in checks["profiles"]["detail"]
