"""`agentbox shell TASK`: a shell where a task's work is, in its role's sandbox (or on the host).

Where: the task's worktree in a worktree run while the task has one and its assignee
writes; else the run's view (its approved work, read-only); in a shared run the project
itself. The sandbox is the one the task's turns get: the role's write scopes narrowed to
the task's, the project's .agent-box and git metadata read-only, the host read-only, the
home hidden, and none of the tool's config or credentials (a shell needs none of them).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from agentbox.core.errors import NotFoundError
from agentbox.core.paths import ProjectPaths

if TYPE_CHECKING:
    from agentbox.core.agents.invoke import Agent
    from agentbox.core.agents.resolve import InteractiveCommand

SYSTEM_DIRS = (Path("/bin"), Path("/usr/bin"), Path("/usr/local/bin"))
"""Where a shell inside the sandbox may come from (the home, where a person's own may live, is hidden there)."""


@dataclass(frozen=True)
class ShellPlace:
    """Where a task's shell opens, and the agent whose sandbox it runs in."""

    what: str
    """For messages: "task t1's worktree", "run R's view (read-only)", "the project"."""
    path: Path
    """The directory on the host (what `--host` opens in)."""
    agent: Agent
    """The task's role, its sandbox narrowed to the task (the path seen at the project's own path)."""


def task_place(project: ProjectPaths, task_id: str, run_id: str | None = None) -> ShellPlace:
    """Where the shell of `task_id` opens (NotFoundError for an unknown task)."""
    from agentbox.core import runs
    from agentbox.core import workspace as git
    from agentbox.core.agents import resolve as services
    from agentbox.core.workspace.layout import common_dir, task_worktree_path
    from agentbox.core.workspace.reach import widen_reach

    found_run, task_id = runs.resolve_task(project, task_id, run_id)  # a prefix names its task
    run = runs.load(project, found_run)
    task = run.tasks.get(task_id)
    if task is None:
        raise NotFoundError(f"run {run.id} has no task {task_id!r}", f"`agentbox status {run.id}` lists its tasks")
    agent = services.role_agent(project, task.assignee)
    writes = () if agent.read_only else tuple(task.writes)
    agent = replace(agent, writes=writes, extra_rw=())
    if not run.in_worktrees:
        return ShellPlace("the project (a shared run works in the live tree)", project.root, agent)
    tree = task_worktree_path(common_dir(project.root), run.id, task_id)
    if writes and tree.is_dir():
        widen_reach(tree, None)  # a person's shell (on the host too) may write anywhere in it
        git.make_whole(tree)
        what = f"task {task_id}'s worktree (branch {task.branch or git.task_branch(run.id, task_id)})"
    else:
        tree = git.ensure_view_worktree(project.root, run.id).path
        what = f"run {run.id}'s view, read-only (its approved work: the task has no worktree now)"
        agent = replace(agent, writes=())
    view = git.sandbox_git_view(project.root, tree)
    agent = replace(agent, worktree=tree, views=tuple(view.binds), view_hidden=tuple(view.hide), base=view.base,
                    over=view.over)
    return ShellPlace(what, tree, agent)


def shell_argv(command: str | None, *, host: bool) -> list[str]:
    """The shell to run: the person's `$SHELL` (inside the sandbox only from a system dir, else sh); `-c COMMAND`."""
    chosen = os.environ.get("SHELL") or "/bin/sh"
    if not host and not any(Path(chosen).parent == d for d in SYSTEM_DIRS):
        chosen = "/bin/sh"
    if not Path(chosen).exists():
        chosen = shutil.which("sh") or "/bin/sh"
    return [chosen, "-c", command] if command is not None else [chosen]


@contextlib.contextmanager
def sandboxed_shell(agent: Agent, argv: list[str]) -> Iterator[InteractiveCommand]:
    """The sandboxed command that runs `argv` as `agent` (attach's path, with a shell instead of the tool).

    Run it inside the block; staged write scopes are carried back when the block ends.
    The shell is no turn of the role: no session is recorded.
    """
    from agentbox.core.agents import egress_turn
    from agentbox.core.agents.invoke import finish_turn, prepare, prepare_session, remove_scratch
    from agentbox.core.agents.resolve import InteractiveCommand
    from agentbox.core.runtimes.base import ToolCommand
    from agentbox.core.sandbox.bwrap import launch

    record = prepare_session(agent, None)
    prepared = prepare(agent, "", record, interactive=True, command=ToolCommand(argv))
    try:
        # a network profile's shell goes out through the same proxy as its turns (its listeners are made in the shell's sandbox)
        with egress_turn.serving(prepared.egress), launch(prepared.argv, before_exec=egress_turn.join(prepared.egress)) as launched:
            yield InteractiveCommand(launched.argv, prepared.env, launched.pass_fds, record.id)
    finally:
        finish_turn(prepared, 1)
        remove_scratch(prepared)
        with contextlib.suppress(OSError):  # nothing of the shell stays in the session history
            prepared.logs.rmdir()
