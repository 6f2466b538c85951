"""The local runner: turns run on this machine, admitted when it has room, watched while they run.

Each turn's process tree is sampled while it runs (`MemoryWatch`): its peak is kept per
tool (the need of the tool's next turns, see `admission`) and a turn whose tree grows
past its profile's `resources.memory_mb` is killed and reported as an environment failure
(`killed`), so one runaway turn never takes the machine down. The watch reads resident
memory (RSS) of the tree; cgroup v2 limits are not used.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from typing import TYPE_CHECKING

from agentbox.core.agents.invoke import InvokeResult, invoke
from agentbox.core.engine.replies import ReplyError, extract_json
from agentbox.core.engine.runners.admission import (
    AdmissionLimits,
    PeakStore,
    Reading,
    decide,
    need_mb,
    read_machine,
)
from agentbox.core.engine.runners.base import Turn, TurnDone
from agentbox.core.errors import AgentboxError
from agentbox.core.process import kill_tree

if TYPE_CHECKING:
    from agentbox.core.agents.sessions import SessionRecord
    from agentbox.core.config.profiles import ProfileInfo

WATCH_EVERY_S = 0.2
"""How often a running turn's memory is sampled."""
UNCLAIMED_S = 30.0
"""A reservation whose turn has not started after this long is dropped (the turn was stopped before it ran)."""


class MemoryWatch:
    """Samples one turn's process tree; kills it once it holds more than `limit_mb` (None: never)."""

    def __init__(self, limit_mb: int | None) -> None:
        self.limit_mb = limit_mb
        self.pid: int | None = None
        self.rss_mb = 0.0
        self.peak_mb = 0.0
        self.over: float | None = None
        """The tree's memory when it was killed for going over the limit (None: it was not)."""

    def sample(self) -> None:
        """Read the tree's memory now, and kill it when it is over the limit."""
        if self.pid is None or self.over is not None:
            return
        import psutil

        total = 0
        try:
            root = psutil.Process(self.pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.Error:
            return
        for proc in tree:
            with contextlib.suppress(psutil.Error):
                total += proc.memory_info().rss
        self.rss_mb = total / 2**20
        self.peak_mb = max(self.peak_mb, self.rss_mb)
        if self.limit_mb is not None and self.rss_mb > self.limit_mb:
            self.over = self.rss_mb
            kill_tree(self.pid)

    async def follow(self) -> None:
        """Sample until cancelled."""
        while True:
            self.sample()
            await asyncio.sleep(WATCH_EVERY_S)


class LocalRunner:
    """Runs each turn here with `invoke`, then commits what it changed in its worktree."""

    kind = "local"

    def __init__(self, *, limits: AdmissionLimits | None = None, reading: Reading = read_machine,
                 peaks: PeakStore | None = None) -> None:
        self.limits = limits or AdmissionLimits()
        self.reading = reading
        self.peaks = peaks or PeakStore.default()
        self._needs: dict[str, tuple[float, float]] = {}
        """Job id → the memory reserved for its turn (admitted, not yet ended) and when it was admitted."""
        self._watches: dict[str, MemoryWatch] = {}

    def _reserved_mb(self) -> float:
        """What the admitted turns may still take beyond what they hold now."""
        now = time.monotonic()
        reserved = 0.0
        for job_id, (need, since) in list(self._needs.items()):
            watch = self._watches.get(job_id)
            if watch is None and now - since > UNCLAIMED_S:  # admitted, then never started (stopped before)
                del self._needs[job_id]
                continue
            reserved += max(0.0, need - (watch.rss_mb if watch is not None else 0.0))
        return reserved

    def room(self, job_id: str, profile: ProfileInfo) -> str | None:
        """None (and the turn's need reserved) when this machine has room for a turn of `profile` now."""
        need = need_mb(profile.profile.resources.memory_mb, self.peaks.peak(profile.tool))
        held = decide(need, self.reading(), self._reserved_mb(), self.limits)
        if held is None:
            self._needs[job_id] = (need, time.monotonic())
        return held

    async def run(self, turn: Turn) -> TurnDone:
        """The turn through `invoke`, its tree watched; then its worktree committed (when it has one)."""
        agent = turn.agent
        watch = MemoryWatch(agent.profile.profile.resources.memory_mb)
        self._watches[turn.job_id] = watch

        def spawned(record: SessionRecord, pid: int) -> None:
            watch.pid = pid
            watch.sample()  # a turn shorter than one period is measured too
            if turn.on_spawn is not None:
                turn.on_spawn(record, pid)

        following = asyncio.ensure_future(watch.follow())
        try:
            result = await invoke(agent, turn.prompt, turn.session_id if turn.resume else None,
                                  timeout_s=turn.timeout_s, on_spawn=spawned,
                                  new_session_id=None if turn.resume else turn.session_id,
                                  run_id=turn.run_id, task_id=turn.task_id)
        except AgentboxError as exc:  # sandbox cannot be built, session busy: an environment failure
            result = InvokeResult(status="error", session_id=turn.session_id, error_kind="spawn_failed",
                                  error=exc.message, role=agent.role)
        finally:
            following.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await following
            self._watches.pop(turn.job_id, None)
            self._needs.pop(turn.job_id, None)
        if watch.over is not None:
            result = _over_limit(result, watch.over, watch.limit_mb or 0)
        peak = watch.peak_mb or None
        if peak is not None:
            with contextlib.suppress(AgentboxError, OSError):
                self.peaks.add(agent.profile.tool, peak)
        if turn.workspace is None or result.error_kind == "spawn_failed":  # nothing ran to commit
            return TurnDone(result, None, peak)
        try:
            git = await asyncio.to_thread(turn.workspace.commit, _summary(result.text))
        except AgentboxError as exc:  # the work stays in the worktree; the next turn's commit takes it
            return TurnDone(InvokeResult(status="error", session_id=turn.session_id, error_kind="spawn_failed",
                                         error=f"committing the turn failed: {exc.message}", role=agent.role),
                            None, peak)
        return TurnDone(result, git, peak)


def _over_limit(result: InvokeResult, used_mb: float, limit_mb: int) -> InvokeResult:
    """The result of a turn killed for its memory: an environment failure that says so."""
    return dataclasses.replace(result, status="error", error_kind="killed",
                               error=f"stopped: its processes held {used_mb:.0f} MB, over the profile's "
                                     f"resources.memory_mb limit of {limit_mb} MB")


def _summary(text: str | None) -> str:
    """The summary the reply gives (for the commit message), or '' (the mode validates the reply itself)."""
    try:
        summary = extract_json(text or "").get("summary")
    except ReplyError:
        return ""
    return " ".join(summary.split())[:300] if isinstance(summary, str) else ""
