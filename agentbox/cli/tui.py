"""`agentbox` (no command), `agentbox tui` and `agentbox demo`."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys

from agentbox.cli.common import maybe_project


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
    """Run the demo crew in a temp project (dashboard unless --no-tui)."""
    from agentbox.core.demo import make_demo_project, run_demo

    project = make_demo_project()
    print(f"demo project: {project.root}", file=sys.stderr)
    try:
        if args.no_tui or not sys.stdout.isatty():
            from agentbox.cli.runs import _printer

            final = asyncio.run(run_demo(project, _printer(False)))
            print(f"\nrun {final.id}: {final.status}")
            if final.result:
                print(f"synthesis: {final.result.get('artifact')}\n\n{final.result.get('summary', '')}")
            return 0 if final.status == "done" else 1
        from agentbox.tui.factory import make_app

        app = make_app(project, demo=True)
        app.run()
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(project.root, ignore_errors=True)
        else:
            print(f"kept {project.root}", file=sys.stderr)
