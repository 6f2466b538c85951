"""One turn of one agent: its sandboxed agent and its process.

The engine's loop starts each turn as an asyncio task of its own through `Turns.run`
and carries out what the turn's result decides when it ends. `Turns` prepares the turn
(the role's agent, its worktree or view, its prompt) and hands it to the run's runner
(`runners`), which runs it (here, or elsewhere) and commits what it changed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from pathlib import Path
from typing import Any

from agentbox.core.agents import resolve as services
from agentbox.core.agents.invoke import InvokeResult
from agentbox.core.agents.setup_command import run_setup
from agentbox.core.config.models import Crew
from agentbox.core.engine.ledger import RunLedger
from agentbox.core.engine.models import Job
from agentbox.core.engine.recovery import session_exists
from agentbox.core.engine.run_store import RunStore
from agentbox.core.engine.runners.base import Turn, TurnRunner, TurnWorkspace
from agentbox.core.engine.workspaces import Mount, TurnGit, Workspaces
from agentbox.core.errors import AgentboxError
from agentbox.core.paths import ProjectPaths
from agentbox.core.telemetry import tracing as telemetry


class Turns:
    """Runs the turns of one run: builds each role's agent once, then one sandboxed turn per job through `runner`."""

    def __init__(self, project: ProjectPaths, store: RunStore, crew: Crew, ledger: RunLedger,
                 workspaces: Workspaces, runner: TurnRunner | None = None) -> None:
        self.project = project
        self._runner = runner
        self.store = store
        self.crew = crew
        self.ledger = ledger
        self.workspaces = workspaces
        self._role_agents: dict[str, Any] = {}
        """Each role's agent, read once per run (profile and instructions)."""
        self.trace = telemetry.settings()
        """Where traces go (None: off): a claude or codex turn exports its own telemetry under its span."""

    @property
    def runner(self) -> TurnRunner:
        """Where the turns run: the one given, else the one the user's config.yaml names (read at the first turn)."""
        if self._runner is None:
            from agentbox.core.engine.runners import configured_runner

            self._runner = configured_runner()
        return self._runner

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
            writes = () if task.ladder.mode == "advisor" else tuple(task.writes)  # advisor mode: read-only
        elif job.data.writes is not None:
            writes = tuple(job.data.writes)
        if job.role not in self._role_agents:
            self._role_agents[job.role] = services.role_agent(self.project, job.role, crew=self.crew)
        return dataclasses.replace(self._role_agents[job.role], writes=writes, extra_rw=extra_rw)

    def room(self, job: Job) -> str | None:
        """None when the runner has room for `job`'s turn now; else why it waits (see `runners.admission`).

        A role whose agent cannot be had is given room: its turn fails at once, saying why.
        """
        try:
            profile = self.agent_for(job).profile
        except AgentboxError:
            return None
        return self.runner.room(job.id, profile)

    async def run(self, job: Job) -> tuple[Job, InvokeResult, TurnGit | None]:
        """Run `job` in its session (resumed if it exists); failures to start become an error result.

        In a worktree run the turn sees its task's worktree at the project's path, a review
        gets the task's diff, and what a writer's turn changed is committed on its branch; a
        turn that writes nothing (a plan, a synthesis) sees the run's approved work (its view).
        """
        session = job.session_id
        assert session is not None
        run = self.ledger.run
        try:
            agent = self.agent_for(job)
            key = self.workspaces.key_for(job)
            mount: Mount | None = None
            prompt = job.prompt
            setup = run.contract.workspace_setup
            if key is not None:
                mount = await asyncio.to_thread(self.workspaces.mount, key, setup.copy_, setup.run, agent.writes)
                if mount.setup_marker is not None and setup.run:
                    await asyncio.to_thread(self._set_up, mount, setup.run, setup.timeout_s, job)
            elif self.workspaces.active and not agent.writes:
                mount = await asyncio.to_thread(self.workspaces.view, setup.copy_)
            if mount is not None:
                agent = dataclasses.replace(agent, worktree=mount.path, views=mount.views, view_hidden=mount.hidden,
                                            base=mount.base, over=mount.over, env={**agent.env, **mount.env})
            task = run.tasks.get(key or "")
            if job.kind == "review" and task is not None:
                agent = dataclasses.replace(agent, writes=())
                prompt += await asyncio.to_thread(self.workspaces.review_section, task)
        except AgentboxError as exc:  # the role, its profile or its worktree cannot be had
            return job, InvokeResult(status="error", session_id=session, error_kind="spawn_failed",
                                     error=exc.message, role=job.role), None
        exists = session_exists(agent.sessions, session)
        agent = telemetry.traced_agent(agent, self.trace, telemetry.turn_parent(run.id, job.id, job.started), {
            "agentbox.run.id": run.id, "agentbox.role": job.role, "agentbox.session.id": session,
            "agentbox.task.id": job.task})

        def spawned(record: Any, pid: int) -> None:
            self.ledger.learned_pid(job, pid, (record.running or {}).get("create_time"))

        workspace = None
        if key is not None and job.kind != "review" and mount is not None:
            task = run.tasks.get(key)
            workspace = TurnWorkspace(
                key=key, path=mount.path, branch=task.branch if task else None, base=task.base if task else None,
                commit=functools.partial(self._commit, job, mount, agent.profile.profile.name))
        done = await self.runner.run(Turn(
            job_id=job.id, run_id=run.id, task_id=job.task, agent=agent, prompt=prompt, session_id=session,
            resume=exists, timeout_s=run.contract.limits.task_timeout_s, workspace=workspace, on_spawn=spawned,
            on_placed=functools.partial(self.ledger.placed, job)))
        if done.node_id is not None:
            self.ledger.record_placement(job, done.node_id, done.host or "?")
        return job, done.result, done.git

    def _commit(self, job: Job, mount: Mount, profile: str, summary: str) -> TurnGit:
        """Commit what the turn changed in its worktree (in a worker thread); what the branch holds now."""
        return self.workspaces.commit(job, mount, profile=profile, summary=summary)

    def _set_up(self, mount: Mount, command: str, timeout_s: float, job: Job) -> None:
        """crew.yaml's setup command, once per worktree (an AgentboxError when it fails: the turn cannot start)."""
        log_path = self.store.dir(self.ledger.run.id) / f"setup-{mount.key}.log"
        outcome = run_setup(self.project.root, mount.path, mount.views, mount.hidden, command, timeout_s, log_path,
                            tuple(self.crew.protected), tuple(self.ledger.run.contract.workspace_setup.allow))
        if not outcome.ok:
            raise AgentboxError(f"workspace setup failed in {mount.key}'s worktree: {outcome.detail}",
                                "fix crew.yaml's workspace_setup.run, then answer the escalation with retry")
        assert mount.setup_marker is not None
        mount.setup_marker.write_text(outcome.detail[:500] + "\n")
