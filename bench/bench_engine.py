"""P3: the engine's throughput — 200 tasks of 0.5 s scripted agents with max_workers 8.

A hierarchical run in a temporary project and AGENT_BOX_HOME: the lead (instant) plans
200 independent tasks spread over the worker roles; every worker turn takes 0.5 s; a fast
reviewer (no delay) approves each submission; the lead writes the synthesis. Everything
runs for real: scripted agents under bwrap, run.json and the decision log on disk.

Ideal wall time, counted honestly: the only work the scenario asks for is 200 × 0.5 s of
worker time, spread over 8 workers = 12.5 s; the plan, the 200 reviews and the synthesis
ask for no time at all. So everything else (starting 402 sandboxed processes, the
reviews, the engine's bookkeeping) counts against the engine. P3 = ideal ÷ measured.

The crew has 16 worker roles by default (`--roles`), twice max_workers. A member whose
work is submitted keeps its slot until the review approves it (a hard rule), so with
exactly 8 members each of them idles during its own review and the 8 workers can never
all be busy, however fast the engine is; with more members than workers another member
takes the free worker while a review runs, which is what the engine is for. Run with
`--roles 8` for the figure with one member per worker.

Two more ratios separate the engine from the agents, against a baseline measured in the
same run: `t0`, the wall time of one no-op scripted turn through `invoke()` (sandbox,
process start, session bookkeeping), taken alone. The agent-bound ideal counts every
task's work turn (delay + t0) spread over the workers, or, with no more members than
workers, each member's chain of work and review turns (delay + 2 t0 per task); the
packing ratio is the measured work turns spread over the workers (plus the plan and the
synthesis) ÷ measured wall time: how busy the engine kept the workers. The engine's CPU
(psutil, this process: the engine runs in-process) is reported per task and per turn.

    .venv/bin/python bench/bench_engine.py [--tasks 200] [--workers 8] [--roles 16] [--delay 0.5]
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
from pathlib import Path
from typing import Any

from _support import write_scripted_profile  # bench/ is sys.path[0] when a script runs

REPO = Path(__file__).resolve().parent.parent
GOAL = 0.8


def make_project(home: Path, root: Path, tasks: int, workers: int, roles: int, delay: float) -> None:
    """The crew: lead, `roles` worker roles sharing one profile, a reviewer; `workers` slots."""
    usage = {"input_tokens": 100, "output_tokens": 20}
    plan = {"notes": "bench", "tasks": [
        {"id": f"t{n:03d}", "assignee": f"w{n % roles}", "brief": f"task {n}",
         "acceptance": [{"id": "a1", "criterion": "done"}], "writes": [f"src/t{n:03d}/**"], "depends_on": []}
        for n in range(tasks)]}
    write_scripted_profile(home, "bench-lead", {"defaults": {"usage": usage}, "rules": [
        {"id": "plan", "when": {"prompt_contains": "[agentbox:plan"}, "do": {"reply_json": plan}},
        {"id": "synthesis", "when": {"prompt_contains": "[agentbox:synthesis"}, "do": {"reply": "done"}}]})
    write_scripted_profile(home, "bench-worker", {"defaults": {"usage": usage}, "rules": [
        {"id": "work", "when": {"prompt_regex": r"\[agentbox:work task=(?P<task>\S+) "},
         "do": {"delay_s": delay, "reply_json": {"summary": "did {task}", "evidence": ["bench"]}}}]})
    write_scripted_profile(home, "bench-reviewer", {"defaults": {"usage": usage}, "rules": [
        {"id": "approve", "when": {"prompt_regex": r"\[agentbox:review task=(?P<task>\S+) "},
         "do": {"reply_json": {"verdict": "approve", "blocking_issues": [], "confidence": 1.0, "checklist": [
             {"item": "done", "acceptance_id": "a1", "pass": True, "evidence": "checked {task}"}]}}}]})
    shutil.copytree(REPO / ".agent-box.example", root / ".agent-box", ignore=shutil.ignore_patterns("runs", "sessions"))
    write_scripted_profile(home, "bench-noop", {"defaults": {"usage": usage}, "rules": [
        {"id": "noop", "when": {}, "do": {"reply": "ok"}}]})
    crew_roles: dict[str, Any] = {"lead": {"profile": "bench-lead", "writes": []},
                                  "reviewer": {"profile": "bench-reviewer", "writes": []}}
    crew_roles.update({f"w{i}": {"profile": "bench-worker", "writes": ["src/**"]} for i in range(roles)})
    crew = {"mode": "hierarchical", "roles": crew_roles,
            "limits": {"max_workers": workers, "task_timeout_s": 120, "max_auto_retries": 2},
            "hierarchical": {"lead": "lead", "reviewer": "reviewer"}}
    (root / ".agent-box" / "crew.yaml").write_text(json.dumps(crew, indent=1))


async def turn_baseline(root: Path, turns: int = 10) -> float:
    """Median wall seconds of one no-op scripted turn through `invoke()`, alone (a new session each)."""
    from agentbox.core.agents import resolve as services
    from agentbox.core.agents.invoke import invoke
    from agentbox.core.paths import ProjectPaths

    agent = services.profile_agent("bench-noop", root, ProjectPaths(root))
    await invoke(agent, "warm up")
    walls = []
    for _ in range(turns):
        t0 = time.perf_counter()
        result = await invoke(agent, "hi")
        walls.append(time.perf_counter() - t0)
        assert result.ok, result.error
    return statistics.median(walls)


async def run_once(root: Path) -> tuple[Any, float, float]:
    """Create and execute the run in this process; its state, wall seconds and engine CPU seconds."""
    import psutil

    from agentbox.core import runs
    from agentbox.core.paths import ProjectPaths

    project = ProjectPaths(root)
    run = runs.create_run(project, "benchmark the engine")
    me = psutil.Process()
    cpu0 = me.cpu_times()
    t0 = time.perf_counter()
    final = await runs.execute(project, run.id)
    wall = time.perf_counter() - t0
    cpu1 = me.cpu_times()
    return final, wall, (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--workers", type=int, default=8, help="max_workers")
    parser.add_argument("--roles", type=int, default=None, help="worker roles (default: 2 × --workers)")
    parser.add_argument("--delay", type=float, default=0.5)
    args = parser.parse_args(argv)
    if shutil.which("bwrap") is None:
        print("bubblewrap is required", file=sys.stderr)
        return 1
    scratch = Path(tempfile.mkdtemp(prefix="agentbox-bench-engine-"))
    try:
        home = scratch / "home"
        home.mkdir()
        os.environ["AGENT_BOX_HOME"] = str(home)
        root = scratch / "repo"
        root.mkdir()
        args.roles = args.roles or 2 * args.workers
        make_project(home, root, args.tasks, args.workers, args.roles, args.delay)
        t0 = asyncio.run(turn_baseline(root))
        final, wall, cpu = asyncio.run(run_once(root))
        if final.status != "done" or any(t.state != "approved" for t in final.tasks.values()):
            print(f"the run did not complete: {final.status} ({final.status_reason})", file=sys.stderr)
            return 1
        report(root, final, wall, cpu, t0, args)
        return 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def report(root: Path, final: Any, wall: float, cpu: float, t0: float, args: argparse.Namespace) -> None:
    from agentbox.core.engine.run_store import RunStore
    from agentbox.core.paths import ProjectPaths

    log = RunStore(ProjectPaths(root)).events(final.id)[0]
    turns = [e for e in log if e["type"] == "turn"]
    by_kind: dict[str, list[float]] = {}
    for event in turns:
        by_kind.setdefault(event["what"].split(" turn")[0], []).append(float(event["duration_s"]))
    ideal = args.tasks * args.delay / args.workers
    serial = sum(by_kind.get("plan", [])) + sum(by_kind.get("synthesis", []))
    if args.roles > args.workers:  # reviews run while other members work
        packed = serial + sum(by_kind.get("work", [])) / args.workers + statistics.median(by_kind["review"])
        agent_bound = args.tasks / args.workers * (args.delay + t0) + 3 * t0
    else:  # each member's tasks and reviews form one chain
        packed = serial + (sum(by_kind.get("work", [])) + sum(by_kind.get("review", []))) / args.workers
        agent_bound = -(-args.tasks // args.roles) * (args.delay + 2 * t0) + 2 * t0
    state_kib = (RunStore(ProjectPaths(root)).dir(final.id) / "run.json").stat().st_size / 1024
    print(f"P3: {args.tasks} tasks × {args.delay:g} s, {args.roles} worker roles, max_workers {args.workers}, "
          f"fast reviewer; {len(turns)} agent turns, {len(log)} events")
    print(f"  machine                {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end")
    print(f"  ideal wall time        {ideal:7.2f} s   (tasks × delay ÷ max_workers)")
    print(f"  measured wall time     {wall:7.2f} s   (plan → synthesis, engine in-process)")
    print(f"  P3 = ideal ÷ measured  {ideal / wall:7.2f}     goal ≥ {GOAL}  {'✔' if ideal / wall >= GOAL else '✘'}")
    print(f"  baseline t0            {t0:7.3f} s   (one no-op turn through invoke(), alone)")
    print(f"  agent-bound ideal      {agent_bound:7.2f} s   (the turns' least cost with t0 each)"
          f"  → ratio {agent_bound / wall:.2f}")
    for kind, durations in sorted(by_kind.items()):
        print(f"  {kind:<8} turns {len(durations):4d}   median {statistics.median(durations):.3f} s, "
              f"total {sum(durations):7.2f} s")
    print(f"  packing of the measured turns ÷ measured wall time  {packed / wall:5.2f}   "
          f"({packed:.2f} s if the {args.workers} workers never idled)")
    print(f"  engine CPU             {cpu:7.2f} s   = {1000 * cpu / args.tasks:.1f} ms per task, "
          f"{1000 * cpu / len(turns):.1f} ms per turn ({100 * cpu / wall:.0f}% of one core)")
    print(f"  run.json at the end    {state_kib:7.1f} KiB")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
