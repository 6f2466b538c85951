"""P6: resident memory of the TUI + the engine while 8 agents run (the agents excluded), goal ≤ 100 MB.

Everything is real: `agentbox tui` runs as its own process in a pseudo-terminal of
200×60 (the screen it draws is read and thrown away), the engine runs detached as
`agentbox run --resume` would (`runs.detach`), and eight scripted workers under bwrap each
take 30 s on their task, so all eight are in flight at once (max_workers 8). The TUI
follows the run live: watcher, reads, process sampling of the eight agent trees.

Measured with psutil on the two processes only (their children — bwrap and the agents —
are excluded): RSS, and USS (memory no other process shares). Baseline, same run: the
same TUI process on the same project before the run starts (nothing to show yet), and
what a process holds once it has only imported what the TUI imports (each in a fresh
interpreter: Python alone, Textual's app, agentbox's run models, the whole TUI), which is
the floor no drawing can go below.

Before and after in one run: the same measurement with agentbox's code of `--before`
(default `main`, its tree written to a temporary directory and put first on PYTHONPATH,
for the TUI, the engine and the import floors), then with this checkout; `--rounds N`
interleaves N pairs and reports the medians. Before the TUI opens, `agentbox role list` reads
the project's crew.yaml once, as any command on a project in use has (`--cold`: the TUI is
its first reader). The run is started the way `agentbox run` starts one (`runs.create_run`,
which checks the crew and its profiles, then `runs.detach`).

    .venv/bin/python bench/bench_tui_memory.py [--agents 8] [--hold 6] [--before main] [--rounds 1]
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from pathlib import Path
from typing import Any

from _support import result, write_scripted_profile  # bench/ is sys.path[0] when a script runs

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
GOAL_MB = 100.0
_START = ("try:\n    from agentbox.cli import startup\n    startup.install({command!r})\n"
          "except ImportError:\n    pass\n")
"""What `agentbox <command>` does before its imports (the finder of `agentbox.cli.startup`; older code has none)."""
IMPORT_FLOORS = (("python alone", "pass"), ("import textual.app", _START.format(command="tui") + "import textual.app"),
                 ("import agentbox.core.engine.models", _START.format(command="run") + "import agentbox.core.engine.models"),
                 ("import agentbox.tui.app", _START.format(command="tui") + "import agentbox.tui.app"),
                 ("import agentbox.core.engine.engine", _START.format(command="run") + "import agentbox.core.engine.engine"))
"""What is imported, in a fresh interpreter, for the floor lines (as the command's own start does it)."""


def make_project(home: Path, root: Path, agents: int, delay: float) -> None:
    usage = {"input_tokens": 100, "output_tokens": 20}
    plan = {"notes": "bench", "tasks": [
        {"id": f"t{n}", "assignee": f"w{n}", "brief": f"task {n}", "acceptance": [{"id": "a1", "criterion": "done"}],
         "writes": [f"src/t{n}/**"]} for n in range(agents)]}
    write_scripted_profile(home, "bench-lead", {"defaults": {"usage": usage}, "rules": [
        {"id": "plan", "when": {"prompt_contains": "[agentbox:plan"}, "do": {"reply_json": plan}}],
        "fallback": {"reply": "ok"}})
    write_scripted_profile(home, "bench-worker", {"defaults": {"usage": usage}, "rules": [],
                                         "fallback": {"delay_s": delay, "reply_json": {"summary": "done", "evidence": ["x"]}}})
    shutil.copytree(REPO / ".agent-box.example", root / ".agent-box", ignore=shutil.ignore_patterns("runs", "sessions"))
    roles: dict[str, Any] = {"lead": {"profile": "bench-lead", "writes": []}}
    roles.update({f"w{n}": {"profile": "bench-worker", "writes": ["src/**"]} for n in range(agents)})
    crew = {"mode": "hierarchical", "roles": roles, "hierarchical": {"lead": "lead"},
            "limits": {"max_workers": agents, "task_timeout_s": 300, "max_auto_retries": 2}}
    (root / ".agent-box" / "crew.yaml").write_text(json.dumps(crew, indent=1))


def start_tui(root: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], int]:
    """`agentbox tui` in a 200×60 pseudo-terminal; its output is drained and discarded."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 60, 200, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "agentbox", "--project", str(root), "tui"], stdin=slave,
                            stdout=slave, stderr=slave, env={**env, "TERM": "xterm-256color"}, start_new_session=True,
                            cwd=root)  # not this checkout: `-m` would put its agentbox ahead of PYTHONPATH
    os.close(slave)

    def drain() -> None:
        while True:
            try:
                if not os.read(master, 65536):
                    return
            except OSError:
                return

    threading.Thread(target=drain, daemon=True).start()
    return proc, master


def memory(pid: int) -> tuple[float, float]:
    import psutil

    info = psutil.Process(pid).memory_full_info()
    return info.rss / 1e6, info.uss / 1e6


HEAVY_OBJECTS = ("libssl", "_hashlib", "_ssl", "_pydantic_core", "_rust_notify")
"""Shared objects whose mapping in a process tells which heavy modules it imported."""


def mapped(pid: int) -> list[str]:
    """Which of HEAVY_OBJECTS the process `pid` has mapped."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return []
    return [name for name in HEAVY_OBJECTS if name in maps]


def import_floor(statement: str, env: dict[str, str]) -> float:
    """RSS (MB) of a fresh interpreter that has run `statement` (read from /proc: no psutil import)."""
    code = f"{statement}\nimport os\nprint(int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/", env=env)
    return int(out.stdout.strip()) / 1e6


def code_env(code: Path | None) -> dict[str, str]:
    """The environment that runs agentbox from `code` (a checkout of another commit), or from this one."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if code is not None:
        env["PYTHONPATH"] = str(code)  # ahead of the editable install's finder
    return env


def checkout(ref: str, into: Path) -> Path:
    """The tree of commit `ref` written under `into`, compiled as an install leaves it."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def measure(label: str, code: Path | None, agents: int, hold: int, cold: bool = False) -> dict[str, float]:
    """One TUI + engine measurement with agentbox's code from `code` (None: this checkout)."""
    from agentbox.core import runs
    from agentbox.core.paths import ProjectPaths

    env = code_env(code)
    saved = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="agentbox-bench-p6-") as tmp:
        home, root = Path(tmp) / "home", Path(tmp) / "repo"
        env["AGENT_BOX_HOME"] = str(home)
        os.environ.clear()
        os.environ.update(env)  # runs.detach starts the engine with this environment
        make_project(home, root, agents, delay=30.0)
        project = ProjectPaths(root)
        if not cold:  # a project someone has used: its crew.yaml was read once by a command before the TUI opens
            subprocess.run([sys.executable, "-m", "agentbox", "role", "list"], env=env, cwd=root, check=True,
                           capture_output=True)
        tui, master = start_tui(root, env)
        run_id = None
        try:
            time.sleep(4)
            if tui.poll() is not None:
                raise SystemExit(f"the TUI exited ({tui.returncode})")
            idle = []
            for _ in range(3):
                idle.append(memory(tui.pid))
                time.sleep(0.5)
            run_id = runs.create_run(project, "bench P6").id
            engine_pid = runs.detach(project, run_id)
            deadline = time.monotonic() + 60
            while True:
                run = runs.load(project, run_id)
                flying = [j for j in run.jobs.values() if j.started and j.pid and j.kind == "work"]
                if len(flying) == agents:
                    break
                if time.monotonic() > deadline or run.status in ("failed", "cancelled", "done"):
                    raise SystemExit(f"only {len(flying)} agents started (run {run.status}); see the engine.log")
                time.sleep(0.2)
            time.sleep(2)  # the TUI sees them and samples their processes
            tui_samples, engine_samples = [], []
            for _ in range(hold):
                tui_samples.append(memory(tui.pid))
                engine_samples.append(memory(engine_pid))
                time.sleep(1)
            still = len([j for j in runs.load(project, run_id).jobs.values() if j.started])
            heavy = {"TUI": mapped(tui.pid), "engine": mapped(engine_pid)}
        finally:
            if run_id is not None:
                runs.send_command(project, run_id, {"action": "cancel_run", "note": "bench over"})
                stop = time.monotonic() + 15
                while runs.engine_alive(project, run_id) and time.monotonic() < stop:
                    time.sleep(0.2)
            os.write(master, b"q")
            try:
                tui.wait(5)
            except subprocess.TimeoutExpired:
                tui.kill()
            os.close(master)
            os.environ.clear()
            os.environ.update(saved)
    floors = {name: import_floor(statement, env) for name, statement in IMPORT_FLOORS}
    got = {"tui_rss": max(s[0] for s in tui_samples), "tui_uss": max(s[1] for s in tui_samples),
           "eng_rss": max(s[0] for s in engine_samples), "eng_uss": max(s[1] for s in engine_samples),
           "idle_rss": max(s[0] for s in idle), "idle_uss": max(s[1] for s in idle), "still": still,
           "tui_floor": floors["import agentbox.tui.app"], "eng_floor": floors["import agentbox.core.engine.engine"]}
    print(f"{label}: P6 memory with {agents} agents running ({still} still in flight at the last sample), "
          f"max of {hold} samples")
    print(f"  TUI     RSS {got['tui_rss']:6.1f} MB   USS {got['tui_uss']:6.1f} MB   maps {', '.join(heavy['TUI'])}")
    print(f"  engine  RSS {got['eng_rss']:6.1f} MB   USS {got['eng_uss']:6.1f} MB   maps {', '.join(heavy['engine'])}")
    print(f"  baseline: the same TUI before the run  RSS {got['idle_rss']:6.1f} MB   USS {got['idle_uss']:6.1f} MB"
          f"   ratio TUI busy/idle RSS {got['tui_rss'] / got['idle_rss']:.2f}")
    print("  what the imports alone hold (fresh interpreter, RSS): " + ", ".join(
        f"{name} {floor:.1f} MB" for name, floor in floors.items()))
    got["total"] = got["tui_rss"] + got["eng_rss"]
    print(f"  breakdown, RSS: TUI = imports {got['tui_floor']:.1f} + its own {got['tui_rss'] - got['tui_floor']:.1f} MB; "
          f"engine = imports {got['eng_floor']:.1f} + its own {got['eng_rss'] - got['eng_floor']:.1f} MB; "
          f"imports ÷ total {(got['tui_floor'] + got['eng_floor']) / got['total']:.2f}")
    print(f"  {label}: TUI + engine = {got['total']:.1f} MB RSS ({got['tui_uss'] + got['eng_uss']:.1f} MB USS)", flush=True)
    return got


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--hold", type=int, default=6, help="seconds of sampling while every agent runs")
    parser.add_argument("--before", default="main", help="the commit measured as the baseline ('' for none)")
    parser.add_argument("--rounds", type=int, default=1, help="before/after pairs, interleaved")
    parser.add_argument("--cold", action="store_true",
                        help="the TUI is the first reader of the new project's crew.yaml (no `agentbox role list` first)")
    args = parser.parse_args(argv)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "agentbox")], check=True,
                   env={**os.environ, "PYTHONDONTWRITEBYTECODE": ""})
    with tempfile.TemporaryDirectory(prefix="agentbox-bench-p6-code-") as code_tmp:
        before_code = None
        if args.before:
            before_code = checkout(args.before, Path(code_tmp) / "before")
            subprocess.run([sys.executable, "-m", "compileall", "-q", str(before_code / "agentbox")], check=True,
                           env={**os.environ, "PYTHONDONTWRITEBYTECODE": ""})
        befores, afters = [], []
        for _ in range(args.rounds):
            if before_code is not None:
                befores.append(measure(f"before ({args.before})", before_code, args.agents, args.hold, args.cold))
            afters.append(measure("after (this checkout)", None, args.agents, args.hold, args.cold))
    after = sorted(afters, key=lambda got: got["total"])[len(afters) // 2]
    total = after["total"]
    imports = after["tui_floor"] + after["eng_floor"]
    extra: dict[str, float] = {}
    if befores:
        before = sorted(befores, key=lambda got: got["total"])[len(befores) // 2]
        extra = {"before_total_mb": before["total"], "before_tui_mb": before["tui_rss"],
                 "before_engine_mb": before["eng_rss"], "after_over_before": total / before["total"]}
        print(f"  after ÷ before (median of {args.rounds}): total {total / before['total']:.3f} "
              f"({before['total']:.1f} → {total:.1f} MB); TUI {before['tui_rss']:.1f} → {after['tui_rss']:.1f}; "
              f"engine {before['eng_rss']:.1f} → {after['eng_rss']:.1f}; imports "
              f"{before['tui_floor'] + before['eng_floor']:.1f} → {imports:.1f} MB")
    result("memory", total_mb=total, uss_mb=after["tui_uss"] + after["eng_uss"], tui_mb=after["tui_rss"],
           engine_mb=after["eng_rss"], imports_mb=imports, imports_share=imports / total, idle_tui_mb=after["idle_rss"],
           **extra)
    print(f"  P6 TUI + engine = {total:.0f} MB RSS ({after['tui_uss'] + after['eng_uss']:.0f} MB USS) "
          f"(goal ≤ {GOAL_MB:.0f} MB) {'✔' if total <= GOAL_MB else '✘'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
