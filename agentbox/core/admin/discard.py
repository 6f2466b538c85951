"""Throwing a run away: its engine stopped, its worktrees, branches, refs and state removed.

`plan` says what `discard` would remove (for the person to confirm); `discard` does it in
this order: a live run is cancelled and its engine waited for (the engine stops first, so
nothing writes while the rest goes); then, under the run's engine lock (no engine can start
meanwhile), turns left by a killed engine are stopped, the run's git objects are removed
(`workspace.clean(discard=True)`: unmerged work included), the sessions that worked for the
run lose their link to it (their history stays the role's), and the run's directory is
renamed out of the runs list before it is deleted, so no reader sees half a run.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from agentbox.core.agents.sessions import SessionStore
from agentbox.core.engine.models import TERMINAL_RUN_STATES, Run
from agentbox.core.engine.run_store import DamagedRunError, RunStore
from agentbox.core.errors import AgentboxError, UsageError
from agentbox.core.paths import ProjectPaths

ENGINE_STOP_WAIT_S = 30.0
"""How long a discard waits for a live run's engine to stop after cancelling it."""
TRASH_PREFIX = ".discarded-"
"""A run directory being deleted is first renamed to this (no valid run id starts with a dot)."""


@dataclass
class DiscardPlan:
    """What discarding a run removes (or removed)."""

    run_id: str
    status: str
    """The run's status ('damaged' when its state cannot be read)."""
    engine_running: bool
    state_dir: str
    worktrees: list[str] = field(default_factory=list)
    branches: list[str] = field(default_factory=list)
    refs: list[str] = field(default_factory=list)
    sessions: list[str] = field(default_factory=list)
    """Sessions whose link to the run is removed (the sessions themselves stay)."""
    stopped_turns: int = 0
    """Turns a killed engine had left running, stopped."""

    def as_dict(self) -> dict[str, object]:
        """JSON-ready."""
        return asdict(self)

    def lines(self) -> list[str]:
        """What it removes, one line per thing, for a person to read."""
        out = ["engine      stopped first (the run is cancelled)"] if self.engine_running else []
        out += [f"worktree    {path}" for path in self.worktrees]
        out += [f"branch      {branch}" for branch in self.branches]
        out += [f"ref         {ref}" for ref in self.refs]
        out += [f"session     {session} (its link to the run; the session stays)" for session in self.sessions]
        out.append(f"state       {self.state_dir}")
        return out


def _load(store: RunStore, run_id: str) -> Run | None:
    try:
        return store.load(run_id)
    except DamagedRunError:
        return None


def _linked_sessions(project: ProjectPaths, run_id: str) -> list[tuple[SessionStore, str]]:
    store = SessionStore(project.sessions_dir)
    return [(store, record.id) for record in store.list() if record.run_id == run_id]


def plan(project: ProjectPaths, run_id: str) -> DiscardPlan:
    """What `discard(project, run_id)` would remove now (`run_id` may be a unique prefix)."""
    store = RunStore(project)
    run_id = store.resolve_id(run_id)
    run = _load(store, run_id)
    result = DiscardPlan(run_id=run_id, status=run.status if run is not None else "damaged",
                         engine_running=store.engine_running(run_id), state_dir=str(store.dir(run_id)))
    _git_plan(project, run_id, result, dry_run=True)
    result.sessions = [session for _, session in _linked_sessions(project, run_id)]
    return result


def _git_plan(project: ProjectPaths, run_id: str, result: DiscardPlan, *, dry_run: bool) -> None:
    from agentbox.core import workspace as git

    try:
        if git.repo_info(project.root) is None:
            return
    except git.GitError:
        return
    cleaned = git.clean(project.root, run_id, dry_run=dry_run, discard=True)
    result.worktrees = [str(p) for p in cleaned.worktrees]
    result.branches = list(cleaned.branches)
    result.refs = list(cleaned.refs)


def discard(project: ProjectPaths, run_id: str) -> DiscardPlan:
    """Remove run `run_id` and everything of it (see the module docstring); what was removed."""
    from agentbox.core import runs

    store = RunStore(project)
    run_id = store.resolve_id(run_id)
    was_live = store.engine_running(run_id)
    if was_live:
        run = _load(store, run_id)
        if run is not None and run.status not in TERMINAL_RUN_STATES:
            with contextlib.suppress(AgentboxError):  # it may end by itself meanwhile
                runs.send_command(project, run_id, {"action": "cancel_run", "note": "discarded with `agentbox discard`"})
        deadline = time.monotonic() + ENGINE_STOP_WAIT_S
        while store.engine_running(run_id):
            if time.monotonic() > deadline:
                raise AgentboxError(f"the engine of run {run_id} did not stop within {ENGINE_STOP_WAIT_S:g} s",
                                    f"stop it (`agentbox cancel {run_id}`), then discard again; nothing was removed")
            time.sleep(0.05)
    with store.engine_lock(run_id) as mine:
        if not mine:
            raise UsageError(f"an engine took run {run_id} meanwhile", f"cancel it (`agentbox cancel {run_id}`), "
                             "then discard again; nothing was removed")
        run = _load(store, run_id)
        result = DiscardPlan(run_id=run_id, status=run.status if run is not None else "damaged",
                             engine_running=was_live, state_dir=str(store.dir(run_id)))
        if run is not None:
            result.stopped_turns = _stop_left_turns(run)
        _git_plan(project, run_id, result, dry_run=False)
        for sessions, session_id in _linked_sessions(project, run_id):
            record = sessions.find(session_id)
            record.run_id = record.task_id = None
            sessions.save(record)
            result.sessions.append(session_id)
        _remove_dir(store.dir(run_id))
    return result


def _stop_left_turns(run: Run) -> int:
    """Kill the turns a killed engine left running (only processes provably of those turns)."""
    from agentbox.core.engine.recovery import _kill_orphan

    for job in run.jobs.values():
        _kill_orphan(job)
    return len(run.jobs)


def _remove_dir(directory: Path) -> None:
    """Take the run out of the list at once (a rename), then delete it (links inside are not followed)."""
    trash = directory.with_name(f"{TRASH_PREFIX}{directory.name}-{os.getpid()}")
    os.rename(directory, trash)

    def writable_then_again(function: object, path: str, _error: object) -> None:
        """A directory made read-only (as a normal user rmtree cannot empty it): opened to its owner, retried."""
        parent = os.path.dirname(path)
        for place in (parent, path):
            with contextlib.suppress(OSError):
                if not os.path.islink(place):
                    os.chmod(place, 0o700)
        if callable(function):
            with contextlib.suppress(FileNotFoundError):
                function(path)

    shutil.rmtree(trash, onerror=writable_then_again)
