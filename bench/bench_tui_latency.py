"""P4: a change written to disk → visible on the dashboard, p95 ÷ the raw watcher's p95 (goal ≤ 1.5; ≤ 250 ms).

The dashboard runs headless (Textual's `run_test`) on a run in a temporary project, with
its real file watcher. A writer thread changes the run the way another process would
(through `RunStore`: a new task in run.json, or a line appended to the decision log) and
the clock stops at the first frame the app paints once the change is in the widget (the
queue has the task, the log's viewport shows the line). Frames are timed by wrapping the app's
`_display`, which receives every composed frame (headless or not), and the widget is
asked at each frame, so no frame is missed between two looks.

Baseline, same run, interleaved: the raw watcher alone (`agentbox.core.watch.watch_project`
in the same process), from the same write to the fact being yielded. The difference is
what the TUI adds: messages, the read in a thread worker, the reactive update and a repaint.

    .venv/bin/python bench/bench_tui_latency.py [--runs 40]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _support import percentile, queue_task_ids  # bench/ is sys.path[0] when a script runs

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
GOAL_MS = 250.0
RATIO_GOAL = 1.5
RUN_ID = "run-20260101-120000-beef"


def make_project(root: Path) -> Any:
    """A project (copy of the example) with one running run of three tasks, written by the core."""
    from agentbox.core.config import project as project_mod
    from agentbox.core.engine.models import Acceptance, Contract, Run, Task
    from agentbox.core.engine.run_store import RunStore
    from agentbox.core.paths import ProjectPaths

    shutil.copytree(REPO / ".agent-box.example", root / ".agent-box", ignore=shutil.ignore_patterns("runs", "sessions"))
    project = ProjectPaths(root)
    crew = project_mod.load_checked_crew(project)
    now = time.time()
    run = Run(id=RUN_ID, status="running", created=now,
              contract=Contract(goal="bench P4", mode="hierarchical", limits=crew.limits.model_dump(),
                                roles={n: r.profile for n, r in crew.roles.items()}))
    for n in range(3):
        run.tasks[f"t{n}"] = Task(id=f"t{n}", assignee="builder", brief=f"task {n}",
                                  acceptance=[Acceptance(id="a1", criterion="done")], created=now)
    RunStore(project).create(run)
    return project


def add_task(project: Any, task_id: str) -> None:
    from agentbox.core.engine.models import Acceptance, Task
    from agentbox.core.engine.run_store import RunStore

    store = RunStore(project)
    run = store.load(RUN_ID)
    run.tasks[task_id] = Task(id=task_id, assignee="tester", brief="bench", acceptance=[Acceptance(id="a1", criterion="x")])
    store.save(run)


def add_event(project: Any, what: str) -> None:
    from agentbox.core.engine.run_store import RunStore

    store = RunStore(project)
    run = store.load(RUN_ID)
    run.seq += 1
    run.outbox.append({"seq": run.seq, "at": time.time(), "run": RUN_ID, "type": "bench", "what": what, "why": None,
                       "task": None, "role": None, "session": None, "fingerprint": None, "tokens": None,
                       "human_required": False})
    store.save(run)


async def measure(project: Any, runs: int) -> tuple[list[float], list[float], list[float]]:
    from agentbox.core import watch
    from agentbox.tui.factory import make_app
    from agentbox.tui.widgets.events import EventLog

    app = make_app(project, sample_interval_s=1.0)
    waiting: list[Callable[[], bool]] = []
    shown_at: list[float] = []
    original_display = app._display

    def display(screen: Any, renderable: Any) -> None:
        """Every composed frame: the first one painted once the change is in the widget stops the clock."""
        original_display(screen, renderable)
        if renderable is not None and waiting and waiting[0]():
            shown_at.append(time.perf_counter())
            waiting.clear()

    app._display = display
    task_ms: list[float] = []
    event_ms: list[float] = []
    watcher_ms: list[float] = []
    async with app.run_test(size=(160, 48)) as pilot:
        board = app.dashboard
        assert board is not None
        deadline = time.monotonic() + 10
        while board.run is None or board._events_offset is None:
            if time.monotonic() > deadline:
                raise SystemExit("the dashboard did not open the run")
            await pilot.pause(0.05)
        await pilot.pause(0.5)
        queue = board.query_one("#queue")
        log = board.query_one(EventLog)

        def queue_has(task_id: str) -> bool:
            return task_id in queue_task_ids(queue)

        def log_has(text: str) -> bool:
            """The line is in the log's viewport (written is not enough: it must be scrolled to)."""
            top = round(log.scroll_y)
            return any(text in strip.text for strip in log.lines[top:top + log.scrollable_content_region.height])

        for n in range(runs):
            for kind in ("task", "event"):
                token = f"b{n}{kind[0]}"
                visible = (lambda t=token: queue_has(t)) if kind == "task" else (lambda t=token: log_has(f"mark {t}"))
                write = (lambda t=token: add_task(project, t)) if kind == "task" else \
                    (lambda t=token: add_event(project, f"mark {t}"))
                shown_at.clear()
                waiting[:] = [visible]
                started = time.perf_counter()
                threading.Thread(target=write).start()
                limit = time.monotonic() + 5
                while not shown_at and time.monotonic() < limit:
                    await asyncio.sleep(0.002)
                if not shown_at:
                    raise SystemExit(f"change {token} never became visible")
                (task_ms if kind == "task" else event_ms).append((shown_at[0] - started) * 1000)
                await pilot.pause(0.05)
            watcher_ms.append(await raw_watcher_latency(project, watch, n))
            await pilot.pause(0.05)  # the dashboard shows that write too: let it settle before the next one
    return task_ms, event_ms, watcher_ms


async def raw_watcher_latency(project: Any, watch: Any, n: int) -> float:
    """Write → `watch_project` yields the fact, with nothing else on the way."""
    stop = asyncio.Event()
    seen = asyncio.Event()
    stamp: list[float] = []

    async def follow() -> None:
        async for facts in watch.watch_project(project, stop_event=stop):
            if any(isinstance(f, watch.EventsAppended) for f in facts):
                stamp.append(time.perf_counter())
                seen.set()
                return

    follower = asyncio.ensure_future(follow())
    await asyncio.sleep(0.1)
    started = time.perf_counter()
    threading.Thread(target=add_event, args=(project, f"raw {n}")).start()
    await asyncio.wait_for(seen.wait(), 5)
    stop.set()
    await follower
    return (stamp[0] - started) * 1000


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="agentbox-bench-p4-") as tmp:
        os.environ["AGENT_BOX_HOME"] = str(Path(tmp) / "home")
        project = make_project(Path(tmp) / "repo")
        task_ms, event_ms, watcher_ms = asyncio.run(measure(project, args.runs))
    both = task_ms + event_ms
    print(f"P4 disk change → visible on the dashboard ({len(both)} changes, {args.runs} runs of each kind)")
    for name, values in (("new task in run.json → queue", task_ms), ("event appended → log", event_ms),
                         ("both", both), ("baseline: raw watcher", watcher_ms)):
        print(f"  {name:<32} p50 {statistics.median(values):6.1f} ms   p95 {percentile(values, 0.95):6.1f} ms   "
              f"max {max(values):6.1f} ms")
    p95 = percentile(both, 0.95)
    ratio = p95 / percentile(watcher_ms, 0.95)
    print(f"  P4 ratio p95 dashboard / p95 raw watcher = {ratio:.2f} (goal ≤ {RATIO_GOAL}) "
          f"{'✔' if ratio <= RATIO_GOAL else '✘'}")
    print(f"  P4 p95 = {p95:.0f} ms (goal ≤ {GOAL_MS:.0f} ms) {'✔' if p95 <= GOAL_MS else '✘'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
