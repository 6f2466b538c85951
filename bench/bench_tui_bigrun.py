"""P5: open a run of 5,000 tasks and 200,000 events (goal ≤ 1.5 s); keypress → repaint while open (≤ 50 ms).

The big run is made with the core's own models and store: 5,000 `Task`s (acceptance
criteria, dependencies, verdicts, failures, spread over every state) saved by
`RunStore.create`, 300 session records through `SessionStore`, 200 artifacts recorded
with `RunStore.record_artifact`, and 200,000 decision-log records shaped exactly like the
engine's (`Engine.event`). The log lines are written in one buffered write with the same
`json.dumps` call `store.append_jsonl` uses (its per-line fsync would take minutes here).

Open time: from building the app to the first frame painted with the run's queue, the
tail of its log, its artifacts and the members all on screen (the app runs headless;
frames are timed by wrapping the app's `_display`). Keypress → repaint: the time from a
key (cursor down in the 5,000-task queue, Tab away from each panel in turn, page down in
the log) to the next frame. Before each key the stage is set untimed (the target focused,
the log scrolled up when it is at its end) and the screen left to go quiet, so a frame
owed to an earlier step is never taken for the key's; the CPU time the process spends
from the key until the screen is quiet again is printed too (on a machine shared with
other work, latency stretches with it). Baseline, same run: the same measures on the
demo-sized run (3 tasks, 60 events), and the bare parse of the big run.json (`RunStore.load`).

    .venv/bin/python bench/bench_tui_bigrun.py [--tasks 5000] [--events 200000] [--keys 60]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from _support import (  # bench/ is sys.path[0] when a script runs
    percentile,
    queue_cursor_to_top_near_end,
    queue_task_ids,
    record_frames,
)

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
OPEN_GOAL_S = 1.5
KEY_GOAL_MS = 50.0
STATES = ("queued", "executing", "submitted", "reviewing", "rework", "blocked", "approved", "approved", "approved",
          "cancelled")


def make_project(root: Path, run_id: str, tasks: int, events: int, artifacts: int, sessions: int) -> Any:
    """A project with one run of the given size, written through the core."""
    from agentbox.core.agents.sessions import SessionRecord, SessionStore
    from agentbox.core.config import project as project_mod
    from agentbox.core.engine.models import (
        Acceptance,
        Contract,
        Failure,
        Run,
        Task,
        Totals,
        Verdict,
    )
    from agentbox.core.engine.run_store import RunStore
    from agentbox.core.paths import ProjectPaths

    shutil.copytree(REPO / ".agent-box.example", root / ".agent-box", ignore=shutil.ignore_patterns("runs", "sessions"))
    project = ProjectPaths(root)
    crew = project_mod.load_checked_crew(project)
    workers = ["builder", "tester"]
    now = time.time()
    run = Run(id=run_id, status="running", created=now - 3600,
              contract=Contract(goal=f"bench P5: {tasks} tasks", mode="hierarchical", limits=crew.limits.model_dump(),
                                roles={n: r.profile for n, r in crew.roles.items()}),
              totals=Totals(tokens=tasks * 3000, turns=tasks * 2, cost_usd=tasks * 0.01))
    for n in range(tasks):
        state = STATES[n % len(STATES)]
        task = Task(id=f"t{n:05d}", assignee=workers[n % 2], brief=f"Task {n}: do the {n}th thing carefully",
                    acceptance=[Acceptance(id="a1", criterion="it works"), Acceptance(id="a2", criterion="it is tested")],
                    writes=[f"src/m{n}/**"], depends_on=[f"t{n - 1:05d}"] if n % 7 == 3 else [], state=state,
                    attempts=1 + n % 3, tokens=3000, created=now, updated=now)
        if state in ("approved", "rework"):
            task.verdicts.append(Verdict(verdict="approve" if state == "approved" else "reject", by="reviewer", at=now,
                                         evidence=["checked"], confidence=0.9))
        if state == "rework":
            task.failures.append(Failure(kind="implementation_defect", fingerprint=f"{n:012x}", message="review rejected",
                                         at=now))
        run.tasks[task.id] = task
    store = RunStore(project)
    store.create(run)
    sessions_store = SessionStore(project.sessions_dir)
    for n in range(sessions):
        role = ["lead", "builder", "tester", "reviewer"][n % 4]
        record = SessionRecord(id=str(uuid.uuid4()), owner=role, role=role, profile="demo-worker", tool="scripted",
                               cwd=str(root), created=now, updated=now, turns=2, run_id=run_id, task_id=f"t{n:05d}")
        sessions_store.save(record)
    art_dir = store.artifacts_dir(run_id)
    for n in range(artifacts):
        path = art_dir / f"t{n:05d}" / f"notes-{n}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# notes {n}\n\nsome text\n")
        store.record_artifact(run_id, path, role=workers[n % 2], session=None, task=f"t{n:05d}")
    with store.events_path(run_id).open("w", encoding="utf-8") as handle:
        kinds = ("dispatch", "turn", "submission", "verdict", "task.approve", "retry")
        for seq in range(1, events + 1):
            record = {"seq": seq, "at": now - 3600 + seq * 0.01, "run": run_id, "type": kinds[seq % len(kinds)],
                      "what": f"event {seq} about t{seq % tasks:05d}", "why": None, "task": f"t{seq % tasks:05d}",
                      "role": workers[seq % 2], "session": None, "fingerprint": None, "tokens": 1200,
                      "human_required": False}
            handle.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
    run = store.load(run_id)
    run.seq = events
    store.save(run)
    return project


async def settle(frames: list[float], quiet_s: float = 0.06, limit_s: float = 3.0) -> None:
    """Wait until no frame has been painted for `quiet_s` (whatever an earlier step set off is drawn)."""
    limit = time.monotonic() + limit_s
    while time.monotonic() < limit:
        mark = len(frames)
        await asyncio.sleep(quiet_s)
        if len(frames) == mark:
            return


async def open_and_press(project: Any, keys: int) -> tuple[float, dict[str, list[float]], dict[str, list[float]]]:
    """Seconds to a first full frame; then, per key kind, key → next frame latencies (ms) and the
    CPU time (ms) the process spent from the key until the screen was quiet again."""
    from agentbox.tui.factory import make_app
    from agentbox.tui.widgets.events import EventLog
    from agentbox.tui.widgets.members import MembersTable

    started = time.perf_counter()
    app = make_app(project, sample_interval_s=1.0)
    frames = record_frames(app)
    kinds = ("down (queue)", "tab (focus)", "pagedown (log)")
    latencies: dict[str, list[float]] = {name: [] for name in kinds}
    cpu: dict[str, list[float]] = {name: [] for name in kinds}
    async with app.run_test(size=(200, 60)) as pilot:
        board = app.dashboard
        assert board is not None

        def opened() -> bool:
            queue = board.query_one("#queue")
            return (board.run is not None and board._events_offset is not None and board._manifest_offset is not None
                    and board._sessions_complete and bool(queue_task_ids(queue))
                    and board.query_one(EventLog).records_shown > 0 and board.query_one(MembersTable).row_count > 0
                    and bool(board.manifest))

        while not opened():
            if time.perf_counter() - started > 60:
                raise SystemExit("the run never opened")
            await asyncio.sleep(0.005)
        mark = len(frames)
        while len(frames) == mark:
            await asyncio.sleep(0.001)
        open_s = frames[-1] - started
        await pilot.pause(0.3)
        queue, log = board.query_one("#queue"), board.query_one(EventLog)
        panels = [board.query_one(MembersTable), queue, board.query_one("#artifact-tree"), log]
        for round_no in range(keys):
            for name, key in zip(kinds, ("down", "tab", "pagedown"), strict=True):
                # set the stage (not timed): the key's target focused, and room to move
                if name == "down (queue)":
                    queue.focus()
                    queue_cursor_to_top_near_end(queue)
                elif name == "pagedown (log)":
                    log.focus()
                    if log.scroll_y >= log.max_scroll_y:
                        log.scroll_home(animate=False, immediate=True)
                else:
                    panels[round_no % len(panels)].focus()  # Tab away from each panel in turn
                await settle(frames)
                mark = len(frames)
                cpu_started = time.process_time()
                pressed = time.perf_counter()
                await pilot.press(key)
                limit = time.monotonic() + 2
                while len(frames) == mark and time.monotonic() < limit:
                    await asyncio.sleep(0.001)
                if len(frames) > mark:
                    latencies[name].append((frames[mark] - pressed) * 1000)
                await settle(frames)
                cpu[name].append((time.process_time() - cpu_started) * 1000)
    return open_s, latencies, cpu


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=40)
    args = parser.parse_args(argv)
    import textual.app  # noqa: F401  (imported before the clock starts, as the CLI does before the app)

    from agentbox.core.engine.run_store import RunStore

    with tempfile.TemporaryDirectory(prefix="agentbox-bench-p5-") as tmp:
        os.environ["AGENT_BOX_HOME"] = str(Path(tmp) / "home")
        made = time.perf_counter()
        big = make_project(Path(tmp) / "big", "run-20260101-120000-b16b", args.tasks, args.events, 200, 300)
        small = make_project(Path(tmp) / "small", "run-20260101-120000-5a11", 3, 60, 3, 4)
        print(f"made the runs in {time.perf_counter() - made:.1f} s "
              f"(events.jsonl {RunStore(big).events_path('run-20260101-120000-b16b').stat().st_size / 1e6:.0f} MB)")
        load_started = time.perf_counter()
        RunStore(big).load("run-20260101-120000-b16b")
        parse_s = time.perf_counter() - load_started
        small_open, small_keys, small_cpu = asyncio.run(open_and_press(small, args.keys))
        big_open, big_keys, big_cpu = asyncio.run(open_and_press(big, args.keys))
        small_open2, _, _ = asyncio.run(open_and_press(small, 2))
        big_open2, _, _ = asyncio.run(open_and_press(big, 2))
    print(f"P5 open a run of {args.tasks} tasks and {args.events} events")
    print(f"  big run:   {big_open:.2f} s, warm {big_open2:.2f} s   (RunStore.load alone {parse_s:.2f} s)")
    print(f"  baseline:  demo-sized run {small_open:.2f} s (first app of the process), warm {small_open2:.2f} s")
    print(f"  ratio big / demo-sized, warm: {big_open2 / small_open2:.2f}")
    worst_open = max(big_open, big_open2)
    print(f"  P5 open = {worst_open:.2f} s (goal ≤ {OPEN_GOAL_S} s) {'✔' if worst_open <= OPEN_GOAL_S else '✘'}")
    print(f"P5 keypress → next frame, big run open, {args.keys} of each (baseline: demo-sized run)")
    worst = 0.0
    for name, values in big_keys.items():
        base = small_keys[name]
        p95 = percentile(values, 0.95)
        worst = max(worst, p95)
        print(f"  {name:<16} p50 {statistics.median(values):5.1f} ms  p95 {p95:5.1f} ms   "
              f"baseline p50 {statistics.median(base):5.1f} ms  p95 {percentile(base, 0.95):5.1f} ms   "
              f"ratio p95 {p95 / percentile(base, 0.95):.2f}")
    print("  CPU time from the key until the screen is quiet again (ms, p50 / p95; what a loaded machine stretches)")
    for name, values in big_cpu.items():
        base = small_cpu[name]
        print(f"  {name:<16} {statistics.median(values):5.1f} / {percentile(values, 0.95):5.1f}   "
              f"baseline {statistics.median(base):5.1f} / {percentile(base, 0.95):5.1f}")
    print(f"  P5 keypress p95 = {worst:.0f} ms (goal ≤ {KEY_GOAL_MS:.0f} ms) {'✔' if worst <= KEY_GOAL_MS else '✘'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
