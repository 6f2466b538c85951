"""Pieces the benchmark scripts share (not a benchmark: `run_all.py` runs `bench_*.py` only)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any


def write_scripted_profile(home: Path, name: str, scenario: dict[str, Any]) -> None:
    """A user profile in AGENT_BOX_HOME `home` running the scripted agent on `scenario`, no network."""
    directory = home / "profiles" / name
    directory.mkdir(parents=True)
    (directory / "scenario.json").write_text(json.dumps(scenario))
    (directory / "profile.yaml").write_text(json.dumps(
        {"name": name, "runtime": {"tool": "scripted", "scenario": "scenario.json"}, "sandbox": {"network": False}}))


def percentile(values: list[float], q: float) -> float:
    """The `q` quantile (0..1) of `values`, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def record_frames(app: Any) -> list[float]:
    """Wrap the Textual app's `_display` (it receives every composed frame, headless or not);
    returns the list the time of each frame is appended to."""
    frames: list[float] = []
    original = app._display

    def display(screen: Any, renderable: Any) -> None:
        original(screen, renderable)
        if renderable is not None:
            frames.append(time.perf_counter())

    app._display = display
    return frames
