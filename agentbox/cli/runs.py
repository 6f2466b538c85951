"""`agentbox run | status | approve | rework | answer | cancel | pause | resume`."""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from agentbox.cli.common import print_json, print_table, project_from
from agentbox.core.agents.pricing import usd
from agentbox.core.errors import UsageError
from agentbox.core.termtext import for_block, for_line, for_terminal

if TYPE_CHECKING:  # the run models and the door load only in the commands that use them
    from agentbox.core.engine.commands import Command
    from agentbox.core.engine.models import Checkpoint, Run
    from agentbox.core.paths import ProjectPaths
    from agentbox.core.runs import CheckpointView, EventRecord

APPROVED_BY_DEFAULT = "approved by a human"
"""The note of `agentbox approve` when none is given."""

_STYLE = {"checkpoint": "bold yellow", "failure": "red", "escalation": "bold red", "run.finished": "bold green",
          "verdict": "magenta", "submission": "cyan", "dispatch": "blue", "retry": "yellow", "plan": "green",
          "run.status": "bold"}


def printer(quiet: bool, bell: bool = True) -> Callable[[EventRecord], None] | None:
    """A callback printing each decision-log event as one coloured line; an event the person must
    hear of (the run ended, failed, stopped) also gets a banner and the terminal bell."""
    if quiet:
        return None
    from rich.console import Console
    from rich.text import Text

    from agentbox.core.engine.notify import terminal_banner

    console = Console(highlight=False)

    def show(event: EventRecord) -> None:
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


ANSWER_COMMANDS = {
    "approve_plan": "agentbox approve {run} {cp}", "replan": 'agentbox answer {run} {cp} "FEEDBACK"',
    "merge": "agentbox merge {run}", "merge_squash": "agentbox merge {run} --squash", "look": "agentbox diff {run}",
    "approve_task": "agentbox approve {task} --run {run}",
    "rework_task": 'agentbox rework {task} --run {run} --note "WHAT TO FIX"', "apply": "agentbox apply {task} --run {run}",
    "answer": 'agentbox answer {run} {cp} "{hint}"',
}
"""The command that answers a checkpoint each way (`agentbox.core.runs.AnswerKind`)."""


def answer_commands(view: CheckpointView) -> list[tuple[str, str]]:
    """(what, exact command) pairs that answer the checkpoint of `view`, for the person to copy."""
    hint = " | ".join(view.words) + (" [ROOT CAUSE]" if view.root_cause else "") if view.words else "YOUR ANSWER"
    return [(way.what, ANSWER_COMMANDS[way.kind].format(run=view.run_id, cp=view.checkpoint.id, task=way.task,
                                                         hint=hint)) for way in view.answers]


class Person:
    """The person at the terminal of a foreground run, in a helper thread.

    Each checkpoint that opens is announced once, with the exact commands that answer it and
    the terminal bell. When stdin is a terminal the person may answer inline; otherwise stdin
    is never read. Answers go to the engine like any other terminal's (through its inbox).
    """

    def __init__(self, project: ProjectPaths, run_id: str, *, interactive: bool, bell: bool = True) -> None:
        import threading

        from agentbox.core.runs import FOLLOW_POLL_S

        self.poll_s = FOLLOW_POLL_S
        """How long one look waits (for the person's answer, or just for time to pass): the door's."""
        self.project = project
        self.run_id = run_id
        self.interactive = interactive
        self.bell = bell
        self.announced: set[str] = set()
        self.queue: list[str] = []
        self.prompted: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="agentbox-person", daemon=True)
        self._next: Callable[[], None] | None = None
        """What to do until the next look at the run: ask the person, or nothing."""

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

    def _wait(self) -> bool:
        """Between two looks at the run: ask the person (for up to a poll), or just wait; False once stopped."""
        ask, self._next = self._next, None
        if ask is not None:
            ask()
        else:
            self._stop.wait(self.poll_s)
        return not self._stop.is_set()

    def _watch(self) -> None:
        from agentbox.core import runs as runs_mod

        if self._stop.is_set():
            return
        for update in runs_mod.follow_sync(self.project, self.run_id, self._wait, events="none"):
            run = update.run
            open_cps = {c.id: c for c in update.open_checkpoints}
            for cp in open_cps.values():
                if cp.id not in self.announced:
                    self.announced.add(cp.id)
                    self.queue.append(cp.id)
                    self._announce(run, cp)
            if self.prompted and self.prompted not in open_cps:
                self._say(f"\n({self.prompted} was answered elsewhere)\n")
                self.prompted = None
            self.queue = [cp_id for cp_id in self.queue if cp_id in open_cps]
            if self.interactive and self.queue:
                cp = open_cps[self.queue[0]]
                self._next = lambda run=run, cp=cp: self._ask(run, cp)

    def _announce(self, run: Run, cp: Checkpoint) -> None:
        from agentbox.core.runs import checkpoint_view

        bell = "\a" if self.bell and sys.stdout.isatty() else ""
        where = f" (task {for_line(cp.task)})" if cp.task else ""
        lines = [f"{bell}\n⚑ {cp.id} waits for you{where}: {for_block(cp.question.strip(), '  │ ')}"]
        lines += [f"  {what + ':':<11} {for_line(command)}" for what, command in answer_commands(checkpoint_view(run, cp))]
        self._say("\n".join(lines) + "\n")

    def _ask(self, run: Run, cp: Checkpoint) -> None:
        import select

        from agentbox.core.runs import checkpoint_view

        choices = "approve [NOTE], rework NOTE, or an answer" if checkpoint_view(run, cp).offers("approve_task") \
            else "your answer"
        if self.prompted != cp.id:
            self.prompted = cp.id
            self._say(f"{cp.id} — {choices} (empty: later) > ")
        ready, _, _ = select.select([sys.stdin], [], [], self.poll_s)
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

    def _send(self, run: Run, cp: Checkpoint, text: str) -> str:
        from agentbox.core import runs as runs_mod
        from agentbox.core.engine import commands
        from agentbox.core.errors import AgentboxError

        word, _, rest = text.partition(" ")
        task = run.tasks.get(cp.task or "")
        command: Command = commands.Answer(checkpoint=cp.id, text=text)
        if task is not None and task.state == "reviewing" and word.lower() == "approve":
            command = commands.Approve(task=task.id, note=rest.strip() or APPROVED_BY_DEFAULT)
        elif task is not None and task.state == "reviewing" and word.lower() == "rework":
            if not rest.strip():
                self.queue.insert(0, cp.id)
                return "rework needs a note saying what to fix"
            command = commands.Rework(task=task.id, note=rest.strip())
        try:
            ok, message = runs_mod.send_command(self.project, self.run_id, command)
        except AgentboxError as exc:
            ok, message = False, exc.message
        if not ok:
            self.queue.insert(0, cp.id)
        return message if ok else f"error: {message}"


def _interrupted(project: ProjectPaths, run_id: str) -> None:
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
    print(f"continue it: {runs_mod.resume_command(run_id)}   (in the background: add --detach)\n"
          f"or end it:   agentbox cancel {run_id}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    """Start (or resume) a run; foreground with live progress, or detached."""
    from agentbox.core import runs
    from agentbox.core.config.user_config import load_user_config

    project = project_from(args)
    bell = load_user_config().notify.bell  # a broken config.yaml stops here, not in a detached engine
    if args.resume:
        if args.base:
            raise UsageError("--base is for a new run", f"a resumed run keeps its base: agentbox run --resume {args.resume}")
        run_id = runs.resume_target(project, args.resume)
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
        final = asyncio.run(runs.execute(project, run_id, printer(args.quiet, bell)))
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


def spend_line(run: Run) -> str:
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
        on_nodes = any(t.ran_on for t in run.tasks.values())
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
                      *([_node(t.ran_on)] if on_nodes else [])]
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
            for what, command in answer_commands(runs_mod.checkpoint_view(run, cp)):
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


def send(project: ProjectPaths, run_id: str | None, command: Command) -> int:
    """Send a human command to a run (the latest when `run_id` is None) and say how it went; the exit code."""
    from agentbox.core import runs as runs_mod

    ok, message = runs_mod.send_command(project, run_id or "latest", command)
    message = for_terminal(message)  # it may quote what an agent wrote
    print(message if ok else f"error: {message}", file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 2


def approve(args: argparse.Namespace) -> int:
    """Approve a task in review (with a note as evidence), or a plan waiting for approval."""
    from agentbox.core import runs as runs_mod
    from agentbox.core.engine import commands

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
        return send(project, run_id, commands.Answer(checkpoint=cp_id, text=text))
    if not target:
        raise UsageError("say what to approve", "agentbox approve TASK, agentbox approve --plan, "
                                                "or agentbox approve RUN cp-N")
    run_id, task_id = runs_mod.resolve_task(project, target, args.run)
    shown = _show_task_changes(project, run_id, task_id, args.at)
    at = (args.at or "").strip().lower() or shown
    return send(project, run_id, commands.Approve.of(task=task_id, note=args.note, **({"commit": at} if at else {})))


def _show_task_changes(project: ProjectPaths, run_id: str, task_id: str, at: str | None = None) -> str | None:
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
    from agentbox.core.engine import commands

    project = project_from(args)
    run_id, task_id = runs_mod.resolve_task(project, args.task, args.run)
    _show_task_changes(project, run_id, task_id)
    return send(project, run_id, commands.Rework(task=task_id, note=args.note))


def answer(args: argparse.Namespace) -> int:
    """Answer a checkpoint (its id, a unique prefix of it, or its number)."""
    from agentbox.core import runs as runs_mod
    from agentbox.core.engine import commands

    project = project_from(args)
    run_id, checkpoint = runs_mod.resolve_checkpoint(project, args.run, args.checkpoint)
    return send(project, run_id, commands.Answer(checkpoint=checkpoint, text=args.text))


def cancel(args: argparse.Namespace) -> int:
    """Cancel a run, or one task."""
    from agentbox.core import runs as runs_mod
    from agentbox.core.engine import commands

    project = project_from(args)
    target = args.target or runs_mod.the_active_run(project, "cancel")
    if target.startswith("run-") or target == "latest":
        return send(project, target, commands.CancelRun(note="cancelled with `agentbox cancel`"))
    run_id, task_id = runs_mod.resolve_task(project, target, args.run)
    return send(project, run_id, commands.CancelTask(task=task_id))


def pause(args: argparse.Namespace) -> int:
    """Pause a run."""
    from agentbox.core import runs as runs_mod
    from agentbox.core.engine import commands

    project = project_from(args)
    return send(project, args.run or runs_mod.the_active_run(project, "pause"), commands.Pause())


def resume_run(args: argparse.Namespace) -> int:
    """Resume a paused run."""
    from agentbox.core import runs as runs_mod
    from agentbox.core.engine import commands

    project = project_from(args)
    return send(project, args.run or runs_mod.the_active_run(project, "resume"), commands.Resume())
