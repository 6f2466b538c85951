"""P1 and P2: what agentbox adds around one agent turn, and what the CLI costs to start.

P1  the library's `invoke()` (in-process, one event loop) on a no-op scripted agent,
    divided by the same agent run by hand under the same bwrap argv (taken from
    `agentbox.core.agents.invoke.prepare`) with `subprocess.run` -- goal <= 1.3. Also the whole
    `agentbox invoke` CLI call divided by the same by-hand run -- goal <= 2.0, with where
    its imports go (self time by top-level package, from `-X importtime`).
P2  `agentbox --version` divided by `python -c pass` -- goal <= 3; and non-TUI commands
    import no Textual (checked with `-X importtime`; a failure exits non-zero).

agentbox's bytecode is compiled first, as an install leaves it (PYTHONDONTWRITEBYTECODE
would otherwise make every run compile the package from source).

Medians over --runs runs, the variants interleaved so drift hits them alike. Everything
happens in a temporary AGENT_BOX_HOME and project; the user's real home is not touched.

    .venv/bin/python bench/bench_invoke.py [--runs N]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import compileall
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _support import write_scripted_profile  # bench/ is sys.path[0] when a script runs

NOOP_SCENARIO = {"rules": [], "fallback": {"reply": "ok"}}
P1_GOAL = 1.3
P1_CLI_GOAL = 2.0
P2_GOAL = 3.0
NON_TUI_COMMANDS = (["--version"], ["invoke", "profile:noop", "hi"], ["sessions"], ["profile", "list"],
                    ["doctor", "--json"])


def agentbox_command() -> list[str]:
    """The console script next to this interpreter (what users run), else `python -m agentbox`."""
    script = Path(sys.executable).parent / "agentbox"
    return [str(script)] if script.exists() else [sys.executable, "-m", "agentbox"]


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def setup(workdir: Path) -> Path:
    """A temp AGENT_BOX_HOME with the `noop` profile, and a project to run in."""
    home = workdir / "agent-box-home"
    write_scripted_profile(home, "noop", NOOP_SCENARIO)
    os.environ["AGENT_BOX_HOME"] = str(home)
    project = workdir / "project"
    project.mkdir()
    return project


def bench_p1(project: Path, runs: int) -> dict[str, float]:
    from agentbox.core.agents import resolve as services
    from agentbox.core.agents.invoke import _prepare_session, invoke, prepare
    from agentbox.core.sandbox import bwrap as sandbox

    agent = services.profile_agent("noop", project, None)
    cli = [*agentbox_command(), "invoke", "profile:noop", "hi"]
    loop = asyncio.new_event_loop()

    def library() -> None:
        result = loop.run_until_complete(invoke(agent, "hi"))
        assert result.ok, result

    def by_hand() -> None:
        # the same bwrap argv, handed over the same way (memory fds, seccomp filter, prompt on stdin)
        with sandbox.launch(prepared.argv) as launched:
            proc = subprocess.run(launched.argv, env=prepared.env, cwd=project, input=prepared.stdin or b"",
                                  capture_output=True, check=False, pass_fds=launched.pass_fds)
        assert proc.returncode == 0 and b'"result": "ok"' in proc.stdout, proc.stderr

    def whole_cli() -> None:
        proc = subprocess.run(cli, cwd=project, stdin=subprocess.DEVNULL, capture_output=True, check=False)
        assert proc.returncode == 0, proc.stderr

    samples: dict[str, list[float]] = {"by_hand": [], "library": [], "cli": []}
    try:
        for index in range(runs + 1):  # the first round warms caches and is dropped
            # a fresh session per run: the agent refuses to create the same session twice
            prepared = prepare(agent, "hi", _prepare_session(agent, None))
            round_samples = {"by_hand": timed(by_hand), "library": timed(library), "cli": timed(whole_cli)}
            if index:
                for key, value in round_samples.items():
                    samples[key].append(value)
    finally:
        loop.close()
    return {key: median_ms(values) for key, values in samples.items()}


def bench_p2(runs: int) -> dict[str, float]:
    version = [*agentbox_command(), "--version"]
    bare = [sys.executable, "-c", "pass"]
    samples: dict[str, list[float]] = {"python": [], "version": []}
    for index in range(runs + 1):
        round_samples = {"python": timed(lambda: subprocess.run(bare, check=True)),
                         "version": timed(lambda: subprocess.run(version, check=True, capture_output=True))}
        if index:
            for key, value in round_samples.items():
                samples[key].append(value)
    return {key: median_ms(values) for key, values in samples.items()}


def import_costs(project: Path, runs: int = 5) -> tuple[float, list[tuple[str, float]]]:
    """`agentbox invoke`'s import self time (ms, median per module over `runs`): the total and by top-level package."""
    per_module: dict[str, list[int]] = collections.defaultdict(list)
    for _ in range(runs):
        proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "agentbox", "invoke", "profile:noop", "hi"],
                              cwd=project, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
        for line in proc.stderr.splitlines():
            if line.startswith("import time:") and "|" in line and not line.rstrip().endswith("package"):
                self_us, _, name = (part.strip() for part in line.removeprefix("import time:").split("|"))
                per_module[name].append(int(self_us))
    by_package: dict[str, float] = collections.Counter()
    for name, samples in per_module.items():
        top = ".".join(name.split(".")[:3]) if name.startswith("agentbox.") else name.split(".")[0]
        by_package[top] += statistics.median(samples) / 1000
    return sum(by_package.values()), sorted(by_package.items(), key=lambda item: -item[1])


def textual_imports(project: Path) -> dict[str, list[str]]:
    """For each non-TUI command, the textual/agentbox.tui modules it imported (should be none)."""
    found = {}
    for command in NON_TUI_COMMANDS:
        proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "agentbox", *command],
                              cwd=project, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
        modules = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()
                   if line.startswith("import time:")]
        found[" ".join(command)] = sorted(m for m in modules
                                          if m.split(".")[0] == "textual" or m.startswith("agentbox.tui"))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15, help="measured runs per variant (default 15)")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="agentbox-bench-"))
    failures = []
    compileall.compile_dir(str(Path(__file__).resolve().parent.parent / "agentbox"), quiet=1)
    try:
        project = setup(workdir)
        p1 = bench_p1(project, args.runs)
        p2 = bench_p2(args.runs)
        leaks = textual_imports(project)
        imports_ms, by_package = import_costs(project)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    lib_ratio, cli_ratio = p1["library"] / p1["by_hand"], p1["cli"] / p1["by_hand"]
    p2_ratio = p2["version"] / p2["python"]
    print(f"bench_invoke: medians of {args.runs} runs (ms)")
    print(f"  P1  no-op scripted agent under bwrap, by hand (subprocess.run) {p1['by_hand']:8.1f}")
    print(f"      library invoke() in-process                              {p1['library']:8.1f}"
          f"   ratio {lib_ratio:4.2f}  (goal <= {P1_GOAL})  {'ok' if lib_ratio <= P1_GOAL else 'MISSED'}")
    print(f"      whole `agentbox invoke` CLI call                         {p1['cli']:8.1f}"
          f"   ratio {cli_ratio:4.2f}  (goal <= {P1_CLI_GOAL})  {'ok' if cli_ratio <= P1_CLI_GOAL else 'MISSED'}")
    print(f"      its imports (-X importtime, self time)                   {imports_ms:8.1f}   of which "
          + ", ".join(f"{name} {ms:.1f}" for name, ms in by_package[:8]))
    print(f"  P2  python -c pass                                           {p2['python']:8.1f}")
    print(f"      agentbox --version                                       {p2['version']:8.1f}"
          f"   ratio {p2_ratio:4.2f}  (goal <= {P2_GOAL})  {'ok' if p2_ratio <= P2_GOAL else 'MISSED'}")
    for command, modules in leaks.items():
        status = "no textual" if not modules else f"IMPORTS {', '.join(modules[:5])}"
        print(f"      agentbox {command:<32} {status}")
        if modules:
            failures.append(f"`agentbox {command}` imports {modules[0]}")
    for failure in failures:
        print(f"FAIL: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
