"""The tool's config home in a turn: which parts of a profile a turn may write, and what of
claude's rewritten global config goes back into the profile (the merge is pure; the plan
and its finish run on real files)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agentbox.core.errors import SandboxError
from agentbox.core.runtimes.base import HomeBind
from agentbox.core.runtimes.claude import TURN_HOME, ClaudeAdapter, kept_state
from agentbox.core.runtimes.codex import CodexAdapter
from agentbox.core.sandbox import tool_homes

HOME = Path("/home/u")


def _json(raw: bytes | None) -> object:
    assert raw is not None
    return json.loads(raw)


# ----------------------------------------------------------------------------- claude's merge (pure)

USER_SERVER = {"mine": {"command": "my-server"}}
PLANTED = {"planted": {"command": "sh", "args": ["-c", "touch /x"]}}


def test_claude_global_config_keeps_the_persons_file_and_only_bookkeeping_of_the_turn() -> None:
    profile = json.dumps({"mcpServers": USER_SERVER, "theme": "dark", "numStartups": 1}).encode()
    turn = json.dumps({
        "mcpServers": PLANTED, "theme": "light", "numStartups": 2, "userID": "u-1",
        "projects": {"/work/proj": {"mcpServers": PLANTED, "allowedTools": ["*"], "hasTrustDialogAccepted": True}},
        "awsAuthRefresh": "touch /x", "customApiKeyResponses": {"approved": ["k"]}, "hasCompletedOnboarding": True,
    }).encode()
    assert _json(kept_state(".claude.json", profile, turn)) == {
        "mcpServers": USER_SERVER, "theme": "dark", "numStartups": 2, "userID": "u-1", "hasCompletedOnboarding": True}


@pytest.mark.parametrize("turn", [
    {"numStartups": "2"}, {"numStartups": True}, {"hasCompletedOnboarding": 1}, {"userID": ["x"]},
    {"mcpServers": PLANTED}, {}, [], "not json", None,
])
def test_claude_global_config_is_left_alone_when_the_turn_kept_nothing_valid(turn: object) -> None:
    profile = json.dumps({"numStartups": 1}).encode()
    raw = None if turn is None else (turn.encode() if isinstance(turn, str) else json.dumps(turn).encode())
    assert kept_state(".claude.json", profile, raw) is None


def test_claude_global_config_is_made_with_bookkeeping_only_when_the_profile_had_none() -> None:
    turn = json.dumps({"numStartups": 1, "mcpServers": PLANTED, "firstStartTime": "2026-12-01"}).encode()
    assert _json(kept_state(".claude.json", None, turn)) == {"numStartups": 1, "firstStartTime": "2026-12-01"}
    assert kept_state(".claude.json", None, b"{}") is None


def test_a_global_config_agentbox_cannot_read_is_the_persons_to_fix() -> None:
    assert kept_state(".claude.json", b"{broken", json.dumps({"numStartups": 3}).encode()) is None


def test_claude_login_refreshed_in_a_turn_goes_back_only_over_an_existing_login() -> None:
    before = {"claudeAiOauth": {"accessToken": "a1", "refreshToken": "r1"}}
    after = {"claudeAiOauth": {"accessToken": "a2", "refreshToken": "r2"}, "other": {"x": 1}}
    assert _json(kept_state(".credentials.json", json.dumps(before).encode(), json.dumps(after).encode())) == {
        "claudeAiOauth": after["claudeAiOauth"]}
    assert kept_state(".credentials.json", None, json.dumps(after).encode()) is None  # no login planted
    assert kept_state(".credentials.json", json.dumps(before).encode(), json.dumps(before).encode()) is None
    assert kept_state(".credentials.json", json.dumps(before).encode(), b'{"claudeAiOauth": "x"}') is None


# ----------------------------------------------------------------------------- the plan (real files)


@pytest.fixture
def claude_profile(tmp_path: Path) -> tuple[Path, HomeBind]:
    state = tmp_path / "profiles" / "p"
    config = state / "dot-claude"
    config.mkdir(parents=True)
    (config / ".claude.json").write_text(json.dumps({"mcpServers": USER_SERVER, "numStartups": 4}))
    (config / "local").mkdir()  # something agentbox does not know: seen, never changed
    (config / "history.jsonl").write_text("{}\n")
    os.symlink("/etc", config / "link")
    return state, HomeBind(config, HOME / ".claude")


def test_claude_turn_home_binds_state_read_write_and_everything_else_of_the_profile_read_only(
        claude_profile: tuple[Path, HomeBind], tmp_path: Path) -> None:
    state, bind = claude_profile
    plan = tool_homes.plan(ClaudeAdapter(), [bind], state, tmp_path / "turn.home", interactive=False)
    view = plan.turn_dirs[0]
    assert plan.binds[0] == HomeBind(view, bind.target)  # the per-turn home first, state dirs inside it
    assert plan.binds[1:] == [HomeBind(bind.source / d, bind.target / d) for d in TURN_HOME.state]
    read_only = dict(plan.read_only)
    for name in ("settings.json", "CLAUDE.md", "agents", "plugins", "skills", "local", "history.jsonl"):
        assert read_only[bind.source / name] == bind.target / name, name
    assert bind.source / "link" not in read_only and bind.source / ".claude.json" not in read_only
    assert not (bind.source / ".config.json").exists()  # never made: claude would prefer it
    assert json.loads((view / ".claude.json").read_text())["mcpServers"] == USER_SERVER
    assert not (view / ".credentials.json").exists()


def test_after_a_claude_turn_only_bookkeeping_goes_back_and_the_turn_home_is_dropped(
        claude_profile: tuple[Path, HomeBind], tmp_path: Path) -> None:
    state, bind = claude_profile
    plan = tool_homes.plan(ClaudeAdapter(), [bind], state, tmp_path / "turn.home", interactive=False)
    view = plan.turn_dirs[0]
    copy = json.loads((view / ".claude.json").read_text())
    (view / ".claude.json").write_text(json.dumps({**copy, "mcpServers": PLANTED, "numStartups": 5}))
    (view / ".config.json").write_text(json.dumps({"mcpServers": PLANTED}))  # what the turn made beside it
    tool_homes.finish(plan)
    tool_homes.remove(plan)
    assert json.loads((bind.source / ".claude.json").read_text()) == {"mcpServers": USER_SERVER, "numStartups": 5}
    assert not view.exists() and not (bind.source / ".config.json").exists()
    assert oct((bind.source / ".claude.json").stat().st_mode & 0o777) == "0o600"


def test_a_turn_that_replaced_its_copy_with_a_symlink_changes_nothing(
        claude_profile: tuple[Path, HomeBind], tmp_path: Path) -> None:
    state, bind = claude_profile
    before = (bind.source / ".claude.json").read_bytes()
    plan = tool_homes.plan(ClaudeAdapter(), [bind], state, tmp_path / "turn.home", interactive=False)
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"numStartups": 99}))
    (plan.turn_dirs[0] / ".claude.json").unlink()
    os.symlink(secret, plan.turn_dirs[0] / ".claude.json")
    tool_homes.finish(plan)
    assert (bind.source / ".claude.json").read_bytes() == before


def test_a_profile_global_config_that_is_a_symlink_stops_the_turn(
        claude_profile: tuple[Path, HomeBind], tmp_path: Path) -> None:
    state, bind = claude_profile
    (bind.source / ".claude.json").unlink()
    os.symlink(tmp_path / "elsewhere.json", bind.source / ".claude.json")
    (tmp_path / "elsewhere.json").write_text("{}")
    with pytest.raises(SandboxError, match="cannot be copied"):
        tool_homes.plan(ClaudeAdapter(), [bind], state, tmp_path / "turn.home", interactive=False)


def test_other_tools_get_their_config_dir_with_what_they_load_read_only(tmp_path: Path) -> None:
    state = tmp_path / "p"
    bind = HomeBind(state / "dot-codex", HOME / ".codex")
    plan = tool_homes.plan(CodexAdapter(), [bind], state, tmp_path / "turn.home", interactive=False)
    assert plan.binds == [bind] and not plan.turn_dirs and not plan.copies
    read_only = dict(plan.read_only)
    for name in ("config.toml", "hooks.json", "AGENTS.md", "skills", "hooks", "memories", "rules"):
        assert read_only[bind.source / name] == bind.target / name, name
    assert (bind.source / "skills").is_dir() and (bind.source / "hooks.json").read_text() == "{}\n"


@pytest.mark.parametrize("adapter", [ClaudeAdapter(), CodexAdapter()])
def test_a_person_at_the_keyboard_gets_the_config_dir_as_it_is(adapter: object, tmp_path: Path) -> None:
    state = tmp_path / "p"
    bind = HomeBind(state / "dot-x", HOME / ".x")
    plan = tool_homes.plan(adapter, [bind], state, tmp_path / "turn.home", interactive=True)  # type: ignore[arg-type]
    assert plan.binds == [bind] and not plan.read_only and not plan.turn_dirs


def test_the_parents_of_a_nested_read_only_entry_are_pinned_so_no_turn_can_move_them(tmp_path: Path) -> None:
    from agentbox.core.runtimes.opencode import PRIVATE_DIR, OpencodeAdapter

    state = tmp_path / "p"
    bind = HomeBind(state / "dot-opencode", HOME / ".opencode")
    plan = tool_homes.plan(OpencodeAdapter(), [bind], state, tmp_path / "turn.home", interactive=False)
    snapshot = bind.source / PRIVATE_DIR / "data" / "opencode" / "snapshot"
    assert dict(plan.read_only)[snapshot] == bind.target / PRIVATE_DIR / "data" / "opencode" / "snapshot"
    pins = [(b.source, b.target) for b in plan.binds[1:]]
    parents = [bind.source / PRIVATE_DIR, bind.source / PRIVATE_DIR / "data", bind.source / PRIVATE_DIR / "data" / "opencode"]
    assert [source for source, _ in pins if source in parents] == parents  # shallowest first, after the home
    assert all(target == bind.target / source.relative_to(bind.source) for source, target in pins)


@pytest.mark.bwrap
def test_a_pinned_parent_cannot_be_renamed_inside_the_sandbox(tmp_path: Path) -> None:
    import subprocess

    from agentbox.core.sandbox.bwrap import require_bwrap

    home = tmp_path / "home"
    (home / "data" / "opencode" / "snapshot").mkdir(parents=True)
    script = "mv /tmp/h/data/opencode /tmp/h/data/moved && echo moved || echo refused"
    base = [require_bwrap(), "--ro-bind", "/", "/", "--dev", "/dev", "--tmpfs", "/tmp", "--bind", str(home), "/tmp/h"]
    snapshot = ["--ro-bind", str(home / "data" / "opencode" / "snapshot"), "/tmp/h/data/opencode/snapshot"]
    pinned = [*base, "--bind", str(home / "data" / "opencode"), "/tmp/h/data/opencode", *snapshot]
    unpinned = [*base, *snapshot]
    assert subprocess.run([*pinned, "sh", "-c", script], capture_output=True, text=True).stdout.strip() == "refused"
    assert (home / "data" / "opencode" / "snapshot").is_dir()
    assert subprocess.run([*unpinned, "sh", "-c", script], capture_output=True, text=True).stdout.strip() == "moved"
