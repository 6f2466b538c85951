"""`agentbox tail ROLE|TASK [--follow]`: what a member's turn shows, as it happens."""

from __future__ import annotations

import argparse
import sys
import time

from agentbox.cli.common import project_from

POLL_S = 0.2
"""How often a follower looks for new output."""
CHECK_S = 1.0
"""How often a follower that sees nothing new asks whether the turn still runs."""


def tail(args: argparse.Namespace) -> int:
    """Print the live view of a role's (or task's) turn; with --follow, until the turn ends."""
    from agentbox.core.agents.live import LiveCursor
    from agentbox.core.agents.live_text import render
    from agentbox.core.reports.live_sources import find_source, still_running

    project = project_from(args)
    source = find_source(project, args.target, args.run)
    state = "running" if source.running else "finished"
    print(f"[{source.what} · session {source.session.id} · turn {source.turn} · {state}]", file=sys.stderr)
    cursor = LiveCursor(source.directory)
    if not source.directory.is_dir() and not source.running:
        print("(this turn has no live view: it ran before agentbox kept one)", file=sys.stderr)
        return 0
    checked = time.monotonic()
    while True:
        read = cursor.read()
        for event in read.events:
            print(render(event), flush=True)
        if read.ended:
            return 0
        if read.events:
            continue
        if not args.follow:
            if source.running:
                print(f"(still running: `agentbox tail {args.target} --follow` keeps watching)", file=sys.stderr)
            return 0
        if time.monotonic() - checked >= CHECK_S:
            checked = time.monotonic()
            if not still_running(project, source):
                for event in cursor.read().events:  # what it wrote before it stopped
                    print(render(event), flush=True)
                if not cursor.ended:
                    print("— turn ended (its live view stops without an end: the process was stopped)")
                return 0
        time.sleep(POLL_S)
