"""`agentbox run | runs | status | approve | rework | answer | cancel | pause | resume`."""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sys
from typing import Any

from agentbox.cli.common import print_json, print_table, project_from
from agentbox.core.errors import UsageError

APPROVED_BY_DEFAULT = "approved by a human"
"""The note of `agentbox approve` when none is given."""

_STYLE = {"checkpoint": "bold yellow", "failure": "red", "escalation": "bold red", "run.finished": "bold green",
          "verdict": "magenta", "submission": "cyan", "dispatch": "blue", "retry": "yellow", "plan": "green",
          "run.status": "bold"}


def _printer(quiet: bool) -> Any:
    """A callback printing each decision-log event as one coloured line."""
    if quiet:
        return None
    from rich.console import Console
    from rich.text import Text

    console = Console(highlight=False)

    def show(event: dict[str, Any]) -> None:
        if event["type"] == "turn" and ": ok" in event["what"]:
            return
        stamp = dt.datetime.fromtimestamp(event["at"]).strftime("%H:%M:%S")
        kind = event["type"]
        style = _STYLE.get(kind, "dim" if kind.startswith("task.") else "")
        line = Text.assemble((stamp + " ", "dim"), (f"{kind:<16} ", style), event["what"])
        if event.get("why") and kind in ("checkpoint", "failure", "run.finished", "escalation", "run.status"):
            line.append(f" — {event['why']}", style="dim")
        if event.get("human_required"):
            line.append("  ⚑ human", style="bold yellow")
        console.print(line)

    return show


def run(args: argparse.Namespace) -> int:
    """Start (or resume) a run; foreground with live progress, or detached."""
    from agentbox.core import runs

    project = project_from(args)
    if args.resume:
        from agentbox.core.engine.run_store import RunStore

        run_store = RunStore(project)
        run_id = run_store.resolve_id(args.resume)
        run_store.load_checked(run_id)  # a damaged run is refused here, before anything starts
    else:
        if not args.goal:
            raise UsageError("say what the crew should do", 'agentbox run "GOAL" (or --resume RUN)')
        run_id = runs.create_run(project, args.goal, args.mode, args.graph).id
    if args.detach:
        pid = runs.detach(project, run_id)
        print(run_id)
        print(f"engine running in the background (pid {pid}); watch with `agentbox status {run_id}` or `agentbox`",
              file=sys.stderr)
        return 0
    print(f"run {run_id}", file=sys.stderr)
    final = asyncio.run(runs.execute(project, run_id, _printer(args.quiet)))
    if not args.quiet:
        print(f"run {final.id}: {final.status}" + (f" — {final.status_reason}" if final.status_reason else ""))
        if final.result and final.result.get("artifact"):
            print(f"result: {final.result['artifact']}")
    return 0 if final.status == "done" else 1


def runs(args: argparse.Namespace) -> int:
    """List runs."""
    from agentbox.core import runs as runs_mod
    from agentbox.core.engine.run_store import DamagedRun

    project = project_from(args)
    listed = runs_mod.list_runs(project)
    damaged = [r for r in listed if isinstance(r, DamagedRun)]
    if args.json:
        print_json([{"id": r.id, "status": "damaged", "error": r.error.message} if isinstance(r, DamagedRun) else
                    {"id": r.id, "status": r.status, "mode": r.contract.mode, "goal": r.contract.goal,
                     "tasks": len(r.tasks), "tokens": r.totals.tokens} for r in listed])
    else:
        print_table(["run", "status", "mode", "tasks", "tokens", "goal"],
                    [[r.id, "damaged", "-", "-", "-", "see below"] if isinstance(r, DamagedRun) else
                     [r.id, r.status, r.contract.mode, str(len(r.tasks)), f"{r.totals.tokens:,}", r.contract.goal[:60]]
                     for r in listed])
    for bad in damaged:
        print(f"warning: {bad.error.message}", file=sys.stderr)
    if damaged:
        print(f"hint: {damaged[0].error.hint}", file=sys.stderr)
    return 0


def status(args: argparse.Namespace) -> int:
    """Show one run: status, tasks, checkpoints, totals."""
    from agentbox.core import runs as runs_mod
    from agentbox.core.engine.models import TERMINAL_RUN_STATES

    project = project_from(args)
    run = runs_mod.load(project, args.run)
    if args.json:
        data = run.model_dump(exclude={"outbox", "applied_commands"})
        data["engine_running"] = runs_mod.engine_alive(project, run.id)
        print_json(data)
        return 0
    alive = runs_mod.engine_alive(project, run.id)
    totals = run.totals
    unknown = f" (+{totals.unknown_usage_turns} turn(s) with unknown usage)" if totals.unknown_usage_turns else ""
    budget = (run.contract.limits.get("budget") or {}).get("tokens_total")
    print(f"{run.id}  {run.status}{' — ' + run.status_reason if run.status_reason else ''}")
    print(f"goal: {run.contract.goal}")
    print(f"mode: {run.contract.mode} · engine: {'running' if alive else 'not running'} · "
          f"tokens: {totals.tokens:,}{' / ' + format(budget, ',') if budget else ''}{unknown}"
          + (f" · cost ${totals.cost_usd:.4f}" if totals.cost_usd is not None else ""))
    if run.tasks:
        print()
        print_table(["task", "state", "assignee", "deps", "attempts", "tokens", "verdict"],
                    [[t.id, t.state, t.assignee, ",".join(t.depends_on) or "-", str(t.attempts),
                      f"{t.tokens:,}" + ("+?" if t.unknown_usage_turns else ""),
                      t.verdicts[-1].verdict + f" ({t.verdicts[-1].by})" if t.verdicts else "-"] for t in run.tasks.values()])
    open_cps = [c for c in run.checkpoints.values() if c.status == "open"]
    if open_cps:
        print("\nwaiting for you:")
        for cp in open_cps:
            print(f"  {cp.id} [{cp.kind}]{' task ' + cp.task if cp.task else ''}: {cp.question}")
            print(f"      answer: agentbox answer {run.id} {cp.id} \"...\"")
    if run.result:
        print(f"\nresult: {run.result.get('artifact') or ''}\n{run.result.get('summary', '')[:600]}")
    if not alive and run.status not in TERMINAL_RUN_STATES:
        print(f"\nthe engine is not running: `agentbox run --resume {run.id}` continues it")
    return 0


def _send(project: Any, run_id: str | None, command: dict[str, Any]) -> int:
    from agentbox.core import runs as runs_mod

    ok, message = runs_mod.send_command(project, run_id or "latest", command)
    print(message if ok else f"error: {message}", file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 2


def approve(args: argparse.Namespace) -> int:
    """Approve a task in review (with a note as evidence), or a plan waiting for approval."""
    from agentbox.core import runs as runs_mod

    project = project_from(args)
    target, checkpoint = args.task, args.checkpoint
    if target and target.startswith("cp-") and checkpoint is None:  # `approve cp-N [--run RUN]`
        target, checkpoint = args.run, target
    if args.plan or checkpoint is not None:
        if args.plan and checkpoint is None and target is not None:
            raise UsageError("--plan takes no task", "agentbox approve --plan [--run RUN] (or approve RUN cp-N)")
        run_id, cp_id = runs_mod.plan_checkpoint(project, target or args.run, checkpoint)
        note = args.note.strip()
        text = "approve" if note in ("", APPROVED_BY_DEFAULT) else f"approve ({note})"
        return _send(project, run_id, {"action": "answer", "checkpoint": cp_id, "text": text})
    if not target:
        raise UsageError("say what to approve", "agentbox approve TASK, agentbox approve --plan, "
                                                "or agentbox approve RUN cp-N")
    run_id = runs_mod.find_task_run(project, target, args.run)
    return _send(project, run_id, {"action": "approve", "task": target, "note": args.note})


def rework(args: argparse.Namespace) -> int:
    """Send a task in review back with a note."""
    from agentbox.core import runs as runs_mod

    project = project_from(args)
    run_id = runs_mod.find_task_run(project, args.task, args.run)
    return _send(project, run_id, {"action": "rework", "task": args.task, "note": args.note})


def answer(args: argparse.Namespace) -> int:
    """Answer a checkpoint."""
    return _send(project_from(args), args.run, {"action": "answer", "checkpoint": args.checkpoint, "text": args.text})


def cancel(args: argparse.Namespace) -> int:
    """Cancel a run, or one task."""
    from agentbox.core import runs as runs_mod

    project = project_from(args)
    target = args.target or runs_mod.the_active_run(project, "cancel")
    if target.startswith("run-") or target == "latest":
        return _send(project, target, {"action": "cancel_run", "note": "cancelled with `agentbox cancel`"})
    run_id = runs_mod.find_task_run(project, target, args.run)
    return _send(project, run_id, {"action": "cancel_task", "task": target})


def pause(args: argparse.Namespace) -> int:
    """Pause a run."""
    from agentbox.core import runs as runs_mod

    project = project_from(args)
    return _send(project, args.run or runs_mod.the_active_run(project, "pause"), {"action": "pause"})


def resume_run(args: argparse.Namespace) -> int:
    """Resume a paused run."""
    from agentbox.core import runs as runs_mod

    project = project_from(args)
    return _send(project, args.run or runs_mod.the_active_run(project, "resume"), {"action": "resume"})
