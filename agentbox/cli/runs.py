"""`agentbox run | status | approve | rework | answer | cancel | pause | resume`."""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sys
import time
from typing import Any

from agentbox.cli.common import print_json, print_table, project_from
from agentbox.core.agents.pricing import usd
from agentbox.core.errors import UsageError
from agentbox.core.termtext import for_block, for_line, for_terminal

APPROVED_BY_DEFAULT = "approved by a human"
"""The note of `agentbox approve` when none is given."""

_STYLE = {"checkpoint": "bold yellow", "failure": "red", "escalation": "bold red", "run.finished": "bold green",
          "verdict": "magenta", "submission": "cyan", "dispatch": "blue", "retry": "yellow", "plan": "green",
          "run.status": "bold"}


def _printer(quiet: bool, bell: bool = True) -> Any:
    """A callback printing each decision-log event as one coloured line; an event the person must
    hear of (the run ended, failed, stopped) also gets a banner and the terminal bell."""
    if quiet:
        return None
    from rich.console import Console
    from rich.text import Text

    from agentbox.core.engine.notify import terminal_banner

    console = Console(highlight=False)

    def show(event: dict[str, Any]) -> None:
        if event["type"] == "turn" and ": ok" in event["what"]:
            return
        stamp = dt.datetime.fromtimestamp(event["at"]).strftime("%H:%M:%S")
        kind = event["type"]
        style = _STYLE.get(kind, "dim" if kind.startswith("task.") else "")
        line = Text.assemble((stamp + " ", "dim"), (f"{for_line(kind):<16} ", style), for_line(event["what"]))
        if event.get("why") and kind in ("checkpoint", "failure", "run.finished", "escalation", "run.status", "ladder"):
            line.append(f" — {for_line(event['why'])}", style="dim")
        if event.get("human_required"):
            line.append("  ⚑ human", style="bold yellow")
        console.print(line)
        banner = terminal_banner(event)
        if banner:
            if bell and console.is_terminal:
                console.bell()
            console.print(Text(for_line(banner), style="bold yellow"))

    return show


def answer_commands(run: Any, cp: Any) -> list[tuple[str, str]]:
    """(what, exact command) pairs that answer checkpoint `cp` of `run`, for the person to copy."""
    commands = []
    if cp.kind == "plan_approval":
        commands.append(("approve the plan", f"agentbox approve {run.id} {cp.id}"))
        commands.append(("re-plan", f'agentbox answer {run.id} {cp.id} "FEEDBACK"'))
        return commands
    if cp.kind == "deliver":
        commands.append(("merge", f"agentbox merge {run.id}"))
        commands.append(("one commit", f"agentbox merge {run.id} --squash"))
        commands.append(("look first", f"agentbox diff {run.id}"))
        return commands
    task = run.tasks.get(cp.task or "")
    if task is not None and task.state == "reviewing":
        commands.append(("approve", f"agentbox approve {task.id} --run {run.id}"))
        commands.append(("send back", f'agentbox rework {task.id} --run {run.id} --note "WHAT TO FIX"'))
    if cp.kind == "ladder" and "apply" in cp.options and task is not None:
        commands.append(("apply", f"agentbox apply {task.id} --run {run.id}"))
    hint = {"retry_escalation": "retry [NOTE] | cancel", "budget": "TOKENS to add | cancel",
            "run_budget": "raise TOKENS | cancel"}.get(cp.kind, "YOUR ANSWER")
    if cp.kind == "ladder":
        words, cause = cp.ladder_answers()
        hint = " | ".join(words) + (" [ROOT CAUSE]" if cause else "")
    commands.append(("answer", f'agentbox answer {run.id} {cp.id} "{hint}"'))
    return commands


class Person:
    """The person at the terminal of a foreground run, in a helper thread.

    Each checkpoint that opens is announced once, with the exact commands that answer it and
    the terminal bell. When stdin is a terminal the person may answer inline; otherwise stdin
    is never read. Answers go to the engine like any other terminal's (through its inbox).
    """

    POLL_S = 0.25

    def __init__(self, project: Any, run_id: str, *, interactive: bool, bell: bool = True) -> None:
        import threading

        self.project = project
        self.run_id = run_id
        self.interactive = interactive
        self.bell = bell
        self.announced: set[str] = set()
        self.queue: list[str] = []
        self.prompted: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="agentbox-person", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        if self.prompted:  # the run ended under an open prompt: what follows starts on its own line
            self.prompted = None
            self._say("\n")

    def _say(self, text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    def _watch(self) -> None:
        from agentbox.core import runs as runs_mod
        from agentbox.core.engine.run_store import RunStore
        from agentbox.core.errors import AgentboxError

        store = RunStore(self.project)
        seen: tuple[int, ...] | None = None
        run = None
        while not self._stop.is_set():
            try:
                stamp = store.state_stamp(self.run_id)
                if run is None or stamp != seen:  # re-read only what changed
                    seen, run = stamp, runs_mod.load(self.project, self.run_id)
            except (AgentboxError, OSError, ValueError):
                self._stop.wait(self.POLL_S)
                continue
            open_cps = {c.id: c for c in run.open_checkpoints()}
            for cp in open_cps.values():
                if cp.id not in self.announced:
                    self.announced.add(cp.id)
                    self.queue.append(cp.id)
                    self._announce(run, cp)
            if self.prompted and self.prompted not in open_cps:
                self._say(f"\n({self.prompted} was answered elsewhere)\n")
                self.prompted = None
            self.queue = [cp_id for cp_id in self.queue if cp_id in open_cps]
            if not (self.interactive and self.queue):
                self._stop.wait(self.POLL_S)
                continue
            self._ask(run, open_cps[self.queue[0]])

    def _announce(self, run: Any, cp: Any) -> None:
        bell = "\a" if self.bell and sys.stdout.isatty() else ""
        where = f" (task {for_line(cp.task)})" if cp.task else ""
        lines = [f"{bell}\n⚑ {cp.id} waits for you{where}: {for_block(cp.question.strip(), '  │ ')}"]
        lines += [f"  {what + ':':<11} {for_line(command)}" for what, command in answer_commands(run, cp)]
        self._say("\n".join(lines) + "\n")

    def _ask(self, run: Any, cp: Any) -> None:
        import select

        choices = "approve [NOTE], rework NOTE, or an answer" if any(
            what == "approve" for what, _ in answer_commands(run, cp)) else "your answer"
        if self.prompted != cp.id:
            self.prompted = cp.id
            self._say(f"{cp.id} — {choices} (empty: later) > ")
        ready, _, _ = select.select([sys.stdin], [], [], self.POLL_S)
        if not ready:
            return
        line = sys.stdin.readline()
        self.prompted = None
        self.queue.remove(cp.id)
        if not line:  # end of input: no more inline answers
            self.interactive = False
            return
        text = line.strip()
        if not text:
            self._say(f"{cp.id} left open: answer it later with the command above\n")
            return
        self._say(for_terminal(self._send(run, cp, text)) + "\n")

    def _send(self, run: Any, cp: Any, text: str) -> str:
        from agentbox.core import runs as runs_mod
        from agentbox.core.errors import AgentboxError

        word, _, rest = text.partition(" ")
        task = run.tasks.get(cp.task or "")
        command: dict[str, Any] = {"action": "answer", "checkpoint": cp.id, "text": text}
        if task is not None and task.state == "reviewing" and word.lower() == "approve":
            command = {"action": "approve", "task": task.id, "note": rest.strip() or APPROVED_BY_DEFAULT}
        elif task is not None and task.state == "reviewing" and word.lower() == "rework":
            if not rest.strip():
                self.queue.insert(0, cp.id)
                return "rework needs a note saying what to fix"
            command = {"action": "rework", "task": task.id, "note": rest.strip()}
        try:
            ok, message = runs_mod.send_command(self.project, self.run_id, command)
        except AgentboxError as exc:
            ok, message = False, exc.message
        if not ok:
            self.queue.insert(0, cp.id)
        return message if ok else f"error: {message}"


def _interrupted(project: Any, run_id: str) -> None:
    """Say what Ctrl-C did to the run and how to go on."""
    from agentbox.core import runs as runs_mod
    from agentbox.core.errors import AgentboxError

    try:
        run = runs_mod.load(project, run_id)
    except (AgentboxError, OSError):  # the message comes out whatever the state file says
        run = None
    waiting = [c.id for c in run.open_checkpoints()] if run is not None else []
    state = f"saved as {run.status}" + (f", {', '.join(waiting)} still open" if waiting else "") if run else "on disk"
    print(f"\ninterrupted: the engine of run {run_id} stopped and so did its running turns; "
          f"nothing runs now (the run is {state}; it is not cancelled)", file=sys.stderr)
    print(f"continue it: agentbox run --resume {run_id}   (in the background: add --detach)\n"
          f"or end it:   agentbox cancel {run_id}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    """Start (or resume) a run; foreground with live progress, or detached."""
    from agentbox.core import runs
    from agentbox.core.config.user_config import load_user_config

    project = project_from(args)
    bell = load_user_config().notify.bell  # a broken config.yaml stops here, not in a detached engine
    if args.resume:
        from agentbox.core.engine.run_store import RunStore

        if args.base:
            raise UsageError("--base is for a new run", f"a resumed run keeps its base: agentbox run --resume {args.resume}")
        run_store = RunStore(project)
        run_id = run_store.resolve_id(args.resume)
        run_store.load_checked(run_id)  # a damaged run is refused here, before anything starts
    else:
        if not args.goal:
            raise UsageError("say what the crew should do", 'agentbox run "GOAL" (or --resume RUN)')
        run_id = runs.create_run(project, args.goal, args.mode, args.graph, base=args.base).id
    if args.detach:
        pid = runs.detach(project, run_id)
        print(run_id)
        print(f"engine running in the background (pid {pid}); watch with `agentbox status {run_id}` or `agentbox`",
              file=sys.stderr)
        return 0
    print(f"run {run_id}", file=sys.stderr)
    person = Person(project, run_id, interactive=sys.stdin.isatty() and sys.stdout.isatty(), bell=bell)
    person.start()
    try:
        final = asyncio.run(runs.execute(project, run_id, _printer(args.quiet, bell)))
    except KeyboardInterrupt:
        person.stop()
        _interrupted(project, run_id)
        return 130
    finally:
        person.stop()
    if not args.quiet:
        print(f"run {final.id}: {final.status}" + (f" — {for_line(final.status_reason)}" if final.status_reason else ""))
        if final.result and final.result.artifact:
            print(f"result: {for_line(final.result.artifact)}")
    return 0 if final.status == "done" else 1


def spend_line(run: Any) -> str:
    """The run's cost so far, against its money budget when it has one."""
    totals = run.totals
    line = usd(totals.cost_usd) + (f" / {usd(run.usd_budget)}" if run.usd_budget is not None else "")
    if totals.cost_usd is not None and totals.unknown_cost_turns:
        line += f" + {totals.unknown_cost_turns} turn{'s' if totals.unknown_cost_turns != 1 else ''} unknown"
    return line + (" (subscription)" if totals.subscription_turns else "")


def status(args: argparse.Namespace) -> int:
    """Show one run: status, tasks, checkpoints, totals."""
    from agentbox.core import runs as runs_mod

    project = project_from(args)
    run = runs_mod.load(project, args.run)
    alive = runs_mod.engine_alive(project, run.id)
    engine = runs_mod.engine_state(run, alive, time.time())
    if args.json:
        data = run.model_dump(exclude={"outbox", "applied_commands"})
        data["engine_running"] = alive
        data["engine_state"] = engine
        print_json(data)
        return 0
    totals = run.totals
    unknown = f" (+{totals.unknown_usage_turns} turn(s) with unknown usage)" if totals.unknown_usage_turns else ""
    budget = run.token_budget
    if engine == "stopped":
        print(f"{run.id}  {runs_mod.ENGINE_STOPPED} — it stopped while {for_line(runs_mod.stopped_while(run))}")
    else:
        print(f"{run.id}  {run.status}{' — ' + for_line(run.status_reason) if run.status_reason else ''}")
    print(f"goal: {for_line(run.contract.goal)}")
    print(f"mode: {run.contract.mode} · engine: {engine.replace('stopped', 'not running')} · "
          f"tokens: {totals.tokens:,}{' / ' + format(budget, ',') if budget else ''}{unknown}"
          + f" · cost {spend_line(run)}")
    if run.git is not None:
        from agentbox.core.reports.changes import merge_hint

        base = f"{run.git.base[:10]}" + (" (a snapshot of your uncommitted changes)" if run.git.dirty else "")
        if run.git.named_base:
            base += f" (--base {run.git.named_base})"
        into = run.git.delivered_into or run.git.branch or "a branch of yours"
        delivered = f"merged into {into} ({run.git.delivered[:10]})" if run.git.delivered else merge_hint(run)
        print(for_line(f"workspace: worktree · {run.git.integration_branch} from {base} · {delivered}"))
    if run.tasks:
        print()
        worktree = run.git is not None
        checking = run.checking()
        ladder = run.contract.ladder
        held = {job.task: job.data.held.split(":")[0] for job in run.pending_jobs() if job.task and job.data.held}
        on_nodes = any(t.node for t in run.tasks.values())
        print_table(["task", "state", *(["ladder"] if ladder else []), "assignee", "deps", "attempts", "tokens",
                     "cost", "verdict", *(["files"] if worktree else []), *(["node"] if on_nodes else [])],
                    [[t.id, t.state_label + (" (checking)" if t.id in checking else f" ({held[t.id]})" if t.id in held else ""),
                      *([t.ladder.label] if ladder else []), t.assignee,
                      ",".join(t.depends_on) or "-", str(t.attempts),
                      f"{t.tokens:,}" + ("+?" if t.unknown_usage_turns else ""),
                      usd(t.cost_usd, t.unknown_cost_turns),
                      t.verdicts[-1].verdict + f" ({t.verdicts[-1].by})" if t.verdicts else "-",
                      *([(str(len(t.changed_files) + t.changed_more) + (" merged" if t.merged else "")) if t.changed_files
                         else "none"] if worktree else []),
                      *([_node(t.node)] if on_nodes else [])]
                     for t in run.tasks.values()])
    if run.spend_by_role:
        print("\nby role: " + " · ".join(f"{for_line(role)} {usd(spend.cost_usd, spend.unknown_cost_turns)}"
                                         for role, spend in sorted(run.spend_by_role.items())))
    open_cps = run.open_checkpoints()
    if open_cps:
        print("\nwaiting for you:")
        for cp in open_cps:
            print(f"  {cp.id} [{cp.kind}]{' task ' + for_line(cp.task) if cp.task else ''}: "
                  f"{for_block(cp.question.strip(), '    │ ')}")
            for what, command in answer_commands(run, cp):
                print(f"      {what + ':':<11} {for_line(command)}")
    if run.result:
        print(f"\nresult: {for_line(run.result.artifact or '')}\n{for_terminal(run.result.summary[:600])}")
    if engine == "stopped":
        print(f"\nthe engine is not running: `{runs_mod.resume_command(run.id)}` continues it "
              "(add --detach to run it in the background)"
              + ("; answers given meanwhile are kept and acted on then" if open_cps else ""))
    return 0


def _node(node: str | None) -> str:
    """`3f2a9c1d0b7e@host` for a task's last cluster node (node id shortened), `-` for this machine."""
    if not node:
        return "-"
    node_id, _, host = node.partition("@")
    return for_line(f"{node_id[:12]}@{host}")


def _send(project: Any, run_id: str | None, command: dict[str, Any]) -> int:
    from agentbox.core import runs as runs_mod

    ok, message = runs_mod.send_command(project, run_id or "latest", command)
    message = for_terminal(message)  # it may quote what an agent wrote
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
    run_id, task_id = runs_mod.resolve_task(project, target, args.run)
    shown = _show_task_changes(project, run_id, task_id, args.at)
    command = {"action": "approve", "task": task_id, "note": args.note}
    at = (args.at or "").strip().lower() or shown
    if at:
        command["commit"] = at
    return _send(project, run_id, command)


def _show_task_changes(project: Any, run_id: str, task_id: str, at: str | None = None) -> str | None:
    """What the task's branch changes (from git), shown to the person deciding on it; the commit shown."""
    from agentbox.core import runs as runs_mod
    from agentbox.core.reports import changes as run_changes

    run = runs_mod.load(project, run_id)
    task = run.tasks.get(task_id)
    if run.git is None or task is None or task.branch is None:
        return None
    diff = run_changes.task_diff(project, run, task_id, stat_only=True)
    head = f" at {task.head[:10]}" if task.head else ""
    print(f"{task_id} changes (its branch {for_line(task.branch)}, from git){head}:\n"
          f"{for_terminal(diff.stat.rstrip()) or ' no file'}\n"
          f"(the whole diff: agentbox diff {run.id} {task_id})")
    if at and task.head and not task.head.startswith(at.strip().lower()):
        print(f"(you approve {at}, not the head shown)")
    return task.head


def rework(args: argparse.Namespace) -> int:
    """Send a task in review back with a note."""
    from agentbox.core import runs as runs_mod

    project = project_from(args)
    run_id, task_id = runs_mod.resolve_task(project, args.task, args.run)
    _show_task_changes(project, run_id, task_id)
    return _send(project, run_id, {"action": "rework", "task": task_id, "note": args.note})


def answer(args: argparse.Namespace) -> int:
    """Answer a checkpoint (its id, a unique prefix of it, or its number)."""
    from agentbox.core import runs as runs_mod

    project = project_from(args)
    run_id, checkpoint = runs_mod.resolve_checkpoint(project, args.run, args.checkpoint)
    return _send(project, run_id, {"action": "answer", "checkpoint": checkpoint, "text": args.text})


def cancel(args: argparse.Namespace) -> int:
    """Cancel a run, or one task."""
    from agentbox.core import runs as runs_mod

    project = project_from(args)
    target = args.target or runs_mod.the_active_run(project, "cancel")
    if target.startswith("run-") or target == "latest":
        return _send(project, target, {"action": "cancel_run", "note": "cancelled with `agentbox cancel`"})
    run_id, task_id = runs_mod.resolve_task(project, target, args.run)
    return _send(project, run_id, {"action": "cancel_task", "task": task_id})


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
