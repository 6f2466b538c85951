"""A flood of changed files in one worktree: the run state keeps a bounded list, the diff is read a page at a time.

A turn that writes thousands of files (a vendored tree, generated code) must not make the
engine, run.json and every face that reads it hold all of them: the task records the first
CHANGED_KEPT files and counts the rest, checks with `paths:` filters still run, and the
TUI's diff reads one page of files from git at a time, every file on exactly one page.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from agentbox.core.paths import ProjectPaths
from agentbox.core.reports import changes as run_changes
from agentbox.core.workspace import changed_files, changed_summary
from agentbox.tui import loaders
from tests.engine.support import create, drive, setup_crew, task, work_rule
from tests.engine.test_worktree_runs import git, make_repo

pytestmark = [pytest.mark.bwrap, pytest.mark.local_runner("a flood of files written by the agent's shell in its worktree, under bwrap")]

FLOOD = 2_500
"""Files the flooding turn writes: more than the run state keeps, a dozen pages of the diff."""


async def test_a_flood_of_files_is_recorded_bounded_and_its_diff_paged(project: Path) -> None:
    make_repo(project)
    flood = f"mkdir -p src/gen && for i in $(seq 1 {FLOOD}); do echo $i > src/gen/f$i.txt; done"
    paths = setup_crew(project, worker=[work_rule(task_id="t1", rule_id="w1", run=flood)],
                       tasks=[task("t1", "builder", writes=["src/**"])])
    run_id = create(paths)
    final = await drive(paths, run_id, timeout=180)
    assert final.status == "done", final.status_reason
    flooded = final.tasks["t1"]
    assert len(flooded.changed_files) == run_changes.CHANGED_KEPT < FLOOD
    assert flooded.changed_more == FLOOD - run_changes.CHANGED_KEPT
    assert len(git(project, "diff", "--name-only", flooded.base or "", flooded.head or "").split()) == FLOOD

    pages, seen, more, page = [], [], True, 0
    while more:
        loaded = loaders.task_diff(ProjectPaths(project), final, "t1", page)
        assert loaded.error is None and loaded.first == len(seen)
        assert 0 < len(loaded.files) <= run_changes.DIFF_PAGE_FILES
        pages.append(len(loaded.files))
        seen += [rendered.file.path for rendered in loaded.files]
        more, page = loaded.more_pages, page + 1
    assert len(pages) == -(-FLOOD // run_changes.DIFF_PAGE_FILES)
    assert sorted(seen) == sorted(f"src/gen/f{i}.txt" for i in range(1, FLOOD + 1))  # each file on one page


def test_the_kept_list_is_read_in_a_fraction_of_the_whole_s_memory(project: Path) -> None:
    make_repo(project)
    gen = project / "gen"
    gen.mkdir()
    for index in range(5_000):
        (gen / f"f{index}.txt").write_text(f"{index}\n")
    git(project, "add", "-A")
    git(project, "-c", "user.name=P", "-c", "user.email=p@example.invalid", "commit", "-q", "-m", "flood")
    base, head = "HEAD~1", git(project, "rev-parse", "HEAD").strip()

    def peak(read: object) -> int:
        tracemalloc.start()
        try:
            read()  # type: ignore[operator]
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    kept, more = run_changes.kept_changed_paths(project, base, head)
    assert len(kept) == run_changes.CHANGED_KEPT and more == 5_000 - run_changes.CHANGED_KEPT
    whole = peak(lambda: changed_files(project, base, head))
    bounded = peak(lambda: changed_summary(project, base, head, keep=100))  # 2 % of the files
    assert bounded * 5 < whole, (bounded, whole)
