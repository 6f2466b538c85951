"""CPU and memory of the crew's agent processes (psutil), for the dashboard's members.

A member's agent runs as a process tree (bwrap, the tool, its helpers). Its pid comes
from the run's jobs in flight (`run.jobs[*].pid`) or from the session record of a turn
in flight (`running.pid`). A turn on a cluster node has no process here: the node samples
it and the session record keeps its latest sample (`running.sample`, see `node_samples`).
`ProcessMonitor` keeps the `psutil.Process` objects between
samples, because `cpu_percent()` measures the time since the previous call on the same
object: a fresh object always reports 0.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import psutil


@dataclass(frozen=True)
class ProcessSample:
    """One member's agent process tree at one moment."""

    cpu_percent: float
    """Sum over the tree; 100 = one core busy."""
    rss_bytes: int
    """Resident memory of the tree (shared pages counted in each process)."""
    processes: int


class ProcessMonitor:
    """Samples process trees; one instance lives as long as the face that shows the samples."""

    def __init__(self) -> None:
        self._procs: dict[int, psutil.Process] = {}

    def _process(self, pid: int) -> psutil.Process | None:
        proc = self._procs.get(pid)
        if proc is not None and proc.is_running():
            return proc
        try:
            proc = psutil.Process(pid)
            proc.cpu_percent(None)  # baseline for the next sample
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            self._procs.pop(pid, None)
            return None
        self._procs[pid] = proc
        return proc

    def sample_tree(self, pids: Iterable[int], seen: set[int] | None = None) -> ProcessSample | None:
        """CPU and RSS summed over the trees rooted at `pids`; None when none of them runs."""
        seen = set() if seen is None else seen
        cpu, rss, count = 0.0, 0, 0
        alive = False
        for pid in pids:
            root = self._process(pid)
            if root is None:
                continue
            alive = True
            members: list[psutil.Process] = [root]
            with contextlib.suppress(psutil.Error):
                members += [self._process(c.pid) or c for c in root.children(recursive=True)]
            for proc in members:
                if proc.pid in seen:
                    continue
                seen.add(proc.pid)
                try:
                    with proc.oneshot():
                        cpu += proc.cpu_percent(None)
                        rss += proc.memory_info().rss
                    count += 1
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                    continue
        if not alive:
            return None
        return ProcessSample(cpu_percent=round(cpu, 1), rss_bytes=rss, processes=count)

    def sample(self, targets: Mapping[str, Iterable[int]]) -> dict[str, ProcessSample]:
        """A sample per target key (a role) whose processes still run; forgets dead processes."""
        seen: set[int] = set()
        samples = {}
        for key, pids in targets.items():
            result = self.sample_tree(pids, seen)
            if result is not None:
                samples[key] = result
        for pid in [p for p in self._procs if p not in seen]:
            del self._procs[pid]
        return samples


def agent_pids(run: Any | None, sessions: Iterable[Any] = ()) -> dict[str, list[int]]:
    """Role → pids of its agent turns in flight: the run's jobs, then running session records."""
    pids: dict[str, list[int]] = {}
    if run is not None:
        for job in run.jobs.values():
            if job.started and job.pid:
                pids.setdefault(job.role, []).append(int(job.pid))
    for record in sessions:
        running = getattr(record, "running", None) or {}
        pid = running.get("pid")
        if getattr(record, "status", None) == "running" and pid and record.role:
            owned = pids.setdefault(record.role, [])
            if int(pid) not in owned:
                owned.append(int(pid))
    return pids


def node_samples(sessions: Iterable[Any]) -> dict[str, ProcessSample]:
    """Role → the latest samples cluster nodes took of its turns in flight (`running.sample`), summed."""
    found: dict[str, ProcessSample] = {}
    for record in sessions:
        running = getattr(record, "running", None) or {}
        sample = running.get("sample") if running.get("node") else None
        if getattr(record, "status", None) != "running" or not isinstance(sample, dict) or not record.role:
            continue
        try:
            taken = ProcessSample(float(sample["cpu_percent"]), int(sample["rss_bytes"]), int(sample["processes"]))
        except (KeyError, TypeError, ValueError):
            continue
        found[record.role] = merged(found[record.role], taken) if record.role in found else taken
    return found


def merged(one: ProcessSample, other: ProcessSample) -> ProcessSample:
    """Two samples of one member's turns as one."""
    return ProcessSample(round(one.cpu_percent + other.cpu_percent, 1), one.rss_bytes + other.rss_bytes,
                         one.processes + other.processes)
