"""What tracing costs a run: the same scripted run with tracing off and on, interleaved.

A hierarchical run (bench_engine's crew: an instant lead, `--tasks` tasks of `--delay` s
workers, an instant reviewer) in a temporary project and AGENT_BOX_HOME, executed in this
process `--runs` times with tracing off and `--runs` times with it on (a local OTLP/HTTP
receiver, tests/fakes/otlp_receiver.py, on 127.0.0.1 in a process of its own so its decoding is
not counted), alternating. Prints the medians of the
wall time and of the engine's CPU (this process) and their ratios on ÷ off. Functional
check: every traced run sends one span per task, per turn, the run and the plan.

    .venv/bin/python bench/bench_traces.py [--tasks 40] [--workers 4] [--delay 0.2] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_engine import make_project, run_once  # bench/ is sys.path[0] when a script runs

REPO = Path(__file__).resolve().parent.parent
RECEIVER = """
import sys
from tests.fakes.otlp_receiver import OtlpReceiver
with OtlpReceiver() as receiver:
    print(receiver.endpoint, flush=True)
    for _ in sys.stdin:
        print(len(receiver.received()), flush=True)
"""


class Receiver:
    """The local OTLP receiver in a child process: its endpoint, and how many spans it has."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", RECEIVER], cwd=REPO, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.endpoint = self.proc.stdout.readline().strip()

    def count(self) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("count\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


def one(scratch: Path, n: int, args: argparse.Namespace, endpoint: str | None) -> tuple[float, float, int]:
    """One run in a fresh project: wall s, CPU s, turns."""
    home, root = scratch / f"home-{n}", scratch / f"repo-{n}"
    home.mkdir()
    root.mkdir()
    os.environ["AGENT_BOX_HOME"] = str(home)
    if endpoint is None:
        os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    else:
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    make_project(home, root, args.tasks, args.workers, 2 * args.workers, args.delay)
    final, wall, cpu = asyncio.run(run_once(root))
    if final.status != "done":
        raise SystemExit(f"the run did not complete: {final.status} ({final.status_reason})")
    return wall, cpu, final.totals.turns


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    if shutil.which("bwrap") is None:
        print("bubblewrap is required", file=sys.stderr)
        return 1
    scratch = Path(tempfile.mkdtemp(prefix="agentbox-bench-traces-"))
    off: list[tuple[float, float]] = []
    on: list[tuple[float, float]] = []
    receiver = Receiver()
    try:
        for n in range(args.runs):
            wall, cpu, _ = one(scratch, 2 * n, args, None)
            off.append((wall, cpu))
            before = receiver.count()
            wall, cpu, turns = one(scratch, 2 * n + 1, args, receiver.endpoint)
            on.append((wall, cpu))
            sent = receiver.count() - before
            expected = turns + args.tasks + 2  # the turns, the tasks, the plan, the run
            if sent != expected:
                print(f"a traced run sent {sent} spans, not {expected}", file=sys.stderr)
                return 1
    finally:
        receiver.close()
        shutil.rmtree(scratch, ignore_errors=True)
    wall_off, wall_on = (statistics.median(w for w, _ in runs) for runs in (off, on))
    cpu_off, cpu_on = (statistics.median(c for _, c in runs) for runs in (off, on))
    print(f"{args.tasks} tasks, {args.workers} workers, {args.delay} s turns, {args.runs} runs each way (medians)")
    print(f"wall   off {wall_off:.2f} s   on {wall_on:.2f} s   on ÷ off {wall_on / wall_off:.3f}")
    print(f"CPU    off {cpu_off:.2f} s   on {cpu_on:.2f} s   on ÷ off {cpu_on / cpu_off:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
