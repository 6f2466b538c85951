"""A turn runner for engine-loop tests: the scripted agent's answer, computed in this process.

`InProcessRunner` implements the engine's `TurnRunner` seam without a subprocess and
without bwrap. For each turn it plays the role's scripted scenario with the scripted
agent's own functions (rule choice, `times` counters, templates, session files kept under
a state home of its own), writes the action's files into the turn's worktree (or the
project), records the turn in the agentbox session store as `invoke` does, and commits
through `turn.workspace.commit` as the local runner does. Its answers are the same as the
real program's (tests/engine/test_inprocess_runner.py holds it to that on one run), so a
test about the engine's policies (scheduling, retries, budgets) can run here in a fraction
of the time. What only a sandbox gives (write scopes, hidden paths, no network, a process
to kill) is not here: those tests stay on the local runner under real bwrap.

What it cannot play the same way it refuses loudly, with `NeedsAProcess` naming the
rule and the action: a shell command (`run`), streamed events (`stream`), a read through
the sandbox's view (`read`), stderr (`stderr`), a `fail` other than `error_exit0` (a crash,
a hang, kill -9, an exit code, a flood), a rule on the agent's environment (`when.env`, a
template's `{env[…]}`), a profile that is not scripted, and a write the sandbox would
decide (outside the role's write scopes and hand-on dirs, or onto a protected or
metadata path). The exception is not an `AgentboxError`: the engine does not turn it into
a failed turn, it stops the run and the test fails naming the scenario; such a test is
marked `local_runner("why")` (tests/engine/conftest.py) and runs on the local runner.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import os
import time
from pathlib import Path, PurePosixPath
from typing import Any

from agentbox.core.agents import pricing
from agentbox.core.agents.invoke import InvokeResult, _finish, prepare_session
from agentbox.core.config.profiles import ProfileInfo
from agentbox.core.engine.runners.base import Turn, TurnDone
from agentbox.core.engine.runners.local import reply_summary
from agentbox.core.errors import AgentboxError
from agentbox.core.runtimes import scripted_agent as program
from agentbox.core.runtimes.base import Usage
from agentbox.core.sandbox import protected, scopes

NEEDS_A_PROCESS = ("run", "stream", "read", "stderr")
"""Scenario actions the in-process runner cannot play (they need the agent's own process or the sandbox's
view; so does every `fail` but `error_exit0`)."""


class NeedsAProcess(Exception):  # noqa: N818  (a refusal, not an error of the code under test)
    """A turn the in-process runner will not fake: the test must run on the local runner (`local_runner("why")`)."""


class InProcessRunner:
    """Answers each turn with the scripted agent's logic, in this process; keeps every turn it was handed."""

    kind = "local"

    def __init__(self, state: Path | None = None) -> None:
        self.state = state
        """Where the scripted agents' state homes are (one per profile); None: each profile's own home (its
        config dir, the SCRIPTED_HOME the real program keeps its sessions and `times` counters in), so a run
        begun by a process and resumed here (or the other way) goes on in the same sessions and counters."""
        self.turns: list[Turn] = []
        self.refused: list[NeedsAProcess] = []
        """Every turn refused (each also raised into the engine, which stops the run with it)."""

    def room(self, job_id: str, profile: ProfileInfo) -> str | None:
        """Always room: nothing here takes a process's memory."""
        return None

    async def run(self, turn: Turn) -> TurnDone:
        """The turn's scripted answer (its files written), recorded in its session; then its worktree committed."""
        self.turns.append(turn)
        agent = turn.agent
        try:
            result = await self._play(turn)
        except NeedsAProcess as exc:
            self.refused.append(exc)
            raise
        except AgentboxError as exc:
            result = InvokeResult(status="error", session_id=turn.session_id, error_kind="spawn_failed",
                                  error=exc.message, role=agent.role)
        if turn.workspace is None or result.error_kind == "spawn_failed":
            return TurnDone(result)
        try:
            git = await asyncio.to_thread(turn.workspace.commit, reply_summary(result.text))
        except AgentboxError as exc:
            return TurnDone(InvokeResult(status="error", session_id=turn.session_id, error_kind="spawn_failed",
                                         error=f"committing the turn failed: {exc.message}", role=agent.role))
        return TurnDone(result, git)

    async def _play(self, turn: Turn) -> InvokeResult:
        agent = turn.agent
        profile = agent.profile
        if profile.tool != "scripted" or profile.scenario_path is None:
            raise NeedsAProcess(f"the in-process runner plays scripted profiles only, not {profile.name!r} "
                                f"({profile.tool}): run this test on the local runner")
        store = agent.sessions
        record = prepare_session(agent, turn.session_id if turn.resume else None,
                                 None if turn.resume else turn.session_id,
                                 {"run_id": turn.run_id, "task_id": turn.task_id})
        started = time.time()
        t0 = time.monotonic()
        home = profile.config_dir if self.state is None else self.state / profile.name
        (home / "sessions").mkdir(parents=True, exist_ok=True)
        model = agent.model or profile.profile.runtime.model
        try:
            scenario = program.load_scenario(str(profile.scenario_path))
            cwd = str(agent.cwd)
            if record.native_id is None:
                session = program.create_session(str(home), record.id, cwd, model, agent.instructions or "")
            else:
                session = program.load_session(str(home), record.native_id, cwd)
        except program.Fatal as exc:
            raise AgentboxError(f"scripted agent: {exc.message}") from None
        scripted = program.Agent({} if model is None else {"model": model}, scenario, str(home), session)
        number = len(session.get("turns", [])) + 1
        system = session.get("system") or ""
        on_env = [rule.id for rule in scenario.rules if rule.when.get("env")]
        if on_env:
            raise NeedsAProcess(f"the in-process runner cannot match rule {on_env[0]!r} of {profile.name!r} on the "
                                "agent's environment (when.env): run this test on the local runner (under bwrap)")
        rule_id, action, variables, counter = program.choose_rule(scenario, str(home), turn.prompt, system, number)
        refused = [key for key in NEEDS_A_PROCESS if key in action]
        if action.get("fail") not in (None, "error_exit0"):
            refused.append(f"fail: {action['fail']}")
        if "{env" in json.dumps(action):
            refused.append("{env[…]} template")
        if refused:
            raise NeedsAProcess(f"the in-process runner cannot play the {', '.join(refused)} of rule {rule_id!r} "
                                f"of {profile.name!r}: run this test on the local runner (under bwrap)")
        values = scripted.template_values(turn.prompt, number, model, system, counter)
        values.update(variables, role=agent.role or "", env={})
        files = _placed(action.get("write") or {}, values, agent, rule_id)
        if action.get("delay_s"):
            await asyncio.sleep(action["delay_s"])
        error = _write(files, values)
        text = error if error is not None else program.reply_text(action, values)
        raw = program.usage_object(action.get("usage")) or {}
        tokens = Usage(input_tokens=raw.get("input_tokens"), cached_input_tokens=raw.get("cached_input_tokens"),
                       cache_write_tokens=raw.get("cache_write_tokens"), output_tokens=raw.get("output_tokens"),
                       reasoning_tokens=raw.get("reasoning_tokens"), cost_usd=action.get("cost_usd"))
        usage = pricing.priced(tokens, tool=profile.tool, model=model,
                               table=pricing.price_table(), billing=None)
        failed = error is not None or action.get("fail") == "error_exit0"
        if not failed:
            scripted.record(program.Turn({"result": text, "rule": rule_id}, action, values, False), turn.prompt)
        record.native_id = record.native_id or session["id"]
        result = InvokeResult(
            status="error" if failed else "ok", session_id=record.id, text=text,
            error_kind="tool_error" if failed else None, error=text if failed else None,
            native_id=record.native_id, usage=usage, duration_s=time.monotonic() - t0, exit_code=0,
            turn=record.turns + 1, role=agent.role, profile=profile.name, tool=profile.tool,
            sandboxed=record.sandboxed, model=model, model_asked=model)
        return _finish(store, record, turn.prompt, result, started)


def _placed(files: dict[str, str], values: dict[str, Any], agent: Any, rule_id: str) -> dict[Path, str]:
    """Where each of the action's files lands, as the sandboxed agent's write would: the worktree is seen at
    `cwd`, the dirs bound in on their own (`extra_rw`, the hand-on dir) where they are. A write the sandbox
    would decide (outside the write scopes, onto a protected or metadata path, outside the project) is refused."""
    cwd: Path = agent.cwd
    worktree: Path | None = agent.worktree
    own: tuple[Path, ...] = agent.extra_rw
    placed: dict[Path, str] = {}
    for raw_path, raw_text in files.items():
        path = Path(os.path.normpath(os.path.expanduser(program.render(raw_path, values))))
        if not path.is_absolute():
            path = Path(os.path.normpath(cwd / path))
        if any(path.is_relative_to(d) for d in own):
            placed[path] = raw_text
            continue
        problem = _scope_problem(path, agent)
        if problem is not None:
            raise NeedsAProcess(f"the in-process runner cannot play the write of {raw_path!r} in rule {rule_id!r} "
                                f"({problem}): only the sandbox says what happens; run this test on the local "
                                "runner (under bwrap)")
        placed[worktree / path.relative_to(cwd) if worktree is not None else path] = raw_text
    return placed


def _scope_problem(path: Path, agent: Any) -> str | None:
    """None when the sandbox lets the role write `path` (seen from inside it) as it is; else why not, or
    why only the sandbox can tell."""
    cwd: Path = agent.cwd
    if not path.is_relative_to(cwd) or path == cwd:
        return "outside the project"
    relative = path.relative_to(cwd).as_posix()
    parts = PurePosixPath(relative).parts
    if any(part in scopes.METADATA_NAMES for part in parts):
        return "a metadata path"
    if any(path.is_relative_to(p) for p in agent.protected) or any(
            protected.matches(pattern, relative) for pattern in agent.protected_paths):
        return "a protected path"
    if agent.writes is None:
        return None
    for scope in agent.writes:
        scope_parts = scopes.normalise(scope)
        if scope_parts[:1] == ("**",):  # the whole tree
            return None
        static, literal = scopes.glob_static_prefix("/".join(scope_parts)) if scope_parts else ((), False)
        if scopes.directory_reach([scope]) or (literal and (cwd / "/".join(static)).is_dir()):
            if parts[:len(static)] == static and len(parts) > len(static):
                return None
        elif literal:
            if parts == static:
                return None
        elif len(scope_parts) == len(static) + 1 and parts[:-1] == static and fnmatch.fnmatchcase(
                parts[-1], scope_parts[-1]):
            return None
    return f"outside the write scopes {list(agent.writes)}"


def _write(files: dict[Path, str], values: dict[str, Any]) -> str | None:
    """Write the placed files (parents made); a write error as the scripted agent reports one."""
    for path, raw_text in files.items():
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(program.render(raw_text, values), encoding="utf-8")
        except OSError as exc:
            return f"write failed: {exc}"
    return None
