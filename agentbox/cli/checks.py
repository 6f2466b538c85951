"""`agentbox checks [RUN [TASK]] [--json]`: the checks the code layer ran, on which commit, with what result."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from agentbox.cli.common import print_json, print_table, project_from

if TYPE_CHECKING:
    from agentbox.core.engine.models import CheckResult

def checks(args: argparse.Namespace) -> int:
    """List a run's checks (of one task): name, stage, commit, result, exit status, duration, log."""
    from agentbox.core import runs as runs_mod
    from agentbox.core.errors import NotFoundError

    project = project_from(args)
    run = runs_mod.load(project, args.run)
    if args.task is not None and args.task not in run.tasks:
        raise NotFoundError(f"no task {args.task!r} in run {run.id}", f"tasks: {', '.join(run.tasks) or '(none yet)'}")
    results = run.check_results(args.task)
    pending = [g for g in run.gates.values() if args.task is None or g.task == args.task]
    if args.json:
        print_json({"run": run.id, "gates": run.contract.gates.model_dump(),
                    "checks": [r.listing() for r in results],
                    "pending": [{"gate": g.id, "stage": g.stage, "task": g.task, "commit": g.commit,
                                 "checks": g.checks, "running": bool(g.started)} for g in pending]})
        return 0
    gates = run.contract.gates
    stages = [f"{stage}: {', '.join(gates.of(stage))}" for stage in ("submission", "integration", "run_end")
              if gates.of(stage)]
    print(f"{run.id} gates: " + ("; ".join(stages) if stages else "none (crew.yaml declares no gates)"))
    if not results and not pending:
        print("no check has run" + (f" for {args.task}" if args.task else ""))
        return 0
    if results:
        print_table(["check", "stage", "task", "commit", "result", "exit", "duration", "log"],
                    [[r.name, r.stage, r.task or "-", (r.commit or "live tree")[:10], _result(r), _exit(r),
                      f"{r.duration_s:.1f} s", r.log] for r in results])
    for gate in pending:
        state = f"running {gate.checks[0]}" if gate.started and gate.checks else "waiting"
        print(f"checking {gate.task or 'the run'} ({gate.stage}, {(gate.commit or 'live tree')[:10]}): {state}; "
              f"to run: {', '.join(gate.checks)}")
    return 0


def _result(result: CheckResult) -> str:
    word = "passed" if result.passed else ("could not run" if result.status == "error" else "failed")
    return word + (" (flaky)" if result.flaky else "")


def _exit(result: CheckResult) -> str:
    return "-" if result.exit_status is None else str(result.exit_status)
