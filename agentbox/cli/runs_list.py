"""`agentbox runs`: every run with its goal, status, age, tasks, tokens, cost and whether it is merged."""

from __future__ import annotations

import argparse
import sys
import time

from agentbox.cli.common import print_json, print_table, project_from
from agentbox.core.agents.pricing import usd


def runs(args: argparse.Namespace) -> int:
    """List runs, oldest first (a damaged one says so, with the reason below)."""
    from agentbox.core import runs as runs_mod
    from agentbox.core.reports.summary import age_text, summarise

    project = project_from(args)
    listed = runs_mod.list_runs(project)
    now = time.time()
    damaged = [r for r in listed if isinstance(r, runs_mod.DamagedRun)]
    if args.json:
        print_json([{"id": r.id, "status": "damaged", "error": r.error.message} if isinstance(r, runs_mod.DamagedRun)
                    else summarise(r, now).as_dict() for r in listed])
    elif not listed:
        print("this project has no runs yet: start one with `agentbox run GOAL`")
    else:
        rows = []
        for entry in listed:
            if isinstance(entry, runs_mod.DamagedRun):
                rows.append([entry.id, "damaged", "-", "-", "-", "-", "-", "see below"])
                continue
            s = summarise(entry, now)
            tokens = "unknown" if s.tokens is None else f"{s.tokens:,}" + ("+?" if s.unknown_usage_turns else "")
            cost = usd(s.cost_usd, s.unknown_cost_turns, s.subscription_turns)
            merged = "(shared)" if s.merged is None else (f"into {s.merged_into or 'a detached HEAD'}" if s.merged
                                                           else "no")
            rows.append([s.id, s.status, age_text(s.age_s), f"{s.tasks_done}/{s.tasks}", tokens, cost, merged,
                         s.goal[:60]])
        print_table(["run", "status", "age", "tasks", "tokens", "cost", "merged", "goal"], rows)
    for bad in damaged:
        print(f"warning: {bad.error.message}", file=sys.stderr)
    if damaged:
        print(f"hint: {damaged[0].error.hint}", file=sys.stderr)
    return 0
