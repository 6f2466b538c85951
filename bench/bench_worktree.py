"""What giving a task its own worktree costs on repositories of 20,000 files (and more: `--files`).

Baseline (`shared` mode): the turn writes its 3 files into the project's tree. Measured
(`worktree` mode), per task: the task's worktree made (`ensure_task_worktree`, told the
task's write scopes as the engine does), the same 3 files written in it (2 new, 1 changed),
the turn committed (`commit_turn`), merged into the run's integration branch (`merge_task`)
and the worktree put away (`remove_task_worktree`). Three ways: with a worktree reused from
the run's previous task (the usual case: a finished task's worktree is parked as a spare
and switched to the next task's branch), the same with no reach named (every scan covers the
whole tree, as before scans followed the write scopes), with a new one (a full checkout
of every file: each worker's first task in a run, before), and with a new one checked out
sparse over the repository's shared base (only the directories the task's scopes need: each
worker's first task now; the base, one full checkout per commit shared by every task and run,
is timed once apart). Runs interleave; figures are medians; the goal is that worktree mode adds
at most 300 ms per task. `--real DIR` measures a copy of a real source tree too (committed into
a new repository; files over 1 MB left out).
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentbox.core.workspace import (  # noqa: E402
    WorktreeOrigin,
    commit_turn,
    ensure_integration_branch,
    ensure_task_worktree,
    ensure_view_worktree,
    merge_task,
    remove_spares,
    remove_task_worktree,
    remove_view_worktree,
    snapshot_base,
)
from agentbox.core.workspace.bases import ensure_base, read_base  # noqa: E402
from agentbox.core.workspace.layout import common_dir  # noqa: E402

GOAL_MS = 300.0
GIT_CALLS = [0]
"""git processes started so far (a figure that does not move with the machine's load)."""


def count_git_calls() -> None:
    """Count every git process agentbox's runner starts."""
    from agentbox.core.workspace import gitcmd

    real = gitcmd._run

    def counted(*args: Any, **kwargs: Any) -> Any:
        GIT_CALLS[0] += 1
        return real(*args, **kwargs)

    gitcmd._run = counted  # type: ignore[assignment]
STEPS = ("ensure", "write", "commit", "merge", "remove")


def median_ms(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] * 1000


def make_repo(root: Path, files: int, real: Path | None = None) -> None:
    """`files` small files in directories of 200, committed (with `real`: that tree's files too,
    under `real/`, those over 1 MB left out)."""
    for index in range(files):
        directory = root / f"pkg{index // 200:03d}"
        if index % 200 == 0:
            directory.mkdir(parents=True)
        (directory / f"mod{index:05d}.py").write_text(f"VALUE = {index}\n" * 4)
    if real is not None:
        shutil.copytree(real, root / "real", symlinks=True, ignore=_big_or_cache)
    identity = ["-c", "user.name=bench", "-c", "user.email=bench@example.com"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(root), *identity, "commit", "-q", "-m", "start"], check=True)


def _big_or_cache(directory: str, names: list[str]) -> list[str]:
    return [n for n in names if n == "__pycache__" or (os.path.isfile(os.path.join(directory, n))
                                                       and os.path.getsize(os.path.join(directory, n)) > 1 << 20)]


def turn_files(root: Path, index: int, dirs: int) -> None:
    """What one turn writes: two new files and one changed file, distinct per task (`dirs`: the repository's)."""
    (root / "feature" / f"t{index}").mkdir(parents=True, exist_ok=True)
    (root / "feature" / f"t{index}" / "new_a.py").write_text(f"A = {index}\n")
    (root / "feature" / f"t{index}" / "new_b.py").write_text(f"B = {index}\n")
    changed = root / f"pkg{index % dirs:03d}" / f"mod{(index % dirs) * 200 + 1:05d}.py"
    changed.write_text(changed.read_text() + f"# task {index}\n")


def one_task(repo: Path, run_id: str, task_id: str, index: int, *, keep_spare: bool,
             want: WorktreeOrigin, scoped: bool = True, sparse: bool = False) -> dict[str, float]:
    """Time each step of one task in worktree mode (`scoped`: its write scopes named, as the engine does)."""
    times: dict[str, float] = {}
    calls = GIT_CALLS[0]
    started = time.perf_counter()
    dirs = len(list(repo.glob("pkg*")))
    reach = [f"feature/t{index}", f"pkg{index % dirs:03d}"] if scoped else None
    tree = ensure_task_worktree(repo, run_id, task_id, reach=reach, sparse=sparse,
                                new_dirs=[f"feature/t{index}"] if sparse else ())
    times["ensure"] = time.perf_counter() - started
    if tree.origin != want:
        raise SystemExit(f"bench_worktree: {task_id} got a {tree.origin} worktree, expected {want}")
    if sparse and read_base(tree.path) is None:
        raise SystemExit(f"bench_worktree: {task_id} got a whole worktree, expected a sparse one")
    started = time.perf_counter()
    turn_files(tree.path, index, dirs)
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
    times["git calls"] = GIT_CALLS[0] - calls
    if commit is None or merged.merged_commit is None:
        raise SystemExit(f"bench_worktree: {task_id} did not commit and merge ({commit}, {merged})")
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--files", type=int, nargs="+", default=[20_000])
    parser.add_argument("--full-upto", type=int, default=20_000,
                        help="above this many files the new full checkout is measured once, not every run, "
                             "and the reused worktree with whole-tree scans not at all")
    parser.add_argument("--real", type=Path, help="a real source tree to measure too (copied, committed)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="agentbox-bench-worktree-"))
    os.environ["HOME"] = str(work)  # no personal git config in the figures
    count_git_calls()
    try:
        for files in args.files:
            measure(work / f"project-{files}", files, args.runs, full_upto=args.full_upto)
            shutil.rmtree(work / f"project-{files}", ignore_errors=True)
        if args.real is not None:
            measure(work / "project-real", 0, args.runs, real=args.real, full_upto=args.full_upto)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def measure(repo: Path, files: int, runs: int, real: Path | None = None, full_upto: int = 20_000) -> None:
    """Make a repository of `files` files and print what a task's worktree costs in it."""
    started = time.perf_counter()
    generated = max(files, 200)
    make_repo(repo, generated, real)
    files = int(subprocess.run(["git", "-C", str(repo), "ls-files"], check=True, capture_output=True,
                               text=True).stdout.count("\n"))
    what = f"{real} ({files:,} files with 200 generated ones)" if real is not None else f"{files:,} files"
    print(f"bench_worktree: a repository of {what} made in {time.perf_counter() - started:.1f} s")
    base = snapshot_base(repo)
    ensure_integration_branch(repo, "reused", base)  # its tasks park their worktree for the next
    ensure_integration_branch(repo, "whole", base)  # the same, no reach named: scans cover the whole tree
    ensure_integration_branch(repo, "fresh", base)  # its tasks get a new worktree each
    ensure_integration_branch(repo, "sparse", base)  # its tasks get a new sparse worktree each, over the base
    started = time.perf_counter()
    ensure_base(repo, common_dir(repo), base.commit)
    base_s = time.perf_counter() - started
    one_task(repo, "reused", "warmup", 10_000, keep_spare=True, want=WorktreeOrigin.NEW)
    big = files > full_upto  # the slow ways once or not at all
    if not big:
        one_task(repo, "whole", "warmup", 10_001, keep_spare=True, want=WorktreeOrigin.NEW, scoped=False)
    shared: list[float] = []
    spare: dict[str, list[float]] = {step: [] for step in (*STEPS, "git calls")}
    whole: dict[str, list[float]] = {step: [] for step in (*STEPS, "git calls")}
    new: dict[str, list[float]] = {step: [] for step in (*STEPS, "git calls")}
    sparse: dict[str, list[float]] = {step: [] for step in (*STEPS, "git calls")}
    views: dict[str, list[float]] = {"whole": [], "sparse": []}
    for run in range(runs):
        started = time.perf_counter()
        turn_files(repo, 20_000 + run, generated // 200)
        shared.append(time.perf_counter() - started)
        subprocess.run(["git", "-C", str(repo), "checkout", "-q", "--", "."], check=True)
        for step, value in one_task(repo, "reused", f"t{run}", 3 * run, keep_spare=True,
                                    want=WorktreeOrigin.SPARE).items():
            spare[step].append(value)
        for step, value in one_task(repo, "whole", f"t{run}", 3 * run + 1, keep_spare=True,
                                    want=WorktreeOrigin.SPARE, scoped=False).items() if not big else ():
            whole[step].append(value)
        for step, value in one_task(repo, "fresh", f"t{run}", 3 * run + 2, keep_spare=False,
                                    want=WorktreeOrigin.NEW).items() if run == 0 or not big else ():
            new[step].append(value)
        for step, value in one_task(repo, "sparse", f"t{run}", 3 * run + 2, keep_spare=False,
                                    want=WorktreeOrigin.NEW, sparse=True).items():
            sparse[step].append(value)
        for kind in ("whole", "sparse") if run == 0 or not big else ("sparse",):
            views[kind].append(one_view(repo, base, f"view-{kind}-{run}", sparse=kind == "sparse"))
    remove_spares(repo, "reused")
    remove_spares(repo, "whole")
    base_ms = median_ms(shared)
    print(f"{what}, medians of {runs} interleaved runs")
    print(f"  shared: the turn writes its 3 files in place                 {base_ms:8.1f} ms")
    for label, samples in (("worktree, reused from the previous task", spare),
                           *((("  the same, scans over the whole tree (no reach named)", whole),) if not big else ()),
                           ("worktree, new (a full checkout)", new),
                           ("worktree, new, sparse over the shared base", sparse)):
        totals = _totals(samples)
        total_ms = median_ms(totals)
        added = total_ms - base_ms
        verdict = "✔" if added <= GOAL_MS else "✘"
        print(f"  {label:<58} {total_ms:8.1f} ms   +{added:.0f} ms per task "
              f"(goal ≤ {GOAL_MS:.0f}) {verdict}   ratio {total_ms / base_ms:,.0f}")
        print("      " + ", ".join(f"{step} {median_ms(samples[step]):.1f}" for step in STEPS)
              + f" ms; {sorted(samples['git calls'])[len(totals) // 2]:.0f} git processes"
              + (f" (1 run: above {full_upto:,} files)" if len(totals) < runs else ""))
    print(f"  the shared base (a full checkout, once per commit, for every task and run): {base_s * 1000:.0f} ms")
    whole_view, sparse_view = median_ms(views["whole"]), median_ms(views["sparse"])
    print(f"  a run's read-only view made: whole (before) {whole_view:.0f} ms, over the base {sparse_view:.0f} ms, "
          f"ratio {sparse_view / whole_view:.3f}" + (" (whole: 1 run)" if len(views["whole"]) < runs else ""))
    kind = "real" if real is not None else "generated"
    print(f"RESULT worktree_new kind={kind} files={files} sparse_added_ms={median_ms(_totals(sparse)) - base_ms:.0f} "
          f"full_added_ms={median_ms(_totals(new)) - base_ms:.0f} "
          f"reused_added_ms={median_ms(_totals(spare)) - base_ms:.0f} base_ms={base_s * 1000:.0f} "
          f"sparse_over_full={median_ms(_totals(sparse)) / median_ms(_totals(new)):.4g} "
          f"view_whole_ms={whole_view:.0f} view_sparse_ms={sparse_view:.0f}", flush=True)


def one_view(repo: Path, base: Any, run_id: str, *, sparse: bool) -> float:
    """Seconds to make a new run's read-only view (`sparse`: over the shared base), then take it away (untimed)."""
    ensure_integration_branch(repo, run_id, base)
    started = time.perf_counter()
    view = ensure_view_worktree(repo, run_id, sparse=sparse)
    took = time.perf_counter() - started
    if sparse != (read_base(view.path) is not None):
        raise SystemExit(f"bench_worktree: the view of {run_id} is {'whole' if sparse else 'sparse'}")
    remove_view_worktree(repo, run_id)
    return took


def _totals(samples: dict[str, list[float]]) -> list[float]:
    return [sum(samples[step][i] for step in STEPS) for i in range(len(samples["ensure"]))]


if __name__ == "__main__":
    raise SystemExit(main())
