"""The runner seam: what the engine hands a runner for one turn, and what it gets back.

A runner runs one prepared turn (the agent with its profile, role, session store and
scopes; the prompt; the session to resume or create; the worktree and branch it works on;
its limits) and returns the turn's `InvokeResult` (usage, native session id) with what it
left in git. It never raises for a turn that failed: a failure is a result with an error
kind, as `invoke` gives. Before the engine starts a turn it asks the runner for room
(`room`): a runner may hold a turn back while its machine has no memory or CPU for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from agentbox.core.agents.invoke import Agent, InvokeResult
    from agentbox.core.agents.sessions import SessionRecord
    from agentbox.core.config.profiles import ProfileInfo
    from agentbox.core.engine.workspaces import TurnGit


@dataclass(frozen=True)
class TurnWorkspace:
    """The git side of a work turn: the worktree it writes, its branch, and how its work is committed."""

    key: str
    """The task id (or the handoff key) whose branch the worktree holds."""
    path: Path
    branch: str | None
    """The task's branch (None before its first commit is recorded)."""
    base: str | None
    """The commit the task's work is measured from (None before its first commit is recorded)."""
    commit: Callable[[str], TurnGit]
    """Commit what the worktree holds now with this summary; what the branch holds after."""


@dataclass(frozen=True)
class Turn:
    """One turn to run: who, what, in which session, where it writes and under which limits."""

    job_id: str
    run_id: str
    task_id: str | None
    agent: Agent
    prompt: str
    session_id: str
    resume: bool
    """True: the session exists and is resumed; False: it is created with `session_id`."""
    timeout_s: float
    workspace: TurnWorkspace | None = None
    """None: the turn commits nothing (a review, a plan, a turn in a shared workspace)."""
    on_spawn: Callable[[SessionRecord, int], None] | None = None
    """Called with the session record and the pid once the turn's process runs (the engine records it)."""
    on_placed: Callable[[str, str], None] | None = None
    """Called with the node id and host once the turn's process runs on a cluster node (not for a turn here)."""


@dataclass(frozen=True)
class TurnDone:
    """What a runner gives back: the turn's result and what it left in git (None: nothing to commit)."""

    result: InvokeResult
    git: TurnGit | None = None
    peak_rss_mb: float | None = None
    """The most memory the turn's processes held together (None: not measured)."""
    node_id: str | None = None
    """The cluster node the turn ran on (None: this machine)."""
    host: str | None = None
    """That node's host name."""


class TurnRunner(Protocol):
    """Runs turns somewhere: here (`local`), or on another machine."""

    kind: str
    """`local`, or the name of the cluster kind."""

    def room(self, job_id: str, profile: ProfileInfo) -> str | None:
        """None when a turn of `profile` may start now (its need is then reserved for `job_id`
        until the turn ends); else why it waits ("waiting for memory: …")."""
        ...

    async def run(self, turn: Turn) -> TurnDone:
        """Run `turn` to its end (never raises for the turn's own failures)."""
        ...
