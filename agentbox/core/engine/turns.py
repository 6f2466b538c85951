"""One turn of one agent: its sandboxed agent and its process.

The engine's loop starts each turn as an asyncio task of its own through `TurnRunner.run`
and carries out what the turn's result decides when it ends.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from agentbox.core import services
from agentbox.core.config import Crew
from agentbox.core.engine.ledger import RunLedger
from agentbox.core.engine.models import Job
from agentbox.core.engine.recovery import _session_exists
from agentbox.core.engine.run_store import RunStore
from agentbox.core.errors import AgentboxError
from agentbox.core.invoke import InvokeResult, invoke
from agentbox.core.paths import ProjectPaths


class TurnRunner:
    """Runs the turns of one run: builds each role's agent once, then one sandboxed turn per job."""

    def __init__(self, project: ProjectPaths, store: RunStore, crew: Crew, ledger: RunLedger) -> None:
        self.project = project
        self.store = store
        self.crew = crew
        self.ledger = ledger
        self._role_agents: dict[str, Any] = {}
        """Each role's agent, read once per run (profile and instructions)."""

    def agent_for(self, job: Job) -> Any:
        """The role's agent for `job`, allowed to write the task's write scope and its handoff folder."""
        run = self.ledger.run
        task = run.tasks.get(job.task or "")
        extra_rw: tuple[Path, ...] = ()
        writes: tuple[str, ...] = ()
        if job.works_on_task and task is not None:
            handoff = self.store.artifacts_dir(run.id) / task.id
            handoff.mkdir(parents=True, exist_ok=True)
            extra_rw = (handoff,)
            writes = tuple(task.writes)
        elif job.data.writes is not None:
            writes = tuple(job.data.writes)
        if job.role not in self._role_agents:
            self._role_agents[job.role] = services.role_agent(self.project, job.role, crew=self.crew)
        return dataclasses.replace(self._role_agents[job.role], writes=writes, extra_rw=extra_rw)

    async def run(self, job: Job) -> tuple[Job, InvokeResult]:
        """Run `job` in its session (resumed if it exists); failures to start become an error result."""
        session = job.session_id
        assert session is not None
        try:
            agent = self.agent_for(job)
        except AgentboxError as exc:  # the role or its profile cannot be loaded any more
            return job, InvokeResult(status="error", session_id=session, error_kind="spawn_failed",
                                     error=exc.message, role=job.role)
        exists = _session_exists(agent.sessions, session)

        def spawned(record: Any, pid: int) -> None:
            self.ledger.learned_pid(job, pid, (record.running or {}).get("create_time"))

        run = self.ledger.run
        try:
            result = await invoke(agent, job.prompt, session if exists else None,
                                  timeout_s=run.contract.limits.task_timeout_s, on_spawn=spawned,
                                  new_session_id=None if exists else session, run_id=run.id, task_id=job.task)
        except AgentboxError as exc:  # sandbox cannot be built, session busy: an environment failure
            result = InvokeResult(status="error", session_id=session, error_kind="spawn_failed", error=exc.message,
                                  role=job.role)
        return job, result
