"""`agentbox stats`: how well the crew works across the project's runs, each figure beside its health line."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from typing import TYPE_CHECKING

from agentbox.cli.common import print_json, project_from
from agentbox.core.agents.pricing import usd
from agentbox.core.errors import UsageError
from agentbox.core.termtext import for_line

if TYPE_CHECKING:
    from agentbox.core.reports.stats import Figures, Health, Stats


def parse_since(text: str) -> float:
    """`--since`'s date (YYYY-MM-DD, or an ISO date and time; local time unless it names a zone) as a timestamp."""
    try:
        when = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(f"--since: {for_line(text[:60])!r} is not a date",
                         "give a date as YYYY-MM-DD, or a date and time such as 2026-11-30T14:00") from None
    return when.timestamp()


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.0f}%"


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _judged(health: Health | None) -> str:
    if health is None:
        return ""
    if health.outside is None:
        return f"({health.rule}: no figure)"
    return f"{health.rule}  {'OUTSIDE' if health.outside else 'ok'}"


def _levels(group: Figures) -> str:
    if group.level_shares is None:
        return "—"
    return " ".join(f"{level} {_percent(share)}" for level, share in group.level_shares.items())


def _block(group: Figures, title: str) -> list[str]:
    health = group.health
    rows = [
        ("first pass", _percent(group.first_pass_rate), _judged(health.get("first_pass_rate"))),
        ("repair rounds", "—" if group.mean_repair_rounds is None else f"{group.mean_repair_rounds:.2f}",
         _judged(health.get("mean_repair_rounds"))),
        ("check failures", _percent(group.check_failure_rate), ""),
        ("flaky checks", _percent(group.flaky_rate), ""),
        ("escalations", _percent(group.escalation_rate), _judged(health.get("escalation_rate"))),
        ("ladder levels", _levels(group), _judged(health.get("l3_share")) if group.level_shares is not None else ""),
        ("stuck at L1", "—" if group.stuck_at_l1 is None else str(group.stuck_at_l1),
         _judged(health.get("stuck_at_l1")) if group.stuck_at_l1 is not None else ""),
        ("tokens", f"{group.tokens:,}", ""),
        ("cost", usd(group.cost_usd, group.unknown_cost_turns), ""),
        ("wall time", _duration(group.wall_s), ""),
        ("waiting for you", _duration(group.waiting_s), ""),
    ]
    lines = [for_line(f"{title}  ({group.tasks} task{'s' if group.tasks != 1 else ''})")]
    lines += [f"  {name:<16} {value:<24} {judged}".rstrip() for name, value, judged in rows]
    return lines


def render(stats: Stats) -> str:
    """The stats as text: a block per role/profile/tool/model, one for all, then the model changes."""
    if not stats.overall.tasks:
        return f"{stats.runs} run(s), no tasks to count"
    lines = [f"{stats.runs} run(s), {stats.overall.tasks} task(s)", ""]
    for group in stats.groups:
        lines += _block(group, f"{group.role} · {group.profile} · {group.tool} · {group.model}")
        lines.append("")
    lines += _block(stats.overall, "all")
    for change in stats.model_changes:
        what = (f"{change.role}: model {change.from_model} → {change.to_model}: first pass "
                f"{_percent(change.rate_before)} over {change.tasks_before} task(s) before, "
                f"{_percent(change.rate_since)} over {change.tasks_since} since")
        if change.verdict == "warning":
            lines += ["", for_line(f"warning: {what} — a fall of {change.drop_points:.0f} points; "
                                   "the cheaper model may not be up to this role")]
        else:
            sample = "; fewer than the 30 tasks needed to judge it" if change.tasks_since < 30 else ""
            lines += ["", for_line(f"note: {what}{sample}")]
    return "\n".join(lines)


def stats(args: argparse.Namespace) -> int:
    """Print the project's figures (per role, profile, tool and model) with their health lines."""
    from agentbox.core import runs as runs_mod
    from agentbox.core.reports.stats import compute

    since = parse_since(args.since) if args.since else None
    project = project_from(args)
    history, damaged = runs_mod.history(project)
    result = compute(history, since=since, role=args.role)
    if args.json:
        print_json({**result.as_dict(), "damaged_runs": [d.id for d in damaged]})
    else:
        print(render(result))
    for bad in damaged:
        print(f"warning: {bad.error.message} (not counted)", file=sys.stderr)
    return 0
