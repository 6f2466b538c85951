"""Notifications: tell the person when a run needs them, ends or fails — once per event.

The `Notifier` consumes the run's *persisted* decision log (events.jsonl). After each
save the engine calls `after_save(run)`; the notifier reads the events past its cursor,
picks those a person must hear of (`notice_for`: a checkpoint opened — a question, a plan
or a task waiting for approval, a budget pause —, the run ended, failed, was circuit-broken,
blocked or paused by a full disk) and delivers each through the channels of the user's
$AGENT_BOX_HOME/config.yaml (`notify_channels`: desktop, hooks, webhook) in a background
thread, so a slow hook or webhook never stalls the engine's loop.

The cursor (`notified.json` in the run's directory, written atomically) moves past a
notification once it was delivered, and a resumed engine goes on from it: after a crash,
even `kill -9`, none is lost and none is sent twice — except the one being delivered at
that very moment, which is sent again. Every notification carries a stable `id` (the run
id and the event's seq) so a receiver can drop that duplicate.

A delivery that goes wrong (a hook that fails, or hangs and is killed; a webhook that
keeps failing) is logged in the run's events as `notify.failed` through the `log`
callback the engine passes in, always on the engine's own thread. Such problems wait in
the cursor file until a save has put them in the log, so they are not lost either.
Hooks are read from the user's config.yaml only, never from a project (see
docs/notifications.md).
"""

from __future__ import annotations

import os
import re
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from agentbox.core import store
from agentbox.core.config.user_config import HookCommand, UserConfig, load_user_config
from agentbox.core.engine.models import TERMINAL_RUN_STATES, Run
from agentbox.core.engine.notify_channels import (
    desktop_command,
    post_webhook,
    run_hook,
    show_desktop,
)
from agentbox.core.engine.run_store import EVENTS_FILE
from agentbox.core.errors import AgentboxError
from agentbox.core.paths import ProjectPaths
from agentbox.core.termtext import for_line, for_terminal

HookName = Literal["on_checkpoint", "on_run_end", "on_failure"]
CURSOR_FILE = "notified.json"
MAX_BACKLOG = 256
"""Most notifications waiting for delivery; the log is read on only once they are fewer."""
READ_CHUNK = 1 << 20
"""Bytes of the log read at a time."""
MAX_DRAIN_S = 300.0
"""Longest a finished run's engine waits for its last notifications before it lets go."""
STOP_GRACE_S = 2.0
"""How long an engine letting go of an unfinished run waits for the delivery under way."""
FAILED_EVENT = "notify.failed"
"""The type of the run event that logs a delivery problem."""

_STATUS_RE = re.compile(r"run is (\w+)")
_ENDED = {"done": "ended: done", "failed": "failed", "cancelled": "was cancelled"}
_STOPPED = {"circuit_broken": "stopped: its token budget is spent", "blocked": "is blocked: nothing can run",
            "paused": "is paused", "gate_blocked": "has a red check: a gate blocked"}

LogFn = Callable[..., Any]
"""Records one run event: `log(type, what, why, **fields)` (the engine's `RunLedger.event`)."""


# ----------------------------------------------------------------------------- what needs a person


def notice_kind(event: Mapping[str, Any]) -> tuple[str, tuple[HookName, ...]] | None:
    """The kind of notification an event is (and the hooks it goes to), or None for the rest."""
    type_ = event.get("type")
    what = str(event.get("what") or "")
    if type_ == "checkpoint":
        return "checkpoint", ("on_checkpoint",)
    if type_ == "run.finished":
        status = what.removeprefix("run ")
        return f"run_{status}", ("on_run_end", "on_failure") if status == "failed" else ("on_run_end",)
    if type_ == "gate.blocked":
        return "gate_blocked", ("on_failure",)
    if type_ == "run.status" and event.get("human_required"):
        match = _STATUS_RE.match(what)
        if match and match.group(1) in _STOPPED:
            return match.group(1), ("on_failure",)
    return None


def terminal_banner(event: Mapping[str, Any]) -> str | None:
    """The banner a foreground run prints (with the bell) for an event, checkpoints aside
    (their announcement says how to answer them); None for events that need nobody."""
    found = notice_kind(event)
    if found is None or found[0] == "checkpoint":
        return None
    why = f" — {event['why']}" if event.get("why") else ""
    return f"⚑ {event.get('run', 'the run')} {_headline(found[0])}{why}"


def _headline(kind: str) -> str:
    if kind.startswith("run_"):
        return _ENDED.get(kind[4:], f"ended: {kind[4:]}")
    return _STOPPED.get(kind, kind)


@dataclass(frozen=True)
class Notice:
    """One notification: the event it is about, the hooks it goes to, and its JSON payload."""

    seq: int
    offset: int
    """Where its event's line ends in events.jsonl (the cursor after it is delivered)."""
    hooks: tuple[HookName, ...]
    urgent: bool
    payload: dict[str, Any]

    @property
    def id(self) -> str:
        """Stable across resumes: receivers dedupe on it."""
        return str(self.payload["id"])


def notice_for(event: Mapping[str, Any], run: Run, offset: int, project: ProjectPaths) -> Notice | None:
    """The notification an event calls for, or None (see `notice_kind`)."""
    found = notice_kind(event)
    seq = event.get("seq")
    if found is None or type(seq) is not int:
        return None
    kind, hooks = found
    cp = run.checkpoints.get(str(event.get("checkpoint"))) if kind == "checkpoint" else None
    goal = run.contract.goal if len(run.contract.goal) <= 80 else run.contract.goal[:77] + "..."
    if cp is not None:
        kind = "paused_for_budget" if cp.kind == "budget" else kind
        title = f"agentbox: {goal} — {cp.id} waits for you"
        text = f"{cp.id} ({cp.kind.replace('_', ' ')}): {cp.question[:400]}"
        command = f'agentbox answer {run.id} {cp.id} "..."'
    else:
        title = f"agentbox: run {_headline(kind)}"
        text = f"{goal}: {event.get('what')}" + (f" — {event['why']}" if event.get("why") else "")
        command = f"agentbox status {run.id}"
    payload = {
        "id": f"{run.id}:{seq}", "kind": kind, "run": run.id, "seq": seq, "at": event.get("at"),
        "project": str(project.root), "goal": run.contract.goal, "run_status": run.status,
        # title and text are ready to show: what an agent wrote in them is made visible, never obeyed
        # (the exact strings stay in "goal", "checkpoint" and "event")
        "title": for_line(title), "text": for_terminal(text), "command": command, "task": event.get("task"), "role": event.get("role"),
        "checkpoint": None if cp is None else {"id": cp.id, "kind": cp.kind, "question": cp.question,
                                               "options": cp.options, "task": cp.task, "status": cp.status},
        "event": dict(event),
    }
    return Notice(seq, offset, hooks, urgent=kind != "run_done", payload=payload)


def hook_environment(notice: Notice, hook: HookName, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment a hook runs in: agentbox's own, plus a few `AGENTBOX_*` variables."""
    payload = notice.payload
    extra = {"AGENTBOX_HOOK": hook, "AGENTBOX_EVENT": payload["kind"], "AGENTBOX_NOTIFICATION_ID": notice.id,
             "AGENTBOX_RUN_ID": payload["run"], "AGENTBOX_RUN_STATUS": payload["run_status"],
             "AGENTBOX_PROJECT": payload["project"], "AGENTBOX_TITLE": payload["title"],
             "AGENTBOX_TEXT": payload["text"], "AGENTBOX_TASK": payload["task"] or "",
             "AGENTBOX_CHECKPOINT": (payload["checkpoint"] or {}).get("id", "")}
    return {**environ, **{key: value.replace("\0", "") for key, value in extra.items()}}


# ----------------------------------------------------------------------------- the notifier


@dataclass(frozen=True)
class Problem:
    """A delivery that went wrong, waiting to be logged in the run's events."""

    what: str
    notification: str
    channel: str


class Notifier:
    """Delivers the notifications of one run, each once, from its persisted decision log."""

    def __init__(self, project: ProjectPaths, run_id: str, *, log: LogFn, config: UserConfig | None = None,
                 environ: Mapping[str, str] | None = None) -> None:
        self.project = project
        self.run_id = run_id
        self.log = log
        self.config = config if config is not None else load_user_config()
        self.environ = dict(os.environ if environ is None else environ)
        self.desktop = desktop_command(self.environ) if self.config.notify.desktop else None
        self.webhook = self.config.notify.webhook
        hooks = self.config.hooks
        self.hooks: dict[HookName, HookCommand | None] = {"on_checkpoint": hooks.on_checkpoint, "on_run_end": hooks.on_run_end,
                                           "on_failure": hooks.on_failure}
        self._dir = project.run_dir(run_id)
        self._cond = threading.Condition()
        self._backlog: deque[Notice] = deque()
        self._cursor: tuple[int, int] | None = None
        """(seq, offset) just past the last delivered notification; None until read from disk."""
        self._read_at = (0, 0)
        """(seq, offset) just past the last event read."""
        self._problems: list[Problem] = []
        self._handed = 0
        """How many of `_problems` were handed to `log` before the last save."""
        self._worker: threading.Thread | None = None
        self._stopping = False

    @property
    def has_channels(self) -> bool:
        """Whether any notification can go anywhere (else they are only marked delivered)."""
        return bool(self.desktop or self.webhook or any(self.hooks.values()))

    def budget_s(self) -> float:
        """The longest one notification's delivery can take."""
        hooks = sum(1 for command in self.hooks.values() if command) * self.config.hooks.timeout_s
        webhook = 0.0
        if self.webhook is not None:
            webhook = (self.webhook.retries + 1) * (self.webhook.timeout_s + 1) + 2 ** self.webhook.retries
        return 5.0 + hooks + webhook + (10.0 if self.desktop else 0.0)

    # ------------------------------------------------------------------ the engine's side
    def after_save(self, run: Run) -> bool:
        """Take in what the save just persisted; True when delivery problems were logged (save again).

        The engine executing the run (whose pid `run.engine` names) gets its notifications
        delivered in the background. Any other save — the engine letting go, or a command
        applied with no engine running — starts nothing new for a run that goes on (its next
        engine will), and for a finished run delivers what is left before it returns, since
        no engine will come back for it.
        """
        live = run.engine is not None and run.engine.pid == os.getpid()
        finished = run.status in TERMINAL_RUN_STATES
        with self._cond:
            self._load_cursor()
            if self._handed:  # the save that just happened holds them
                del self._problems[:self._handed]
                self._handed = 0
                self._write_cursor()
        if live or finished:
            self._read(run)
        if not live:
            self._settle(run, finished)
        return self._hand_over()

    def _hand_over(self) -> bool:
        with self._cond:
            fresh = self._problems[self._handed:]
            self._handed = len(self._problems)
        for problem in fresh:
            self.log(FAILED_EVENT, problem.what[:500], None, notification=problem.notification,
                     channel=problem.channel)
        return bool(fresh)

    def _settle(self, run: Run, finished: bool) -> None:
        """Wait for deliveries when no engine will drive them on (see `after_save`).

        An engine letting go of a run that goes on (Ctrl-C, a full disk) takes no new
        delivery and gives the one under way `STOP_GRACE_S` to end: the next engine sends
        what is left, and that one again if it did not end (same id).
        """
        if self._worker is None:
            return
        if not finished:
            with self._cond:
                self._stopping = True
                self._cond.notify_all()
            self._worker.join(STOP_GRACE_S)
            return
        deadline = min(MAX_DRAIN_S, self.budget_s() * max(1, len(self._backlog)))
        with self._cond:
            self._cond.wait_for(lambda: not self._backlog, deadline)
            more = not self._backlog and self._read_at[0] < run.seq
        if more:  # the backlog was full: read on
            self._read(run)
            self._settle(run, finished)

    # ------------------------------------------------------------------ reading the log
    def _read(self, run: Run) -> None:
        """Queue the notifications of the events past the last one read (up to MAX_BACKLOG)."""
        if self._read_at[0] >= run.seq:
            return
        path = self._dir / EVENTS_FILE
        while len(self._backlog) < MAX_BACKLOG:
            try:
                fd = store.open_regular(path)
                try:
                    if os.fstat(fd).st_size < self._read_at[1]:  # not the log the cursor was taken in
                        self._read_at = (self._read_at[0], 0)
                    data = os.pread(fd, READ_CHUNK, self._read_at[1])
                finally:
                    os.close(fd)
            except (OSError, AgentboxError):  # no log yet, or a damaged one the engine reports itself
                return
            end = data.rfind(b"\n")
            if end < 0:
                return
            offset = self._read_at[1]
            for line in data[:end + 1].splitlines(keepends=True):
                offset += len(line)
                record = store.parse_line(line) if line.strip() else None
                seq = record.get("seq") if record is not None else None
                if type(seq) is not int or seq <= self._read_at[0]:
                    continue
                self._read_at = (seq, offset)
                assert record is not None
                notice = notice_for(record, run, offset, self.project)
                if notice is not None:
                    self._enqueue(notice)
                if len(self._backlog) >= MAX_BACKLOG:
                    return
            self._read_at = (self._read_at[0], offset)

    def _enqueue(self, notice: Notice) -> None:
        if not self.has_channels:
            with self._cond:
                self._delivered(notice, [])
            return
        with self._cond:
            self._backlog.append(notice)
            self._cond.notify_all()
        if self._worker is None:
            self._worker = threading.Thread(target=self._work, name=f"agentbox-notify-{self.run_id}", daemon=True)
            self._worker.start()

    # ------------------------------------------------------------------ the cursor
    def _load_cursor(self) -> None:
        """Read `notified.json` once: where delivery stopped, and problems not yet logged."""
        if self._cursor is not None:
            return
        self._cursor = (0, 0)
        try:
            saved = store.read_json(self._dir / CURSOR_FILE, {})
        except AgentboxError:
            saved = {}
        if isinstance(saved, dict) and type(saved.get("seq")) is int and type(saved.get("offset")) is int:
            self._cursor = (max(0, saved["seq"]), max(0, saved["offset"]))
        for item in saved.get("unlogged", []) if isinstance(saved, dict) else []:
            if isinstance(item, dict) and all(isinstance(item.get(k), str) for k in ("what", "notification", "channel")):
                self._problems.append(Problem(item["what"], item["notification"], item["channel"]))
        self._read_at = self._cursor

    def _write_cursor(self) -> None:
        """Persist the cursor and the problems not yet in the run's log (under `_cond`)."""
        assert self._cursor is not None
        seq, offset = self._cursor
        data = {"seq": seq, "offset": offset,
                "unlogged": [{"what": p.what, "notification": p.notification, "channel": p.channel}
                             for p in self._problems]}
        try:
            store.atomic_write_json(self._dir / CURSOR_FILE, data)
        except (OSError, AgentboxError) as exc:  # kept in memory; the next write may succeed
            if not self.has_channels:
                return  # nothing could be sent twice: not worth a line in the log
            reason = exc.message if isinstance(exc, AgentboxError) else exc.strerror or str(exc)
            problem = Problem(f"could not record notification progress: {reason}", "-", "cursor")
            if problem not in self._problems:
                self._problems.append(problem)

    def _delivered(self, notice: Notice, problems: list[Problem]) -> None:
        """Move the cursor past `notice` (under `_cond`)."""
        self._problems.extend(problems)
        self._cursor = (notice.seq, notice.offset)
        self._write_cursor()

    # ------------------------------------------------------------------ delivering
    def _work(self) -> None:
        """The delivery thread: one notification at a time, in the order of the log."""
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._backlog or self._stopping)
                if not self._backlog:
                    return
                notice = self._backlog[0]
            problems = self._deliver(notice)
            with self._cond:
                self._backlog.popleft()
                self._delivered(notice, problems)
                self._cond.notify_all()
                if self._stopping:
                    return

    def _deliver(self, notice: Notice) -> list[Problem]:
        """Send `notice` through every channel it goes to; the problems met (never raises)."""
        problems: list[Problem] = []

        def attempt(channel: str, send: Callable[[], str | None]) -> None:
            try:
                what = send()
            except Exception as exc:  # a channel must never take the delivery thread down
                what = f"{channel} failed: {type(exc).__name__}: {exc}"
            if what:
                problems.append(Problem(what, notice.id, channel))

        payload = notice.payload
        if self.desktop is not None:
            desktop = self.desktop
            attempt("desktop", lambda: show_desktop(desktop, payload["title"], payload["text"],
                                                    urgent=notice.urgent, environ=self.environ))
        for hook in notice.hooks:
            command = self.hooks[hook]
            if command:
                attempt(f"hook:{hook}", lambda hook=hook, command=command: run_hook(
                    hook, command, {**payload, "hook": hook}, hook_environment(notice, hook, self.environ),
                    timeout_s=self.config.hooks.timeout_s, cwd=self.project.root))
        if self.webhook is not None:
            webhook = self.webhook
            attempt("webhook", lambda: post_webhook(webhook, payload, self.environ))
        return problems

