"""The dashboard: live members, queue, artifacts, events and checkpoints of one run.

Data flow: one long-lived worker follows `.agent-box/` with the core watcher and posts
`BoxChanged`; its handler asks for the reads the facts call for; each read runs in a
thread worker (at most one in flight per kind, a request meanwhile means one more run)
and posts what it read; the handlers store it in the reactive snapshots below, which the
widgets are bound to.

The shown run is followed through the door's follower (`runs.RunFollower`, as the CLI and
MCP follow one): the watcher's facts say which parts to look at, a look is made on the UI
thread from where the follower stands and read in a thread, and its handler gives it back
to the follower (`take`), which moves on or drops a look that another has overtaken. The
log opens at its end ("tail").
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.reactive import Reactive, var
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import DataTable, Tree

from agentbox.core import paths, runs, watch
from agentbox.core.engine.models import TERMINAL_RUN_STATES, Run
from agentbox.core.engine.records import ArtifactEntry
from agentbox.core.paths import ProjectPaths

if TYPE_CHECKING:
    from agentbox.core.agents.sessions import SessionRecord
    from agentbox.core.reports.monitor import ProcessSample
from agentbox.core.reports.monitor import ProcessMonitor, agent_pids, merged, node_samples
from agentbox.tui import action_table, alerts, gc_tuning, loaders
from agentbox.tui import messages as msg
from agentbox.tui.actions import RunActions
from agentbox.tui.model import CrewInfo
from agentbox.tui.widgets.artifacts import ArtifactsPanel
from agentbox.tui.widgets.checkpoints import CheckpointBar
from agentbox.tui.widgets.events import EventLog
from agentbox.tui.widgets.footer import KeyFooter
from agentbox.tui.widgets.header import RunHeader
from agentbox.tui.widgets.members import MembersTable
from agentbox.tui.widgets.queue import QueueList

NARROW_WIDTH = 110
"""Below this many columns the artifact preview hides and the members table drops a column."""
POLL_S = 1.0
"""How often the run is re-read when the file watcher cannot run here."""
READ_ORDER = ("events", "manifest", "sessions", "crew", "runs", "summaries", "sample", "run")
"""Reads sharing a thread run in this order: the cheap ones first, the run's parse (the
biggest: 5,000 tasks take ~0.1 s) last."""
FOLLOWED: dict[str, runs.FollowPart] = {"events": "events", "manifest": "manifest", "run": "run"}
"""The reads that look at the shown run, each a part of its follower's look."""


class DashboardScreen(RunActions, Screen[None]):
    """Members, queue, artifacts, events and checkpoints of the selected run, all live."""

    BINDINGS = action_table.bindings()

    # Snapshots, not pixels: the screen draws none of them itself (the widgets bound to them
    # repaint what changed), so setting one never repaints the whole screen.
    run_id: var[str | None] = var(None)
    run: var[Run | None] = var(None, always_update=True)
    run_ids: var[tuple[str, ...]] = var(())
    crew: var[CrewInfo | None] = var(None, always_update=True)
    sessions: var[dict[str, SessionRecord]] = var(dict, always_update=True)
    samples: var[dict[str, ProcessSample]] = var(dict, always_update=True)
    manifest: var[tuple[ArtifactEntry, ...]] = var((), always_update=True)
    now: var[float] = var(0.0)
    engine: var[str] = var("ended")
    """Whether the shown run has an engine (`agentbox.core.runs.EngineState`)."""
    narrow: var[bool] = var(False)
    focused: Reactive[Widget | None] = Reactive(None, repaint=False)
    """As on every screen, minus the repaint of the whole screen on each focus change (the
    widgets that gain and lose focus repaint themselves)."""

    def __init__(self, project: ProjectPaths, *, run_id: str | None = None, clock: Callable[[], float] = time.time,
                 live: bool = True, sample_interval_s: float | None = 1.0,
                 engine_probe: Callable[[ProjectPaths, str], bool] | None = None) -> None:
        super().__init__(id="dashboard")
        self.engine_probe = engine_probe or runs.engine_alive
        self.project = project
        self.clock = clock
        self.live = live
        self.sample_interval_s = sample_interval_s
        self._wanted_run = run_id
        self._loads = loaders.Coalescer()
        self._follower: runs.RunFollower | None = None
        """Where the dashboard is in following the shown run (changed only on the UI thread)."""
        self._dirty_sessions: set[str] = set()
        self._sessions_complete = False
        self._alerted: set[tuple[str, str]] = set()
        self._statuses: dict[str, str] = {}
        """Run id → the status last shown (a change of it may call for the bell)."""
        self._monitor = ProcessMonitor()
        self._listed_once = False
        self._possible_actions: frozenset[str] | None = None

    @property
    def _events_offset(self) -> int | None:
        """Where the shown run's log is read from next (None: its first read has not landed)."""
        return self._follower.offset if self._follower is not None else None

    @property
    def _manifest_offset(self) -> int | None:
        """Where the shown run's manifest is read from next (None: its first read has not landed)."""
        return self._follower.manifest_offset if self._follower is not None else None

    def compose(self) -> ComposeResult:
        cls = DashboardScreen
        yield RunHeader(self.project.root.name, id="run-header").data_bind(cls.run, cls.run_ids, cls.now, cls.engine)
        yield CheckpointBar(id="checkpoints").data_bind(cls.run)
        with Vertical(id="body"):
            yield MembersTable(id="members").data_bind(cls.run, cls.crew, cls.sessions, cls.samples, cls.narrow)
            with Horizontal(id="middle"):
                yield QueueList(id="queue").data_bind(cls.run)
                yield ArtifactsPanel(self.project.root, id="artifacts").data_bind(cls.manifest)
            yield EventLog(id="events")
        yield KeyFooter(compact=True)  # with the palette key: on a phone it is how every action is a tap away

    def on_mount(self) -> None:
        """Start following the project: watcher, clock, process sampler, first reads."""
        self.query_one("#members").border_title = "members"
        self.query_one("#queue").border_title = "queue"
        self.query_one("#artifacts").border_title = "artifacts"
        self.query_one("#events").border_title = "events"
        self.now = self.clock()
        self.set_interval(1.0, self._tick)
        if self.sample_interval_s:
            self.set_interval(self.sample_interval_s, self._sample)
        if self.live:
            self.run_worker(self._follow_files, name="watcher", group="watcher", exclusive=True, exit_on_error=False)
        self._request("crew", "runs", "sessions")
        self.query_one(MembersTable).focus()

    def on_resize(self) -> None:
        """Narrow terminals hide the artifact preview and a members column."""
        self.narrow = self.size.width < NARROW_WIDTH
        self.set_class(self.narrow, "-narrow")
        self.set_class(self.size.height < 30, "-short")

    # ------------------------------------------------------------------ workers
    async def _follow_files(self) -> None:
        """The one long-lived worker: file changes → BoxChanged messages (polling if watching fails)."""
        try:
            async for facts in watch.watch_project(self.project, profiles_dir=paths.profiles_dir(),
                                                   ready=self._caught_up):
                self.post_message(msg.BoxChanged(facts))
        except Exception as exc:  # no inotify (limits, odd filesystems): poll the shown run instead
            self.post_message(msg.ActionFailed("live updates", f"cannot watch files ({exc}); re-reading every "
                                               f"{POLL_S:g} s instead"))
            while True:
                await asyncio.sleep(POLL_S)
                self._reread_shown_run()

    def _caught_up(self) -> None:
        """The watchers watch: what changed between the first reads and now is read once more."""
        self._request("crew", "runs")
        self._reread_shown_run()

    def _reread_shown_run(self) -> None:
        """The shown run, its log and its artifacts read again, as if all three had changed."""
        if self.run_id is not None:
            self.post_message(msg.BoxChanged([watch.RunChanged(self.run_id), watch.EventsAppended(self.run_id),
                                              watch.ArtifactsChanged(self.run_id)]))

    def _request(self, *keys: str) -> None:
        """Read `keys` now, in one thread (a kind being read already is read once more after)."""
        self._launch([key for key in keys if self._loads.request(key)])

    def _launch(self, keys: list[str]) -> None:
        jobs = []
        for key in sorted(keys, key=READ_ORDER.index):
            job = self._job(key)
            if job is not None:
                jobs.append((key, job))
            else:
                self._loads.finished(key)  # nothing to read; no request can have come in meanwhile
        if jobs:
            self.run_worker(partial(self._read, jobs), name=",".join(key for key, _ in jobs), group="reads",
                            thread=True, exit_on_error=False)

    def _read(self, jobs: list[tuple[str, Callable[[], Message]]]) -> None:
        """Thread body: each read in turn, its result posted as soon as it is made, then that it is over.

        Reads asked for by one batch of file changes share a thread, cheapest first: a line
        appended to the log and the run saved with it reach the screen in the same frame,
        and a big run's parse never holds back the log.
        """
        for key, job in jobs:
            try:
                message = job()
            except Exception as exc:  # any failure of a read becomes a notification, never a traceback
                message = msg.ActionFailed(f"reading {key}", f"{type(exc).__name__}: {exc}")
            self.post_message(message)
            self.post_message(msg.LoadFinished(key))

    def _job(self, key: str) -> Callable[[], Message] | None:
        """The read for `key` with the current offsets, or None when there is nothing to read."""
        project = self.project
        if key == "crew":
            return partial(loaders.load_crew, project)
        if key == "runs":
            return partial(loaders.list_runs, project)
        if key == "sessions":
            if not self._sessions_complete:
                self._dirty_sessions.clear()
                return partial(loaders.load_sessions, project)
            ids, self._dirty_sessions = sorted(self._dirty_sessions), set()
            return partial(loaders.load_session, project, ids) if ids else None
        if key == "summaries":
            return partial(loaders.run_summaries, project)
        if key == "sample":
            pids = agent_pids(self.run, self.sessions.values())
            on_nodes = node_samples(self.sessions.values())
            return partial(self._sample_now, pids, on_nodes) if pids or on_nodes or self.samples else None
        part = FOLLOWED[key]
        return None if self._follower is None else partial(loaders.follow_read, self._follower.reader(part))

    def _sample_now(self, pids: dict[str, list[int]], on_nodes: dict[str, ProcessSample]) -> msg.MembersSampled:
        samples = self._monitor.sample(pids)
        for role, sample in on_nodes.items():  # a node's turn, sampled there
            samples[role] = merged(samples[role], sample) if role in samples else sample
        return msg.MembersSampled(samples)

    def _tick(self) -> None:
        self.now = self.clock()
        self._check_engine()

    def _check_engine(self) -> None:
        """Whether an engine still drives the shown run (a killed one changes no file, so this is asked)."""
        run = self.run
        if run is None:
            state = "ended"
        else:
            try:
                alive = run.status not in TERMINAL_RUN_STATES and self.engine_probe(self.project, run.id)
            except OSError:  # the run's directory went (discarded): the next listing drops it
                return
            state = runs.engine_state(run, alive, self.clock())
        if state != self.engine:
            self.engine = state
            self.refresh_bindings()

    def _sample(self) -> None:
        self._request("sample")

    # ------------------------------------------------------------------ handlers
    def on_load_finished(self, message: msg.LoadFinished) -> None:
        """Start the read that was asked for while this one ran."""
        if self._loads.finished(message.key):
            self._launch([message.key])

    def on_box_changed(self, message: msg.BoxChanged) -> None:
        """Ask for the reads the changed files call for (one thread for them all)."""
        keys: list[str] = []
        for fact in message.facts:
            if isinstance(fact, watch.RunChanged):
                if fact.run_id == self.run_id:
                    keys.append("run")
                if fact.run_id not in self.run_ids:
                    keys.append("runs")
            elif isinstance(fact, watch.EventsAppended):
                if fact.run_id == self.run_id:
                    keys.append("events")
            elif isinstance(fact, watch.ArtifactsChanged):
                if fact.run_id == self.run_id:
                    keys.append("manifest")
            elif isinstance(fact, watch.SessionChanged):
                self._dirty_sessions.add(fact.session_id)
                keys.append("sessions")
            elif isinstance(fact, watch.CrewChanged):
                keys.append("crew")
            elif isinstance(fact, watch.ProfilesChanged):
                reload = getattr(self.app.screen, "reload", None)
                if callable(reload):
                    reload()
        self._request(*dict.fromkeys(keys))

    def on_runs_listed(self, message: msg.RunsListed) -> None:
        """Pick the run to show; follow a new run when the shown one has ended."""
        before, first = set(self.run_ids), not self._listed_once
        self._listed_once = True
        self.run_ids = message.run_ids
        if not message.run_ids:
            self.run_id = None  # the last run was discarded
            return
        if self.run_id is None or self.run_id not in message.run_ids:
            wanted = self._wanted_run
            self.run_id = wanted if wanted in message.run_ids else message.run_ids[-1]
            return
        new = [r for r in message.run_ids if r not in before and r != self.run_id]
        if new and not first:
            if self.run is None or self.run.status in TERMINAL_RUN_STATES:
                self.run_id = new[-1]
                self.notify(f"following the new run {new[-1]}")
            else:
                self.notify(f"a new run started: {new[-1]} — press r to switch", timeout=8)

    def watch_run_id(self, old: str | None, new: str | None) -> None:
        """Open another run: forget the old one's log and artifacts, read the new one."""
        if new == old:
            return
        self._follower = None if new is None else \
            runs.RunFollower(self.project, new, events="tail", tail=loaders.EVENTS_SHOWN, manifest=True)
        self.query_one(EventLog).reset()
        self.manifest = ()
        self.run = None
        self._request("events", "manifest", "run")

    def on_run_loaded(self, message: msg.RunLoaded) -> None:
        """The new state of the shown run."""
        if not self._took(message.look) or message.unchanged:
            return
        if message.run is None:
            self.notify(message.error or "the run cannot be read", severity="error")
            return
        first = self.run is None
        self._alert_new_checkpoints(message.run)
        self._note_status(message.run)
        self.run = message.run
        self._check_engine()
        if first:
            self.call_after_refresh(gc_tuning.freeze)
        possible = self.offered_actions()
        if possible != self._possible_actions:  # the footer redraws only when what it offers changes
            self._possible_actions = possible
            self.refresh_bindings()

    def _alert_new_checkpoints(self, run: Run) -> None:
        if run.status in TERMINAL_RUN_STATES:
            return
        for cp in run.checkpoints.values():
            if cp.status == "open" and (run.id, cp.id) not in self._alerted:
                self._alerted.add((run.id, cp.id))
                self.post_message(msg.CheckpointOpened(run.id, cp))

    def _note_status(self, run: Run) -> None:
        previous = self._statuses.get(run.id)
        self._statuses[run.id] = run.status
        if previous is not None and previous != run.status:  # a run first opened is not news
            self.post_message(msg.RunStatusChanged(run, previous))

    def on_run_status_changed(self, message: msg.RunStatusChanged) -> None:
        """Ring the bell and show a banner when the run ended, failed or stopped and waits for someone."""
        banner = alerts.status_banner(message.run)
        if banner is not None:
            self.app.bell()
            self.notify(banner.text, title=banner.title, severity=banner.severity, timeout=banner.timeout)

    def on_checkpoint_opened(self, message: msg.CheckpointOpened) -> None:
        """Ring the bell and say what waits: a checkpoint must not go unnoticed."""
        cp = message.checkpoint
        self.app.bell()
        question = cp.question.strip().splitlines()[0] if cp.question.strip() else cp.kind
        self.notify(f"{question}\npress a to answer", title=f"{cp.id} waits on you", severity="warning", timeout=8)

    def on_events_read(self, message: msg.EventsRead) -> None:
        """Append what the log gained (the initial tail when the run was just opened)."""
        if self._took(message.look):
            self.query_one(EventLog).add_records(message.records)

    def on_manifest_read(self, message: msg.ManifestRead) -> None:
        """Artifacts added to the manifest."""
        if not self._took(message.look):
            return
        if message.entries or message.initial:
            self.manifest = (() if message.initial else self.manifest) + tuple(message.entries)

    def _took(self, look: runs.RunLook | None) -> bool:
        """The shown run's follower moved on with `look` (False: another run's, or overtaken)."""
        return look is not None and self._follower is not None and self._follower.take(look)

    def on_sessions_loaded(self, message: msg.SessionsLoaded) -> None:
        """Session records read: all of them, or the ones that changed."""
        if message.complete:
            self._sessions_complete = True
            self.sessions = {r.id: r for r in message.records}
            return
        sessions = dict(self.sessions)
        sessions.update({r.id: r for r in message.records})
        for session_id in message.removed:
            sessions.pop(session_id, None)
        self.sessions = sessions

    def on_crew_loaded(self, message: msg.CrewLoaded) -> None:
        """crew.yaml was (re)read."""
        if message.error:
            self.notify(message.error, title="crew.yaml", severity="error", timeout=15)
        self.crew = message.crew

    def on_members_sampled(self, message: msg.MembersSampled) -> None:
        """New CPU and memory figures."""
        self.samples = message.samples

    def on_action_failed(self, message: msg.ActionFailed) -> None:
        """Say what went wrong, without a traceback."""
        self.notify(message.error, title=message.what, severity="error", timeout=12)

    @on(RunHeader.SwitcherRequested)
    def _header_clicked(self) -> None:
        self.action_switch_run()

    @on(DataTable.RowSelected, "#members")
    def _member_chosen(self, event: DataTable.RowSelected) -> None:
        self.action_history(str(event.row_key.value))

    @on(QueueList.TaskChosen, "#queue")
    def _task_chosen(self, event: QueueList.TaskChosen) -> None:
        self.action_task_detail(event.task_id)

    @on(Tree.NodeSelected, "#artifact-tree")
    def _artifact_chosen(self, event: Tree.NodeSelected[ArtifactEntry]) -> None:
        if event.node.data:
            self.action_view_artifact(str(event.node.data["path"]))

    # ------------------------------------------------------------------ selections
    @property
    def selected_role(self) -> str | None:
        """The member highlighted in the members table."""
        return self.query_one(MembersTable).selected_role

    @property
    def selected_task(self) -> str | None:
        """The task under the queue's cursor."""
        return self.query_one(QueueList).selected_task

    @property
    def selected_artifact(self) -> ArtifactEntry | None:
        """The manifest entry of the highlighted artifact."""
        return self.query_one(ArtifactsPanel).selected_entry
