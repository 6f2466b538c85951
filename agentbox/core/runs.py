"""Run services for the faces: create, execute, resume, steer and read runs."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any, Literal

from agentbox.core.config import project as project_mod
from agentbox.core.engine.models import (
    TERMINAL_RUN_STATES,
    Contract,
    Run,
    RunGit,
    check_id,
    no_engine_reason,
)
from agentbox.core.engine.run_store import DamagedRun, DamagedRunError, RunStore, new_run_id
from agentbox.core.errors import NotFoundError, UsageError
from agentbox.core.paths import ProjectPaths

if TYPE_CHECKING:  # git plumbing loads only when a run starts
    from agentbox.core.workspace import RepoInfo

COMMAND_ACK_TIMEOUT_S = 15.0
"""How long a command waits for a running engine to acknowledge it."""


def create_run(project: ProjectPaths, goal: str, mode: str | None = None, graph: str | None = None,
               success_criteria: list[str] | None = None, base: str | None = None) -> Run:
    """Validate the crew (and graph) and write a new run's directory; the engine starts it.
    `base`: a branch or commit the run starts from instead of the person's HEAD (worktree runs)."""
    if not goal.strip():
        raise UsageError("the goal is empty", 'say what the crew should do: agentbox run "..."')
    if graph is not None and mode not in (None, "graph"):
        raise UsageError(f"a work graph is for graph mode, not {mode} mode",
                         f"drop --graph, or run it as a graph: --mode graph --graph {graph}")
    crew = project_mod.load_checked_crew(project)
    mode = "graph" if graph is not None else mode or crew.mode  # a graph given is a graph run
    graph_data = graph_file = None
    if mode == "graph":
        from agentbox.core.graph.load import load_graph, resolve_graph

        name = graph or crew.graph.file
        if not name:
            raise UsageError("graph mode needs a work graph", "pass --graph NAME or set graph.file in crew.yaml")
        path = resolve_graph(name, project).absolute()
        graph_data = load_graph(path, list(crew.roles)).model_dump(by_alias=True)
        graph_file = str(path)
    now = time.time()
    store = RunStore(project)
    workspace, info = _workspace_of(project, crew.workspace)
    if workspace == "shared":
        if base is not None:
            raise UsageError(f"--base {base}: this run works in the live tree (a shared workspace), which "
                             "has no other base", "start it without --base, or use `workspace: worktree` in crew.yaml")
        _refuse_a_second_shared_writer(store)
    run = Run(
        id=new_run_id(now),
        contract=Contract(goal=goal.strip(), mode=mode, success_criteria=success_criteria or [],
                          limits=crew.limits, settings=getattr(crew, mode),
                          roles={name: role.profile for name, role in crew.roles.items()}, graph=graph_data,
                          graph_file=graph_file, workspace=workspace, deliver=crew.deliver,
                          workspace_setup=crew.workspace_setup, checks=crew.checks, gates=crew.gates,
                          ladder=crew.ladder, no_compromise=list(crew.no_compromise)),
        status="planning",
        created=now,
    )
    if workspace == "worktree":
        from agentbox.core import workspace as git

        start = git.named_base(project.root, base, info) if base is not None else git.snapshot_base(project.root, info)
        branch = git.ensure_integration_branch(project.root, run.id, start)
        run.git = RunGit(base=start.commit, head=start.head, branch=start.branch, dirty=start.dirty,
                         integration_branch=branch, named_base=base)
    store.create(run)
    return run


def _workspace_of(project: ProjectPaths, chosen: str | None) -> tuple[str, RepoInfo | None]:
    """crew.yaml's `workspace`, or the default: `worktree` at the top of a git repository with
    a commit; with the repository's facts (None when git was not asked: a `shared` crew)."""
    from agentbox.core.workspace import GitError, repo_info

    if chosen == "shared":
        return "shared", None
    try:
        info = repo_info(project.root)
    except GitError:  # git refuses the repository (another user's): only an error when worktrees were asked for
        if chosen == "worktree":
            raise
        info = None
    usable = info is not None and info.top.resolve() == project.root.resolve()
    if chosen == "worktree" and not usable:
        raise UsageError(f"crew.yaml asks for `workspace: worktree`, but {project.root} is not the top of a git "
                         "repository with at least one commit",
                         "run `git init && git add -A && git commit -m start` there, or set `workspace: shared`")
    return chosen or ("worktree" if usable else "shared"), info


def _refuse_a_second_shared_writer(store: RunStore) -> None:
    """Two runs writing one live tree overwrite each other: a shared run waits for the other to end."""
    for other in store.scan():
        if (isinstance(other, Run) and other.contract.workspace == "shared"
                and other.status not in TERMINAL_RUN_STATES and store.engine_running(other.id)):
            raise UsageError(f"run {other.id} is writing this project's live tree (shared workspace)",
                             f"wait for it, cancel it (`agentbox cancel {other.id}`), or use `workspace: worktree` "
                             "(each run in its own branches)")


async def execute(project: ProjectPaths, run_id: str, on_event: Any = None) -> Run:
    """Drive a run in this process until it ends (resumes from disk if it was interrupted)."""
    from agentbox.core.engine.engine import Engine

    engine = Engine.open(project, run_id, on_event=on_event)
    return await engine.execute()


def detach(project: ProjectPaths, run_id: str) -> int:
    """Start the engine of `run_id` in a background process; returns its pid."""
    log = RunStore(project).dir(run_id) / "engine.log"
    with log.open("ab") as handle:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agentbox", "--project", str(project.root), "run", "--resume", run_id, "--quiet"],
            stdin=subprocess.DEVNULL, stdout=handle, stderr=handle, start_new_session=True, cwd=str(project.root),
        )
    return proc.pid


def send_command(project: ProjectPaths, run_id: str, command: dict[str, Any]) -> tuple[bool, str]:
    """Apply a human command: through the running engine's inbox, or directly when none runs.

    The command is checked against the engine's command models first: a malformed one is
    a UsageError and never reaches the inbox.
    """
    from agentbox.core.engine import commands
    from agentbox.core.engine.engine import Engine

    commands.parse(command)
    store = RunStore(project)
    run_id = store.resolve_id(run_id)
    with store.engine_lock(run_id) as mine:
        if mine:
            engine = Engine.open(project, run_id)
            ok, message = engine.apply_command(command)
            engine.settle_without_engine()
            engine.save()
            return ok, message
    log = store.events_path(run_id)
    offset = log.stat().st_size if log.exists() else 0  # the ack comes after the post: read only what is new
    command_id = store.post_command(run_id, command)
    deadline = time.monotonic() + COMMAND_ACK_TIMEOUT_S
    while time.monotonic() < deadline:
        events, offset = store.events(run_id, offset)
        for event in events:
            if event.get("type") == "command" and event.get("command_id") == command_id:
                return bool(event.get("ok")), str(event.get("what"))
        if not store.engine_running(run_id):
            return send_command(project, run_id, {**command, "id": command_id})
        time.sleep(0.05)
    return True, f"queued for the engine (command {command_id}); it will apply it shortly"


def load(project: ProjectPaths, run_id: str | None) -> Run:
    """A run's state (the latest when `run_id` is None), checked: a damaged run is a DamagedRunError."""
    store = RunStore(project)
    return store.load_checked(store.resolve_id(run_id), full=False)


def list_runs(project: ProjectPaths) -> list[Run | DamagedRun]:
    """Every run of the project, oldest first; a run that cannot be read comes as a `DamagedRun`."""
    return RunStore(project).scan()


def history(project: ProjectPaths) -> tuple[list[tuple[Run, list[dict[str, Any]]]], list[DamagedRun]]:
    """Every readable run of the project with its decision log, oldest first (`agentbox stats`), and the damaged ones."""
    store = RunStore(project)
    readable, damaged = [], []
    for run in store.scan():
        if isinstance(run, DamagedRun):
            damaged.append(run)
            continue
        logged, _ = store.events(run.id)
        last = max((e.get("seq", 0) for e in logged), default=0)  # events saved with the state, not yet logged
        readable.append((run, [*logged, *(e for e in run.outbox if e.get("seq", 0) > last)]))
    return readable, damaged


def find_task_run(project: ProjectPaths, task_id: str, run_id: str | None) -> str:
    """The run holding `task_id` (the given run, else the latest run that has it)."""
    return resolve_task(project, task_id, run_id)[0]


def resolve_task(project: ProjectPaths, task_id: str, run_id: str | None) -> tuple[str, str]:
    """(run id, task id) of the task `task_id` names: its id or a unique prefix of it, in the given
    run, else in the latest run that has such a task (a prefix naming several lists them)."""
    from agentbox.core.ids import by_prefix

    check_id("task", task_id)
    store = RunStore(project)
    if run_id:
        run = store.load(store.resolve_id(run_id))
        found = by_prefix("task", task_id, run.tasks, where=f" in run {run.id}")
        return run.id, found or task_id  # a task the run has not: the command says so
    for candidate in reversed(store.list_ids()):
        try:
            found = by_prefix("task", task_id, store.load(candidate).tasks, where=f" in run {candidate}")
        except DamagedRunError:
            continue
        if found is not None:
            return candidate, found
    raise NotFoundError(f"no run has a task {task_id!r}", "pass --run RUN")


def resolve_checkpoint(project: ProjectPaths, run_id: str | None, checkpoint_id: str) -> tuple[str, str]:
    """(run id, checkpoint id) of the checkpoint `checkpoint_id` (its id, a unique prefix, or its number) names."""
    from agentbox.core.ids import by_prefix

    check_id("checkpoint", checkpoint_id)
    store = RunStore(project)
    run = store.load(store.resolve_id(run_id))
    known = list(run.checkpoints)
    given = f"cp-{checkpoint_id}" if checkpoint_id.isdigit() else checkpoint_id
    return run.id, by_prefix("checkpoint", given, known, where=f" in run {run.id}") or checkpoint_id


def active_runs(project: ProjectPaths) -> list[Run]:
    """Runs that have not ended (done, failed, cancelled), oldest first; damaged ones are left out."""
    from agentbox.core.engine.models import TERMINAL_RUN_STATES

    return [r for r in list_runs(project) if isinstance(r, Run) and r.status not in TERMINAL_RUN_STATES]


def the_active_run(project: ProjectPaths, command: str) -> str:
    """The run a command without a run id means: the only active run (else the latest run).

    Several active runs are a UsageError listing them: picking one silently could pause or
    cancel the wrong run.
    """
    active = active_runs(project)
    if len(active) == 1:
        return active[0].id
    if not active:
        return RunStore(project).resolve_id(None)
    listing = "; ".join(f"{r.id} ({r.status}: {r.contract.goal[:40]})" for r in active)
    raise UsageError(f"{len(active)} runs are active: {listing}",
                     f"name one: `agentbox {command} {active[-1].id}`")


def plan_checkpoint(project: ProjectPaths, run_id: str | None, checkpoint_id: str | None = None) -> tuple[str, str]:
    """(run id, checkpoint id) of a plan waiting for approval.

    With `checkpoint_id`, that checkpoint of `run_id` must be an open plan approval; without
    it, the open plan approval of `run_id`, or of the only run that has one.
    """
    store = RunStore(project)
    if run_id is None and checkpoint_id is None:
        waiting = [(r.id, c.id) for r in active_runs(project) for c in r.checkpoints.values()
                   if c.kind == "plan_approval" and c.status == "open"]
        if not waiting:
            raise NotFoundError("no plan waits for approval", "`agentbox status` shows what the runs wait for")
        if len(waiting) > 1:
            raise UsageError(f"{len(waiting)} plans wait for approval: "
                             + ", ".join(f"{run} {cp}" for run, cp in waiting),
                             f"name one: `agentbox approve {waiting[-1][0]} {waiting[-1][1]}`")
        return waiting[0]
    run = store.load_checked(store.resolve_id(run_id), full=False)
    if checkpoint_id is None:
        open_plans = [c.id for c in run.checkpoints.values() if c.kind == "plan_approval" and c.status == "open"]
        if not open_plans:
            raise NotFoundError(f"no plan of run {run.id} waits for approval",
                                f"`agentbox status {run.id}` shows what it waits for")
        return run.id, open_plans[-1]
    check_id("checkpoint", checkpoint_id)
    from agentbox.core.ids import by_prefix

    given = f"cp-{checkpoint_id}" if checkpoint_id.isdigit() else checkpoint_id
    cp = run.checkpoints.get(by_prefix("checkpoint", given, run.checkpoints, where=f" in run {run.id}") or "")
    if cp is None:
        open_ids = ", ".join(c.id for c in run.open_checkpoints()) or "(none open)"
        raise NotFoundError(f"no checkpoint {checkpoint_id!r} in run {run.id}", f"open checkpoints: {open_ids}")
    if cp.kind != "plan_approval":
        raise UsageError(f"{cp.id} is a {cp.kind.replace('_', ' ')} checkpoint, not a plan to approve",
                         f'answer it: agentbox answer {run.id} {cp.id} "..."')
    if cp.status != "open":
        raise UsageError(f"the plan of {cp.id} was already answered: {cp.answer!r}")
    return run.id, cp.id


def engine_alive(project: ProjectPaths, run_id: str) -> bool:
    """True when an engine process holds the run."""
    return RunStore(project).engine_running(run_id)


EngineState = Literal["running", "starting", "stopped", "ended"]
"""Whether a run has an engine: one holds it; one was just started for it; none, though the run
has not ended (the engine was interrupted, killed or the machine restarted); the run ended."""
ENGINE_START_GRACE_S = 10.0
"""How long a new run may go without an engine before it counts as stopped (a detached engine
takes a moment to start)."""
ENGINE_STOPPED = "engine not running"
"""What every face calls a run whose engine is gone."""


def engine_state(run: Run, alive: bool, now: float) -> EngineState:
    """The engine state of `run`, given whether an engine holds its lock (`alive`) at time `now`."""
    if run.status in TERMINAL_RUN_STATES:
        return "ended"
    if alive:
        return "running"
    if run.engine is None and not run.mode_started and now - run.created < ENGINE_START_GRACE_S:
        return "starting"
    return "stopped"


def resume_command(run_id: str) -> str:
    """The command a person types to start a stopped run's engine again."""
    return f"agentbox run --resume {run_id}"


def stopped_while(run: Run) -> str:
    """What a run whose engine is gone was at: its status, and the reason when it says more."""
    reason = run.status_reason if run.status_reason != no_engine_reason(run.id) else None
    return run.status + (f" ({reason})" if reason else "")


def stopped_summary(run: Run) -> str:
    """One line for a run whose engine is gone: what it was at and how to go on."""
    return f"{ENGINE_STOPPED}: the run stopped while {stopped_while(run)}; `{resume_command(run.id)}` continues it"


def resume_engine(project: ProjectPaths, run_id: str) -> int:
    """Start the engine of a run that has not ended and has none, in the background; its pid."""
    store = RunStore(project)
    run_id = store.resolve_id(run_id)
    run = store.load_checked(run_id, full=False)
    if run.status in TERMINAL_RUN_STATES:
        raise UsageError(f"run {run_id} has ended ({run.status}): it has no engine to resume",
                         'start a new run: agentbox run "GOAL"')
    if store.engine_running(run_id):
        raise UsageError(f"run {run_id} already has an engine running", "watch it with `agentbox status` or the dashboard")
    return detach(project, run_id)
