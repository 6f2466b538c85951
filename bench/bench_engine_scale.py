"""The engine's cost as the run grows: engine CPU per task at 200 tasks ÷ at 2,000 tasks.

Both runs are `bench_engine.py` with 32 workers (64 worker roles) and the same scripted
agents (0.2 s work turns, an instant reviewer), run one after the other in this script.
Goal: the 2,000-task figure at most 1.2 × the 200-task one — what a change costs the
engine should follow the change, not the size of the run.

    .venv/bin/python bench/bench_engine_scale.py [--small 200] [--large 2000] [--workers 32]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

GOAL = 1.2
HERE = Path(__file__).resolve().parent


def cpu_per_task(tasks: int, workers: int, delay: float) -> tuple[float, str]:
    """Engine CPU in ms per task, and the run.json size line, from one bench_engine run."""
    proc = subprocess.run([sys.executable, str(HERE / "bench_engine.py"), "--tasks", str(tasks), "--workers",
                           str(workers), "--delay", str(delay)], capture_output=True, text=True, check=False)
    found = re.search(r"engine CPU\s+[\d.]+ s\s+=\s+([\d.]+) ms per task", proc.stdout)
    if proc.returncode != 0 or found is None:
        raise SystemExit(f"bench_engine.py --tasks {tasks} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    size = next((line.strip() for line in proc.stdout.splitlines() if "run.json at the end" in line), "")
    return float(found.group(1)), size


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=int, default=200)
    parser.add_argument("--large", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--delay", type=float, default=0.2)
    args, _ = parser.parse_known_args(argv)
    small, small_size = cpu_per_task(args.small, args.workers, args.delay)
    large, large_size = cpu_per_task(args.large, args.workers, args.delay)
    ratio = large / small
    print(f"bench_engine_scale: engine CPU per task, {args.workers} workers")
    print(f"  {args.small:>5} tasks  {small:6.1f} ms per task   ({small_size})")
    print(f"  {args.large:>5} tasks  {large:6.1f} ms per task   ({large_size})")
    print(f"  ratio {ratio:4.2f}  (goal <= {GOAL})  {'ok' if ratio <= GOAL else 'MISSED'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
