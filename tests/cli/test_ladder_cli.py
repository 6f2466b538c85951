"""`agentbox zones` and `agentbox debt` through the real entry point."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime

from agentbox.core.config import zones as Z
from agentbox.core.config.zones import TaggedLine, ZoneFailure
from tests.conftest import run_cli

NOW = datetime(2026, 12, 1, 21, 0, tzinfo=UTC)


def test_empty_project_has_no_zones_nor_debt(project):
    assert run_cli("zones", cwd=project).out == "no high-rot zone recorded (.agent-box/zones.yaml)\n"
    assert run_cli("debt", cwd=project).out == "no tech debt recorded (.agent-box/debt.yaml)\n"
    assert json.loads(run_cli("zones", "--json", cwd=project).out) == {"zones": []}
    assert json.loads(run_cli("debt", "--json", cwd=project).out) == {"debts": []}


def test_zones_are_listed(project):
    box = project / ".agent-box"
    Z.record_zone(box, "src/payments", ZoneFailure(fingerprint="fp-a", level="L3", task="api", run="run-1", at=NOW),
                  escape_hatches_used=["compromise", "advisor"], now=NOW)
    text = run_cli("zones", cwd=project)
    assert text.code == 0
    assert text.out.splitlines()[1].split() == ["Z-1", "src/payments", "1", "L3", "compromise,", "advisor", "open",
                                                "2026-12-01", "21:00"]
    [zone] = json.loads(run_cli("zones", "--json", cwd=project).out)["zones"]
    assert zone["zone_id"] == "Z-1" and zone["failure_history"][0]["fingerprint"] == "fp-a"
    assert zone["max_ladder_level"] == "L3" and zone["fail_count"] == 1


def test_debt_is_listed_closed_and_waived_keeping_comments(project):
    box = project / ".agent-box"
    Z.record_debts(box, [TaggedLine("src/app.py", 12, "x = 1  # FIXME: Tech Debt"),
                         TaggedLine("src/db.py", 3, "# FIXME: Tech Debt")],
                   owner_role="builder", task="api", run="run-1", due=date(2020, 1, 1), now=NOW)
    path = box / "debt.yaml"
    path.write_text("# my own note at the top\n" + path.read_text().replace("  D-2:\n", "  # the db one\n  D-2:\n"))
    listing = run_cli("debt", cwd=project)
    assert listing.code == 0
    assert "D-1   src/app.py:12  open" in listing.out and "2020-01-01 (overdue)" in listing.out
    assert "2 overdue: each blocks a controlled rewrite" in listing.out
    closed = run_cli("debt", "--close", "D-1", "--note", "paid back", cwd=project)
    assert (closed.code, closed.out) == (0, "closed D-1 (src/app.py:12)\n")
    waived = json.loads(run_cli("debt", "--waive", "D-2", "--json", cwd=project).out)
    assert waived["debt_id"] == "D-2" and waived["status"] == "waived"
    debts = {d["debt_id"]: d for d in json.loads(run_cli("debt", "--json", cwd=project).out)["debts"]}
    assert (debts["D-1"]["status"], debts["D-1"]["note"], debts["D-1"]["overdue"]) == ("closed", "paid back", False)
    assert debts["D-2"]["status"] == "waived" and not debts["D-2"]["overdue"]
    text = path.read_text()
    assert text.startswith("# my own note at the top\n") and "  # the db one\n  D-2:" in text


def test_bad_input_is_one_message_and_exit_2(project):
    box = project / ".agent-box"
    unknown = run_cli("debt", "--close", "D-9", cwd=project)
    assert unknown.code == 2 and unknown.err.startswith("error: no debt 'D-9'") and "Traceback" not in unknown.err
    assert run_cli("debt", "--note", "x", cwd=project).code == 2
    (box / "zones.yaml").write_text("zones:\n  Z-1:\n    module_path: src\n    fail_count: -1\n")
    broken = run_cli("zones", cwd=project)
    assert broken.code == 2 and "zones.yaml:4" in broken.err and "zones.Z-1.fail_count" in broken.err
    assert "Traceback" not in broken.err
    (box / "debt.yaml").write_text("debts:\n  D-1:\n    file: \"\\e]0;owned\\a\"\n    line: 1\n")
    hostile = run_cli("debt", cwd=project)
    assert hostile.code == 2 and "debt.yaml:3" in hostile.err and "control characters" in hostile.err
    assert "\x1b" not in hostile.err
    before = (box / "debt.yaml").read_bytes()
    assert run_cli("debt", "--close", "D-1", cwd=project).code == 2
    assert (box / "debt.yaml").read_bytes() == before  # nothing half-written


def test_zones_and_debt_stay_light(project):
    """Neither command loads the engine or the TUI."""
    import subprocess
    import sys

    probe = ("import sys; from agentbox.cli import main\n"
             "for command in (['zones'], ['debt', '--json']):\n"
             "    assert main(['--project', sys.argv[1], *command]) == 0\n"
             "heavy = [m for m in sys.modules if m.split('.')[0] in ('textual', 'rich', 'psutil', 'watchfiles')\n"
             "         or m.startswith(('agentbox.core.engine', 'agentbox.tui', 'agentbox.core.runs'))]\n"
             "assert not heavy, heavy\n")
    proc = subprocess.run([sys.executable, "-c", probe, str(project)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_hostile_zones_files_stop_the_cli_with_a_located_error(tmp_path):
    """Every hostile file (FIFO, device link, directory, 50 MB, alias bomb, deep nesting, ...) where zones.yaml
    should be: exit 2, `error: FILE:LINE`, no traceback, no hang. debt.yaml is read by the same code
    (tests/core/test_zones.py holds it to the same cases in-process)."""
    import re
    import shutil
    from concurrent.futures import ThreadPoolExecutor

    from tests.conftest import REPO
    from tests.core.test_hostile_files import CLI_TIMEOUT_S, HOSTILE

    cases = [hostile for hostile in HOSTILE if hostile not in ("empty", "comments-only")]  # empty: no zones

    def one(index: int):
        root = tmp_path / f"case{index}"
        shutil.copytree(REPO / ".agent-box.example", root / ".agent-box")
        path = root / ".agent-box" / "zones.yaml"
        HOSTILE[cases[index]](path)
        return path, run_cli("zones", cwd=root, timeout=CLI_TIMEOUT_S)

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(one, range(len(cases))))
    for hostile, (path, result) in zip(cases, results, strict=True):
        output = result.out + result.err
        assert result.code == 2 and "Traceback" not in output and "MemoryError" not in output, (hostile, output)
        assert re.match(r"error: " + re.escape(str(path)) + r":\d+", result.err), (hostile, result.err)
