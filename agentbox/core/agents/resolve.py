"""Which agent a person means, and attaching to it: a role of the crew or `profile:NAME`
resolved to an `Agent` (its instructions, sessions and sandbox), whose sessions those
are, and an interactive session of the tool itself in the role's sandbox.

The faces resolve agents only here; they never open session files themselves.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from agentbox.core import paths
from agentbox.core.agents.sessions import SessionRecord, SessionStore
from agentbox.core.errors import NotFoundError, UsageError
from agentbox.core.records import turn_record

if TYPE_CHECKING:  # the models, the profiles and the turn machinery are imported by the functions that use them
    from agentbox.core.agents.invoke import Agent
    from agentbox.core.config.models import Crew
    from agentbox.core.paths import ProjectPaths
    from agentbox.core.runtimes.transcripts import TypedTurn

PROFILE_PREFIX = "profile:"


def instructions_for(proj: ProjectPaths, role_name: str, crew: Crew | None = None) -> str | None:
    """Role instructions followed by the project's shared knowledge (a session's first turn)."""
    from agentbox.core.config import project

    crew = crew or project.load_crew(proj).crew
    role = crew.roles[role_name]
    parts = []
    text = project.role_instructions(proj, role)
    if text:
        parts.append(f"# Your role: {role_name}\n\n{text.strip()}")
    knowledge = project.knowledge_text(proj)
    if knowledge:
        parts.append(f"# Shared project knowledge\n\n{knowledge}")
    return "\n\n".join(parts) or None


def role_agent(proj: ProjectPaths, role_name: str, *, extra_rw: tuple[Path, ...] = (),
               crew: Crew | None = None) -> Agent:
    """The agent of one role of the project's crew (`crew` saves re-reading crew.yaml)."""
    from agentbox.core.agents.invoke import Agent
    from agentbox.core.config import profiles, project

    crew = crew or project.load_crew(proj).crew
    if role_name not in crew.roles:
        raise NotFoundError(f"no role {role_name!r} in {proj.crew_file}",
                            f"roles: {', '.join(crew.roles)}; or use profile:NAME")
    role = crew.roles[role_name]
    info = profiles.resolve(role.profile, cached=True)  # checked before and unchanged: no parser in the engine
    return Agent(
        profile=info, label=role_name, role=role_name, cwd=proj.root,
        sessions=SessionStore(proj.sessions_dir), instructions=instructions_for(proj, role_name, crew),
        model=role.model, extra_args=tuple(role.extra_args), env=dict(role.env),
        writes=tuple(role.writes) if role.writes is not None else None,
        protected=(proj.box,), protected_paths=tuple(crew.protected), extra_rw=extra_rw,
        timeout_s=crew.limits.task_timeout_s,
    )


def profile_agent(name: str, cwd: Path, proj: ProjectPaths | None) -> Agent:
    """A profile used directly (`profile:NAME`): sessions kept per profile in AGENT_BOX_HOME."""
    from agentbox.core.agents.invoke import Agent
    from agentbox.core.config import profiles

    info = profiles.resolve(name, cached=True)  # a profile.yaml checked before and unchanged: no parser, no models
    root = proj.root if proj is not None else cwd
    return Agent(
        profile=info, label=f"{PROFILE_PREFIX}{name}", cwd=root,
        sessions=SessionStore(paths.global_sessions_dir()),
        protected=(proj.box,) if proj is not None else (),
    )


def resolve_agent(target: str, proj: ProjectPaths | None, cwd: Path | None = None) -> Agent:
    """A role of the project, or `profile:NAME`."""
    if target.startswith(PROFILE_PREFIX):
        return profile_agent(target[len(PROFILE_PREFIX):], cwd or Path.cwd(), proj)
    if proj is None:
        raise UsageError(f"{target!r} is not a role here: no project found",
                         "run inside a project (`agentbox init`), or use profile:NAME")
    return role_agent(proj, target)


def session_store_for(target: str | None, proj: ProjectPaths | None) -> SessionStore:
    """Where the sessions of `target` (a role or profile:NAME) are recorded."""
    if (target and target.startswith(PROFILE_PREFIX)) or proj is None:
        return SessionStore(paths.global_sessions_dir())
    return SessionStore(proj.sessions_dir)


def check_session_owner(target: str, proj: ProjectPaths | None) -> None:
    """A NotFoundError naming the known roles when `target` is neither a role of the crew nor profile:NAME."""
    from agentbox.core.config import profiles, project

    if target.startswith(PROFILE_PREFIX):
        profiles.resolve(target[len(PROFILE_PREFIX):])  # unknown: lists the profiles there are
        return
    if proj is None:
        raise NotFoundError(f"{target!r} is not a profile:NAME, and there is no project here for it to be a role of",
                            "run it in a project, or name a profile: `agentbox sessions profile:NAME`")
    roles = list(project.load_crew(proj).crew.roles)
    if target not in roles:
        raise NotFoundError(f"no role {target!r} in the crew", f"roles: {', '.join(roles) or '(none)'}; "
                            "a profile's sessions: `agentbox sessions profile:NAME`")


@dataclass(frozen=True)
class InteractiveCommand:
    """What attach/launch run: the argv, its environment and descriptors, and the session id."""

    argv: list[str]
    env: dict[str, str]
    pass_fds: tuple[int, ...]
    session_id: str


@contextlib.contextmanager
def interactive_session(agent: Agent, session_id: str | None) -> Iterator[InteractiveCommand]:
    """The sandboxed interactive command that resumes `session_id` (attach/launch).

    Run the command inside the block (`subprocess.call(c.argv, env=c.env,
    pass_fds=c.pass_fds)`). The session record is written first, so the attached session
    shows in the history; staged write scopes are carried back and directories made for
    the scopes and left empty are taken back when the block ends.
    """
    from agentbox.core.agents import egress_turn
    from agentbox.core.agents.invoke import finish_turn, prepare, prepare_session, remove_scratch
    from agentbox.core.runtimes import adapter_for
    from agentbox.core.runtimes.transcripts import typed_turns
    from agentbox.core.sandbox.bwrap import launch

    record = prepare_session(agent, session_id)
    prepared = prepare(agent, "", record, interactive=True)
    config_dir = prepared.request.config_dir
    try:
        if record.native_id is None and adapter_for(record.tool).takes_session_id:
            record.native_id = record.id  # these tools take the caller's id for a new session
        agent.sessions.save(record)
        known = len(typed_turns(record.tool, config_dir, record.native_id))
        started = time.time()
        with egress_turn.serving(prepared.egress), launch(prepared.argv, before_exec=egress_turn.join(prepared.egress)) as launched:
            yield InteractiveCommand(launched.argv, prepared.env, launched.pass_fds, record.id)
    finally:
        finish_turn(prepared, record.turns + 1)
        remove_scratch(prepared)
    _record_typed_turns(agent.sessions, record, typed_turns(record.tool, config_dir, record.native_id)[known:],
                        started)


def _record_typed_turns(store: SessionStore, record: SessionRecord, typed: list[TypedTurn], started: float) -> None:
    """Append the turns a person typed while attached to the session history, marked interactive."""
    if not typed:
        return
    finished = time.time()
    for exchange in typed:
        record.turns += 1
        record.totals.add(exchange.usage)
        store.append_turn(record, turn_record(
            record.turns, started=started, finished=finished, prompt=exchange.prompt, text=exchange.text,
            status="ok", error_kind=None, error=None, usage=exchange.usage, duration_s=0, exit_code=None,
            native_id=record.native_id, log_path=None, with_model=False, interactive=True))
    record.last_status, record.last_error_kind = "ok", None
    store.save(record)
