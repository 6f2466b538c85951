"""What giving a task its own worktree costs on a repository of 20,000 files.

Baseline (`shared` mode): the turn writes its 3 files into the project's tree. Measured
(`worktree` mode), per task: the task's worktree made (`ensure_task_worktree`), the same 3
files written in it (2 new, 1 changed), the turn committed (`commit_turn`), merged into the
run's integration branch (`merge_task`) and the worktree put away (`remove_task_worktree`).
Twice: with a worktree reused from the run's previous task (the usual case: a finished
task's worktree is parked as a spare and switched to the next task's branch, rewriting only
the files that differ), and with a new one (a full checkout of every file: each worker's
first task in a run). Runs interleave; figures are medians; the goal is that worktree mode
adds at most 300 ms per task.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentbox.core.workspace import (  # noqa: E402
    WorktreeOrigin,
    commit_turn,
    ensure_integration_branch,
    ensure_task_worktree,
    merge_task,
    remove_spares,
    remove_task_worktree,
    snapshot_base,
)

GOAL_MS = 300.0
STEPS = ("ensure", "write", "commit", "merge", "remove")


def median_ms(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] * 1000


def make_repo(root: Path, files: int) -> None:
    """`files` small files in directories of 200, committed."""
    for index in range(files):
        directory = root / f"pkg{index // 200:03d}"
        if index % 200 == 0:
            directory.mkdir(parents=True)
        (directory / f"mod{index:05d}.py").write_text(f"VALUE = {index}\n" * 4)
    identity = ["-c", "user.name=bench", "-c", "user.email=bench@example.com"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(root), *identity, "commit", "-q", "-m", "start"], check=True)


def turn_files(root: Path, index: int) -> None:
    """What one turn writes: two new files and one changed file, distinct per task."""
    (root / "feature" / f"t{index}").mkdir(parents=True, exist_ok=True)
    (root / "feature" / f"t{index}" / "new_a.py").write_text(f"A = {index}\n")
    (root / "feature" / f"t{index}" / "new_b.py").write_text(f"B = {index}\n")
    changed = root / f"pkg{index % 100:03d}" / f"mod{(index % 100) * 200 + 1:05d}.py"
    changed.write_text(changed.read_text() + f"# task {index}\n")


def one_task(repo: Path, run_id: str, task_id: str, index: int, *, keep_spare: bool,
             want: WorktreeOrigin) -> dict[str, float]:
    """Time each step of one task in worktree mode."""
    times: dict[str, float] = {}
    started = time.perf_counter()
    tree = ensure_task_worktree(repo, run_id, task_id)
    times["ensure"] = time.perf_counter() - started
    if tree.origin != want:
        raise SystemExit(f"bench_worktree: {task_id} got a {tree.origin} worktree, expected {want}")
    started = time.perf_counter()
    turn_files(tree.path, index)
    times["write"] = time.perf_counter() - started
    started = time.perf_counter()
    commit = commit_turn(tree.path, author_name="bench", author_email="bench@example.com", message=task_id)
    times["commit"] = time.perf_counter() - started
    started = time.perf_counter()
    merged = merge_task(repo, run_id, task_id)
    times["merge"] = time.perf_counter() - started
    started = time.perf_counter()
    remove_task_worktree(repo, run_id, task_id, keep_spare=keep_spare)
    times["remove"] = time.perf_counter() - started
    if commit is None or merged.merged_commit is None:
        raise SystemExit(f"bench_worktree: {task_id} did not commit and merge ({commit}, {merged})")
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--files", type=int, default=20_000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="agentbox-bench-worktree-"))
    os.environ["HOME"] = str(work)  # no personal git config in the figures
    try:
        repo = work / "project"
        started = time.perf_counter()
        make_repo(repo, args.files)
        print(f"bench_worktree: a repository of {args.files:,} files made in {time.perf_counter() - started:.1f} s")
        base = snapshot_base(repo)
        ensure_integration_branch(repo, "reused", base)  # its tasks park their worktree for the next
        ensure_integration_branch(repo, "fresh", base)  # its tasks get a new worktree each
        one_task(repo, "reused", "warmup", 10_000, keep_spare=True, want=WorktreeOrigin.NEW)
        shared: list[float] = []
        spare: dict[str, list[float]] = {step: [] for step in STEPS}
        new: dict[str, list[float]] = {step: [] for step in STEPS}
        for run in range(args.runs):
            started = time.perf_counter()
            turn_files(repo, 20_000 + run)
            shared.append(time.perf_counter() - started)
            subprocess.run(["git", "-C", str(repo), "checkout", "-q", "--", "."], check=True)
            for step, value in one_task(repo, "reused", f"t{run}", 2 * run, keep_spare=True, want=WorktreeOrigin.SPARE).items():
                spare[step].append(value)
            for step, value in one_task(repo, "fresh", f"t{run}", 2 * run + 1, keep_spare=False,
                                        want=WorktreeOrigin.NEW).items():
                new[step].append(value)
        remove_spares(repo, "reused")
        base_ms = median_ms(shared)
        print(f"medians of {args.runs} interleaved runs")
        print(f"  shared: the turn writes its 3 files in place                 {base_ms:8.1f} ms")
        for label, samples in (("worktree, reused from the previous task", spare),
                               ("worktree, new (a full checkout)", new)):
            totals = [sum(samples[step][i] for step in STEPS) for i in range(args.runs)]
            total_ms = median_ms(totals)
            added = total_ms - base_ms
            verdict = "✔" if added <= GOAL_MS else "✘"
            print(f"  {label:<58} {total_ms:8.1f} ms   +{added:.0f} ms per task "
                  f"(goal ≤ {GOAL_MS:.0f}) {verdict}   ratio {total_ms / base_ms:,.0f}")
            print("      " + ", ".join(f"{step} {median_ms(samples[step]):.1f}" for step in STEPS) + " ms")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
