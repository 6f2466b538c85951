"""`agentbox zones` and `agentbox debt`: the project's high-rot zones and compromise tech debt."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from agentbox.cli.common import print_json, print_table, project_from


def zones(args: argparse.Namespace) -> int:
    """List `.agent-box/zones.yaml`: modules where a task's failure ladder reached L3."""
    from agentbox.core.config.zones import load_zones

    found = load_zones(project_from(args).box)
    if args.json:
        print_json({"zones": [{"zone_id": zone_id, **zone.model_dump(mode="json")} for zone_id, zone in found.items()]})
        return 0
    if not found:
        print("no high-rot zone recorded (.agent-box/zones.yaml)")
        return 0
    print_table(["zone", "module", "fails", "max level", "escape hatches", "resolution", "updated"],
                [[zone_id, zone.module_path, str(zone.fail_count), zone.max_ladder_level,
                  ", ".join(zone.escape_hatches_used) or "-", zone.resolution,
                  zone.updated.strftime("%Y-%m-%d %H:%M") if zone.updated else "-"]
                 for zone_id, zone in found.items()])
    return 0


def debt(args: argparse.Namespace) -> int:
    """List `.agent-box/debt.yaml`, or close / waive one debt (the file's comments stay)."""
    from agentbox.core.config.zones import close_debt, load_debts
    from agentbox.core.errors import UsageError

    box = project_from(args).box
    target = args.close or args.waive
    if args.note is not None and target is None:
        raise UsageError("--note goes with --close ID or --waive ID", "agentbox debt --close D-1 --note 'paid back'")
    if target is not None:
        status = "closed" if args.close else "waived"
        changed = close_debt(box, target, status=status, note=args.note)
        if args.json:
            print_json({"debt_id": target, **changed.model_dump(mode="json")})
        else:
            print(f"{status} {target} ({changed.file}:{changed.line})")
        return 0
    found = load_debts(box)
    today = datetime.now(UTC).date()
    if args.json:
        print_json({"debts": [{"debt_id": debt_id, **d.model_dump(mode="json"), "overdue": d.overdue(today)}
                              for debt_id, d in found.items()]})
        return 0
    if not found:
        print("no tech debt recorded (.agent-box/debt.yaml)")
        return 0
    print_table(["debt", "where", "status", "risk", "due", "owner", "task", "run"],
                [[debt_id, f"{d.file}:{d.line}", d.status, d.risk,
                  (d.due.isoformat() + (" (overdue)" if d.overdue(today) else "")) if d.due else "-",
                  d.owner_role or "-", d.task or "-", d.run or "-"] for debt_id, d in found.items()])
    overdue = sum(d.overdue(today) for d in found.values())
    if overdue:
        print(f"{overdue} overdue: each blocks a controlled rewrite of its module until closed or waived "
              "(`agentbox debt --close ID` / `--waive ID`)")
    return 0
