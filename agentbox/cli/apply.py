"""`agentbox apply TASK [--run RUN]`: apply the advisor's patch of a task and resubmit it.

A task in the failure ladder's advisor mode was worked on read-only: its worker handed in a
guide and a patch, and a checkpoint asks whether to apply it. This answers that checkpoint
with `apply`: the engine applies the patch in the task's worktree (only inside the task's
writes), commits it on the task's branch and resubmits the task, whose checks then run; if
they fail, the ladder goes on to L3.
"""

from __future__ import annotations

import argparse

from agentbox.cli.common import project_from
from agentbox.cli.runs import send


def apply(args: argparse.Namespace) -> int:
    """Answer the task's open advisor checkpoint with `apply`."""
    from agentbox.core import runs as runs_mod
    from agentbox.core.engine import commands
    from agentbox.core.errors import NotFoundError

    project = project_from(args)
    run_id, task_id = runs_mod.resolve_task(project, args.task, args.run)
    run = runs_mod.read(project, run_id)
    task = run.tasks.get(task_id)
    waiting = [cp for cp in run.open_checkpoints() if cp.task == task_id and cp.kind == "ladder"]
    if task is None or not waiting or task.ladder.waiting_on != "apply_patch":
        where = f"task {task_id} is at {task.ladder.label}" if task is not None else f"run {run_id} has no {task_id!r}"
        raise NotFoundError(f"no advisor patch of {task_id} waits to be applied in run {run_id} ({where})",
                            "`agentbox status` shows the open checkpoints")
    return send(project, run_id, commands.Answer(checkpoint=waiting[0].id, text="apply"))
