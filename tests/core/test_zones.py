"""zones.yaml and debt.yaml: typed, edited as text (comments kept), hostile files refused; the pure rules."""

from __future__ import annotations

import os
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from agentbox.core.config import zones as Z
from agentbox.core.config.zones import Debt, TaggedLine, Zone, ZoneFailure, debt_tags_in_diff
from agentbox.core.errors import ConfigError, NotFoundError

NOW = datetime(2026, 12, 1, 21, 0, tzinfo=UTC)


@pytest.fixture
def box(tmp_path: Path) -> Path:
    directory = tmp_path / ".agent-box"
    directory.mkdir()
    return directory


def failure(fp: str = "fp-a", level: str = "L3", task: str = "api") -> ZoneFailure:
    return ZoneFailure(fingerprint=fp, level=level, task=task, run="run-1", at=NOW)


# ----------------------------------------------------------------------------- files


def test_absent_files_are_empty(box):
    assert Z.load_zones(box) == {} and Z.load_debts(box) == {}


def test_a_zone_is_recorded_then_counted_again_keeping_comments(box):
    zone_id, zone = Z.record_zone(box, "src/payments", failure(), escape_hatches_used=["compromise", "advisor"], now=NOW)
    assert zone_id == "Z-1" and zone.fail_count == 1
    path = box / "zones.yaml"
    text = path.read_text()
    assert text.startswith("# High-rot zones")
    path.write_text(text.replace("zones:\n", "zones:\n  # payments keeps breaking (a person's note)\n")
                    + "# a comment at the end\n")
    Z.record_zone(box, "src/auth", failure("fp-x"), now=NOW)
    again_id, again = Z.record_zone(box, "src/payments", failure("fp-b"), escape_hatches_used=["bypass", "advisor"],
                                    now=datetime(2026, 12, 2, tzinfo=UTC))
    assert again_id == "Z-1"
    read = Z.load_zones(box)
    assert list(read) == ["Z-1", "Z-2"]
    assert read["Z-1"].fail_count == 2 and [f.fingerprint for f in read["Z-1"].failure_history] == ["fp-a", "fp-b"]
    assert read["Z-1"].escape_hatches_used == ["compromise", "advisor", "bypass"]
    assert read["Z-1"].updated == datetime(2026, 12, 2, tzinfo=UTC) and read["Z-1"].created == NOW
    final = path.read_text()
    assert "  # payments keeps breaking (a person's note)\n  Z-1:" in final
    assert final.endswith("# a comment at the end\n")
    assert read["Z-2"].module_path == "src/auth"


def test_a_zone_is_resolved(box):
    zone_id, _ = Z.record_zone(box, "src/payments", failure(), now=NOW)
    Z.resolve_zone(box, zone_id, "bypass", suggested_bypass="src/payments_v2 beside it", now=NOW)
    zone = Z.load_zones(box)[zone_id]
    assert (zone.resolution, zone.suggested_bypass) == ("bypass", "src/payments_v2 beside it")
    with pytest.raises(NotFoundError):
        Z.resolve_zone(box, "Z-9", "bypass")


def test_debts_are_recorded_and_closed_keeping_comments(box):
    tagged = [TaggedLine("src/app.py", 12, "x = 1  # FIXME: Tech Debt"), TaggedLine("src/db.py", 3, "# FIXME: Tech Debt")]
    recorded = Z.record_debts(box, tagged, owner_role="builder", task="api", run="run-1", risk="high",
                              due=date(2026, 12, 15), now=NOW)
    assert [i for i, _ in recorded] == ["D-1", "D-2"]
    path = box / "debt.yaml"
    path.write_text(path.read_text().replace("  D-2:\n", "  # keep this one until the db moves\n  D-2:\n"))
    closed = Z.close_debt(box, "D-1", note="fixed in the next run", now=NOW)
    assert closed.status == "closed"
    Z.close_debt(box, "D-2", status="waived", now=NOW)
    debts = Z.load_debts(box)
    assert (debts["D-1"].status, debts["D-1"].note, debts["D-1"].closed) == ("closed", "fixed in the next run", NOW)
    assert debts["D-2"].status == "waived" and debts["D-2"].due == date(2026, 12, 15)
    assert debts["D-2"].owner_role == "builder" and debts["D-2"].risk == "high" and debts["D-2"].line == 3
    assert "  # keep this one until the db moves\n  D-2:" in path.read_text()
    assert Z.record_debts(box, [TaggedLine("a.py", 1, "t")], owner_role="b", task="t", run="r")[0][0] == "D-3"


def test_closing_an_unknown_debt_names_the_known_ones(box):
    Z.record_debts(box, [TaggedLine("a.py", 1, "t")], owner_role="b", task="t", run="r")
    with pytest.raises(NotFoundError) as caught:
        Z.close_debt(box, "D-7")
    assert "D-1" in (caught.value.hint or "")


def test_a_hand_written_flow_style_entry_is_edited_too(box):
    (box / "debt.yaml").write_text("# mine\ndebts:\n  D-1: {file: a.py, line: 2}\n")
    Z.close_debt(box, "D-1", now=NOW)
    assert Z.load_debts(box)["D-1"].status == "closed"
    assert (box / "debt.yaml").read_text().startswith("# mine\n")


@pytest.mark.parametrize("text, line, field", [
    ("debts:\n  D-1:\n    file: a.py\n    line: 0\n", 4, "debts.D-1.line"),
    ("debts:\n  D-1:\n    file: a.py\n    line: 2\n    risk: huge\n", 5, "debts.D-1.risk"),
    ("debts:\n  D-1:\n    file: a.py\n    line: 2\n    colour: red\n", 5, "debts.D-1.colour"),
    ("debts:\n  D-1:\n    file: \"a\\e[31m.py\"\n    line: 2\n", 3, "debts.D-1.file"),
    ("debts:\n  \"../x\":\n    file: a.py\n    line: 2\n", 2, "debts.../x"),
    ("debts: [1, 2\n", 1, None),
    ("debts:\n  D-1:\n    file: ../../etc/passwd\n    line: 2\n", 3, "debts.D-1.file"),
    ("debts:\n  D-1:\n    file: /etc/passwd\n    line: 2\n", 3, "debts.D-1.file"),
])
def test_a_hostile_debt_file_is_refused_with_file_line_and_field(box, text, line, field):
    (box / "debt.yaml").write_text(text)
    with pytest.raises(ConfigError) as caught:
        Z.load_debts(box)
    error = caught.value
    assert error.file == box / "debt.yaml" and error.line == line
    if field:
        assert error.field == field


def test_a_symlinked_or_huge_zones_file_is_refused(box, tmp_path):
    secret = tmp_path / "secret.yaml"
    secret.write_text("zones: {}\n")
    os.symlink(secret, box / "zones.yaml")
    with pytest.raises(ConfigError, match="symlink"):
        Z.load_zones(box)
    (box / "zones.yaml").unlink()
    (box / "zones.yaml").write_text("zones:\n" + "#" * (1 << 20) + "\n")
    with pytest.raises(ConfigError, match="more than the 1,048,576 allowed"):
        Z.load_zones(box)


def test_an_alias_bomb_is_refused(box):
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(6))
    (box / "zones.yaml").write_text(bomb)
    with pytest.raises(ConfigError, match="more than"):
        Z.load_zones(box)


# ----------------------------------------------------------------------------- pure rules


ZONES = {"Z-1": Zone(module_path="src/payments"), "Z-2": Zone(module_path="docs"),
         "Z-3": Zone(module_path=".github/workflows")}
DEBTS = {
    "D-1": Debt(file="src/payments/charge.py", line=3, due=date(2026, 11, 30)),
    "D-2": Debt(file="src/api/app.py", line=9, due=date(2026, 12, 30)),
    "D-3": Debt(file="src/payments/refund.py", line=1, due=date(2026, 11, 1), status="waived"),
}


@pytest.mark.parametrize("files, zone_ids, debt_ids", [
    (["src/payments/charge.py"], ["Z-1"], ["D-1"]),
    (["src/**"], ["Z-1"], ["D-1", "D-2"]),
    (["src/payments/**"], ["Z-1"], ["D-1"]),
    (["src/api/app.py"], [], ["D-2"]),
    (["README.md"], [], []),
    (["**"], ["Z-1", "Z-2", "Z-3"], ["D-1", "D-2"]),
    ([".github/workflows/ci.yml"], ["Z-3"], []),
    (["./github/x"], [], []),                        # not the hidden directory
    (["./docs/index.md"], ["Z-2"], []),
    (["src/pay"], [], []),                          # a prefix of a name is not the directory
    ([], [], []),
])
def test_zones_and_open_debts_touching_files(files, zone_ids, debt_ids):
    near_zones, near_debts = Z.touching(ZONES, DEBTS, files)
    assert list(near_zones) == zone_ids and list(near_debts) == debt_ids


@pytest.mark.parametrize("module, today, blocking", [
    ("src/payments", date(2026, 12, 1), ["D-1"]),      # D-3 is waived
    ("src/payments", date(2026, 11, 30), []),          # due today is not overdue
    ("src/api", date(2027, 1, 1), ["D-2"]),
    ("src", date(2027, 1, 1), ["D-1", "D-2"]),
    ("docs", date(2027, 1, 1), []),
])
def test_overdue_debt_on_a_module(module, today, blocking):
    assert Z.overdue_on(DEBTS, module, today) == blocking


def test_a_closed_or_undated_debt_is_never_overdue():
    assert not Debt(file="a", line=1, status="closed", due=date(2000, 1, 1)).overdue(date(2026, 1, 1))
    assert not Debt(file="a", line=1).overdue(date(2026, 1, 1))


@pytest.mark.parametrize("paths, module", [
    (["src/payments/charge.py", "src/payments/refund.py"], "src/payments"),
    (["src/payments/charge.py", "src/api/app.py"], "src"),
    (["src/payments/**"], "src/payments"),
    (["app.py", "lib.py"], "."),
    ([], "."),
])
def test_module_of_a_tasks_files(paths, module):
    assert Z.module_of(paths) == module


DIFF = '''diff --git a/src/app.py b/src/app.py
index 1111111..2222222 100644
--- a/src/app.py
+++ b/src/app.py
@@ -10,3 +10,5 @@ def main():
     setup()
--- a line removed that starts with dashes
+++ a line added that starts with pluses
+    retries = 3  # FIXME: Tech Debt: hard-coded until the config lands
     run()
-    # FIXME: Tech Debt removed, not added
+    done()
@@ -40,0 +42,1 @@
+# FIXME: Tech Debt second hunk
diff --git "a/caf\\303\\251.py" "b/caf\\303\\251.py"
new file mode 100644
--- /dev/null
+++ "b/caf\\303\\251.py"
@@ -0,0 +1,2 @@
+a = 1
+b = 2  # FIXME: Tech Debt
\\ No newline at end of file
diff --git a/gone.py b/gone.py
deleted file mode 100644
--- a/gone.py
+++ /dev/null
@@ -1 +0,0 @@
-x = 1  # FIXME: Tech Debt
'''


def test_debt_tags_are_found_in_added_lines_only_with_their_new_line_numbers():
    assert debt_tags_in_diff(DIFF) == [
        TaggedLine("src/app.py", 12, "retries = 3  # FIXME: Tech Debt: hard-coded until the config lands"),
        TaggedLine("src/app.py", 42, "# FIXME: Tech Debt second hunk"),
        TaggedLine("café.py", 2, "b = 2  # FIXME: Tech Debt"),
    ]


def test_a_diff_without_the_tag_has_no_debt():
    assert debt_tags_in_diff(DIFF.replace("FIXME: Tech Debt", "TODO")) == []
    assert debt_tags_in_diff("") == []


def test_planning_notes_name_what_touches_the_goal():
    zones = {**ZONES, "Z-1": Zone(module_path="src/payments", fail_count=3, escape_hatches_used=["compromise"],
                                  suggested_bypass="src/payments2")}
    notes = Z.planning_notes(zones, DEBTS, ["src/payments/**"], date(2026, 12, 1))
    assert notes.splitlines()[1:] == [
        "- zone Z-1 src/payments: 3 failure(s), reached L3, escape hatches used: compromise, resolution: open, "
        "suggested bypass: src/payments2",
        "- debt D-1 src/payments/charge.py:3: medium risk, due 2026-11-30 (overdue: blocks a controlled rewrite)",
    ]
    assert Z.planning_notes(zones, DEBTS, ["README.md"], date(2026, 12, 1)) == ""


def test_planning_notes_are_bounded():
    many = {f"D-{n}": Debt(file=f"src/f{n}.py", line=1) for n in range(1, 31)}
    notes = Z.planning_notes({}, many, ["src/**"], date(2026, 12, 1), max_items=5)
    assert len(notes.splitlines()) == 1 + 5 + 1 and notes.endswith("- and 25 more (`agentbox zones`, `agentbox debt`)")


@pytest.mark.parametrize("hostile", ["fifo", "dev-zero", "dev-urandom", "directory", "50mb", "not-utf8",
                                     "billion-laughs", "top-level-list"])
def test_a_hostile_debt_file_is_a_located_error(box, hostile):
    from tests.core.test_hostile_files import HOSTILE

    HOSTILE[hostile](box / "debt.yaml")
    with pytest.raises(ConfigError) as caught:
        Z.load_debts(box)
    assert caught.value.file == box / "debt.yaml" and caught.value.line is not None
    with pytest.raises(ConfigError):
        Z.close_debt(box, "D-1")


@pytest.mark.parametrize("text, location, key, value, expected", [
    ("# top\na:\n  x: 1  # one\n  # about y\n  y:\n    - 1\n  z: 3\n# end\n", ("a",), "y", [1, 2],
     "# top\na:\n  x: 1  # one\n  # about y\n  y:\n    - 1\n    - 2\n  z: 3\n# end\n"),
    ("a:\n  x: 1\n  z: 3", ("a",), "z", 4, "a:\n  x: 1\n  z: 4"),                      # no newline at the end
    ("a:\n  x: 1\n", ("a",), "w", 4, None),                                                # not there: add it
    ("a: {x: 1}\n", ("a",), "x", 4, None),                                                 # flow style
])
def test_an_entry_is_replaced_by_a_text_edit_of_its_lines(text, location, key, value, expected):
    from agentbox.core.yaml_io import parse_yaml, text_with_entry_replaced

    assert text_with_entry_replaced(text, parse_yaml(text, "t.yaml"), location, key, value) == expected


def test_a_zone_outside_the_project_is_refused(box):
    (box / "zones.yaml").write_text("zones:\n  Z-1:\n    module_path: ~/.ssh\n")
    with pytest.raises(ConfigError) as caught:
        Z.load_zones(box)
    assert (caught.value.line, caught.value.field) == (3, "zones.Z-1.module_path")


def test_an_edit_that_would_not_read_back_leaves_the_file_as_it_was(box):
    zone_id, _ = Z.record_zone(box, "src/payments", failure(), now=NOW)
    before = (box / "zones.yaml").read_bytes()
    with pytest.raises(ConfigError, match="resolution"):
        Z.resolve_zone(box, zone_id, "x" * 300)
    assert (box / "zones.yaml").read_bytes() == before
    assert sorted(p.name for p in box.iterdir()) == ["zones.yaml", "zones.yaml.lock"]  # no temp file left behind


def test_edits_wait_for_each_other(box):
    """An engine recording debts and a person closing one never overwrite each other: each edit holds the file's lock."""
    import threading

    from agentbox.core.store import locked

    Z.record_debts(box, [TaggedLine("a.py", 1, "t")], owner_role="b", task="t", run="r")
    with locked(box / "debt.yaml"):
        closing = threading.Thread(target=Z.close_debt, args=(box, "D-1"))
        closing.start()
        closing.join(0.5)
        assert closing.is_alive()  # it waits for the lock
        assert Z.load_debts(box)["D-1"].status == "open"
    closing.join(30)
    assert Z.load_debts(box)["D-1"].status == "closed"


def test_init_tracks_zones_and_debt_in_git(tmp_path):
    """zones.yaml and debt.yaml are for people and git: `.agent-box/.gitignore` keeps them, not their locks."""
    import subprocess

    from agentbox.core.config.project import GITIGNORE
    from tests.conftest import REPO

    assert (REPO / ".agent-box.example" / ".gitignore").read_text() == GITIGNORE
    (tmp_path / ".agent-box").mkdir()
    (tmp_path / ".agent-box" / ".gitignore").write_text(GITIGNORE)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    paths = [".agent-box/zones.yaml", ".agent-box/debt.yaml", ".agent-box/debt.yaml.lock", ".agent-box/runs/x"]
    ignored = subprocess.run(["git", "-C", str(tmp_path), "check-ignore", *paths], capture_output=True, text=True)
    assert ignored.stdout.split() == [".agent-box/debt.yaml.lock", ".agent-box/runs/x"]
