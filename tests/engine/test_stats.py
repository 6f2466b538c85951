"""`agentbox stats` over runs the real engine recorded: hand-computed figures, health lines, the downgrade valve.

The three runs (`stats_support.record_history`) are made once for the module with scripted
crews under the real sandbox; the pure figures of the ladder, which no engine run records
yet, are checked on a run and a log given directly.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentbox.core.engine.models import Checkpoint, Contract, Run, Task
from agentbox.core.engine.run_store import RunStore
from agentbox.core.paths import ProjectPaths
from agentbox.core.reports import stats as stats_mod
from agentbox.core.tasks import TaskState
from tests.conftest import REPO, run_cli
from tests.engine.stats_support import ESCALATED, EXPECTED, record_history


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[str]]]:
    """A project with runs A, B and C recorded by the engine (its own AGENT_BOX_HOME for the profiles)."""
    base = tmp_path_factory.mktemp("stats")
    root = base / "repo"
    root.mkdir()
    shutil.copytree(REPO / ".agent-box.example", root / ".agent-box")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGENT_BOX_HOME", str(base / "home"))
        yield root, record_history(root)


def stats_json(root: Path, *args: str) -> dict[str, Any]:
    cli = run_cli("stats", "--json", *args, cwd=root)
    assert cli.code == 0, cli.err
    return json.loads(cli.out)


def groups_by_role_and_model(data: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(g["role"], g["model"]): g for g in data["groups"]}


pytestmark = [pytest.mark.bwrap, pytest.mark.slow]


def test_the_figures_match_the_hand_computed_ones(history: tuple[Path, list[str]]) -> None:
    root, run_ids = history
    data = stats_json(root)
    assert data["runs"] == 3
    groups = groups_by_role_and_model(data)
    assert sorted(groups) == sorted(EXPECTED)
    for key, expected in EXPECTED.items():
        group = groups[key]
        assert group["profile"] == "t-worker" and group["tool"] == "scripted", key
        for name, value in expected.items():
            assert group[name] == pytest.approx(value), (key, name)
        assert group["check_failure_rate"] is None and group["level_shares"] is None  # no checks, no ladder
        assert group["tokens"] > 0 and group["cost_usd"] is None and group["unknown_cost_turns"] > 0
    overall = data["overall"]
    assert overall["tasks"] == 39 and overall["first_pass_rate"] == pytest.approx(25 / 39)
    escalated = groups[("builder", "m-small")]
    assert escalated["waiting_s"] > 0 and groups[("builder", "m-big")]["waiting_s"] == 0
    run_c = RunStore(ProjectPaths(root)).load(run_ids[2])
    assert [c.kind for c in run_c.checkpoints.values() if c.task == ESCALATED] == ["retry_escalation"]


def test_each_figure_is_judged_against_its_health_line(history: tuple[Path, list[str]]) -> None:
    root, _ = history
    groups = groups_by_role_and_model(stats_json(root))
    small = groups[("builder", "m-small")]["health"]
    assert small["first_pass_rate"] == {"rule": "≥ 60%", "outside": True}  # 58 %
    assert small["mean_repair_rounds"] == {"rule": "≤ 1.5", "outside": False}
    assert small["escalation_rate"] == {"rule": "≤ 15%", "outside": False}
    assert small["l3_share"]["outside"] is None and small["stuck_at_l1"]["outside"] is None
    assert groups[("builder", "m-big")]["health"]["first_pass_rate"]["outside"] is False
    text = run_cli("stats", cwd=root)
    assert text.code == 0, text.err
    block = text.out.split("builder · t-worker · scripted · m-small")[1].split("\n\n")[0]
    assert "first pass       58%" in block and "≥ 60%  OUTSIDE" in block
    assert "repair rounds    0.48" in block and "≤ 1.5  ok" in block
    assert "ladder levels    —" in block and "cost             unknown" in block


def test_the_downgrade_valve_warns_over_30_tasks_and_only_reports_below(history: tuple[Path, list[str]]) -> None:
    root, _ = history
    changes = {c["role"]: c for c in stats_json(root)["model_changes"]}
    builder, tester = changes["builder"], changes["tester"]
    assert (builder["from_model"], builder["to_model"], builder["tasks_before"], builder["tasks_since"]) == (
        "m-big", "m-small", 4, 31)
    assert builder["drop_points"] == pytest.approx(100 * (1 - 18 / 31), abs=0.01) and builder["verdict"] == "warning"
    assert (tester["tasks_since"], tester["drop_points"], tester["verdict"]) == (2, 50.0, "report")
    text = run_cli("stats", cwd=root).out
    assert "warning: builder: model m-big → m-small: first pass 100% over 4 task(s) before, 58% over 31 since" in text
    assert "note: tester: model m-big → m-small" in text and "fewer than the 30 tasks needed to judge it" in text
    assert "warning: tester" not in text


def test_role_and_since_narrow_the_runs_and_tasks(history: tuple[Path, list[str]]) -> None:
    root, run_ids = history
    testers = stats_json(root, "--role", "tester")
    assert {g["role"] for g in testers["groups"]} == {"tester"} and testers["overall"]["tasks"] == 4
    store = RunStore(ProjectPaths(root))
    run_a, run_b = store.load(run_ids[0]), store.load(run_ids[1])
    assert run_a.created < run_b.created
    since = dt.datetime.fromtimestamp((run_a.created + run_b.created) / 2).isoformat()  # between A and B
    later = stats_json(root, "--since", since)
    assert later["runs"] == 2 and later["overall"]["tasks"] == 33 and later["model_changes"] == []
    assert stats_json(root, "--since", "2999-01-01")["runs"] == 0


@pytest.mark.parametrize("bad", ["yesterday", "2026-13-01", "01/12/2026"])
def test_a_bad_since_is_a_clear_error(project: Path, bad: str) -> None:
    cli = run_cli("stats", "--since", bad, cwd=project)
    assert cli.code == 2 and cli.err.startswith(f"error: --since: {bad!r} is not a date"), cli.err
    assert "Traceback" not in cli.err and "YYYY-MM-DD" in cli.err


# ----------------------------------------------------------------------------- ladder levels (pure)


def _run_with(tasks: dict[str, TaskState], status: str = "done") -> Run:
    contract = Contract(goal="g", mode="hierarchical", roles={"builder": "p"})
    return Run(id="run-1", contract=contract, status=status, created=100.0, updated=200.0, finished=200.0,  # type: ignore[arg-type]
               tasks={t: Task(id=t, assignee="builder", brief="b", state=s, created=100.0, updated=150.0)
                      for t, s in tasks.items()})


def test_ladder_level_shares_and_stuck_at_l1_come_from_the_logs_transitions() -> None:
    run = _run_with({"t1": TaskState.APPROVED, "t2": TaskState.BLOCKED, "t3": TaskState.APPROVED,
                     "t4": TaskState.APPROVED, "t5": TaskState.APPROVED})
    log = [
        {"type": "ladder", "task": "t1", "to_level": "L0"},
        {"type": "ladder", "task": "t2", "to_level": "L0"}, {"type": "ladder", "task": "t2", "to_level": "L1"},
        {"type": "ladder", "task": "t3", "to_level": "L2"}, {"type": "ladder", "task": "t3", "to_level": "L3"},
        {"type": "task.reject", "task": "t3"},
    ]
    found = stats_mod.compute([(run, log)])
    overall = found.overall
    assert overall.level_shares == pytest.approx({"L0": 1 / 3, "L1": 1 / 3, "L2": 0.0, "L3": 1 / 3})
    assert overall.stuck_at_l1 == 1  # t2 ended the run blocked at L1
    assert overall.health["l3_share"].outside is True and overall.health["stuck_at_l1"].outside is True
    assert overall.first_pass_rate == pytest.approx(3 / 5) and overall.health["first_pass_rate"].outside is False


def test_time_waiting_for_the_human_counts_open_and_answered_checkpoints() -> None:
    run = _run_with({"t1": TaskState.APPROVED})
    run.checkpoints = {
        "cp-1": Checkpoint(id="cp-1", kind="question", question="?", task="t1", created=120.0, answered_at=130.0,
                           status="answered"),
        "cp-2": Checkpoint(id="cp-2", kind="budget", question="?", task="t1", created=140.0),  # open until the end
    }
    overall = stats_mod.compute([(run, [])]).overall
    assert overall.waiting_s == pytest.approx(10.0 + 60.0)
    assert overall.escalation_rate == 1.0  # a question is an escalation; a budget pause alone is not


def test_live_health_projects_the_cost_at_the_current_burn() -> None:
    run = _run_with({"t1": TaskState.APPROVED, "t2": TaskState.EXECUTING, "t3": TaskState.QUEUED, "t4": TaskState.QUEUED})
    run.totals.cost_usd = 0.5
    cost, projected, first_pass = stats_mod.live_health(run)
    assert (cost, projected, first_pass) == (0.5, pytest.approx(2.0), 1.0)
    run.totals.cost_usd = None
    assert stats_mod.live_health(run)[:2] == (None, None)


def test_stats_imports_no_textual(project: Path, tmp_path: Path) -> None:
    """`agentbox stats` is a non-TUI command: it loads neither textual nor the TUI."""
    from tests.core.test_import_bounds import loaded_by

    modules = loaded_by("stats", project, tmp_path)
    assert "agentbox.cli.stats" in modules and "agentbox.core.reports.stats" in modules
    assert not [m for m in modules if m == "textual" or m.startswith(("textual.", "agentbox.tui"))]


def test_check_failure_and_flaky_rates_are_of_the_checks_run_on_the_tasks_work() -> None:
    from agentbox.core.engine.models import CheckResult

    def check(status: str, flaky: bool = False) -> CheckResult:
        return CheckResult(name="unit", stage="submission", commit=None, passed=status == "passed",
                           status=status, flaky=flaky, log="/dev/null")  # type: ignore[arg-type]

    run = _run_with({"t1": TaskState.APPROVED, "t2": TaskState.APPROVED})
    run.tasks["t1"].checks = [check("failed"), check("passed")]
    run.tasks["t2"].checks = [check("passed", flaky=True), check("error")]
    overall = stats_mod.compute([(run, [])]).overall
    assert (overall.check_failure_rate, overall.flaky_rate) == (0.25, 0.25)  # a check that could not run is no red
