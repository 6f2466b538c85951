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

A scenario action that needs a process (`run`, `stream`, a `fail` other than `error_exit0`) is refused with a
message saying so: such a test belongs on the local runner.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from agentbox.core.agents import pricing
from agentbox.core.agents.invoke import InvokeResult, _finish, prepare_session
from agentbox.core.config.profiles import ProfileInfo
from agentbox.core.engine.runners.base import Turn, TurnDone
from agentbox.core.engine.runners.local import reply_summary
from agentbox.core.errors import AgentboxError
from agentbox.core.runtimes import scripted_agent as program
from agentbox.core.runtimes.base import Usage

NEEDS_A_PROCESS = ("run", "stream")
"""Scenario actions the in-process runner cannot play (they need the agent's own process; so does every
`fail` but `error_exit0`)."""


class InProcessRunner:
    """Answers each turn with the scripted agent's logic, in this process; keeps every turn it was handed."""

    kind = "local"

    def __init__(self, state: Path | None = None) -> None:
        self.state = state or Path(os.environ["AGENT_BOX_HOME"]) / "inprocess"
        """Where the scripted agents' state homes are (one per profile, as the profile's own home is);
        by default in the test's AGENT_BOX_HOME."""
        self.turns: list[Turn] = []

    def room(self, job_id: str, profile: ProfileInfo) -> str | None:
        """Always room: nothing here takes a process's memory."""
        return None

    async def run(self, turn: Turn) -> TurnDone:
        """The turn's scripted answer (its files written), recorded in its session; then its worktree committed."""
        self.turns.append(turn)
        agent = turn.agent
        try:
            result = await self._play(turn)
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
            raise AgentboxError(f"the in-process runner plays scripted profiles only, not {profile.name}")
        store = agent.sessions
        record = prepare_session(agent, turn.session_id if turn.resume else None,
                                 None if turn.resume else turn.session_id,
                                 {"run_id": turn.run_id, "task_id": turn.task_id})
        started = time.time()
        t0 = time.monotonic()
        home = self.state / profile.name
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
        rule_id, action, variables, counter = program.choose_rule(scenario, str(home), turn.prompt, system, number)
        refused = [key for key in NEEDS_A_PROCESS if key in action]
        if action.get("fail") not in (None, "error_exit0"):
            refused.append(f"fail: {action['fail']}")
        if refused:
            raise AgentboxError(f"the in-process runner cannot play the {', '.join(refused)} of rule {rule_id!r}: "
                                "run this test on the local runner (under bwrap)")
        values = scripted.template_values(turn.prompt, number, model, system, counter)
        values.update(variables, role=agent.role or "", env={})
        if action.get("delay_s"):
            await asyncio.sleep(action["delay_s"])
        error = _write(action.get("write") or {}, values, agent.cwd, agent.worktree, agent.extra_rw)
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


def _write(files: dict[str, str], values: dict[str, Any], cwd: Path, worktree: Path | None,
           own: tuple[Path, ...]) -> str | None:
    """The action's files, where the sandboxed agent's writes would land: the worktree is seen at `cwd`,
    and the directories bound in on their own (`own`, the hand-on dir) are seen where they are."""
    for raw_path, raw_text in files.items():
        path = Path(os.path.expanduser(program.render(raw_path, values)))
        if not path.is_absolute():
            path = cwd / path
        if worktree is not None and path.is_relative_to(cwd) and not any(path.is_relative_to(d) for d in own):
            path = worktree / path.relative_to(cwd)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(program.render(raw_text, values), encoding="utf-8")
        except OSError as exc:
            return f"write failed: {exc}"
    return None

