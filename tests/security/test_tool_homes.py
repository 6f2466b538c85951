"""A per-turn tool home under real bwrap: what a turn writes there never reaches the profile,
except the state dirs and what the adapter keeps of its copies.

The scripted probe is given a declared `TurnHome` (the shape claude's adapter declares),
then a read-only role writes everywhere in its home from inside the sandbox. Checked on
the host afterwards. Runs as root and, through the unprivileged pass, as a normal user.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentbox.core.paths import ProjectPaths
from agentbox.core.runtimes.base import TurnHome
from agentbox.core.runtimes.scripted import ScriptedAdapter
from tests.sandbox_support import ask, make_profile, write_crew

pytestmark = pytest.mark.bwrap


def _keep_counts(name: str, profile: bytes | None, turn: bytes | None) -> bytes | None:
    """Of the turn's copy of counters.json, integer counts only, over the profile's file."""
    merged = json.loads(profile) if profile else {}
    for key, value in (json.loads(turn) if turn else {}).items():
        if isinstance(value, int) and not isinstance(value, bool):
            merged[key] = value
    return json.dumps(merged).encode()


@pytest.fixture
def probe_home(project: Path, agent_box_home: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[ProjectPaths, Path]:
    monkeypatch.setattr(ScriptedAdapter, "turn_home",
                        TurnHome(state=("sessions",), copies=("counters.json",), keep=_keep_counts))
    monkeypatch.setattr(ScriptedAdapter, "loaded_config", ("hooks/", "settings.json"))
    make_profile(agent_box_home, "probe")
    config = agent_box_home / "profiles" / "probe" / "dot-scripted"
    config.mkdir(parents=True)
    (config / "counters.json").write_text(json.dumps({"mine": 1, "servers": "the person's"}))
    (config / "extra").mkdir()  # something the tool may load that agentbox does not know
    return write_crew(project, {"reviewer": {"profile": "probe", "writes": []}}), config


async def test_what_a_turn_writes_in_its_home_is_dropped_but_state_and_kept_keys(
        probe_home: tuple[ProjectPaths, Path]) -> None:
    proj, config = probe_home
    h = "$SCRIPTED_HOME"
    attack = "; ".join([
        f"echo planted > {h}/planted.sh; echo new_rc=$?",
        f"mkdir -p {h}/plugins && echo planted > {h}/plugins/p.js; echo newdir_rc=$?",
        f"echo planted > {h}/hooks/h.sh; echo hooks_rc=$?",
        f"echo planted > {h}/settings.json; echo settings_rc=$?",
        f"echo planted > {h}/extra/x; echo extra_rc=$?",
        f"echo ok > {h}/sessions/kept.txt; echo state_rc=$?",
        # claude's way of saving its config: a temp file beside it, renamed over it
        f"""echo '{{"mine": 7, "servers": {{"planted": "sh"}}}}' > {h}/c.tmp && mv {h}/c.tmp {h}/counters.json;"""
        " echo copy_rc=$?",
        f"cat {h}/counters.json",
    ])
    result = await ask(proj, "reviewer", f"run {attack}")
    assert result.ok, result.error
    output = result.text
    for step in ("new", "newdir", "state", "copy"):  # the tool's own home works as it expects
        assert f"{step}_rc=0" in output, (step, output)
    for step in ("hooks", "settings", "extra"):  # what it loads is read-only
        assert f"{step}_rc=0" not in output, (step, output)
    assert '"planted"' in output  # the turn saw its own copy change
    assert not (config / "planted.sh").exists() and not (config / "plugins").exists()
    assert list((config / "hooks").iterdir()) == [] and "planted" not in (config / "settings.json").read_text()
    assert list((config / "extra").iterdir()) == []
    assert (config / "sessions" / "kept.txt").read_text() == "ok\n"
    assert json.loads((config / "counters.json").read_text()) == {"mine": 7, "servers": "the person's"}
    sessions = proj.box / "sessions" / "reviewer"
    assert not [p for p in sessions.rglob("*.home")], "the per-turn home outlived its turn"
