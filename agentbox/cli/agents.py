"""`agentbox invoke`, `sessions`, `attach` and `launch`."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from agentbox.cli.common import maybe_project, print_json, print_table
from agentbox.core.termtext import for_line, for_terminal

if TYPE_CHECKING:
    from agentbox.core.agents.invoke import Agent
    from agentbox.core.agents.sessions import SessionRecord
    from agentbox.core.paths import ProjectPaths


def _when(timestamp: float | None) -> str:
    if not timestamp:
        return "-"
    import datetime as dt

    return dt.datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M:%S")


def _tokens(value: int | None) -> str:
    return "unknown" if value is None else f"{value:,}"


def check_timeout(seconds: float | None) -> float | None:
    """`--timeout` as given, when it is a finite number of seconds above 0 (else a UsageError)."""
    import math

    from agentbox.core.errors import UsageError

    if seconds is not None and not (math.isfinite(seconds) and seconds > 0):
        raise UsageError(f"--timeout must be a number of seconds above 0, not {seconds:g}",
                         "give the seconds the turn may take, e.g. --timeout 300")
    return seconds


def invoke(args: argparse.Namespace) -> int:
    """One headless turn; exit 0 on success, 1 on an agent failure (error on stderr)."""
    import time

    from agentbox.core.agents import resolve as services
    from agentbox.core.agents.invoke import invoke_sync
    from agentbox.core.errors import NotFoundError, UsageError
    from agentbox.core.telemetry import tracing as telemetry

    check_timeout(args.timeout)
    proj = maybe_project(args)
    agent = services.resolve_agent(args.target, proj)
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    if not prompt.strip():
        raise UsageError("the prompt is empty")
    session_id = args.session
    if args.continue_:
        latest = agent.sessions.latest(agent.label)
        if latest is None:
            raise NotFoundError(f"{agent.label} has no session to continue", "drop --continue to start one")
        session_id = latest.id
    trace = telemetry.settings()
    if trace is not None:  # a one-span trace; claude and codex export their own under it
        ids, started = telemetry.new_invoke_ids(), time.time()
        agent = telemetry.traced_agent(agent, trace, telemetry.traceparent(*ids),
                                       {"agentbox.role": agent.role, "agentbox.profile": agent.profile.name})
    result = invoke_sync(agent, prompt, session_id, timeout_s=args.timeout)  # one turn: no event loop to start
    if trace is not None:
        telemetry.export_invoke(trace, ids, result, started, time.time())
    if args.json:
        print_json(result.as_dict())
    else:
        if result.text:
            print(for_terminal(result.text))
        usage = result.usage
        cost = f", ${usage.cost_usd:.4f}" if usage.cost_usd is not None else ""
        tokens = _tokens(usage.total_tokens)
        print(f"[{for_line(agent.label)} · session {for_line(result.session_id)} · turn {result.turn} · "
              f"{tokens} tokens{cost} · {result.duration_s:.1f}s"
              f"{'' if result.sandboxed else ' · NOT SANDBOXED'}]", file=sys.stderr)
    if result.network is not None:  # a turn with no proxy loads none of it
        from agentbox.core.agents.egress_turn import denied_line

        refused = denied_line(result.network)
        if refused is not None:
            print(refused, file=sys.stderr)
    if not result.ok:
        print(f"error: {result.error_kind}: {for_terminal(result.error)}", file=sys.stderr)
        print(f"hint: raw output in {result.log_path}", file=sys.stderr)
        return 1
    return 0


def sessions(args: argparse.Namespace) -> int:
    """`sessions [ROLE]` lists sessions; `sessions show UUID` shows one session's turns."""
    from agentbox.core.agents import resolve as services
    from agentbox.core.errors import StateError

    proj = maybe_project(args)
    if args.role == "show":
        if not args.session_id:
            from agentbox.core.errors import UsageError

            raise UsageError("usage: agentbox sessions show UUID")
        return _show_session(args, proj)  # SessionStore.find checks the id before it becomes a file name
    store = services.session_store_for(args.role, proj)
    damaged: list[StateError] = []
    records = store.list(args.role, damaged)
    if args.role and not records and not damaged:
        services.check_session_owner(args.role, proj)  # a name that is no role: say so, not an empty table
    for problem in damaged:
        print(f"warning: {for_terminal(problem)}", file=sys.stderr)
    if args.json:
        print_json([r.as_dict() for r in records])
        return 0
    rows = [[r.owner, r.id, r.tool, r.run_id or "-", r.task_id or "-", str(r.turns),
             f"{r.totals.tokens:,}" + (f" (+{r.totals.unknown_usage_turns} unknown)" if r.totals.unknown_usage_turns else ""),
             _running_on(r) or r.last_status or "-", _when(r.updated)] for r in records]
    print_table(["role", "session", "tool", "run", "task", "turns", "tokens", "last", "updated"], rows)
    return 0


def _running_on(record: SessionRecord) -> str | None:
    """`running`, with the cluster node it runs on (`running on NODE@HOST`), for a session whose turn is in flight."""
    if record.status != "running":
        return None
    running = record.running
    if running is None or "node" not in running:
        return "running"
    return f"running on {running['node'][:12]}@{running.get('host', '?')}"


def _show_session(args: argparse.Namespace, proj: ProjectPaths | None) -> int:
    from agentbox.core import paths
    from agentbox.core.agents.egress_turn import denied_line
    from agentbox.core.agents.sessions import SessionStore
    from agentbox.core.errors import NotFoundError
    from agentbox.core.runtimes.base import Usage

    stores = ([SessionStore(proj.sessions_dir)] if proj is not None else []) + [SessionStore(paths.global_sessions_dir())]
    for store in stores:
        try:
            record = store.find(args.session_id)
        except NotFoundError:
            continue
        turns = store.turns(record)
        if args.json:
            print_json({"session": record.as_dict(), "turns": turns})
            return 0
        print(for_line(f"session {record.id} · {record.owner} · profile {record.profile} ({record.tool}) · "
                       f"native {record.native_id or '-'}"))
        print(for_line(f"cwd {record.cwd} · {record.turns} turns · {record.totals.tokens:,} tokens · "
                       f"last {record.last_status}"))
        for turn in turns:
            if not (isinstance(turn.get("turn"), int) and isinstance(turn.get("status"), str)
                    and isinstance(turn.get("prompt"), str) and isinstance(turn.get("usage") or {}, dict)
                    and isinstance(turn.get("duration_s", 0), int | float)):
                print(f"\n--- a damaged turn line in {for_line(store.turns_path(record))} (skipped)")
                continue
            tokens = _tokens(Usage.from_dict(turn.get("usage")).total_tokens)
            kind = f" ({turn['error_kind']})" if turn.get("error_kind") else ""
            print("\n" + for_line(f"--- turn {turn['turn']} · {turn['status']}{kind} · {tokens} tokens · "
                                  f"{turn.get('duration_s', 0):.1f}s · {_when(turn.get('started'))}"))
            print(f"> {for_terminal(turn['prompt'])}")
            print(for_terminal(turn.get("text") or turn.get("error") or ""))
            refused = denied_line(turn.get("network"))
            if refused is not None:
                print(for_line(refused))
        return 0
    raise NotFoundError(f"no session {args.session_id}", "`agentbox sessions` lists them")


def _interactive(agent: Agent, session_id: str | None) -> int:
    import subprocess

    from agentbox.core.agents.resolve import interactive_session

    with interactive_session(agent, session_id) as command:
        if agent.profile.profile.sandbox == "none":
            print("warning: this profile runs WITHOUT a sandbox (sandbox: none)", file=sys.stderr)
        print(f"[attaching to {for_line(agent.label)} · session {command.session_id}]", file=sys.stderr)
        return subprocess.call(command.argv, env=command.env, cwd=str(agent.cwd),
                               pass_fds=command.pass_fds)


def attach(args: argparse.Namespace) -> int:
    """Run the role's tool interactively in its sandbox, resuming its (latest) session."""
    from agentbox.core.agents import resolve as services

    proj = maybe_project(args)
    agent = services.resolve_agent(args.role, proj)
    session_id = args.session_id
    if session_id is None:
        latest = agent.sessions.latest(agent.label)
        session_id = latest.id if latest else None
    return _interactive(agent, session_id)


def launch(args: argparse.Namespace) -> int:
    """agent-box v1's launch: a profile's tool, interactive, sandboxed."""
    from agentbox.core.agents import resolve as services

    proj = maybe_project(args)
    agent = services.profile_agent(args.profile, __import__("pathlib").Path.cwd(), proj)
    return _interactive(agent, args.session)
