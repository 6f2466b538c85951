"""What the hardened sandbox costs per turn: its full bwrap launch vs a bare bwrap, same command.

Baseline: `bwrap --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp --unshare-pid true`
(about what the first build's sandbox did before its mounts). Measured: agentbox's own
sandbox for a role with a file scope (a staged view) and a directory scope, in a git
project — dropped capabilities, the seccomp filter, /run and secrets masked, metadata
read-only, state hidden — handed to bwrap through memory fds, running the same `true`.
Runs interleave; the figure is the ratio of medians, and the difference in ms.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentbox.core.sandbox import bwrap as sandbox  # noqa: E402
from agentbox.core.sandbox import scopes  # noqa: E402


def median_ms(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    bwrap = sandbox.require_bwrap()
    work = Path(tempfile.mkdtemp(prefix="agentbox-bench-sandbox-"))
    try:
        project = work / "project"
        (project / "src").mkdir(parents=True)
        (project / "README.md").write_text("x")
        subprocess.run(["git", "init", "-q", str(project)], check=True)
        (project / ".agent-box" / "runs").mkdir(parents=True)
        (project / ".agent-box" / "sessions").mkdir(parents=True)
        bare = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
                "--unshare-pid", "--", "true"]
        samples: dict[str, list[float]] = {"bare": [], "agentbox": []}
        for index in range(args.runs + 1):
            plan = scopes.plan(project, ["README.md", "src/**"], work / f"stage-{index}")
            spec = sandbox.SandboxSpec(
                project_root=project, writable=plan.writable,
                staged=tuple((v.stage, v.real) for v in plan.staged), sealed=plan.sealed, links=plan.links,
                protected=(project / ".agent-box", *scopes.metadata_paths(project)), extra_rw=(),
                homes=(), hidden=(Path.home(), project / ".agent-box" / "runs", project / ".agent-box" / "sessions"),
                ro_binds=sandbox.binds_needed([], [Path.home()]), network=False,
                env={"PATH": "/usr/bin:/bin"}, **sandbox.host_layout())  # type: ignore[arg-type]
            argv = sandbox.bwrap_argv(spec, ["true"], bwrap)
            started = time.perf_counter()
            subprocess.run(bare, check=True)
            bare_s = time.perf_counter() - started
            started = time.perf_counter()
            with sandbox.launch(argv) as launched:
                subprocess.run(launched.argv, check=True, pass_fds=launched.pass_fds)
            full_s = time.perf_counter() - started
            scopes.finish(plan, work / "discarded")
            if index:
                samples["bare"].append(bare_s)
                samples["agentbox"].append(full_s)
        bare_ms, full_ms = median_ms(samples["bare"]), median_ms(samples["agentbox"])
        print(f"bench_sandbox: medians of {args.runs} interleaved runs")
        print(f"  bare bwrap, `true`                                  {bare_ms:7.1f} ms")
        print(f"  agentbox's hardened sandbox, same `true`           {full_ms:7.1f} ms"
              f"   ratio {full_ms / bare_ms:4.2f}  (+{full_ms - bare_ms:.1f} ms per turn)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
