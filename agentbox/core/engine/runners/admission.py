"""Whether this machine has room for one more turn: memory and CPU, decided from a reading.

A turn's need is its profile's `resources.memory_mb` when it names one, else the most
memory this tool's recent turns reached (kept per tool in AGENT_BOX_HOME, `PeakStore`),
else `DEFAULT_NEED_MB`. A turn starts only when the memory available now, less what the
machine keeps for itself and what the turns already started may still take, covers that
need, and the load per core is under the limit. The machine is read through a
`Reading` (a function), so the rules are tested with fake readings.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_NEED_MB = 256
"""The need of a tool never measured here and whose profile names none (a small CLI turn)."""
DEFAULT_RESERVE_MB = 512
"""Memory kept free for the machine itself, beyond every turn's need."""
DEFAULT_MAX_LOAD_PER_CPU = 8.0
"""Load (1-minute average) per core above which no turn starts: the machine is far behind."""
PEAKS_KEPT = 20
"""How many recent turns' peaks are kept per tool (their maximum is the tool's need)."""
PEAKS_FILE = "runner/peaks.json"
"""Where the peaks live, relative to AGENT_BOX_HOME."""


@dataclass(frozen=True)
class Room:
    """One reading of the machine."""

    available_mb: float
    """Memory the machine could give now without swapping (psutil's `available`)."""
    total_mb: float
    load: float
    """The 1-minute load average."""
    cpus: int


Reading = Callable[[], Room]
"""Reads the machine now (`read_machine` here; a fake in tests)."""


@dataclass(frozen=True)
class AdmissionLimits:
    """What the person's config.yaml says about room (`runner:`)."""

    reserve_mb: float = DEFAULT_RESERVE_MB
    max_load_per_cpu: float | None = DEFAULT_MAX_LOAD_PER_CPU
    """None: the load never holds a turn back."""


def read_machine() -> Room:
    """This machine's memory and load now."""
    import psutil

    memory = psutil.virtual_memory()
    return Room(available_mb=memory.available / 2**20, total_mb=memory.total / 2**20, load=os.getloadavg()[0],
                cpus=os.cpu_count() or 1)


def need_mb(profile_mb: int | None, peak_mb: float | None) -> float:
    """The memory a turn is expected to take: the profile's figure, else the tool's recent peak, else the default."""
    if profile_mb is not None:
        return float(profile_mb)
    return max(peak_mb, 1.0) if peak_mb is not None else float(DEFAULT_NEED_MB)


def decide(need: float, room: Room, reserved_mb: float, limits: AdmissionLimits) -> str | None:
    """None when a turn needing `need` MB may start; else why it waits (the text shown in the queue and status).

    `reserved_mb` is what the turns already started may still take beyond what they hold.
    A need larger than the machine could ever give is said so, not waited for silently.
    """
    if limits.max_load_per_cpu is not None and room.load / room.cpus > limits.max_load_per_cpu:
        return (f"waiting for CPU: load {room.load:.1f} on {room.cpus} core(s), "
                f"the limit is {limits.max_load_per_cpu:g} per core")
    free = room.available_mb - reserved_mb - limits.reserve_mb
    if free >= need:
        return None
    if need > room.total_mb - limits.reserve_mb:
        return (f"waiting for memory: the turn needs {need:.0f} MB, more than this machine's "
                f"{room.total_mb:.0f} MB less the {limits.reserve_mb:.0f} MB it keeps; lower the profile's "
                "resources.memory_mb")
    return f"waiting for memory: the turn needs {need:.0f} MB, {max(free, 0):.0f} MB is free"


class PeakStore:
    """The recent peak memory of each tool's turns, in AGENT_BOX_HOME (written atomically).

    `path` None keeps nothing: a Ray node's runner, whose turn's peak goes back to the head in its
    result (the node's disk is written by nothing but the turn's own dirs)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path

    @classmethod
    def default(cls) -> PeakStore:
        from agentbox.core.paths import agent_box_home

        return cls(agent_box_home() / PEAKS_FILE)

    def _read(self) -> dict[str, list[float]]:
        from agentbox.core.errors import StateError
        from agentbox.core.store import read_json

        data: object = None
        if self.path is None:
            return {}
        with contextlib.suppress(StateError, OSError):
            data = read_json(self.path, {})
        if not isinstance(data, Mapping):
            return {}
        peaks: dict[str, list[float]] = {}
        for tool, values in data.items():
            if isinstance(tool, str) and isinstance(values, list):
                peaks[tool] = [float(v) for v in values if isinstance(v, int | float) and v > 0][-PEAKS_KEPT:]
        return peaks

    def peak(self, tool: str) -> float | None:
        """The largest of the tool's recent peaks (None: never measured)."""
        values = self._read().get(tool)
        return max(values) if values else None

    def add(self, tool: str, peak_mb: float) -> None:
        """Keep one more turn's peak for `tool` (only the last PEAKS_KEPT are kept)."""
        from agentbox.core.store import atomic_write_json, locked

        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with locked(self.path, timeout=5):
            peaks = self._read()
            peaks[tool] = [*peaks.get(tool, []), round(peak_mb, 1)][-PEAKS_KEPT:]
            atomic_write_json(self.path, peaks, durable=False)
