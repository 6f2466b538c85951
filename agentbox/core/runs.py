"""The one door of the faces to runs: create, execute, resume, steer, read and follow them.

The CLI, the TUI and the MCP face read and change runs only through this module (the
import-contract test holds them to it): the run store behind it stays private to core.
What every face shows the same way is defined here once: how to answer a checkpoint
(`checkpoint_view(...).answers`), how a run is followed (`RunFollower`, behind `follow` and
`follow_sync`: every face follows through it), whether a run has an engine (`engine_state`). Human commands come in as the typed models of
`engine.commands` and are checked once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

from agentbox.core import store as store_mod
from agentbox.core.config import project as project_mod
from agentbox.core.engine.models import (
    TERMINAL_RUN_STATES,
    Checkpoint,
    Contract,
    Run,
    RunGit,
    no_engine_reason,
)
from agentbox.core.engine.records import ArtifactEntry, Event, as_artifact_entries, as_events
from agentbox.core.engine.run_store import MANIFEST_FILE, RunStore, manifest_problem, new_run_id
from agentbox.core.engine.run_store import DamagedRun as DamagedRun
from agentbox.core.engine.run_store import DamagedRunError as DamagedRunError
from agentbox.core.errors import AgentboxError, NotFoundError, UsageError
from agentbox.core.ids import check_id
from agentbox.core.paths import ProjectPaths

if TYPE_CHECKING:  # git plumbing loads only when a run starts; the engine only when a command is applied
    from agentbox.core.config.models import Mode
    from agentbox.core.engine.commands import Command
    from agentbox.core.graph.model import Graph
    from agentbox.core.workspace import RepoInfo

Workspace = Literal["worktree", "shared"]
"""Where a run's agents write: each task in its own git worktree and branch, or the live tree."""

EventRecord = Event
"""One record of a run's decision log as the engine wrote it (a typed record of `engine.records`)."""
ManifestEntry = ArtifactEntry
"""One entry of a run's artifact manifest (a typed record of `engine.records`)."""
RawCommand = Mapping[str, Any]
"""A human command as JSON (the inbox's form): checked against the command models once, here."""
# A face holds a run it cannot read as the `DamagedRun` (and `DamagedRunError`) imported above.

COMMAND_ACK_TIMEOUT_S = 15.0
"""How long a command waits for a running engine to acknowledge it."""


def create_run(project: ProjectPaths, goal: str, mode: Mode | None = None, graph: str | None = None,
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
    graph_data: Graph | None = None
    graph_file: str | None = None
    if mode == "graph":
        from agentbox.core.graph.load import load_graph, resolve_graph

        name = graph or crew.graph.file
        if not name:
            raise UsageError("graph mode needs a work graph", "pass --graph NAME or set graph.file in crew.yaml")
        path = resolve_graph(name, project).absolute()
        graph_data = load_graph(path, list(crew.roles))
        graph_file = str(path)
    now = time.time()
    store = RunStore(project)
    workspace, info = _workspace_of(project, crew.workspace)
    if workspace == "shared":
        if base is not None:
            raise UsageError(f"--base {base}: this run works in the live tree (a shared workspace), which "
                             "has no other base", "start it without --base, or use `workspace: worktree` in crew.yaml")
        _refuse_a_second_shared_writer(store)
        _refuse_a_cluster_for_the_live_tree()
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


def _workspace_of(project: ProjectPaths, chosen: Workspace | None) -> tuple[Workspace, RepoInfo | None]:
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


def _refuse_a_cluster_for_the_live_tree(run_id: str | None = None) -> None:
    """A shared run's turns read and write the project at its path, which a cluster's nodes do not have:
    with the Ray runner it is refused before anything starts."""
    from agentbox.core.config.user_config import load_user_config

    if load_user_config().runner.kind != "ray":
        return
    what = f"run {run_id} works" if run_id else "this run would work"
    raise UsageError(f"{what} in the project's live tree (a shared workspace), and config.yaml's runner is a "
                     "Ray cluster, whose nodes have no copy of that tree",
                     "set `workspace: worktree` in crew.yaml (the project must be a git repository with a "
                     "commit): each turn then takes its branch to the node; or run it here with "
                     "`runner: {kind: local}` in config.yaml")


def _refuse_a_second_shared_writer(store: RunStore) -> None:
    """Two runs writing one live tree overwrite each other: a shared run waits for the other to end."""
    for other in store.scan():
        if (isinstance(other, Run) and other.contract.workspace == "shared"
                and other.status not in TERMINAL_RUN_STATES and store.engine_running(other.id)):
            raise UsageError(f"run {other.id} is writing this project's live tree (shared workspace)",
                             f"wait for it, cancel it (`agentbox cancel {other.id}`), or use `workspace: worktree` "
                             "(each run in its own branches)")


async def execute(project: ProjectPaths, run_id: str, on_event: Callable[[EventRecord], None] | None = None) -> Run:
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


def send_command(project: ProjectPaths, run_id: str, command: Command | RawCommand) -> tuple[bool, str]:
    """Apply a human command: through the running engine's inbox, or directly when none runs.

    `command` is one of the typed models of `engine.commands` (what the faces pass), or its
    JSON form, which is checked against those models here, once: a malformed one is a
    UsageError and never reaches the inbox.
    """
    from agentbox.core.engine import commands

    typed = commands.parse(dict(command)) if isinstance(command, Mapping) else command
    store = RunStore(project)
    run_id = store.resolve_id(run_id)
    with store.engine_lock(run_id) as mine:
        if mine:
            from agentbox.core.engine.engine import Engine

            engine = Engine.open(project, run_id)
            ok, message = engine.apply_command(typed)
            engine.settle_without_engine()
            engine.save()
            return ok, message
    log = store.events_path(run_id)
    offset = log.stat().st_size if log.exists() else 0  # the ack comes after the post: read only what is new
    command_id = store.post_command(run_id, commands.as_json(typed))
    deadline = time.monotonic() + COMMAND_ACK_TIMEOUT_S
    while time.monotonic() < deadline:
        events, offset = store.events(run_id, offset)
        for event in events:
            if event.get("type") == "command" and event.get("command_id") == command_id:
                return bool(event.get("ok")), str(event.get("what"))
        if not store.engine_running(run_id):
            return send_command(project, run_id, typed.model_copy(update={"id": command_id}))
        time.sleep(0.05)
    return True, f"queued for the engine (command {command_id}); it will apply it shortly"


def load(project: ProjectPaths, run_id: str | None) -> Run:
    """A run's state (the latest when `run_id` is None), checked: a damaged run is a DamagedRunError."""
    store = RunStore(project)
    return store.load_checked(store.resolve_id(run_id), full=False)


def list_runs(project: ProjectPaths) -> list[Run | DamagedRun]:
    """Every run of the project, oldest first; a run that cannot be read comes as a `DamagedRun`."""
    return RunStore(project).scan()


def history(project: ProjectPaths) -> tuple[list[tuple[Run, list[Event]]], list[DamagedRun]]:
    """Every readable run of the project with its decision log, oldest first (`agentbox stats`), and the damaged ones."""
    store = RunStore(project)
    readable, damaged = [], []
    for run in store.scan():
        if isinstance(run, DamagedRun):
            damaged.append(run)
            continue
        logged, _ = store.events(run.id)
        last = max((e.get("seq", 0) for e in logged), default=0)  # events saved with the state, not yet logged
        readable.append((run, [*logged, *as_events([e for e in run.outbox if e.get("seq", 0) > last])]))
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


# ----------------------------------------------------------------------------- the door's reads
def resolve_id(project: ProjectPaths, run_id: str | None) -> str:
    """The full id of the run `run_id` names (`None`/`latest`: the latest run; a unique prefix or end of an id)."""
    return RunStore(project).resolve_id(run_id)


def read(project: ProjectPaths, run_id: str) -> Run:
    """A run's state as it is on disk, its logs not checked (`load` checks them)."""
    return RunStore(project).load(run_id)


def run_ids(project: ProjectPaths) -> list[str]:
    """The ids of the project's runs, oldest first."""
    return RunStore(project).list_ids()


def manifest(project: ProjectPaths, run_id: str) -> list[ManifestEntry]:
    """The run's manifest of who made which file (well-formed entries, in the order they were made)."""
    return RunStore(project).manifest(run_id)


def resume_target(project: ProjectPaths, run_ref: str) -> str:
    """The id of the run `agentbox run --resume RUN` continues; a damaged run is refused here, before anything starts."""
    store = RunStore(project)
    run_id = store.resolve_id(run_ref)
    run = store.load_checked(run_id)
    if run.contract.workspace == "shared":
        _refuse_a_cluster_for_the_live_tree(run_id)
    return run_id


_SAVE_TIME = re.compile(rb'"updated":[-+0-9.eE]+,"finished":')
"""run.json's top-level save time (compact JSON; only the run's own `updated` precedes `finished`)."""
_SAVES = re.compile(rb'^(\{"id":"[^"\\]*","saves":)\d+')
"""run.json's save counter (second in the file), which every save moves."""


def read_run_if_changed(project: ProjectPaths, run_id: str, last_digest: bytes | None) -> tuple[Run | None, bytes]:
    """The run, or None when its state differs from `last_digest` only by run.json's save time.

    A running engine saves its state several times a second even when nothing happened;
    hashing the bytes is far cheaper than validating a big run again. If the file's
    layout ever changes, every read simply counts as a change.
    """
    run_store = RunStore(project)
    state = run_store.read_state(run_id)  # bounded, regular files only; "no run" / damaged errors
    snapshot = _SAVES.sub(rb"\1", _SAVE_TIME.sub(b'"finished":', state.snapshot, count=1), count=1)
    digest = hashlib.blake2b(snapshot, digest_size=16)
    digest.update(state.journal)  # a journal line is only written for a real change
    if digest.digest() == last_digest:
        return None, digest.digest()
    return run_store.parse_state(run_id, state), digest.digest()


def read_events(project: ProjectPaths, run_id: str, offset: int) -> tuple[list[EventRecord], int]:
    """Decision-log records appended since byte `offset`, and the next offset."""
    return RunStore(project).events(run_id, offset)


def tail_events(project: ProjectPaths, run_id: str, limit: int, chunk: int = 1 << 18) -> tuple[list[EventRecord], int]:
    """The last `limit` decision-log records and the offset of the end of the log.

    Reads backwards from the end in chunks, so opening a run with a huge log costs only
    the records shown; follow it afterwards with `read_events` from the returned offset.
    """
    path = RunStore(project).events_path(run_id)
    try:
        handle = os.fdopen(store_mod.open_regular(path), "rb")
    except FileNotFoundError:
        return [], 0
    with handle:
        handle.seek(0, os.SEEK_END)
        size = handle.tell()
        data = handle.read(0)
        end = size
        start = size
        while start > 0:
            start = max(0, start - chunk)
            handle.seek(start)
            data = handle.read(end - start) + data
            end = start
            if data.count(b"\n") > limit:
                break
    last_newline = data.rfind(b"\n")
    if last_newline < 0:
        return [], size - len(data)
    complete_end = size - len(data) + last_newline + 1
    lines = data[: last_newline + 1].splitlines()
    if start > 0:
        lines = lines[1:]  # the first line may be cut
    records: list[dict[str, Any]] = []
    for raw in lines[-limit:] if limit else []:
        if raw.strip() and (record := store_mod.parse_line(raw)) is not None:
            records.append(record)
    return as_events(records), complete_end


def recent_events(project: ProjectPaths, run_id: str, limit: int) -> list[EventRecord]:
    """The last `limit` records of a run's decision log: a look at it, not a follow (`RunFollower` follows)."""
    return tail_events(project, run_id, limit)[0]


def task_events(project: ProjectPaths, run_id: str, task_id: str, offset: int = 0,
                limit: int = 500) -> tuple[list[EventRecord], int]:
    """The last `limit` decision-log records about one task from byte `offset`, and the next offset.

    A task detail view reads the log once, then follows it from the returned offset; only
    complete lines are read (a line being appended is left for the next call).
    """
    needle = json.dumps(task_id, ensure_ascii=False).encode("utf-8")
    marker = b'"task": ' + needle
    path = RunStore(project).events_path(run_id)
    found: list[dict[str, Any]] = []
    try:
        with os.fdopen(store_mod.open_regular(path), "rb") as handle:
            handle.seek(offset)
            for raw in handle:
                if not raw.endswith(b"\n"):
                    break
                offset += len(raw)
                if marker in raw:
                    record = store_mod.parse_line(raw)
                    if record is not None and record.get("task") == task_id:
                        found.append(record)
    except FileNotFoundError:
        return [], offset
    return as_events(found[-limit:]), offset


def read_manifest(project: ProjectPaths, run_id: str, offset: int = 0) -> tuple[list[ManifestEntry], int]:
    """Well-formed artifact manifest entries added since byte `offset`, and the next offset."""
    entries, offset = store_mod.read_jsonl(RunStore(project).artifacts_dir(run_id) / MANIFEST_FILE, offset)
    return as_artifact_entries([e for e in entries if manifest_problem(e) is None]), offset


# ----------------------------------------------------------------------------- following a run
FOLLOW_POLL_S = 0.25
"""How often a followed run is looked at (by a face that looks rather than being told of changes)."""
FOLLOW_ENGINE_GRACE_S = 5.0
"""How long a followed run may show no engine (one just detached is still starting) before following gives up."""
FOLLOW_TAIL = 200
"""Records of the decision log a follower opening at the log's end ("tail") reads first."""

FollowPart = Literal["run", "events", "manifest"]
"""What one look at a followed run reads: its state, its decision log, its artifact manifest."""
EventsFrom = Literal["new", "all", "tail", "none"]
"""Where a follower starts reading the decision log: where it ends now, its start, its last records, not at all."""
_FIELDS: dict[str, tuple[str, ...]] = {"run": ("stamp", "digest"), "events": ("events", "seq"), "manifest": ("manifest",)}
_serials = itertools.count(1)


@dataclass(frozen=True)
class FollowPosition:
    """Where a follower stands in one run: how far its log and manifest were read, which state it last saw."""

    events: int | None = None
    """Byte offset the decision log is read from next (None: not read yet)."""
    manifest: int | None = None
    """Byte offset the artifact manifest is read from next (None: not read yet)."""
    stamp: tuple[int, ...] | None = None
    """The state files' stat when the state was last read (unchanged: the state is not read again)."""
    digest: bytes | None = None
    """What the state last read hashed to, its save time left out (None: not read yet)."""
    seq: int = 0
    """The newest event handed on from a run's saved outbox before its log had it: a log record at
    or below it was handed on already."""


@dataclass(frozen=True)
class RunLook:
    """What one look at a followed run read, from where (`since`) to where (`at`).

    A look only reads: it changes nothing of its follower, so a face may take it in a thread
    and hand it back to the thread that owns the follower (`RunFollower.take`).
    """

    run_id: str
    parts: tuple[FollowPart, ...]
    since: FollowPosition
    at: FollowPosition
    run: Run | None = None
    """The run, when its state was read and differs by more than its save time."""
    events: tuple[EventRecord, ...] = ()
    """Decision-log records read (oldest first)."""
    manifest: tuple[ManifestEntry, ...] = ()
    """Well-formed artifact manifest entries read."""
    failure: AgentboxError | None = None
    """Why a part could not be read (the parts after it were not read either)."""
    source: int = 0
    """The follower the look was made by."""

    @property
    def opening_events(self) -> bool:
        """The log was read for the first time (its records open the view rather than add to it)."""
        return self.since.events is None

    @property
    def opening_manifest(self) -> bool:
        """The manifest was read for the first time."""
        return self.since.manifest is None


@dataclass(frozen=True)
class RunUpdate:
    """What a followed run did since the last update."""

    run: Run
    """The run as it now stands."""
    events: tuple[EventRecord, ...] = ()
    """Decision-log records appended since the last update, oldest first."""
    changed: bool = False
    """The run's state changed since the last update (the first update always counts as changed)."""
    manifest: tuple[ManifestEntry, ...] = ()
    """Artifact manifest entries added since the last update (a follower made with `manifest=True`)."""

    @property
    def open_checkpoints(self) -> list[Checkpoint]:
        """What the run waits on a person for."""
        return self.run.open_checkpoints()

    @property
    def settled(self) -> bool:
        """The run ended or needs a person: waiting longer changes nothing by itself."""
        return self.run.status in TERMINAL_RUN_STATES or bool(self.run.open_checkpoints())


def _seq_of(record: Mapping[str, Any]) -> int:
    """A log record's seq (0 when it has none that is a number: a damaged or hand-made line)."""
    seq = record.get("seq")
    return seq if type(seq) is int else 0


class RunFollower:
    """Where a face is in following one run: how far its log and manifest were read, which state was seen.

    Every face follows a run through one of these, so log offsets, change detection and what
    a first read shows are written once. A face that looks at the run now and then calls
    `poll()` (the CLI's person, MCP's `follow`, through `follow`/`follow_sync`). The dashboard,
    told of changes by the file watcher, asks a `reader` for the parts that changed on its UI
    thread, runs it in a thread, and `take`s the look back on the UI thread: the follower's
    state is only ever changed by the thread that owns it.

    `events`: "new" reads the log from where it ends now, "all" from its start, "tail" its last
    `tail` records first (a big log opens at its end), "none" not at all. `task`: only the
    log's records about that task (the last `tail` of them first). `manifest`: `poll()` reads
    the artifact manifest too. `at`: where to start (a position saved from an earlier look).
    """

    def __init__(self, project: ProjectPaths, run_id: str, *, events: EventsFrom = "new", tail: int = FOLLOW_TAIL,
                 task: str | None = None, manifest: bool = False, at: FollowPosition | None = None) -> None:
        self.project = project
        self.run_id = run_id
        self._store = RunStore(project)
        self._events: EventsFrom = events
        self._tail = tail
        self._task = task
        self._serial = next(_serials)
        self.parts: tuple[FollowPart, ...] = ("events", "manifest", "run") if manifest else ("events", "run")
        """What `poll()` reads."""
        self.position = at or FollowPosition()
        """Where the follower stands (changed only by `take`)."""
        self.run: Run | None = None
        """The run as last read."""

    @property
    def offset(self) -> int | None:
        """Byte offset the decision log is read from next (None: not read yet)."""
        return self.position.events

    @property
    def manifest_offset(self) -> int | None:
        """Byte offset the artifact manifest is read from next (None: not read yet)."""
        return self.position.manifest

    def reader(self, *parts: FollowPart) -> Callable[[], RunLook]:
        """A look at `parts` from where the follower stands now, to be run on any thread."""
        since = self.position
        return partial(self._look, since, parts)

    def take(self, look: RunLook) -> bool:
        """Move to where `look` ended; False (nothing moves) when it is another follower's, or was
        made from a position this follower has left (a look overtaken by another: its records are
        shown already)."""
        if look.source != self._serial:
            return False
        fields = [name for part in look.parts for name in _FIELDS[part]]
        if any(getattr(look.since, name) != getattr(self.position, name) for name in fields):
            return False
        self.position = dataclasses.replace(self.position, **{name: getattr(look.at, name) for name in fields})
        if look.run is not None:
            self.run = look.run
        return True

    def poll(self) -> RunUpdate:
        """What is new: the log's new records (and manifest entries), then the run (re-read only when it changed)."""
        look = self.reader(*self.parts)()
        if look.failure is not None:
            raise look.failure
        self.take(look)
        assert self.run is not None
        return RunUpdate(self.run, look.events, look.run is not None, look.manifest)

    # ------------------------------------------------------------------ one look (any thread)
    def _look(self, since: FollowPosition, parts: tuple[FollowPart, ...]) -> RunLook:
        at, run, failure = since, None, None
        events: tuple[EventRecord, ...] = ()
        entries: tuple[ManifestEntry, ...] = ()
        if "run" in parts and "events" in parts:  # the state first: its outbox holds what the log may not have yet
            parts = ("run", *(part for part in parts if part != "run"))
        try:
            for part in parts:
                if part == "events":
                    opening = at.events is None
                    found, offset = self._read_events(at.events)
                    events = tuple(e for e in found if not at.seq or _seq_of(e) > at.seq)
                    unlogged: tuple[EventRecord, ...] = ()
                    if run is not None and not (opening and self._events == "new"):
                        unlogged = self._unlogged(run, max([at.seq, *(_seq_of(e) for e in events)]))
                    events += unlogged
                    at = dataclasses.replace(at, events=offset, seq=max([at.seq, *map(_seq_of, unlogged)]))
                elif part == "manifest":
                    found_entries, offset = read_manifest(self.project, self.run_id, at.manifest or 0)
                    entries = tuple(found_entries)
                    at = dataclasses.replace(at, manifest=offset)
                else:
                    run, stamp, digest = self._read_run(at)
                    at = dataclasses.replace(at, stamp=stamp, digest=digest)
        except AgentboxError as exc:  # a damaged log or manifest opens empty, is read from where it was
            failure = exc
            at = dataclasses.replace(at, events=0 if at.events is None and "events" in parts and
                                     self._events != "none" else at.events,
                                     manifest=0 if at.manifest is None and "manifest" in parts else at.manifest)
        return RunLook(self.run_id, parts, since, at, run, events, entries, failure, self._serial)

    def _unlogged(self, run: Run, after: int) -> tuple[EventRecord, ...]:
        """The events of `run`'s saved state past `after` that its log did not hold when read.

        The engine saves its state, events in its outbox, and then appends them to the log: a
        look in between sees the new state (a checkpoint open, the run done) and an old log.
        """
        if self._events == "none":
            return ()
        return tuple(as_events([e for e in run.outbox  # in seq order: the engine appends to it
                                if _seq_of(e) > after and (self._task is None or e.get("task") == self._task)]))

    def _read_events(self, offset: int | None) -> tuple[list[EventRecord], int | None]:
        if self._events == "none":
            return [], offset
        if offset is None and self._task is None and self._events == "tail":
            return tail_events(self.project, self.run_id, self._tail)
        if offset is None:
            log = self._store.events_path(self.run_id)
            offset = 0 if self._events != "new" or not log.exists() else log.stat().st_size
        if self._task is not None:
            return task_events(self.project, self.run_id, self._task, offset, self._tail)
        return self._store.events(self.run_id, offset)

    def _read_run(self, at: FollowPosition) -> tuple[Run | None, tuple[int, ...] | None, bytes | None]:
        """The run when its state changed since `at` (the first read always), with its stamp and digest.

        Its files are looked at first (a stat); when they changed, the state is read and parsed
        only if it differs by more than its save time.
        """
        try:
            stamp: tuple[int, ...] | None = self._store.state_stamp(self.run_id)
        except OSError:  # the run's directory went: the read says so
            stamp = None
        if stamp is not None and at.digest is not None and stamp == at.stamp:
            return None, stamp, at.digest
        run, digest = read_run_if_changed(self.project, self.run_id, at.digest)
        return run, stamp, digest


def follow_sync(project: ProjectPaths, run_id: str, wait: Callable[[], bool], *,
                events: EventsFrom = "new") -> Iterator[RunUpdate]:
    """Follow a run from a thread: an update at every look, then `wait()` (False: stop following).

    A look that cannot read the run (caught mid-save, briefly unreadable) is skipped: the
    next one reads it again.
    """
    follower = RunFollower(project, run_id, events=events)
    while True:
        try:
            update = follower.poll()
        except (AgentboxError, OSError, ValueError):
            update = None
        if update is not None:
            yield update
        if not wait():
            return


async def follow(project: ProjectPaths, run_id: str, wait_s: float, *, from_start: bool = False,
                 poll_s: float = FOLLOW_POLL_S, grace_s: float = FOLLOW_ENGINE_GRACE_S,
                 sleep: Callable[[float], Any] | None = None) -> AsyncIterator[RunUpdate]:
    """Follow a run until it ends, needs a person, or `wait_s` passes, or no engine drives it past
    `grace_s`: an update at every look; the last one holds the run as it then stands."""
    import asyncio

    pause = sleep or asyncio.sleep
    follower = RunFollower(project, run_id, events="all" if from_start else "new")
    started = time.monotonic()
    while True:
        update = follower.poll()
        yield update
        elapsed = time.monotonic() - started
        if update.settled or elapsed >= wait_s:
            return
        if elapsed > grace_s and not engine_alive(project, run_id):
            return  # nobody drives it: waiting longer would change nothing
        await pause(poll_s)


# ----------------------------------------------------------------------------- how to answer a checkpoint
AnswerKind = Literal["approve_plan", "replan", "merge", "merge_squash", "look", "approve_task", "rework_task",
                     "apply", "answer"]
"""Ways to answer a checkpoint: approve or re-plan a plan; merge a done run (as one commit) or look at
its diff first; approve or send back a task in review; apply an advisor's patch; answer in words."""


@dataclass(frozen=True)
class AnswerWay:
    """One way to answer an open checkpoint: what it does and, for an answer in words, what the words may be."""

    kind: AnswerKind
    what: str
    """What it does, in a few words ("approve the plan", "send back")."""
    task: str | None = None
    """The task it acts on (approve, rework, apply)."""


@dataclass(frozen=True)
class CheckpointView:
    """An open checkpoint of a run with every way to answer it: what each face renders, in its own commands."""

    run_id: str
    checkpoint: Checkpoint
    answers: tuple[AnswerWay, ...]
    words: tuple[str, ...] = ()
    """What an answer in words may say (a word, or a placeholder in capitals); empty: anything."""
    root_cause: bool = False
    """An exit of the failure ladder other than abandon is followed by a one-sentence root cause with evidence."""

    def offers(self, kind: AnswerKind) -> bool:
        """True when the checkpoint can be answered that way."""
        return any(way.kind == kind for way in self.answers)


ANSWER_WORDS: dict[str, tuple[str, ...]] = {
    "retry_escalation": ("retry [NOTE]", "cancel"),
    "budget": ("TOKENS to add", "continue", "cancel"),
    "run_budget": ("raise TOKENS", "cancel"),
    "deliver": ("merge", "squash", "later"),
}
"""What an answer in words to a checkpoint of each kind may say (the engine's reading of answers decides)."""
ROOT_CAUSE = "an exit but abandon is followed by a one-sentence root cause with evidence"
"""What a failure-ladder answer other than abandon must carry."""


def checkpoint_view(run: Run, cp: Checkpoint) -> CheckpointView:
    """Checkpoint `cp` of `run` with the ways to answer it, defined here once for every face."""
    if cp.kind == "plan_approval":
        return CheckpointView(run.id, cp, (AnswerWay("approve_plan", "approve the plan"), AnswerWay("replan", "re-plan")))
    if cp.kind == "deliver":
        return CheckpointView(run.id, cp, (AnswerWay("merge", "merge"), AnswerWay("merge_squash", "one commit"),
                                           AnswerWay("look", "look first")), ANSWER_WORDS["deliver"])
    ways: list[AnswerWay] = []
    task = run.tasks.get(cp.task or "")
    if task is not None and task.state == "reviewing":
        ways += [AnswerWay("approve_task", "approve", task.id), AnswerWay("rework_task", "send back", task.id)]
    if cp.kind == "ladder" and "apply" in cp.options and task is not None:
        ways.append(AnswerWay("apply", "apply", task.id))
    ways.append(AnswerWay("answer", "answer"))
    if cp.kind == "ladder":
        words, cause = cp.ladder_answers()
        return CheckpointView(run.id, cp, tuple(ways), tuple(words), cause)
    return CheckpointView(run.id, cp, tuple(ways), ANSWER_WORDS.get(cp.kind, ()))
