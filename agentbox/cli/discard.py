"""`agentbox discard RUN [--yes]`: throw a run away, saying exactly what goes."""

from __future__ import annotations

import argparse
import sys

from agentbox.cli.common import print_json, project_from


def discard(args: argparse.Namespace) -> int:
    """Show what discarding the run removes, ask (unless --yes), then remove it and say what went."""
    from agentbox.core.admin import discard as discard_mod
    from agentbox.core.errors import UsageError

    project = project_from(args)
    planned = discard_mod.plan(project, args.run)
    if not args.yes:
        if not (sys.stdin.isatty() and sys.stdout.isatty()):
            raise UsageError(f"discarding run {planned.run_id} removes its work and state for good, and there is "
                             "no terminal to ask", f"pass --yes: agentbox discard {planned.run_id} --yes")
        print(f"discard run {planned.run_id} ({planned.status})? This removes, for good:")
        for line in planned.lines():
            print(f"  {line}")
        reply = input("discard it? [y/N] ").strip().lower()
        if reply not in ("y", "yes"):
            print("kept: nothing was removed")
            return 1
    removed = discard_mod.discard(project, planned.run_id)
    if args.json:
        print_json(removed.as_dict())
        return 0
    print(f"discarded run {removed.run_id} ({removed.status}); removed:")
    for line in removed.lines():
        print(f"  {line}")
    if removed.stopped_turns:
        print(f"  turns       {removed.stopped_turns} left running by its engine, stopped")
    return 0
