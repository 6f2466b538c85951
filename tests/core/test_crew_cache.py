"""The cache of checked crew.yaml files: used only for the very file it checked, never trusted beyond that.

The engine and the TUI read a crew.yaml they (or `agentbox run`) checked before from its
plain data, without the YAML parser; any change of the file, and any doubt about the cache
entry, sends it back to the full parse and check with today's messages (file, line, field).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentbox.core.config import crew_cache
from agentbox.core.config import project as project_mod
from agentbox.core.errors import ConfigError
from agentbox.core.paths import ProjectPaths
from tests.conftest import REPO, run_cli


def _entries(home: Path) -> list[Path]:
    return sorted((home / "cache" / "crews").glob("*.json"))


def _warm(root: Path) -> project_mod.LoadedCrew:
    """Load the crew once (it is kept), then read it back from the cache."""
    paths = ProjectPaths(root)
    first = project_mod.load_crew(paths)
    assert first.document is not None, "the first read is the full parse"
    again = project_mod.load_crew(paths)
    assert again.document is None, "an unchanged crew.yaml comes from the cache"
    return again


def _full_error(home: Path, root: Path) -> str:
    """What the full check says about crew.yaml as it is now (the cache left aside)."""
    for entry in _entries(home):
        entry.unlink()
    with pytest.raises(ConfigError) as caught:
        project_mod.load_crew(ProjectPaths(root))
    for entry in _entries(home):
        entry.unlink()
    return str(caught.value)


def _crew_file(root: Path) -> Path:
    return root / ".agent-box" / "crew.yaml"


def test_the_cached_crew_is_what_the_full_check_found(agent_box_home: Path, project: Path) -> None:
    cached = _warm(project)
    [entry] = _entries(agent_box_home)
    entry.unlink()
    full = project_mod.load_crew(ProjectPaths(project))
    assert full.document is not None
    assert cached.crew.model_dump() == full.crew.model_dump()
    assert list(cached.crew.roles) == list(full.crew.roles), "roles keep the order of the file"
    [entry] = _entries(agent_box_home)
    assert entry.stat().st_mode & 0o777 == 0o600
    assert (agent_box_home / "cache" / "crews").stat().st_mode & 0o777 == 0o700


def test_an_edited_crew_is_checked_again_with_the_same_message(agent_box_home: Path, project: Path) -> None:
    _warm(project)
    file = _crew_file(project)
    file.write_text(file.read_text().replace("mode: hierarchical", "mode: anarchy"))
    with pytest.raises(ConfigError) as caught:
        project_mod.load_crew(ProjectPaths(project))
    expected = _full_error(agent_box_home, project)
    assert str(caught.value) == expected and "crew.yaml:8" in expected and "mode" in expected


def test_an_edit_that_keeps_size_and_mtime_is_still_caught(agent_box_home: Path, project: Path) -> None:
    _warm(project)
    file = _crew_file(project)
    before = file.stat()
    file.write_text(file.read_text().replace("profile: demo-lead", "profile: 1emo-lead"))  # same size
    os.utime(file, ns=(before.st_atime_ns, before.st_mtime_ns))  # `touch -d` back to the old time
    after = file.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)
    loaded = project_mod.load_crew(ProjectPaths(project))
    assert loaded.document is not None, "the edited file is parsed again"
    assert loaded.crew.roles["lead"].profile == "1emo-lead"


def test_the_content_hash_alone_tells_an_edit(agent_box_home: Path, project: Path) -> None:
    """Even with the same device, inode, size, mtime and ctime, other bytes are another file."""
    _warm(project)
    file = _crew_file(project)
    source = crew_cache.read_source(file)
    assert source is not None
    assert crew_cache.lookup(file, source) is not None
    other = source.data.replace(b"demo-lead", b"demo-leaX")
    forged = crew_cache.Source(other, {**source.identity, "blake2b": crew_cache.content_hash(other)})
    assert crew_cache.lookup(file, forged) is None


def _tamper(entry: Path) -> None:
    data = json.loads(entry.read_text())
    data["body"]["data"]["roles"]["lead"]["writes"] = ["**"]
    entry.write_text(json.dumps(data))


def test_a_tampered_entry_is_ignored_and_replaced(agent_box_home: Path, project: Path) -> None:
    _warm(project)
    [entry] = _entries(agent_box_home)
    _tamper(entry)  # its digest no longer matches
    loaded = project_mod.load_crew(ProjectPaths(project))
    assert loaded.document is not None, "the tampered entry is not used: the file is parsed again"
    assert loaded.crew.roles["lead"].writes == []
    assert project_mod.load_crew(ProjectPaths(project)).document is None  # replaced by a good one


def test_an_entry_for_another_file_is_not_used(agent_box_home: Path, project: Path, tmp_path: Path) -> None:
    """An entry (digest and all) moved to the name of another project's crew.yaml says whose it is."""
    _warm(project)
    other = tmp_path / "other"
    other.mkdir()
    (other / ".agent-box").mkdir()
    _crew_file(other).write_bytes(_crew_file(project).read_bytes())
    [entry] = _entries(agent_box_home)
    target = crew_cache._entry_path(agent_box_home / "cache" / "crews", _crew_file(other).resolve())
    entry.rename(target)
    source = crew_cache.read_source(_crew_file(other).resolve())
    assert source is not None and crew_cache.lookup(_crew_file(other).resolve(), source) is None


@pytest.mark.parametrize("hostile", ["group-writable", "world-readable", "symlink", "other-owner", "garbage",
                                     "directory"])
def test_an_entry_that_is_not_safely_ours_is_ignored(hostile: str, agent_box_home: Path, project: Path,
                                                      tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _warm(project)
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
        from agentbox.core.config import profile_cache

        monkeypatch.setattr(profile_cache.os, "geteuid", lambda: entry.stat().st_uid + 1)
    elif hostile == "garbage":
        entry.write_bytes(b"\x00not json{")
    else:
        entry.unlink()
        entry.mkdir()
    assert project_mod.load_crew(ProjectPaths(project)).document is not None, "parsed again, entry ignored"


def test_a_cache_that_cannot_be_written_is_no_error(agent_box_home: Path, project: Path) -> None:
    (agent_box_home / "cache").write_text("not a directory")
    for _ in range(2):
        loaded = project_mod.load_crew(ProjectPaths(project))
        assert loaded.document is not None and "lead" in loaded.crew.roles


def test_what_the_crew_names_is_checked_every_time(agent_box_home: Path, project: Path) -> None:
    """An instructions file is another file: gone after the crew was kept, it is refused with its line."""
    _warm(project)
    instructions = project / ".agent-box" / "roles" / "lead.md"
    instructions.unlink()
    with pytest.raises(ConfigError) as caught:
        project_mod.load_crew(ProjectPaths(project))
    expected = _full_error(agent_box_home, project)
    assert str(caught.value) == expected and "crew.yaml:13" in expected and "roles/lead.md" in expected
    instructions.symlink_to("/dev/zero")
    with pytest.raises(ConfigError) as caught:
        project_mod.load_crew(ProjectPaths(project))
    assert str(caught.value) == _full_error(agent_box_home, project)


def test_a_broken_reference_of_a_cached_crew_is_named_with_its_line(agent_box_home: Path, project: Path) -> None:
    """check_references on a crew read from the cache still says the line (the file is parsed for it)."""
    file = _crew_file(project)
    file.write_text(file.read_text().replace("profile: demo-lead", "profile: nobody-here"))
    loaded = _warm(project)
    problems = project_mod.check_references(ProjectPaths(project), loaded)
    full = project_mod.check_references(ProjectPaths(project), _full_loaded(agent_box_home, project))
    assert [str(p) for p in problems] == [str(p) for p in full]
    assert problems and "crew.yaml:12" in str(problems[0]) and "nobody-here" in str(problems[0])


def _full_loaded(home: Path, root: Path) -> project_mod.LoadedCrew:
    for entry in _entries(home):
        entry.unlink()
    loaded = project_mod.load_crew(ProjectPaths(root))
    assert loaded.document is not None
    return loaded


def test_a_cached_crew_is_read_without_the_yaml_parser(agent_box_home: Path, project: Path) -> None:
    _warm(project)
    code = ("import sys\nfrom pathlib import Path\nfrom agentbox.core.config import project as p\nfrom agentbox.core.paths import ProjectPaths\n"
            f"loaded = p.load_crew(ProjectPaths(Path({str(project)!r})))\n"
            "print(loaded.document is None, sorted(m for m in sys.modules if m.startswith('ruamel'))[:1])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True,
                         env={**os.environ, "AGENT_BOX_HOME": str(agent_box_home)})
    assert out.stdout.split() == ["True", "[]"], out.stdout + out.stderr


def test_the_cli_refuses_an_edited_crew_exactly_as_before(agent_box_home: Path, project: Path) -> None:
    first = run_cli("role", "list", cwd=project)
    assert first.code == 0, first.err
    assert _entries(agent_box_home), "the checked crew was kept"
    file = _crew_file(project)
    file.write_text(file.read_text().replace("    writes: []              # read-only: the lead",
                                             "    writes: 3               # read-only: the lead"))
    warm = run_cli("role", "list", cwd=project)
    for entry in _entries(agent_box_home):
        entry.unlink()
    cold = run_cli("role", "list", cwd=project)
    assert warm.code == cold.code == 2
    assert warm.err == cold.err and "crew.yaml:15" in warm.err and "writes" in warm.err
    assert "Traceback" not in warm.err
