"""What the MCP face shows of a project: runs, checkpoints, roles, sessions and artifacts as JSON.

Pure readers over core services (nothing here writes): the tools and resources of
`agentbox.mcp.server` return these dictionaries as their structured content.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from agentbox.core import runs
from agentbox.core.agents import pricing
from agentbox.core.agents.sessions import SessionStore
from agentbox.core.config import profiles
from agentbox.core.config import project as project_mod
from agentbox.core.engine.models import Checkpoint, Run, Task
from agentbox.core.errors import AgentboxError, NotFoundError
from agentbox.core.paths import ProjectPaths
from agentbox.core.safe_io import UnsafeFileError, inside, read_bounded

ARTIFACT_MAX_BYTES = 1 << 20
"""Largest artifact returned whole as a resource."""
EVENTS_LIMIT = 500
"""Most decision-log records one events resource returns (the latest ones)."""


def roles(project: ProjectPaths) -> dict[str, Any]:
    """The crew's roles: name, profile, tool, what they may write, what they do."""
    crew = project_mod.load_crew(project).crew
    listed = []
    for name, role in crew.roles.items():
        try:
            tool: str | None = profiles.resolve(role.profile).tool
            problem = None
        except AgentboxError as exc:
            tool, problem = None, exc.message
        listed.append({"role": name, "profile": role.profile, "tool": tool, "description": role.description,
                       "writes": "read-only" if role.read_only else role.writes or "whole project",
                       **({"problem": problem} if problem else {})})
    return {"project": str(project.root), "mode": crew.mode, "roles": listed}


def how_to_answer(view: runs.CheckpointView) -> str:
    """Which tool call answers the checkpoint of `view`, in words a model can follow."""
    run_id, cp_id = view.run_id, view.checkpoint.id
    if view.offers("approve_plan"):
        return (f'answer_checkpoint(checkpoint="{cp_id}", run="{run_id}", text="approve"), '
                "or text=feedback to have the plan made again")
    task = next((way.task for way in view.answers if way.kind == "approve_task"), None)
    if task is not None:
        return (f'approve_task(task="{task}", run="{run_id}") or rework_task(task="{task}", '
                f'run="{run_id}", note="what to fix"), or answer_checkpoint')
    hint = " or ".join(f"'{word}'" for word in view.words) if view.words else "your answer"
    if view.root_cause:
        hint += f" ({runs.ROOT_CAUSE})"
    return f'answer_checkpoint(checkpoint="{cp_id}", run="{run_id}", text=...) with {hint}'


def checkpoint(run: Run, cp: Checkpoint) -> dict[str, Any]:
    """One checkpoint, with how to answer it while it is open."""
    view = {"run": run.id, "checkpoint": cp.id, "kind": cp.kind, "question": cp.question, "options": cp.options,
            "task": cp.task, "role": cp.role, "status": cp.status, "answer": cp.answer}
    if cp.status == "open":
        view["how_to_answer"] = how_to_answer(runs.checkpoint_view(run, cp))
    return view


def run_status(project: ProjectPaths, run: Run) -> dict[str, Any]:
    """A run: status, goal, its engine, tasks (with their checks), the gates, open checkpoints, usage and result."""
    checking = run.checking()
    alive = runs.engine_alive(project, run.id)
    engine = runs.engine_state(run, alive, time.time())
    view: dict[str, Any] = {"engine": engine}
    if engine == "stopped":
        view["engine_note"] = (f"{runs.stopped_summary(run)}; the resume_run tool starts it again (answers given "
                               "meanwhile are kept and acted on then)")
    return {
        "run": run.id, "status": run.status, "status_reason": run.status_reason, "goal": run.contract.goal,
        "mode": run.contract.mode, "engine_running": alive, **view,
        "tasks": [{"task": t.id, "state": str(t.state), "assignee": t.assignee, "brief": t.brief[:300],
                   "attempts": t.attempts, "tokens": t.tokens,
                   **pricing.cost_view(t.cost_usd, t.unknown_cost_turns),
                   "verdict": t.verdicts[-1].verdict if t.verdicts else None, "checking": t.id in checking,
                   "checks": [c.listing() for c in t.checks],
                   **({"ladder": ladder_view(t)} if run.contract.ladder else {})} for t in run.tasks.values()],
        "gates": run.contract.gates.model_dump(), "run_end_checks": [c.listing() for c in run.checks],
        "open_checkpoints": [checkpoint(run, cp) for cp in run.open_checkpoints()],
        "tokens": run.totals.tokens, "token_budget": run.token_budget,
        **pricing.cost_view(run.totals.cost_usd, run.totals.unknown_cost_turns, run.totals.subscription_turns),
        "usd_budget": run.usd_budget,
        "cost_by_role": {role: pricing.cost_view(spend.cost_usd, spend.unknown_cost_turns)
                         for role, spend in run.spend_by_role.items()},
        "result": run.result.model_dump(exclude_none=True) if run.result else None,
        "created": run.created, "finished": run.finished,
    }


def ladder_view(task: Task) -> dict[str, Any]:
    """Where a task stands on the failure ladder: level, mode, counts, the open question."""
    state = task.ladder
    return {"label": state.label, "level": str(state.level), "mode": str(state.mode),
            "counted_failures": state.counted_failures, "rewrites": state.rewrites_total,
            "waiting_on": str(state.waiting_on) if state.waiting_on else None,
            "escape_hatches_used": list(state.escape_hatches_used)}


def run_list(project: ProjectPaths) -> list[dict[str, Any]]:
    """Every run of the project, oldest first (a damaged one says so)."""
    listed: list[dict[str, Any]] = []
    for run in runs.list_runs(project):
        if isinstance(run, Run):
            listed.append({"run": run.id, "status": run.status, "mode": run.contract.mode,
                           "goal": run.contract.goal, "tasks": len(run.tasks), "tokens": run.totals.tokens,
                           **pricing.cost_view(run.totals.cost_usd, run.totals.unknown_cost_turns,
                                               run.totals.subscription_turns)})
        else:
            listed.append({"run": run.id, "status": "damaged", "error": run.error.message})
    return listed


def open_checkpoints(project: ProjectPaths, run_id: str | None) -> list[dict[str, Any]]:
    """The open checkpoints of one run, or of every run that has not ended."""
    chosen = [runs.load(project, run_id)] if run_id else runs.active_runs(project)
    return [checkpoint(run, cp) for run in chosen for cp in run.open_checkpoints()]


def checkpoint_run(project: ProjectPaths, checkpoint_id: str, run_id: str | None) -> str:
    """The run whose checkpoint `checkpoint_id` a person answers (the only active run that has it open)."""
    if run_id:
        return runs.resolve_id(project, run_id)
    holding = [run.id for run in runs.active_runs(project) if checkpoint_id in
               {cp.id for cp in run.open_checkpoints()}]
    if len(holding) == 1:
        return holding[0]
    if not holding:
        raise NotFoundError(f"no running run has an open checkpoint {checkpoint_id!r}",
                            "list_checkpoints shows the open ones; pass run= for an ended run")
    raise NotFoundError(f"{len(holding)} runs have an open {checkpoint_id}: {', '.join(holding)}", "pass run=")


def events(project: ProjectPaths, run_id: str) -> str:
    """The latest records of a run's decision log, one JSON object a line."""
    records = runs.recent_events(project, runs.resolve_id(project, run_id), EVENTS_LIMIT)
    return "".join(json.dumps(record, ensure_ascii=False, default=str) + "\n" for record in records)


def sessions(project: ProjectPaths) -> list[dict[str, Any]]:
    """Every session of the project's roles, newest first."""
    return [{"session": r.id, "role": r.owner, "profile": r.profile, "tool": r.tool, "turns": r.turns,
             "tokens": r.totals.tokens, "last_status": r.last_status, "updated": r.updated, "run": r.run_id,
             "task": r.task_id} for r in SessionStore(project.sessions_dir).list()]


def session(project: ProjectPaths, session_id: str) -> dict[str, Any]:
    """One session's record and every turn (prompt, result, usage, status)."""
    sessions_store = SessionStore(project.sessions_dir)
    record = sessions_store.find(session_id)
    return {"session": record.as_dict(), "turns": sessions_store.turns(record)}


def artifacts(project: ProjectPaths, run_id: str) -> list[dict[str, Any]]:
    """The run's manifest of who made which file, each with the index that reads it."""
    run_id = runs.resolve_id(project, run_id)  # the manifest needs no run state read
    entries = runs.manifest(project, run_id)
    return [{"index": index, **entry, "uri": f"agentbox://runs/{run_id}/artifacts/{index}"}
            for index, entry in enumerate(entries)]


def artifact(project: ProjectPaths, run_id: str, index: int) -> str | bytes:
    """The content of manifest entry `index`: text when it is UTF-8, else bytes.

    Agents wrote these files, so only a regular file inside the project, reached through
    no symlink, of at most ARTIFACT_MAX_BYTES, is read.
    """
    listed = artifacts(project, run_id)
    if not 0 <= index < len(listed):
        raise NotFoundError(f"run {run_id} has no artifact {index} (it has {len(listed)})")
    path = Path(str(listed[index]["path"]))
    if not inside(path, project.root) or os.path.realpath(path) != os.path.abspath(path):
        raise NotFoundError(f"artifact {index} ({path}) leads out of the project or through a symlink")
    try:
        data = read_bounded(path, max_bytes=ARTIFACT_MAX_BYTES)
    except FileNotFoundError:
        raise NotFoundError(f"artifact {index} ({path}) no longer exists") from None
    except UnsafeFileError as exc:
        raise NotFoundError(f"artifact {index} ({path}) is not served: it {exc.reason}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data
