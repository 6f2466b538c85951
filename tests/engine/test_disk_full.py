"""A full disk, for real: the project on a 12 MB tmpfs that a worker fills up.

The whole scenario runs in a private mount namespace (`unshare -m`, root only) so the
tmpfs is nobody else's business: the engine (`agentbox run`, a real process) must stop
with a typed error — no traceback — leaving the run paused with its reason; after the
file is deleted, `run --resume` finishes the run without running again a turn the state
recorded as done.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engine.support import setup_crew, task, work_rule

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]

DRIVER = r'''
import json, os, subprocess, sys, shutil
from pathlib import Path

source, mnt = Path(sys.argv[1]), Path(sys.argv[2])
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12m", "tmpfs", str(mnt)], check=True)
root = mnt / "repo"
shutil.copytree(source, root, symlinks=True)

def agentbox(*args):
    proc = subprocess.run([sys.executable, "-m", "agentbox", "--project", str(root), *args], cwd=root,
                          capture_output=True, text=True, timeout=150, stdin=subprocess.DEVNULL)
    return {"rc": proc.returncode, "out": proc.stdout, "err": proc.stderr}

first = agentbox("run", "fill the disk")  # the person's live view, as a foreground run shows it
run_id = sorted(p.name for p in (root / ".agent-box" / "runs").iterdir())[0]
run_dir = root / ".agent-box" / "runs" / run_id
from agentbox.core.engine.run_store import RunStore  # run.json with its journal replayed
from agentbox.core.paths import ProjectPaths
state = lambda: RunStore(ProjectPaths(root)).load(run_id).model_dump(mode="json")
paused = state()
fill = root / "src" / "t2" / "fill"
filled = fill.stat().st_size if fill.exists() else 0
full = agentbox("run", "--resume", run_id)  # the disk is still full
fill.unlink(missing_ok=True)
second = agentbox("run", "--resume", run_id)
final = state()
events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]
prompts = []
for turns in (root / ".agent-box" / "sessions").glob("*/*.turns.jsonl"):
    prompts += [json.loads(line)["prompt"] for line in turns.read_text().splitlines() if line.strip()]
print(json.dumps({"first": first, "full": full, "second": second, "paused": paused, "final": final, "events": events,
                  "prompts": prompts, "filled": filled}))
'''


def test_a_full_disk_pauses_the_run_and_resume_finishes_it(project: Path, tmp_path: Path) -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a real size-limited filesystem needs root (mount in a private namespace)")
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"unshare -m is not allowed here: {probe.stderr.decode()[:200]}")
    # the disk fills while the turn still runs: what the engine writes during a turn (its pid, for
    # the dashboard) meets the full disk too
    filling = work_rule(task_id="t2", times=1, rule_id="fill",
                        run="head -c 64M /dev/zero > src/t2/fill; sleep 1; true")
    setup_crew(project, worker=[filling], tasks=[task("t1", "builder", writes=["src/t1/**"]),
                                                 task("t2", "builder", writes=["src/t2/**"], deps=["t1"])])
    for scope in ("src/t1", "src/t2"):
        (project / scope).mkdir(parents=True, exist_ok=True)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    done = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, str(driver), str(project),
                           str(mnt)], capture_output=True, text=True, timeout=400,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    first, full, second = report["first"], report["full"], report["second"]

    assert report["filled"] > 4 << 20, "the worker did fill the disk"
    for stopped in (first, full):  # one clear error, no traceback (of asyncio's callbacks neither)
        shown = stopped["out"] + stopped["err"]
        assert "Traceback" not in shown and "Exception in callback" not in shown, shown
        assert stopped["rc"] == 1 and "full" in stopped["err"] and "--resume" in stopped["err"], stopped
        assert stopped["err"].count("error:") == 1, stopped["err"]
    assert report["paused"]["status"] == "paused", report["paused"]["status_reason"]
    assert "disk full" in report["paused"]["status_reason"]

    assert "Traceback" not in second["out"] + second["err"], second["err"]
    assert second["rc"] == 0, second
    final = report["final"]
    assert final["status"] == "done", final["status_reason"]
    assert {t["state"] for t in final["tasks"].values()} == {"approved"}
    assert any(e["type"] == "run.status" and "disk is full" in e["what"] for e in report["events"])
    seqs = [e["seq"] for e in report["events"]]
    assert seqs == list(range(1, len(seqs) + 1)), "the log has no gap or repeat"
    prompts = report["prompts"]
    assert sum("[agentbox:plan" in p for p in prompts) == 1, "the plan turn, recorded as done, ran once"
    assert sum("[agentbox:work task=t1" in p for p in prompts) == 1, "t1's work, recorded as done, ran once"
