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


def result(key: str, **values: float | int | str) -> None:
    """Print one machine-readable figure line, `RESULT <key> name=value ...`, that `run_all.py` collects."""
    print(f"RESULT {key} " + " ".join(f"{name}={value:.4g}" if isinstance(value, float) else f"{name}={value}"
                                      for name, value in values.items()), flush=True)


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


def queue_task_ids(queue: Any) -> set[str]:
    """The ids of the tasks the dashboard's queue lists.

    The queue is a virtual list now and was a Textual tree before; both are read, so a
    bench can be run on an older commit for a before/after figure.
    """
    if hasattr(queue, "groups"):
        return {task_id for task_ids in queue.groups.values() for task_id in task_ids}
    return {node.data for group in queue.root.children for node in group.children if node.data}


def queue_cursor_to_top_near_end(queue: Any) -> None:
    """Put the queue's cursor back above the first row when it is near the last (see queue_task_ids)."""
    if hasattr(queue, "cursor_row"):
        if queue.cursor_row >= queue.last_row - 1:
            queue.cursor_row = -1
            queue.scroll_home(animate=False, immediate=True)
    elif queue.cursor_line >= queue.last_line - 1:
        queue.move_cursor(None)


def stop_cluster(cluster: Any, work: Path) -> None:
    """Shut down this process's Ray connection and the bench's `ray.cluster_utils.Cluster`, kill any
    process still running under its temp dir `work`, and remove `work`."""
    import contextlib
    import shutil

    import psutil
    import ray

    with contextlib.suppress(Exception):
        ray.shutdown()
    with contextlib.suppress(Exception):
        cluster.shutdown()
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if str(work) in " ".join(proc.info["cmdline"] or []):
                proc.kill()
    shutil.rmtree(work, ignore_errors=True)
