"""`agentbox runs`: goal, status, age, tasks done/total, tokens, cost (unknown stays unknown), merged into which branch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentbox.core.engine.models import Contract, Run, RunGit, Totals
from agentbox.core.reports.summary import age_text, summarise
from tests.cli.test_worktree_cli import finished_run
from tests.conftest import run_cli
from tests.engine.support import setup_crew, task
from tests.engine.test_worktree_runs import git

COLUMNS = ["RUN", "STATUS", "AGE", "TASKS", "TOKENS", "COST", "MERGED", "GOAL"]


def rows(project: Path) -> dict[str, list[str]]:
    """The table's rows by run id, cut at the header's column starts."""
    listed = run_cli("runs", cwd=project)
    assert listed.code == 0, listed.err
    header, *lines = listed.out.splitlines()
    assert header.split() == COLUMNS
    starts = [header.index(name) for name in COLUMNS]
    table = {}
    for line in lines:
        cells = [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
        table[cells[0]] = cells
    return table


@pytest.mark.bwrap
def test_a_worktree_run_before_and_after_it_is_merged(project: Path) -> None:
    run_id = finished_run(project)
    (entry,) = json.loads(run_cli("runs", "--json", cwd=project).out)
    assert (entry["id"], entry["status"], entry["goal"], entry["tasks"], entry["tasks_done"]) == (
        run_id, "done", "build it", 2, 2)
    assert entry["tokens"] > 0 and entry["unknown_usage_turns"] == 0 and entry["cost_usd"] is None
    assert (entry["workspace"], entry["merged"], entry["merged_into"]) == ("worktree", False, None)
    row = rows(project)[run_id]
    assert row[1] == "done" and row[2].rstrip("smhd").isdigit() and row[3] == "2/2"
    assert row[4] == f"{entry['tokens']:,}" and row[5] == "unknown" and row[6] == "no" and row[7] == "build it"

    merged = run_cli("merge", run_id, cwd=project)
    assert merged.code == 0, merged.err
    (entry,) = json.loads(run_cli("runs", "--json", cwd=project).out)
    assert (entry["merged"], entry["merged_into"]) == (True, "main")
    assert entry["merge_commit"] == git(project, "rev-parse", "main").strip()
    assert rows(project)[run_id][6:8] == ["into main", "build it"]


@pytest.mark.bwrap
def test_a_run_whose_tools_reported_no_usage_shows_unknown_not_zero(project: Path) -> None:
    setup_crew(project, usage="unknown", tasks=[task("t1")])
    done = run_cli("run", "count nothing", "--quiet", cwd=project, timeout=180)
    assert done.code == 0, done.err
    (entry,) = json.loads(run_cli("runs", "--json", cwd=project).out)
    assert (entry["tokens"], entry["cost_usd"], entry["merged"]) == (None, None, None)
    assert entry["unknown_usage_turns"] > 0 and entry["tasks_done"] == entry["tasks"] == 1
    row = rows(project)[entry["id"]]
    assert row[3:7] == ["1/1", "unknown", "unknown", "(shared)"]


def test_summary_of_cost_partial_usage_and_age() -> None:
    run = Run(id="run-20260101-120000-a1b2", contract=Contract(goal="g", mode="hierarchical", workspace="worktree"),
              created=1000.0, git=RunGit(base="b" * 40, head="h" * 40, branch="dev", integration_branch="agentbox/r",
                                         delivered="c" * 40),
              totals=Totals(tokens=1500, cost_usd=0.25, turns=3, unknown_usage_turns=1))
    summary = summarise(run, now=1000.0 + 2 * 3600 + 5)
    assert (summary.tokens, summary.unknown_usage_turns, summary.cost_usd) == (1500, 1, 0.25)
    assert (summary.merged, summary.merged_into) == (True, "dev")  # recorded before the target was: the run's branch
    assert age_text(summary.age_s) == "2h" and age_text(59) == "59s" and age_text(3 * 86400) == "3d"
    run.git = run.git.model_copy(update={"delivered_into": "release"})  # type: ignore[union-attr]
    assert summarise(run, now=1000.0).merged_into == "release"


def test_a_project_without_runs_says_so_and_its_json_is_an_empty_list(project: Path) -> None:
    listed = run_cli("runs", cwd=project)
    assert (listed.code, listed.err) == (0, "")
    assert listed.out.strip() == "this project has no runs yet: start one with `agentbox run GOAL`"
    as_json = run_cli("runs", "--json", cwd=project)
    assert (as_json.code, json.loads(as_json.out)) == (0, [])
