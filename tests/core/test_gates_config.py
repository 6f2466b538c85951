"""crew.yaml's `checks:` and `gates:`: typed, documented, and every mistake a located error."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentbox.core.admin.schemas import json_schema
from agentbox.core.config import project as project_mod
from agentbox.core.errors import ConfigError
from agentbox.core.paths import ProjectPaths

CREW = """\
roles:
  builder: {profile: scripted-worker}
checks:
  smoke: {run: "python -m pytest -q -x tests/unit", timeout_s: 120}
  full:  {run: "python -m pytest -q", timeout_s: 900}
  lint:  {run: "ruff check .", paths: ["src/**"]}
gates:
  submission: [smoke, full]
  integration: [smoke]
  run_end: [full]
"""


def load(root: Path, text: str) -> object:
    (root / ".agent-box").mkdir(exist_ok=True)
    (root / ".agent-box" / "crew.yaml").write_text(text)
    return project_mod.load_crew(ProjectPaths(root)).crew


def test_the_documented_example_loads(tmp_path: Path) -> None:
    crew = load(tmp_path, CREW)
    assert crew.gates.submission == ["smoke", "full"] and crew.checks["lint"].paths == ["src/**"]  # type: ignore[attr-defined]
    assert crew.checks["smoke"].network is False and crew.checks["smoke"].flaky == "deny"  # type: ignore[attr-defined]


@pytest.mark.parametrize(("edit", "line", "field", "words"), [
    (("run_end: [full]", "run_end: [ful]"), 10, "gates.run_end.0", "unknown check 'ful'"),
    (("timeout_s: 120}", "timeout_s: 120, retries: 3}"), 4, "checks.smoke.retries", "retries"),
    (("paths: [\"src/**\"]", "paths: [\"../x\"]"), 6, "checks.lint.paths.0", "relative to the project"),
    (("  lint:", "  bad name:"), 6, "checks.bad name", "bad name"),
    (("integration: [smoke]", "merge: [smoke]"), 9, "gates.merge", "merge"),
    (("timeout_s: 900}", "timeout_s: 900, network: \"yes\"}"), 5, "checks.full.network", "boolean"),
])
def test_mistakes_are_located(tmp_path: Path, edit: tuple[str, str], line: int, field: str, words: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load(tmp_path, CREW.replace(*edit))
    error = raised.value
    assert error.line == line and error.field == field and words in str(error), str(error)


def test_the_schema_documents_checks_and_gates() -> None:
    schema = json_schema("crew")
    text = str(schema)
    assert "read-only over the work it judges" in text and "stops at the first red check" in text
    assert "flaky" in text and "scratch" in text


def test_init_writes_commented_checks_and_gates_that_validate_when_uncommented(tmp_path: Path) -> None:
    project_mod.init(tmp_path)
    text = (tmp_path / ".agent-box" / "crew.yaml").read_text()
    assert "\n# checks:" in text and "\n# gates:" in text
    assert project_mod.load_crew(ProjectPaths(tmp_path)).crew.checks == {}  # commented: nothing runs
    lines = text.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("# checks:")))
    end = next(i for i in range(start, len(lines)) if not lines[i].startswith("#"))
    uncommented = [line[2:] if not line.startswith("#   #") else "" for line in lines[start:end]]
    (tmp_path / ".agent-box" / "crew.yaml").write_text("\n".join(lines[:start] + uncommented + lines[end:]) + "\n")
    crew = project_mod.load_crew(ProjectPaths(tmp_path)).crew
    assert list(crew.checks) == ["smoke", "full", "lint"]
    assert crew.gates.submission == ["smoke", "full"] and crew.gates.run_end == ["full"]
