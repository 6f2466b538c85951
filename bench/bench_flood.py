"""A flood of files in one worktree: what 200,000 changed files cost the engine and the TUI's reads.

One worktree run per size, in-process engine, one scripted worker whose turn writes
`--files` new files (a shell loop inside the sandbox that starts one `mkdir` per 1,000 files, so the
flood costs file writes rather than 200,000 process starts); the lead plans one task, a reviewer
approves it. Baseline, same script: the same run whose turn writes 10 files. Measured: the
engine process's peak RSS during the run (sampled), run.json's size, and in a fresh
interpreter what the TUI's reads of that run hold: the run loaded, the task's first diff page
read and highlighted (`agentbox.tui.loaders.task_diff`), then its last page. Figures are
ratios flood ÷ baseline; bounded means they stay near 1 however big the flood.

    .venv/bin/python bench/bench_flood.py [--files 200000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _support import result, write_scripted_profile  # bench/ is sys.path[0] when a script runs

REPO = Path(__file__).resolve().parent.parent
READER = """
import os, sys, time
from pathlib import Path
from agentbox.core import runs
from agentbox.core.paths import ProjectPaths
from agentbox.tui import loaders
project = ProjectPaths(Path(sys.argv[1]))
run = runs.load(project, sys.argv[2])
started = time.perf_counter()
first = loaders.task_diff(project, run, "t1", 0)
pages = (len(run.tasks["t1"].changed_files) + run.tasks["t1"].changed_more + 199) // 200
last = loaders.task_diff(project, run, "t1", max(0, pages - 1))
took = time.perf_counter() - started
rss = int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE') / 1e6
print(rss, took, len(first.files), len(last.files), first.more_pages, last.more_pages)
"""


def make_project(home: Path, root: Path, files: int) -> None:
    root.mkdir(parents=True)
    (root / "README.md").write_text("# flood\n")
    (root / ".gitignore").write_text(".agent-box/runs/\n.agent-box/sessions/\n")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["-c", "user.name=b", "-c", "user.email=b@x",
                                                                 "commit", "-q", "-m", "start"]):
        subprocess.run(["git", "-C", str(root), *args], check=True)
    usage = {"input_tokens": 10, "output_tokens": 2}
    plan = {"notes": "flood", "tasks": [{"id": "t1", "assignee": "w", "brief": "flood",
                                         "acceptance": [{"id": "a1", "criterion": "done"}], "writes": ["gen/**"]}]}
    tag = f"{files}"
    write_scripted_profile(home, f"lead-{tag}", {"defaults": {"usage": usage}, "rules": [
        {"id": "plan", "when": {"prompt_contains": "[agentbox:plan"}, "do": {"reply_json": plan}}],
        "fallback": {"reply": "done"}})
    loop = (f"mkdir -p gen && cd gen && i=0; while [ $i -lt {files} ]; do d=d$((i / 1000)); "
            "[ $((i % 1000)) -eq 0 ] && mkdir -p $d; echo $i > $d/f$i.txt; i=$((i+1)); done")
    write_scripted_profile(home, f"worker-{tag}", {"defaults": {"usage": usage}, "rules": [],
                                                   "fallback": {"run": loop, "reply_json": {"summary": "flood",
                                                                                             "evidence": ["x"]}}})
    write_scripted_profile(home, f"reviewer-{tag}", {"defaults": {"usage": usage}, "rules": [], "fallback": {
        "reply_json": {"verdict": "approve", "blocking_issues": [], "confidence": 1.0, "checklist": [
            {"item": "done", "acceptance_id": "a1", "pass": True, "evidence": "ok"}]}}})
    shutil.copytree(REPO / ".agent-box.example", root / ".agent-box", ignore=shutil.ignore_patterns("runs", "sessions"))
    crew = {"mode": "hierarchical", "workspace": "worktree", "deliver": "manual",
            "roles": {"lead": {"profile": f"lead-{tag}", "writes": []}, "w": {"profile": f"worker-{tag}",
                                                                               "writes": ["gen/**"]},
                      "reviewer": {"profile": f"reviewer-{tag}", "writes": []}},
            "hierarchical": {"lead": "lead", "reviewer": "reviewer"},
            "limits": {"max_workers": 1, "task_timeout_s": 1800, "max_auto_retries": 0}}
    (root / ".agent-box" / "crew.yaml").write_text(json.dumps(crew, indent=1))


def one_run(home: Path, root: Path, files: int) -> dict[str, Any]:
    import psutil

    from agentbox.core import runs
    from agentbox.core.paths import ProjectPaths

    make_project(home, root, files)
    project = ProjectPaths(root)
    run = runs.create_run(project, "flood")
    me, peak, done = psutil.Process(), [0.0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], me.memory_info().rss / 1e6)
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    before = me.memory_info().rss / 1e6
    sampler.start()
    started = time.perf_counter()
    final = asyncio.run(asyncio.wait_for(runs.execute(project, run.id), 3600))
    wall = time.perf_counter() - started
    done.set()
    sampler.join()
    if final.status != "done":
        raise SystemExit(f"the flood run of {files} files ended {final.status}: {final.status_reason}")
    state = (root / ".agent-box" / "runs" / run.id / "run.json").stat().st_size / 1e6
    out = subprocess.run([sys.executable, "-c", READER, str(root), run.id], capture_output=True, text=True, cwd=REPO)
    if out.returncode != 0:
        raise SystemExit(f"reading the run failed: {out.stderr[-2000:]}")
    rss, took, first, last, first_more, last_more = out.stdout.split()
    return {"wall": wall, "engine_peak": peak[0], "engine_grew": peak[0] - before, "state_mb": state,
            "reader_rss": float(rss), "pages_s": float(took), "first": int(first), "last": int(last),
            "paged": first_more == "True" and last_more == "False"}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=200_000)
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="agentbox-bench-flood-"))
    try:
        home = scratch / "home"
        home.mkdir()
        os.environ["AGENT_BOX_HOME"] = str(home)
        os.environ["HOME"] = str(scratch)
        base = one_run(home, scratch / "small", 10)
        flood = one_run(home, scratch / "flood", args.files)
        print(f"a flood of {args.files:,} files in one worktree ÷ a turn of 10 files, same script:")
        print(f"  run wall time          {base['wall']:7.1f} s → {flood['wall']:7.1f} s")
        print(f"  engine peak RSS        {base['engine_peak']:7.1f} MB → {flood['engine_peak']:7.1f} MB   "
              f"ratio {flood['engine_peak'] / base['engine_peak']:.2f}")
        print(f"  run.json               {base['state_mb']:7.3f} MB → {flood['state_mb']:7.3f} MB")
        print(f"  TUI's reads (run + first and last diff page), RSS {base['reader_rss']:.1f} MB → "
              f"{flood['reader_rss']:.1f} MB   ratio {flood['reader_rss'] / base['reader_rss']:.2f}; "
              f"pages read in {flood['pages_s']:.2f} s, {flood['first']} and {flood['last']} files, "
              f"paged {'✔' if flood['paged'] else '✘'}")
        result("flood", files=args.files, engine_ratio=flood["engine_peak"] / base["engine_peak"],
               reader_ratio=flood["reader_rss"] / base["reader_rss"], wall_s=flood["wall"], base_wall_s=base["wall"],
               engine_mb=flood["engine_peak"], paged=int(bool(flood["paged"])))
        return 0 if flood["paged"] else 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
