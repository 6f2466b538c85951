"""`agentbox mcp`: one project served to MCP clients (Claude Code, Codex, opencode, ...).

Built on the official `mcp` SDK's `MCPServer`. The tools reuse the services the CLI uses
(`services.role_agent` + `invoke` for a turn, `runs.create_run` + `runs.detach` to start
a run, `runs.send_command` — the run's inbox — to steer one), so an MCP client can do
what a person at the CLI does and nothing more. Every argument is validated (types and
bounds by the SDK from the signatures below, ids and names by the services); any
`AgentboxError` comes back as a tool error (`isError`) with its hint, never as a crash of
the server. Long calls (a turn, following a run) report MCP progress notifications.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from pydantic import Field

from agentbox import __version__
from agentbox.core import runs
from agentbox.core.agents import resolve as services
from agentbox.core.agents.invoke import invoke
from agentbox.core.config.models import MODES, Mode
from agentbox.core.engine import commands
from agentbox.core.engine.models import Run
from agentbox.core.errors import AgentboxError, NotFoundError
from agentbox.core.paths import ProjectPaths
from agentbox.mcp import views

PROGRESS_EVERY_S = 1.0
"""How often a running turn reports that it is still working."""
MAX_WAIT_S = 3600.0
MAX_TEXT = 256 * 1024
"""Longest prompt, goal, answer or note accepted (a prompt is read into a model's context anyway)."""

Text = Annotated[str, Field(min_length=1, max_length=MAX_TEXT)]
Name = Annotated[str, Field(min_length=1, max_length=200)]
WaitS = Annotated[float, Field(ge=0, le=MAX_WAIT_S, description=(
    "Wait up to this many seconds for the run to end or to need a person (an open checkpoint), "
    "reporting each decision as progress; 0 returns at once."))]
CommitRef = Annotated[str | None, Field(max_length=40, description="A commit id (or a prefix of 7+ hex digits).")]
RunRef = Annotated[str | None, Field(max_length=200, description="A run id (or a unique prefix); default: the latest or only active run.")]

INSTRUCTIONS = """agentbox runs crews of CLI coding agents in sandboxes. list_roles shows the crew;
invoke_role runs one prompt in a role's session (pass the returned session_id to continue it);
start_run hands a goal to the whole crew; run_status and list_checkpoints show what a run waits
for; answer_checkpoint, approve_task, rework_task and cancel act as the person would."""


@contextlib.contextmanager
def _as_tool_error() -> Iterator[None]:
    """An agentbox error becomes a tool error the model can read (message and hint)."""
    try:
        yield
    except AgentboxError as exc:
        raise ToolError(exc.message + (f" (hint: {exc.hint})" if exc.hint else "")) from None


@contextlib.contextmanager
def _as_resource_error() -> Iterator[None]:
    try:
        yield
    except NotFoundError as exc:
        raise ResourceNotFoundError(exc.message) from None
    except AgentboxError as exc:
        raise ResourceError(exc.message) from None


async def _steer(project: ProjectPaths, run_id: str | None, command: commands.Command) -> dict[str, Any]:
    """Send a person's command to a run (its inbox, or applied directly when no engine runs)."""
    ok, message = await anyio.to_thread.run_sync(runs.send_command, project, run_id or "latest", command)
    if not ok:
        raise ToolError(f"refused: {message}")
    return {"ok": True, "message": message}


async def follow(project: ProjectPaths, run_id: str, wait_s: float, ctx: Context, *, from_start: bool) -> Run:
    """Report a run's new decisions as progress until it ends, needs a person, or `wait_s`
    passes; the run as it then stands."""
    reported = 0
    async for update in runs.follow(project, run_id, wait_s, from_start=from_start, sleep=anyio.sleep):
        for record in update.events:
            reported += 1
            await ctx.report_progress(reported, None, f"{record.get('type')}: {record.get('what')}"[:300])
        run = update.run
    return run


def build_server(project: ProjectPaths) -> MCPServer:
    """The MCP server of `project`: its tools and resources."""
    server: MCPServer = MCPServer("agentbox", version=__version__, instructions=INSTRUCTIONS,
                                  description=f"agentbox crew of {project.root}", log_level="WARNING")

    @server.tool(description="The crew's roles: name, profile, tool, what each may write and does.")
    async def list_roles() -> dict[str, Any]:
        with _as_tool_error():
            return views.roles(project)

    @server.tool(description="Run one prompt through a role, headless and sandboxed, in a new session or "
                             "the given one; returns the answer and agentbox's session_id to continue it.")
    async def invoke_role(role: Name, prompt: Text, ctx: Context,
                          session_id: Annotated[str | None, Field(max_length=64)] = None,
                          timeout_s: Annotated[float | None, Field(gt=0, le=MAX_WAIT_S)] = None) -> dict[str, Any]:
        with _as_tool_error():
            agent = services.role_agent(project, role)
            turn = asyncio.ensure_future(invoke(agent, prompt, session_id, timeout_s=timeout_s))
            started = time.monotonic()
            await ctx.report_progress(0, None, f"{role} starts")
            while not turn.done():
                await asyncio.wait([turn], timeout=PROGRESS_EVERY_S)
                if not turn.done():
                    elapsed = time.monotonic() - started
                    await ctx.report_progress(elapsed, None, f"{role} is working ({elapsed:.0f} s)")
            result = turn.result()
        if not result.ok:
            raise ToolError(f"the turn of {role} failed ({result.error_kind}): {result.error}; "
                            f"session_id {result.session_id} continues it")
        return {"role": role, "session_id": result.session_id, "turn": result.turn, "text": result.text,
                "tokens": result.usage.total_tokens, "cost_usd": result.usage.cost_usd,
                "duration_s": round(result.duration_s, 3), "sandboxed": result.sandboxed}

    @server.tool(description="Start a run of the whole crew on a goal, its engine in the background. "
                             f"mode: {', '.join(MODES[:-1])} or {MODES[-1]} (default: crew.yaml's); "
                             "base: a branch or commit to start from (default: the person's HEAD).")
    async def start_run(goal: Text, ctx: Context,
                        mode: Mode | None = None,
                        graph: Annotated[str | None, Field(max_length=500)] = None,
                        base: Annotated[str | None, Field(max_length=250)] = None,
                        wait_s: WaitS = 0.0) -> dict[str, Any]:
        with _as_tool_error():
            run = runs.create_run(project, goal, mode, graph, base=base)
            pid = runs.detach(project, run.id)
            await ctx.report_progress(0, None, f"run {run.id} started (engine pid {pid})")
            if wait_s:
                run = await follow(project, run.id, wait_s, ctx, from_start=True)
            else:
                run = runs.load(project, run.id)  # as the engine has it by now
            return {"engine_pid": pid, **views.run_status(project, run)}

    @server.tool(description="A run's status: goal, tasks, open checkpoints (with how to answer each), tokens, "
                             "result. With wait_s, first waits for it to end or to need a person.")
    async def run_status(ctx: Context, run: RunRef = None, wait_s: WaitS = 0.0) -> dict[str, Any]:
        with _as_tool_error():
            loaded = runs.load(project, run)
            if wait_s:
                loaded = await follow(project, loaded.id, wait_s, ctx, from_start=False)
            return views.run_status(project, loaded)

    @server.tool(description="Start the engine of a run whose engine is not running (run_status says "
                             "engine: stopped: it was interrupted, killed, or the machine restarted).")
    async def resume_run(ctx: Context, run: RunRef = None, wait_s: WaitS = 0.0) -> dict[str, Any]:
        with _as_tool_error():
            run_id = runs.resolve_id(project, run)
            pid = runs.resume_engine(project, run_id)
            await ctx.report_progress(0, None, f"the engine of {run_id} runs again (pid {pid})")
            loaded = await follow(project, run_id, wait_s, ctx, from_start=False) if wait_s else \
                runs.load(project, run_id)
            return {"engine_pid": pid, **views.run_status(project, loaded)}

    @server.tool(description="Throw a run away: its engine is stopped if it runs, then its worktrees, branches "
                             "(merged or not), state and its sessions' links to it are removed for good. Without "
                             "confirm=true, only says what it would remove.")
    async def discard_run(run: Name, confirm: bool = False) -> dict[str, Any]:
        from agentbox.core.admin import discard

        with _as_tool_error():
            if not confirm:
                planned = discard.plan(project, run)
                return {"discarded": False, "run": planned.run_id, "would_remove": planned.lines(),
                        "how": "call discard_run again with confirm=true to remove it"}
            removed = await anyio.to_thread.run_sync(discard.discard, project, run)
            return {"discarded": True, "run": removed.run_id, "removed": removed.lines()}

    @server.tool(description="Open checkpoints (questions, plans and tasks waiting for approval, budget "
                             "pauses) of one run, or of every run that has not ended.")
    async def list_checkpoints(run: RunRef = None) -> dict[str, Any]:
        with _as_tool_error():
            return {"checkpoints": views.open_checkpoints(project, run)}

    @server.tool(description="Answer a checkpoint as the person: a plan ('approve' or feedback), a question, "
                             "a retry escalation ('retry' or 'cancel'), a budget pause ('continue' or 'cancel').")
    async def answer_checkpoint(checkpoint: Name, text: Text, run: RunRef = None) -> dict[str, Any]:
        with _as_tool_error():
            run_id, checkpoint = runs.resolve_checkpoint(project, views.checkpoint_run(project, checkpoint, run),
                                                         checkpoint)
            return await _steer(project, run_id, commands.Answer(checkpoint=checkpoint, text=text))

    @server.tool(description="Approve a task in review; the note is the person's evidence. `commit` names the "
                             "commit you judged (default: the task's head as the run shows it); the approval is "
                             "refused as stale when the task's branch is no longer there.")
    async def approve_task(task: Name, note: Text = "approved by a human (through MCP)",
                           run: RunRef = None, commit: CommitRef = None) -> dict[str, Any]:
        with _as_tool_error():
            run_id, task = runs.resolve_task(project, task, run)
            at = {"commit": commit.strip().lower()} if commit else {}
            return await _steer(project, run_id, commands.Approve.of(task=task, note=note, **at))

    @server.tool(description="Send a task in review back for rework, with a note saying what to fix.")
    async def rework_task(task: Name, note: Text, run: RunRef = None) -> dict[str, Any]:
        with _as_tool_error():
            run_id, task = runs.resolve_task(project, task, run)
            return await _steer(project, run_id, commands.Rework(task=task, note=note))

    @server.tool(description="Cancel one task (task=...), or a whole run (default: the only active run).")
    async def cancel(run: RunRef = None, task: Annotated[str | None, Field(max_length=200)] = None) -> dict[str, Any]:
        with _as_tool_error():
            if task:
                run_id, task = runs.resolve_task(project, task, run)
                return await _steer(project, run_id, commands.CancelTask(task=task))
            run_id = run or runs.the_active_run(project, "cancel")
            return await _steer(project, run_id, commands.CancelRun(note="cancelled through MCP"))

    @server.tool(description="Ask the crew's liaison where things stand: a read-only turn that answers from a "
                             "digest of the run's state (tasks, checks, checkpoints, decisions, costs, engine), "
                             "stating the time of its data; never changes the run. Follow-ups continue its session.")
    async def ask(question: Text, run: RunRef = None) -> dict[str, Any]:
        from agentbox.core.reports import liaison

        with _as_tool_error():
            answer = await liaison.ask(project, question, run)
        if not answer.ok:
            raise ToolError(f"the liaison's turn failed: {answer.error}")
        return {"answer": answer.text, "data_as_of": liaison.stamp(answer.as_of), "run": answer.run_id,
                "session_id": answer.session_id, "tokens": answer.tokens, "cost_usd": answer.cost_usd}

    _add_resources(server, project)
    return server


def _add_resources(server: MCPServer, project: ProjectPaths) -> None:
    """Runs (status, events, artifacts) and sessions (history) as resources."""

    @server.resource("agentbox://runs", mime_type="application/json", description="The project's runs.")
    def run_list() -> list[dict[str, Any]]:
        with _as_resource_error():
            return views.run_list(project)

    @server.resource("agentbox://runs/{run_id}", mime_type="application/json", description="A run's status.")
    def run_status(run_id: str) -> dict[str, Any]:
        with _as_resource_error():
            return views.run_status(project, runs.load(project, run_id))

    @server.resource("agentbox://runs/{run_id}/events", mime_type="application/jsonl",
                     description=f"The latest {views.EVENTS_LIMIT} records of a run's decision log.")
    def run_events(run_id: str) -> str:
        with _as_resource_error():
            return views.events(project, run_id)

    @server.resource("agentbox://runs/{run_id}/artifacts", mime_type="application/json",
                     description="Who made which file in a run (the manifest), each with the URI that reads it.")
    def run_artifacts(run_id: str) -> list[dict[str, Any]]:
        with _as_resource_error():
            return views.artifacts(project, run_id)

    @server.resource("agentbox://runs/{run_id}/artifacts/{index}", description="One artifact's content.")
    def run_artifact(run_id: str, index: int) -> str | bytes:
        with _as_resource_error():
            return views.artifact(project, run_id, index)

    @server.resource("agentbox://sessions", mime_type="application/json",
                     description="Every session of the crew's roles, newest first.")
    def session_list() -> list[dict[str, Any]]:
        with _as_resource_error():
            return views.sessions(project)

    @server.resource("agentbox://sessions/{session_id}", mime_type="application/json",
                     description="One session's history: each turn's prompt, result, tokens and status.")
    def session_history(session_id: str) -> dict[str, Any]:
        with _as_resource_error():
            return views.session(project, session_id)


def serve(project: ProjectPaths, http_port: int | None = None, token: str | None = None) -> None:
    """Serve `project` over stdio, or streamable HTTP on 127.0.0.1:`http_port` (never another
    address), where every request must carry `Authorization: Bearer <token>`."""
    server = build_server(project)
    if http_port is None:
        anyio.run(server.run_stdio_async)
        return
    import uvicorn

    from agentbox.mcp.auth import BearerGate, http_token

    app = BearerGate(server.streamable_http_app(host="127.0.0.1"), token or http_token())
    config = uvicorn.Config(app, host="127.0.0.1", port=http_port, log_level=server.settings.log_level.lower())
    anyio.run(uvicorn.Server(config).serve)
