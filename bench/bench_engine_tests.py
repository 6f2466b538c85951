"""The engine tests' wall time with their turns in-process ÷ before, interleaved file by file; and who ran the turns.

`before` is a tree of the tests as they were (default: `git archive` of the merge base with
main, into a temp dir): every engine a test built ran its turns on the local runner under
bwrap. `after` is this checkout's HEAD (also archived, so the checkout may change meanwhile),
where an engine a test builds plays its turns in-process unless the test is marked
`local_runner` (tests/engine/conftest.py). Each test file of
tests/engine (the Ray tests left out: they start a cluster) runs once in each tree, the
order alternating from file to file so both see the same load; the plugin
`bench.runner_tally` notes which runner each test's engines used.

    .venv/bin/python bench/bench_engine_tests.py [--before TREE] [--files test_a.py ...]

Prints per file the two times, then `RESULT engine_tests` with the total of each, their
ratio, the count of tests whose turns ran in-process / on the local runner in each tree, and
the load average at start and end. bubblewrap must work (AGENTBOX_REQUIRE_BWRAP=1 is set).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _support import result

HERE = Path(__file__).resolve().parent.parent
LEFT_OUT = ("test_ray_runner.py", "test_ray_tls.py")


def _tree(commit: str, into: Path) -> Path:
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(HERE), "archive", commit], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    shutil.copy(HERE / "bench" / "runner_tally.py", into / "bench" / "runner_tally.py")
    if (HERE / ".tools").exists():
        (into / ".tools").symlink_to((HERE / ".tools").resolve())
    return into


def _run(tree: Path, test_file: str, tally: Path) -> tuple[float, int]:
    env = {**os.environ, "AGENTBOX_REQUIRE_BWRAP": "1", "RUNNER_TALLY": str(tally),
           "PATH": f"{tree / '.tools' / 'bin'}:{os.environ.get('PATH', '')}"}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "bench.runner_tally",
                           f"tests/engine/{test_file}"], cwd=tree, env=env, capture_output=True, text=True)
    return time.monotonic() - started, done.returncode


def _count(tallies: list[Path]) -> dict[str, int]:
    counts = {"in_process": 0, "local": 0, "other": 0, "no_turn_here": 0, "tests": 0}
    for path in tallies:
        if not path.exists():
            continue
        for runners in json.loads(path.read_text()).values():
            counts["tests"] += 1
            if "LocalRunner" in runners:
                counts["local"] += 1
            elif "InProcessRunner" in runners:
                counts["in_process"] += 1
            elif runners:
                counts["other"] += 1
            else:
                counts["no_turn_here"] += 1
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="a tree of the tests before (default: the merge base with main)")
    parser.add_argument("--files", nargs="*", help="test files of tests/engine (default: all but the Ray ones)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-engine-tests-"))
    try:
        if args.before is None:
            base = subprocess.run(["git", "-C", str(HERE), "merge-base", "HEAD", "main"], check=True,
                                  capture_output=True, text=True).stdout.strip()
            before = _tree(base, work / "before")
        else:
            before = args.before
        after = _tree("HEAD", work / "after")
        files = args.files or sorted(p.name for p in (HERE / "tests" / "engine").glob("test_*.py")
                                     if p.name not in LEFT_OUT)
        load_start = os.getloadavg()
        totals = {"before": 0.0, "after": 0.0}
        tallies: dict[str, list[Path]] = {"before": [], "after": []}
        failed: dict[str, list[str]] = {"before": [], "after": []}
        for index, name in enumerate(files):
            order = [("before", before), ("after", after)]
            if index % 2:
                order.reverse()
            times = {}
            for side, tree in order:
                tally = work / f"{side}-{name}.json"
                seconds, code = _run(tree, name, tally)
                times[side] = seconds
                totals[side] += seconds
                tallies[side].append(tally)
                if code not in (0, 5):
                    failed[side].append(name)
            print(f"{name:42} before {times['before']:7.1f} s  after {times['after']:7.1f} s  "
                  f"load {os.getloadavg()[0]:.1f}", flush=True)
        load_end = os.getloadavg()
        counts = {side: _count(paths) for side, paths in tallies.items()}
        print(json.dumps({"counts": counts, "failed": failed}, indent=1))
        result("engine_tests", before_s=totals["before"], after_s=totals["after"],
               ratio=totals["after"] / totals["before"],
               in_process_before=counts["before"]["in_process"], in_process_after=counts["after"]["in_process"],
               local_before=counts["before"]["local"], local_after=counts["after"]["local"],
               tests=counts["after"]["tests"], load_start=load_start[0], load_end=load_end[0])
        return 1 if failed["after"] else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
