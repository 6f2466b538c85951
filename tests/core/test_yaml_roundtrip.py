"""`role add` / `role rm` edit crew.yaml without disturbing what the person wrote.

Every line that is not the added or removed role stays byte for byte: comments at the top,
inline comments, comments between roles, single and double quotes, flow-style maps, blank
lines and key order.
"""

from __future__ import annotations

import difflib
import shutil
from pathlib import Path

import pytest

from agentbox.core.config import project
from agentbox.core.errors import AlreadyExistsError, NotFoundError, UsageError
from agentbox.core.paths import ProjectPaths
from agentbox.core.yaml_io import load_yaml

REPO = Path(__file__).resolve().parent.parent.parent

COMMENTED_CREW = """\
# Top-of-file comment: this crew is hand-written.
# Second line of the header.

mode: hierarchical   # inline comment on mode

# Roles come next.
roles:
  # the lead plans
  lead:
    profile: 'scripted'        # single-quoted
    instructions: "roles/lead.md"   # double-quoted
    writes: []
    description: |
      # not a comment: part of a literal block
      Plans the work.

  # the builder writes code
  builder: {profile: scripted, writes: ["src/**", 'tests/**']}   # flow style

  # the reviewer only reads
  reviewer:
    profile: "scripted"
    description: 'Reviews: carefully, "strictly"'
    writes: []   # read-only
  # trailing comment inside roles

# Limits below.
limits:
  max_workers: 2          # two at a time
  budget: {tokens_per_task: 400000, tokens_total: 4000000}   # flow map

hierarchical:
  lead: lead
  reviewer: 'reviewer'     # the reviewer role
# final comment
"""


@pytest.fixture
def crew_project(tmp_path: Path) -> ProjectPaths:
    """A project whose crew.yaml is the heavily commented one above."""
    paths = ProjectPaths(tmp_path)
    paths.box.mkdir()
    (paths.box / "roles").mkdir()
    (paths.box / "roles" / "lead.md").write_text("lead\n")
    paths.crew_file.write_text(COMMENTED_CREW, encoding="utf-8")
    return paths


def opcodes(before: str, after: str) -> list[tuple[str, list[str], list[str]]]:
    """The line-level changes from `before` to `after`, without the unchanged runs."""
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    return [(tag, a[i1:i2], b[j1:j2]) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]


def comment_lines(text: str) -> list[str]:
    """Every line holding a comment (whole-line or inline), exactly as written."""
    return [line for line in text.splitlines(keepends=True) if "#" in line]


def test_add_role_only_inserts_the_new_role(crew_project: ProjectPaths) -> None:
    project.add_role(crew_project, "tester", "scripted", writes=["tests/**"])
    after = crew_project.crew_file.read_text(encoding="utf-8")

    changes = opcodes(COMMENTED_CREW, after)
    assert len(changes) == 1
    tag, removed, inserted = changes[0]
    assert tag == "insert" and removed == []
    assert inserted[0] == "  tester:\n"
    assert "".join(inserted) == "  tester:\n    profile: scripted\n    writes:\n      - tests/**\n"
    # it sits right after the last role's own lines, before the comments that follow them
    assert after.index("    writes: []   # read-only\n  tester:\n") > 0
    assert comment_lines(after) == comment_lines(COMMENTED_CREW)


def test_added_role_is_appended_and_key_order_kept(crew_project: ProjectPaths) -> None:
    project.add_role(crew_project, "tester", "scripted", instructions="roles/lead.md", writes=[])
    crew = project.load_crew(crew_project).crew
    assert list(crew.roles) == ["lead", "builder", "reviewer", "tester"]
    assert crew.roles["tester"].read_only
    assert crew.roles["tester"].instructions == "roles/lead.md"
    assert list(load_yaml(crew_project.crew_file)) == ["mode", "roles", "limits", "hierarchical"]
    # untouched values keep their parsed meaning too
    assert crew.roles["builder"].writes == ["src/**", "tests/**"]
    assert crew.roles["lead"].description == "# not a comment: part of a literal block\nPlans the work.\n"
    assert crew.limits.budget.tokens_total == 4_000_000


def test_remove_middle_role_deletes_only_its_lines(crew_project: ProjectPaths) -> None:
    project.remove_role(crew_project, "builder")
    after = crew_project.crew_file.read_text(encoding="utf-8")

    removed = [
        "  # the builder writes code\n",
        "  builder: {profile: scripted, writes: [\"src/**\", 'tests/**']}   # flow style\n",
        "\n",
    ]
    assert after == COMMENTED_CREW.replace("".join(removed), "", 1)
    assert [tag for tag, _, _ in opcodes(COMMENTED_CREW, after)] == ["delete"]
    expected_comments = [c for c in comment_lines(COMMENTED_CREW) if c not in removed]
    assert comment_lines(after) == expected_comments
    assert "  # the reviewer only reads\n  reviewer:\n" in after
    assert list(project.load_crew(crew_project).crew.roles) == ["lead", "reviewer"]


def test_remove_last_role_keeps_the_comments_after_it(crew_project: ProjectPaths) -> None:
    project.remove_role(crew_project, "reviewer", force=True)  # hierarchical.reviewer names it
    after = crew_project.crew_file.read_text(encoding="utf-8")

    assert "  # trailing comment inside roles\n\n# Limits below.\nlimits:\n" in after
    changes = opcodes(COMMENTED_CREW, after)
    assert [tag for tag, _, _ in changes] == ["delete"]
    assert changes[0][1] == [
        "  # the reviewer only reads\n",
        "  reviewer:\n",
        '    profile: "scripted"\n',
        "    description: 'Reviews: carefully, \"strictly\"'\n",
        "    writes: []   # read-only\n",
    ]
    assert list(project.load_crew(crew_project).crew.roles) == ["lead", "builder"]


def test_add_then_remove_restores_the_file_byte_for_byte(crew_project: ProjectPaths) -> None:
    project.add_role(crew_project, "tester", "scripted", writes=["tests/**", "docs/**"])
    project.remove_role(crew_project, "tester")
    assert crew_project.crew_file.read_bytes() == COMMENTED_CREW.encode("utf-8")


def test_example_project_crew_survives_add_and_remove(tmp_path: Path) -> None:
    shutil.copytree(REPO / ".agent-box.example", tmp_path / ".agent-box")
    paths = ProjectPaths(tmp_path)
    original = paths.crew_file.read_text(encoding="utf-8")
    project.add_role(paths, "builder2", "scripted", writes=["docs/**"])
    changes = opcodes(original, paths.crew_file.read_text(encoding="utf-8"))
    assert [tag for tag, _, _ in changes] == ["insert"]
    project.remove_role(paths, "builder2")
    assert paths.crew_file.read_text(encoding="utf-8") == original


def test_file_without_final_newline(crew_project: ProjectPaths) -> None:
    crew_project.crew_file.write_text("roles:\n  lead:\n    profile: scripted  # no newline at the end")
    project.add_role(crew_project, "tester", "scripted")
    text = crew_project.crew_file.read_text()
    assert text.startswith("roles:\n  lead:\n    profile: scripted  # no newline at the end\n  tester:\n")
    assert list(project.load_crew(crew_project).crew.roles) == ["lead", "tester"]


def test_flow_style_roles_mapping_is_edited_through_the_dumper(crew_project: ProjectPaths) -> None:
    """A `roles: {...}` written on one line has no lines to insert into; the round-trip
    dumper still keeps the other comments and the quoting."""
    crew_project.crew_file.write_text(
        "# head comment\nmode: sequential  # inline\n"
        "roles: {lead: {profile: 'scripted'}, builder: {profile: \"scripted\"}}\n"
        "limits: {max_workers: 1}   # one at a time\n"
    )
    project.add_role(crew_project, "tester", "scripted")
    text = crew_project.crew_file.read_text()
    assert text.startswith("# head comment\nmode: sequential  # inline\n")
    assert "'scripted'" in text and '"scripted"' in text
    assert "limits: {max_workers: 1}   # one at a time\n" in text
    assert list(project.load_crew(crew_project).crew.roles) == ["lead", "builder", "tester"]
    project.remove_role(crew_project, "lead")
    assert list(project.load_crew(crew_project).crew.roles) == ["builder", "tester"]
    assert crew_project.crew_file.read_text().startswith("# head comment\n")


def test_refusals_leave_the_file_untouched(crew_project: ProjectPaths) -> None:
    with pytest.raises(AlreadyExistsError):
        project.add_role(crew_project, "lead", "scripted")
    with pytest.raises(NotFoundError, match="unknown profile 'no-such-profile'") as caught:
        project.add_role(crew_project, "tester", "no-such-profile")
    assert caught.value.hint is not None and "available profiles: " in caught.value.hint
    assert "scripted" in caught.value.hint
    with pytest.raises(UsageError, match="invalid role name"):
        project.add_role(crew_project, "bad name", "scripted")
    with pytest.raises(NotFoundError, match="no role 'ghost'"):
        project.remove_role(crew_project, "ghost")
    assert crew_project.crew_file.read_text(encoding="utf-8") == COMMENTED_CREW
    for name in ("builder", "reviewer"):
        project.remove_role(crew_project, name, force=True)  # the mode settings name them
    with pytest.raises(UsageError, match="last role"):
        project.remove_role(crew_project, "lead")
    assert list(project.load_crew(crew_project).crew.roles) == ["lead"]
    assert not list(crew_project.box.glob(".crew.yaml.*")), "no temp file left behind"
