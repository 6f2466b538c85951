"""crew.yaml's `ladder:` and `no_compromise:`: typed, carried into the run contract, mistakes located."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentbox.core.config import project as project_mod
from agentbox.core.errors import ConfigError
from agentbox.core.paths import ProjectPaths

CREW = """\
roles:
  builder: {profile: scripted-worker}
ladder: true
no_compromise: ["auth/**", "payments/**"]
"""


def load(root: Path, text: str) -> object:
    (root / ".agent-box").mkdir(exist_ok=True)
    (root / ".agent-box" / "crew.yaml").write_text(text)
    return project_mod.load_crew(ProjectPaths(root)).crew


def test_the_ladder_settings_load_default_on_and_can_be_turned_off(tmp_path: Path) -> None:
    crew = load(tmp_path, CREW)
    assert crew.ladder is True and crew.no_compromise == ["auth/**", "payments/**"]  # type: ignore[attr-defined]
    plain = load(tmp_path, "roles:\n  builder: {profile: scripted-worker}\n")
    assert plain.ladder is True and plain.no_compromise == []  # type: ignore[attr-defined]
    off = load(tmp_path, "roles:\n  builder: {profile: scripted-worker}\nladder: false\n")
    assert off.ladder is False  # type: ignore[attr-defined]


@pytest.mark.parametrize(("edit", "line", "field"), [
    (("ladder: true", 'ladder: "sometimes"'), 3, "ladder"),
    (('"payments/**"', '"/etc/**"'), 4, "no_compromise.1"),
])
def test_mistakes_are_located(tmp_path: Path, edit: tuple[str, str], line: int, field: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load(tmp_path, CREW.replace(*edit))
    assert raised.value.line == line and raised.value.field == field, str(raised.value)



def test_a_new_hierarchical_run_climbs_the_ladder_unless_the_crew_says_no(project: Path) -> None:
    from agentbox.core import runs
    from tests.engine.support import setup_crew

    paths = setup_crew(project)  # a crew.yaml without `ladder:`
    assert runs.create_run(paths, "a goal").contract.ladder is True
    setup_crew(project, ladder=False)
    assert runs.create_run(paths, "a goal").contract.ladder is False
