"""`agentbox` (no command), `agentbox tui` and `agentbox demo`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import signal
import sys
import time

from agentbox.cli.common import maybe_project
from agentbox.core.paths import ProjectPaths

ENGINE_STOP_WAIT_S = 5.0
"""How long `agentbox demo` waits for the engine to let go of a cancelled run."""


def run_default(args: argparse.Namespace) -> int:
    """No command: the dashboard."""
    return tui(args)


def tui(args: argparse.Namespace) -> int:
    """Open the dashboard (inside a project), or the profiles view outside one."""
    from agentbox.tui.factory import make_app

    project = maybe_project(args)
    app = make_app(project)
    app.run()
    return 0


def demo(args: argparse.Namespace) -> int:
    """Run the demo crew in a temp project: the dashboard on the live run, or printed progress."""
    from agentbox.core.admin.demo import make_demo_project

    project = make_demo_project()
    print(f"demo project: {project.root}", file=sys.stderr)
    try:
        if args.no_tui or not sys.stdout.isatty():
            return _printed_demo(project, keep=args.keep)
        return _dashboard_demo(project)
    finally:
        if not args.keep:
            shutil.rmtree(project.root, ignore_errors=True)
            with contextlib.suppress(OSError):  # the terminal may be gone (closed window)
                print(f"removed the demo project {project.root} (`--keep` keeps it)", file=sys.stderr)
        else:
            print(f"kept {project.root}", file=sys.stderr)


def _printed_demo(project: ProjectPaths, *, keep: bool) -> int:
    """Run the demo in this process; the synthesis is printed (its file goes with the project unless `keep`)."""
    from agentbox.cli.runs import _printer
    from agentbox.core.admin.demo import deliver_demo, run_demo

    final = asyncio.run(run_demo(project, _printer(False)))
    print(f"\nrun {final.id}: {final.status}")
    delivered = deliver_demo(project, final)
    if delivered:
        from agentbox.core.termtext import for_terminal

        print(f"the stand-in human answered the merge question: {for_terminal(delivered)}")
    if final.result:
        where = (f"synthesis: {final.result.artifact}" if keep else
                 "synthesis (the demo project is removed on exit; `agentbox demo --no-tui --keep` keeps it):")
        from agentbox.core.termtext import for_terminal

        print(f"{for_terminal(where)}\n\n{for_terminal(final.result.summary)}")
    return 0 if final.status == "done" else 1


def _dashboard_demo(project: ProjectPaths) -> int:
    """Start the demo run's engine in the background and watch it; the person answers its question."""
    from agentbox.core import runs
    from agentbox.core.admin.demo import DEMO_GOAL
    from agentbox.core.engine.models import TERMINAL_RUN_STATES
    from agentbox.tui.factory import make_app

    run = runs.create_run(project, DEMO_GOAL)
    runs.detach(project, run.id)
    app = make_app(project, demo=True, run_id=run.id)
    previous = signal.signal(signal.SIGHUP, lambda *_: app.exit())  # terminal closed: still clean up
    try:
        app.run()
    finally:
        signal.signal(signal.SIGHUP, previous)
        final = runs.load(project, run.id)
        if final.status not in TERMINAL_RUN_STATES:
            runs.send_command(project, run.id, {"action": "cancel_run", "note": "the demo was closed"})
        deadline = time.monotonic() + ENGINE_STOP_WAIT_S
        while runs.engine_alive(project, run.id) and time.monotonic() < deadline:
            time.sleep(0.1)
    final = runs.load(project, run.id)
    closed_early = final.status == "cancelled"
    with contextlib.suppress(OSError):  # the terminal may be gone (closed window)
        print(f"run {final.id}: {final.status}" + (" (the dashboard was closed before the end)" if closed_early else ""))
    return 1 if final.status == "failed" else 0  # closing the demo early is not a failure
