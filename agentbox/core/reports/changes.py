"""What a worktree run changed, for every face (CLI, TUI, MCP): a task's diff, the run's, its files.

The diffs come from git (the task branch against the commit it started from; the run's
integration branch against the run's base), never from what agents said they changed.
A shared run has no branches: asking for its diff is a clear error.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from agentbox.core import workspace as git
from agentbox.core.engine.changed_files import CHANGED_KEPT as CHANGED_KEPT
from agentbox.core.engine.changed_files import changed_paths
from agentbox.core.engine.changed_files import kept_changed_paths as kept_changed_paths
from agentbox.core.engine.changed_files import merge_hint as merge_hint
from agentbox.core.engine.models import ChangedPath, Run, Task
from agentbox.core.errors import NotFoundError, UsageError
from agentbox.core.paths import ProjectPaths

DIFF_BYTES = 1 << 20
DIFF_PAGE_FILES = 200
"""Files on one page of a task's diff (`task_diff_page`)."""
"""Most bytes of a patch shown (the command to see it whole is given when it is cut)."""


@dataclass(frozen=True)
class TaskChanges:
    """One task's branch and the files it changed."""

    task: str
    role: str
    state: str
    branch: str | None
    base: str | None
    head: str | None
    merged: str | None
    files: list[ChangedPath]
    more: int = 0
    """Files changed beyond `files` (a flood: the run state keeps the first ones)."""


def _worktree_run(run: Run, project: ProjectPaths | None = None) -> None:
    if not run.in_worktrees:
        in_git = project is not None and os.path.lexists(project.root / ".git")
        raise UsageError(
            f"run {run.id} worked in the live tree (shared workspace): it has no branches to diff",
            "`git diff` shows what your tree holds now, the run's changes and yours together" if in_git else
            f"it wrote into your files directly and nothing recorded them apart: `agentbox status {run.id}` "
            "and `agentbox sessions` show what each turn did")


def task_changes(run: Run) -> list[TaskChanges]:
    """Every task that has a branch, with what it changed (as recorded after its last turn)."""
    _worktree_run(run)
    return [TaskChanges(t.id, t.assignee, t.state, t.branch, t.base, t.head, t.merged, list(t.changed_files),
                        t.changed_more)
            for t in run.tasks.values() if t.branch is not None]


def _task(run: Run, task_id: str) -> Task:
    task = run.tasks.get(task_id)
    if task is None:
        raise NotFoundError(f"no task {task_id!r} in run {run.id}", f"tasks: {', '.join(run.tasks) or '(none yet)'}")
    return task


def task_diff(project: ProjectPaths, run: Run, task_id: str, *, stat_only: bool = False,
              max_bytes: int = DIFF_BYTES) -> git.Diff:
    """The task's diff against the commit its work started from."""
    _worktree_run(run, project)
    task = _task(run, task_id)
    if task.base is None or task.head is None:
        return git.Diff("", "", False, f"agentbox diff {run.id} {task_id}")
    return _diff(project, task.base, task.head, f"git diff {task.base[:12]} {task.head[:12]}",
                 stat_only=stat_only, max_bytes=max_bytes)


@dataclass(frozen=True)
class DiffPage:
    """One page of a task's diff: the files `first` to `first + len(paths)` in git's order."""

    diff: git.Diff
    paths: list[str]
    first: int
    more: bool
    """Files follow this page."""


def task_diff_page(project: ProjectPaths, run: Run, task_id: str, page: int, *, per_page: int = DIFF_PAGE_FILES,
                   max_bytes: int = DIFF_BYTES) -> DiffPage:
    """Page `page` (from 0) of the task's diff: `per_page` files, listed and diffed by git as it
    prints them, so a diff of 200,000 files costs a page of memory, never the whole."""
    _worktree_run(run, project)
    task = _task(run, task_id)
    if task.base is None or task.head is None:
        return DiffPage(git.Diff("", "", False, f"agentbox diff {run.id} {task_id}"), [], 0, False)
    first = max(0, page) * per_page
    paths, more = git.changed_names(project.root, task.base, task.head, first, per_page)
    command = f"git diff {task.base[:12]} {task.head[:12]}"
    if not paths:
        return DiffPage(git.Diff("", "", False, command), [], first, False)
    diff = git.diff_text(project.root, task.base, task.head, max_bytes=max_bytes, full_command=command, paths=paths)
    return DiffPage(diff, paths, first, more)


def run_diff(project: ProjectPaths, run: Run, *, stat_only: bool = False, max_bytes: int = DIFF_BYTES) -> git.Diff:
    """Everything the run's integration branch holds over the run's base (what `agentbox merge` brings)."""
    _worktree_run(run, project)
    assert run.git is not None
    return _diff(project, run.git.base, run.git.integration_branch,
                 f"git diff {run.git.base[:12]} {run.git.integration_branch}", stat_only=stat_only, max_bytes=max_bytes)


def _diff(project: ProjectPaths, base: str, head: str, full_command: str, *, stat_only: bool,
          max_bytes: int) -> git.Diff:
    """The diff from git; with `stat_only` the stat alone (no patch computed), never marked cut."""
    diff = git.diff_text(project.root, base, head, max_bytes=max_bytes, full_command=full_command,
                         stat_only=stat_only)
    return dataclasses.replace(diff, truncated=False) if stat_only else diff


def run_files(project: ProjectPaths, run: Run) -> list[ChangedPath]:
    """The files the run's integration branch changes over its base."""
    _worktree_run(run, project)
    assert run.git is not None
    return changed_paths(project.root, run.git.base, run.git.integration_branch)
