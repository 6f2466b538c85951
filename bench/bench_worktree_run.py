"""A task's worktree overhead in a real run: the engine, scripted agents under bwrap, real git.

Generated repositories shaped like pallets/click (~170 files) and sqlalchemy (~930 files)
by default (`--files`). The same hierarchical run twice per size, interleaved: `shared`
(the baseline: writers work in the project's tree) and `worktree` (each task its own
branch and worktree, the turn committed, approved work merged). One worker, so tasks run
one after the other; each work turn waits `--delay` s and writes 3 files (2 new, 1
changed). The figure is the wall time a task adds in worktree mode over shared mode,
÷ the agent's own work turn; the goal is ≤ +0.3 s per task. `--count-git` first runs the
pair once more with every git process counted (a wrapper first on PATH, so that pair is not
timed): the git processes a task adds, a figure the machine's load does not move.

    .venv/bin/python bench/bench_worktree_run.py [--files 170 930] [--tasks 6] [--runs 2] [--count-git]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _support import result, write_scripted_profile  # bench/ is sys.path[0] when a script runs

REPO = Path(__file__).resolve().parent.parent
GOAL_S = 0.3


def make_repo(root: Path, files: int) -> None:
    """`files` source-like files (a few KB each) in directories of 25, committed."""
    root.mkdir(parents=True)
    for index in range(files):
        directory = root / "lib" / f"pkg{index // 25:03d}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"mod{index:05d}.py").write_text(f"def f{index}(x):\n    return x + {index}\n" * 60)
    (root / ".gitignore").write_text("__pycache__/\n")
    identity = ["-c", "user.name=bench", "-c", "user.email=bench@example.com"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(root), *identity, "commit", "-q", "-m", "start"], check=True)


def make_crew(home: Path, root: Path, tasks: int, delay: float, workspace: str) -> None:
    usage = {"input_tokens": 100, "output_tokens": 20}
    plan = {"notes": "bench", "tasks": [
        {"id": f"t{n:03d}", "assignee": "w", "brief": f"task {n}", "acceptance": [{"id": "a1", "criterion": "done"}],
         "writes": [f"feature/t{n:03d}/**", "lib/pkg000/**"], "depends_on": []} for n in range(tasks)]}
    write_scripted_profile(home, f"lead-{workspace}", {"defaults": {"usage": usage}, "rules": [
        {"id": "plan", "when": {"prompt_contains": "[agentbox:plan"}, "do": {"reply_json": plan}},
        {"id": "synthesis", "when": {"prompt_contains": "[agentbox:synthesis"}, "do": {"reply": "done"}}]})
    write_scripted_profile(home, f"worker-{workspace}", {"defaults": {"usage": usage}, "rules": [
        {"id": "work", "when": {"prompt_regex": r"\[agentbox:work task=t(?P<n>\d+) "},
         "do": {"delay_s": delay, "write": {"feature/t{n}/a.py": "A = {n}\n", "feature/t{n}/b.py": "B = {n}\n",
                                            "lib/pkg000/mod00{n}.py": "C = {n}\n"},
                "reply_json": {"summary": "did t{n}", "evidence": ["bench"]}}}]})
    write_scripted_profile(home, f"reviewer-{workspace}", {"defaults": {"usage": usage}, "rules": [
        {"id": "approve", "when": {"prompt_regex": r"\[agentbox:review task=(?P<task>\S+) "},
         "do": {"reply_json": {"verdict": "approve", "blocking_issues": [], "confidence": 1.0, "checklist": [
             {"item": "done", "acceptance_id": "a1", "pass": True, "evidence": "checked {task}"}]}}}]})
    shutil.copytree(REPO / ".agent-box.example", root / ".agent-box", ignore=shutil.ignore_patterns("runs", "sessions"))
    crew = {"mode": "hierarchical", "workspace": workspace, "deliver": "manual",
            "roles": {"lead": {"profile": f"lead-{workspace}", "writes": []},
                      "reviewer": {"profile": f"reviewer-{workspace}", "writes": []},
                      "w": {"profile": f"worker-{workspace}", "writes": ["feature/**", "lib/**"]}},
            "limits": {"max_workers": 1, "task_timeout_s": 120, "max_auto_retries": 2},
            "hierarchical": {"lead": "lead", "reviewer": "reviewer"}}
    (root / ".agent-box" / "crew.yaml").write_text(json.dumps(crew, indent=1))
    info = root / ".git" / "info" / "exclude"
    info.write_text(info.read_text() + ".agent-box/runs/\n.agent-box/sessions/\n")


async def run_once(root: Path) -> tuple[Any, float]:
    from agentbox.core import runs
    from agentbox.core.paths import ProjectPaths

    project = ProjectPaths(root)
    run = runs.create_run(project, "benchmark worktrees")
    started = time.perf_counter()
    final = await asyncio.wait_for(runs.execute(project, run.id), 600)
    return final, time.perf_counter() - started


def work_turns(root: Path, run_id: str) -> list[float]:
    from agentbox.core.engine.run_store import RunStore
    from agentbox.core.paths import ProjectPaths

    log = RunStore(ProjectPaths(root)).events(run_id)[0]
    return [float(e["duration_s"]) for e in log if e["type"] == "turn" and e["what"].startswith("work")]


GIT_WRAPPER = """#!/bin/sh
[ -n "$AGENTBOX_BENCH_GIT_LOG" ] && echo "$*" >> "$AGENTBOX_BENCH_GIT_LOG"
exec {git} "$@"
"""


def counted_git(scratch: Path) -> Path:
    """A directory holding a `git` that notes each call in $AGENTBOX_BENCH_GIT_LOG, then runs the real one."""
    real = shutil.which("git")
    assert real is not None, "git is not on PATH"
    top = scratch / "counting-bin"
    top.mkdir(exist_ok=True)
    (top / "git").write_text(GIT_WRAPPER.format(git=real))
    (top / "git").chmod(0o755)
    return top


def subcommand(words: list[str]) -> str:
    """The git subcommand of a call's arguments (after `-C DIR`, `-c KEY=VALUE` and the like)."""
    at = 0
    while at < len(words) and words[at].startswith("-"):
        at += 2 if words[at] in ("-C", "-c", "--work-tree", "--git-dir") else 1
    return words[at] if at < len(words) else "?"


def git_per_task(scratch: Path, files: int, tasks: int) -> tuple[float, dict[str, int]]:
    """The git processes a worktree run starts per task over a shared run, and by subcommand per task."""
    wrapper = counted_git(scratch)
    counts: dict[str, list[str]] = {}
    old_path = os.environ["PATH"]
    os.environ["PATH"] = f"{wrapper}{os.pathsep}{old_path}"
    try:
        for workspace in ("shared", "worktree"):
            root = scratch / f"repo-{files}-{workspace}-counted"
            make_repo(root, files)
            shutil.copytree(scratch / f"crew-{workspace}", root / ".agent-box", dirs_exist_ok=True)
            info = root / ".git" / "info" / "exclude"
            info.write_text(info.read_text() + ".agent-box/runs/\n.agent-box/sessions/\n")
            log = scratch / f"git-{files}-{workspace}.log"
            os.environ["AGENTBOX_BENCH_GIT_LOG"] = str(log)
            asyncio.run(run_once(root))
            os.environ.pop("AGENTBOX_BENCH_GIT_LOG")
            counts[workspace] = log.read_text().splitlines() if log.exists() else []
    finally:
        os.environ["PATH"] = old_path
        os.environ.pop("AGENTBOX_BENCH_GIT_LOG", None)
    by: dict[str, int] = {}
    for workspace, sign in (("worktree", 1), ("shared", -1)):
        for line in counts[workspace]:
            name = subcommand(line.split())
            by[name] = by.get(name, 0) + sign
    return (len(counts["worktree"]) - len(counts["shared"])) / tasks, dict(sorted(by.items(), key=lambda kv: -kv[1]))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, nargs="+", default=[170, 930])
    parser.add_argument("--tasks", type=int, default=6)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--delay", type=float, default=0.5)
    parser.add_argument("--count-git", action="store_true", help="count the git processes a task adds (untimed)")
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="agentbox-bench-wtrun-"))
    try:
        home = scratch / "home"
        home.mkdir()
        os.environ["AGENT_BOX_HOME"] = str(home)
        os.environ["HOME"] = str(scratch)  # no personal git config in the figures
        for files in args.files:
            walls: dict[str, list[float]] = {"shared": [], "worktree": []}
            turns: list[float] = []
            for attempt in range(args.runs):
                for workspace in ("shared", "worktree") if attempt % 2 == 0 else ("worktree", "shared"):
                    root = scratch / f"repo-{files}-{workspace}-{attempt}"
                    make_repo(root, files)
                    if not (home / "profiles" / f"lead-{workspace}").exists():
                        make_crew(home, root, args.tasks, args.delay, workspace)
                    else:
                        shutil.copytree(scratch / f"crew-{workspace}", root / ".agent-box", dirs_exist_ok=True)
                        info = root / ".git" / "info" / "exclude"
                        info.write_text(info.read_text() + ".agent-box/runs/\n.agent-box/sessions/\n")
                    if not (scratch / f"crew-{workspace}").exists():
                        shutil.copytree(root / ".agent-box", scratch / f"crew-{workspace}")
                    final, wall = asyncio.run(run_once(root))
                    if final.status != "done" or any(t.state != "approved" for t in final.tasks.values()):
                        print(f"the {workspace} run did not complete: {final.status} ({final.status_reason})",
                              file=sys.stderr)
                        return 1
                    walls[workspace].append(wall)
                    turns += work_turns(root, final.id)
            per_task = None
            if args.count_git:
                per_task, by = git_per_task(scratch, files, args.tasks)
                print(f"{files} files: a worktree run starts {per_task:.1f} git processes per task more than a shared "
                      "one: " + ", ".join(f"{name} {count / args.tasks:.1f}" for name, count in by.items() if count))
            shared, worktree = statistics.median(walls["shared"]), statistics.median(walls["worktree"])
            turn = statistics.median(turns)
            added = (worktree - shared) / args.tasks
            verdict = "✔" if added <= GOAL_S else "✘"
            print(f"{files} files, {args.tasks} tasks one after the other, medians of {args.runs} runs:")
            print(f"  shared run {shared:6.2f} s, worktree run {worktree:6.2f} s, work turn {turn:.3f} s")
            print(f"  worktree adds {added:+.3f} s per task (goal ≤ +{GOAL_S:.1f}) {verdict}, "
                  f"÷ the work turn {added / turn:.2f}")
            extra = {"git_per_task": round(per_task, 1)} if per_task is not None else {}
            result("worktree_run", files=files, added_s=added, turn_s=turn, ratio=worktree / shared, **extra)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
