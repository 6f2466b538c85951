"""What the submission gate costs per submission, the check's own run excluded.

Two crews run the same scripted work on the same repository, one after the other: the
baseline has no gate; the measured one has `gates: {submission: [noop]}` with a check that
does nothing (`true`). Per task, the time from its submission to its review's dispatch is
read from the decision log; the gate's cost is the measured interval minus the baseline's
and minus the check's own duration (its sandbox start and exit, what any check pays). On the
demo-sized repository and on one of 20,000 files; figures are medians. Goal: at most 150 ms.

    .venv/bin/python bench/bench_gates.py [--tasks 6] [--files 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._support import write_scripted_profile  # noqa: E402

GOAL_MS = 150.0


def make_repo(root: Path, files: int) -> None:
    """A git repository of `files` small files (directories of 200) plus the project's .agent-box."""
    for index in range(files):
        directory = root / f"pkg{index // 200:03d}"
        directory.mkdir(exist_ok=True)
        (directory / f"m{index}.py").write_text(f"VALUE = {index}\n")
    (root / ".gitignore").write_text(".agent-box/runs/\n.agent-box/sessions/\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x.invalid", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@x.invalid"}
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True, env=env)
    subprocess.run(["git", "-C", str(root), "commit", "-q", "-m", "start"], check=True, env=env)


def crew(tasks: int, gated: bool) -> dict[str, object]:
    crew: dict[str, object] = {
        "mode": "hierarchical",
        "roles": {"lead": {"profile": "b-lead", "writes": []},
                  **{f"w{i}": {"profile": "b-worker", "writes": [f"src/t{i}/**"]} for i in range(tasks)},
                  "reviewer": {"profile": "b-reviewer", "writes": []}},
        "limits": {"max_workers": 1, "task_timeout_s": 60},
        "hierarchical": {"lead": "lead", "reviewer": "reviewer"},
        "deliver": "manual",
    }
    if gated:
        crew["checks"] = {"noop": {"run": "true"}}
        crew["gates"] = {"submission": ["noop"]}
    return crew


def profiles(home: Path, tasks: int) -> None:
    plan = [{"id": f"t{i}", "assignee": f"w{i}", "brief": "b", "acceptance": [{"id": "a1", "criterion": "c"}],
             "writes": [f"src/t{i}/**"], "depends_on": []} for i in range(tasks)]
    write_scripted_profile(home, "b-lead", {"rules": [
        {"id": "plan", "when": {"prompt_contains": "[agentbox:plan"}, "do": {"reply_json": {"tasks": plan}}},
        {"id": "synth", "when": {"prompt_contains": "[agentbox:synthesis"}, "do": {"reply": "done"}}]})
    write_scripted_profile(home, "b-worker", {"rules": [
        {"id": "work", "when": {"prompt_regex": r"\[agentbox:work task=(?P<task>\w+)"},
         "do": {"write": {"src/{task}/out.txt": "x\n"}, "reply_json": {"summary": "did", "evidence": ["e"]}}}]})
    write_scripted_profile(home, "b-reviewer", {"rules": [
        {"id": "ok", "when": {"prompt_contains": "[agentbox:review"}, "do": {"reply_json": {
            "verdict": "approve", "blocking_issues": [], "confidence": 0.9,
            "checklist": [{"item": "c", "acceptance_id": "a1", "pass": True, "evidence": "e"}]}}}]})


def intervals(root: Path, gated: bool, tasks: int) -> list[float]:
    """Per task, seconds from its submission to its review's dispatch (minus the check's own duration)."""
    from agentbox.core import runs
    from agentbox.core.engine.engine import Engine
    from agentbox.core.paths import ProjectPaths

    (root / ".agent-box" / "crew.yaml").write_text(json.dumps(crew(tasks, gated)))
    project = ProjectPaths(root)
    run = runs.create_run(project, "bench the gate")
    final = asyncio.run(Engine.open(project, run.id).execute())
    assert final.status == "done", final.status_reason
    log = [json.loads(line) for line in (root / ".agent-box" / "runs" / run.id / "events.jsonl").read_text().splitlines()]
    found = []
    for index in range(tasks):
        task = f"t{index}"
        submitted = next(e["at"] for e in log if e["type"] == "submission" and e["task"] == task)
        reviewed = next(e["at"] for e in log if e["type"] == "dispatch" and e["task"] == task
                        and e["what"].startswith("review"))
        own = sum(e.get("duration_s") or 0 for e in log if e["type"] == "check" and e["task"] == task)
        found.append(reviewed - submitted - own)
    return found


def measure(files: int, tasks: int) -> tuple[float, float]:
    """Median ms from submission to review without a gate, and with one (its check excluded)."""
    with tempfile.TemporaryDirectory(prefix="bench-gates-") as tmp:
        home = Path(tmp) / "home"
        os.environ["AGENT_BOX_HOME"] = str(home)
        profiles(home, tasks)
        root = Path(tmp) / "repo"
        (root / ".agent-box").mkdir(parents=True)
        make_repo(root, files)
        base = intervals(root, False, tasks)
        gated = intervals(root, True, tasks)
    return statistics.median(base) * 1000, statistics.median(gated) * 1000


def git_spawn_ms(root: Path, times: int = 15) -> float:
    """Median ms of one `git rev-parse HEAD` here now: the unit the gate's git reads cost (the machine's load
    shows in it)."""
    import time

    found = []
    for _ in range(times):
        start = time.perf_counter()
        subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], check=True, capture_output=True)
        found.append(time.perf_counter() - start)
    return statistics.median(found) * 1000


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=6)
    parser.add_argument("--files", type=int, default=20000)
    args, _ = parser.parse_known_args(argv)
    print("bench_gates: submission → review dispatch, per task (median); the check's own run excluded")
    worst = 0.0
    spawn = git_spawn_ms(Path(__file__).resolve().parent.parent)
    print(f"  one git spawn here now: {spawn:.1f} ms (the gate reads the task's head with one)")
    for label, files in (("demo-sized (3 files)", 3), (f"{args.files:,} files", args.files)):
        base, gated = measure(files, args.tasks)
        cost = gated - base
        worst = max(worst, cost)
        print(f"  {label:<22} no gate {base:7.1f} ms   gate {gated:7.1f} ms   gate's cost {cost:6.1f} ms"
              f" = {cost / spawn:4.1f} git spawns")
    print(f"  goal: gate's cost <= {GOAL_MS:.0f} ms  {'ok' if worst <= GOAL_MS else 'MISSED'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
