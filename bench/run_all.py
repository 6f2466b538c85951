"""Run every `bench/bench_*.py` in turn with this interpreter and print their output.

Benchmarks print figures and ratios against baselines measured in the same run; they
are never timed assertions in the test-suite. Arguments after the script name are passed
to every benchmark (e.g. `--runs 5` if they all take it). Exits non-zero when any
benchmark does, after running them all.

    .venv/bin/python bench/run_all.py [ARGS...]
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent


def main(argv: list[str]) -> int:
    scripts = sorted(BENCH_DIR.glob("bench_*.py"))
    if not scripts:
        print(f"no bench_*.py in {BENCH_DIR}", file=sys.stderr)
        return 1
    failed: list[str] = []
    for script in scripts:
        print(f"=== {script.name}", flush=True)
        started = time.perf_counter()
        code = subprocess.call([sys.executable, str(script), *argv], cwd=REPO)
        print(f"=== {script.name}: exit {code} in {time.perf_counter() - started:.1f} s\n", flush=True)
        if code != 0:
            failed.append(f"{script.name} (exit {code})")
    print(f"{len(scripts) - len(failed)}/{len(scripts)} benchmarks ran cleanly"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
