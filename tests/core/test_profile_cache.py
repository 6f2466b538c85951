"""The cache of checked profiles: used only for the very file it checked, never trusted beyond that.

A one-turn command (`agentbox invoke profile:NAME`) reads a profile.yaml it checked before
as plain data, without the YAML parser and the models; any change of the file, and any
doubt about the cache entry, sends it back to the full check with today's messages.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agentbox.core.config import profile_cache, profiles
from agentbox.core.config.models import Profile, Resources, Runtime, SandboxPolicy
from agentbox.core.config.profile_cache import (
    CachedProfile,
    CachedResources,
    CachedRuntime,
    CachedSandbox,
)
from agentbox.core.errors import ConfigError
from tests.conftest import run_cli

GOOD = ("name: cached\nruntime:\n  tool: scripted\n  scenario: scenario.json\n  env:\n    MODE: fast\n"
        "sandbox:\n  network: false\n")


def _write(home: Path, text: str = GOOD) -> Path:
    directory = home / "profiles" / "cached"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "scenario.json").write_text(json.dumps({"rules": [], "fallback": {"reply": "ok"}}))
    (directory / "profile.yaml").write_text(text)
    return directory


def _entries(home: Path) -> list[Path]:
    return sorted((home / "cache" / "profiles").glob("*.json"))


def _warm(home: Path) -> CachedProfile:
    """Check the profile once (it is kept), then read it back from the cache."""
    first = profiles.resolve("cached", cached=True).profile
    assert isinstance(first, Profile)  # the first read is the full check
    again = profiles.resolve("cached", cached=True).profile
    assert isinstance(again, CachedProfile), "an unchanged profile.yaml comes from the cache"
    return again


def _full_error(home: Path) -> str:
    """What the full check says about the profile as it is now (the cache left aside)."""
    with pytest.raises(ConfigError) as caught:
        profiles.resolve("cached")
    return str(caught.value)


def test_the_cached_profile_is_what_the_full_check_found(agent_box_home: Path) -> None:
    _write(agent_box_home)
    cached = _warm(agent_box_home)
    full = profiles.resolve("cached").profile
    assert isinstance(full, Profile)
    assert cached.name == full.name and cached.runtime.tool == full.runtime.tool
    assert dict(cached.runtime.env) == full.runtime.env and cached.runtime.scenario == full.runtime.scenario
    assert not isinstance(full.sandbox, str) and not isinstance(cached.sandbox, str)
    assert cached.sandbox.network is full.sandbox.network is False
    entry = _entries(agent_box_home)
    assert len(entry) == 1 and entry[0].stat().st_mode & 0o777 == 0o600
    assert (agent_box_home / "cache" / "profiles").stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize(("model", "cached"), [(Profile, CachedProfile), (Runtime, CachedRuntime),
                                               (Resources, CachedResources), (SandboxPolicy, CachedSandbox)])
def test_the_plain_data_has_every_field_of_the_model(model: type, cached: type) -> None:
    assert set(cached._fields) == set(model.model_fields), "a field the cache would drop, or one it invents"


def test_an_edited_profile_is_checked_again_with_the_same_message(agent_box_home: Path) -> None:
    directory = _write(agent_box_home)
    _warm(agent_box_home)
    (directory / "profile.yaml").write_text(GOOD.replace("network: false", "network: everywhere"))
    expected = _full_error(agent_box_home)
    with pytest.raises(ConfigError) as caught:
        profiles.resolve("cached", cached=True)
    assert str(caught.value) == expected and "profile.yaml:8" in expected


def test_an_edit_that_keeps_size_and_mtime_is_still_caught(agent_box_home: Path) -> None:
    directory = _write(agent_box_home)
    file = directory / "profile.yaml"
    _warm(agent_box_home)
    before = file.stat()
    file.write_text(GOOD.replace("tool: scripted", "tool: scripteX"))  # same size
    os.utime(file, ns=(before.st_atime_ns, before.st_mtime_ns))  # `touch -d` back to the old time
    after = file.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)
    with pytest.raises(ConfigError) as caught:
        profiles.resolve("cached", cached=True)
    assert str(caught.value) == _full_error(agent_box_home) and "tool" in str(caught.value)


def test_the_content_hash_alone_tells_an_edit(agent_box_home: Path) -> None:
    """Even with the same device, inode, size, mtime and ctime, other bytes are another file."""
    directory = _write(agent_box_home)
    _warm(agent_box_home)
    source = profile_cache.read_source(directory / "profile.yaml")
    assert source is not None
    cache_dir = agent_box_home / "cache" / "profiles"
    assert profile_cache.lookup(cache_dir, directory, directory, source) is not None
    other = source.data.replace(b"scripted", b"scripteX")
    forged = profile_cache.Source(other, {**source.identity, "blake2b": profile_cache._hash(other)})
    assert profile_cache.lookup(cache_dir, directory, directory, forged) is None


def _tamper(entry: Path) -> None:
    data = json.loads(entry.read_text())
    data["body"]["profile"]["sandbox"]["network"] = "host"
    data["body"]["profile"]["runtime"]["env"]["SNEAKY"] = "yes"
    entry.write_text(json.dumps(data))


def test_a_tampered_entry_is_ignored_and_replaced(agent_box_home: Path) -> None:
    _write(agent_box_home)
    _warm(agent_box_home)
    [entry] = _entries(agent_box_home)
    _tamper(entry)  # its digest no longer matches
    info = profiles.resolve("cached", cached=True)
    assert isinstance(info.profile, Profile), "the tampered entry is not used: the file is checked again"
    assert not isinstance(info.profile.sandbox, str) and info.profile.sandbox.network is False
    assert "SNEAKY" not in info.profile.runtime.env
    assert isinstance(profiles.resolve("cached", cached=True).profile, CachedProfile)  # replaced by a good one


@pytest.mark.parametrize("hostile", ["group-writable", "world-readable", "symlink", "other-owner", "garbage",
                                     "directory"])
def test_an_entry_that_is_not_safely_ours_is_ignored(hostile: str, agent_box_home: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _write(agent_box_home)
    _warm(agent_box_home)
    [entry] = _entries(agent_box_home)
    if hostile == "group-writable":
        entry.chmod(0o620)
    elif hostile == "world-readable":
        entry.chmod(0o604)
    elif hostile == "symlink":  # a good entry, reached through a link
        elsewhere = tmp_path / "entry.json"
        entry.rename(elsewhere)
        entry.symlink_to(elsewhere)
    elif hostile == "other-owner":  # the entry's owner is not who runs agentbox
        monkeypatch.setattr(profile_cache.os, "geteuid", lambda: entry.stat().st_uid + 1)
    elif hostile == "garbage":
        entry.write_bytes(b"\x00not json{")
    else:
        entry.unlink()
        entry.mkdir()
    assert isinstance(profiles.resolve("cached", cached=True).profile, Profile), "checked again, entry ignored"


def test_a_cache_that_cannot_be_written_is_no_error(agent_box_home: Path) -> None:
    _write(agent_box_home)
    (agent_box_home / "cache").write_text("not a directory")
    for _ in range(2):
        info = profiles.resolve("cached", cached=True)
        assert isinstance(info.profile, Profile) and info.profile.name == "cached"


def test_what_the_profile_names_is_checked_every_time(agent_box_home: Path) -> None:
    """The scenario file is another file: replaced by a device after the profile was kept, it is refused."""
    directory = _write(agent_box_home)
    _warm(agent_box_home)
    scenario = directory / "scenario.json"
    scenario.unlink()
    scenario.symlink_to("/dev/zero")
    expected = _full_error(agent_box_home)
    assert "not a regular file" in expected and "profile.yaml:4" in expected
    with pytest.raises(ConfigError) as caught:
        profiles.resolve("cached", cached=True)
    assert str(caught.value) == expected


@pytest.mark.bwrap
def test_the_cli_refuses_an_edited_profile_exactly_as_before(agent_box_home: Path, tmp_path: Path) -> None:
    directory = _write(agent_box_home)
    first = run_cli("invoke", "profile:cached", "hi", cwd=tmp_path)
    assert first.code == 0, first.err
    assert _entries(agent_box_home), "the checked profile was kept"
    (directory / "profile.yaml").write_text(GOOD + "surprise: 1\n")
    warm = run_cli("invoke", "profile:cached", "hi", cwd=tmp_path)
    for entry in _entries(agent_box_home):
        entry.unlink()
    cold = run_cli("invoke", "profile:cached", "hi", cwd=tmp_path)
    assert warm.code == cold.code == 2
    assert warm.err == cold.err and "surprise" in warm.err and "profile.yaml:9" in warm.err
    assert "Traceback" not in warm.err


def test_an_unset_variable_of_a_cached_profile_is_named_with_its_line(agent_box_home: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """References are resolved at every turn, never cached: the message is the full check's, line included."""
    from agentbox.core.config import secrets

    _write(agent_box_home, GOOD.replace("MODE: fast", "MODE: ${AB_CACHE_MODE}"))
    monkeypatch.setenv("AB_CACHE_MODE", "fast")
    assert profiles.resolve("cached", cached=True)  # checked and kept while the variable was set
    monkeypatch.delenv("AB_CACHE_MODE")
    cached = profiles.resolve("cached", cached=True)
    assert isinstance(cached.profile, CachedProfile)
    with pytest.raises(ConfigError) as from_cache:
        secrets.resolve_env(cached)
    with pytest.raises(ConfigError) as from_full:
        secrets.resolve_env(profiles.resolve("cached"))
    assert str(from_cache.value) == str(from_full.value)
    assert "AB_CACHE_MODE" in str(from_cache.value) and "profile.yaml:6" in str(from_cache.value)
