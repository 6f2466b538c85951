"""What the dashboard shows, computed from the snapshots: pure functions, no widgets.

Formatting rules kept in one place: token usage a tool did not report is "unknown",
never 0; times come from the caller's clock (a seam for tests with a frozen clock).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentbox.core.engine.models import TERMINAL_RUN_STATES, Checkpoint, Run, Task

TASK_STATE_ORDER = ("executing", "reviewing", "submitted", "rework", "blocked", "paused_for_budget", "queued",
                    "approved", "cancelled")
"""Queue groups, most urgent first; finished work last."""

STATE_STYLE = {
    "executing": "bold cyan", "reviewing": "bold magenta", "submitted": "magenta", "rework": "yellow",
    "blocked": "bold red", "paused_for_budget": "yellow", "queued": "", "approved": "green", "cancelled": "dim",
}
RUN_STATUS_STYLE = {
    "planning": "cyan", "running": "bold cyan", "waiting_user": "bold yellow", "paused": "yellow",
    "blocked": "bold red", "circuit_broken": "bold red", "done": "bold green", "failed": "bold red",
    "cancelled": "dim",
}
MEMBER_STATE_STYLE = {"running": "bold cyan", "waiting": "bold yellow", "submitted": "magenta", "idle": "dim"}
MEMBER_STATES = ("running", "waiting", "submitted", "idle")


@dataclass(frozen=True)
class RoleInfo:
    """A crew member as configured: its profile and the tool that profile runs."""

    role: str
    profile: str
    tool: str
    description: str = ""


@dataclass(frozen=True)
class CrewInfo:
    """The crew as the dashboard needs it (roles in crew.yaml order)."""

    roles: tuple[RoleInfo, ...]
    mode: str = "hierarchical"
    graph_file: str | None = None


@dataclass(frozen=True)
class MemberRow:
    """One line of the members table."""

    role: str
    profile: str
    tool: str
    state: str
    task: str
    session: str
    session_id: str | None
    tokens: str
    cpu: str
    memory: str
    node: str = ""
    """The cluster node of the member's task (`NODE_ID@HOST`, the id shortened); "" on this machine."""


# ----------------------------------------------------------------------------- formatting
def count(value: float) -> str:
    """A compact number: 950, 12.3k, 4.0M."""
    if value < 1000:
        return f"{value:.0f}"
    if value < 1_000_000:
        return f"{value / 1000:.1f}k"
    return f"{value / 1_000_000:.1f}M"


def tokens(known: int, unknown_turns: int, turns: int | None = None) -> str:
    """Token usage; turns whose usage the tool did not report make it "unknown" (never 0)."""
    if unknown_turns and not known:
        return "unknown"
    if unknown_turns:
        return f"{count(known)}+unknown"
    if known == 0 and turns == 0:
        return "—"
    return count(known)


def elapsed(seconds: float) -> str:
    """12s, 3:05, 1h02m."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}:{seconds % 60:02d}"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def size(num_bytes: int) -> str:
    """512B, 12K, 340M, 1.2G."""
    value = float(num_bytes)
    for unit in ("B", "K", "M", "G"):
        if value < 1024 or unit == "G":
            return f"{value:.0f}{unit}" if value >= 10 or unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return f"{num_bytes}B"


def clock_time(timestamp: float | None) -> str:
    """HH:MM:SS in local time."""
    if not timestamp:
        return "--:--:--"
    return dt.datetime.fromtimestamp(timestamp).strftime("%H:%M:%S")


def date_time(timestamp: float | None) -> str:
    """YYYY-MM-DD HH:MM in local time."""
    if not timestamp:
        return "-"
    return dt.datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M")


def month_day_time(timestamp: float | None) -> str:
    """MM-DD HH:MM in local time (compact, for tables)."""
    if not timestamp:
        return "-"
    return dt.datetime.fromtimestamp(timestamp).strftime("%m-%d %H:%M")


def short_id(value: str | None) -> str:
    """The first 8 characters of a session UUID."""
    return (value or "")[:8] or "—"


def cost(value: float | None, unknown_turns: int = 0) -> str:
    """$0.061, "$0.061 + 2 unknown" when some turns' cost is unknown, or "cost unknown" when none is known."""
    if value is None:
        return "cost unknown"
    return f"${value:.3f}" + (f" + {unknown_turns} unknown" if unknown_turns else "")


def health_line(run: Run) -> str:
    """A live run's health: its cost projected at the current burn and its first-pass rate ("" before either is known)."""
    from agentbox.core.reports.stats import live_health

    if run.status in TERMINAL_RUN_STATES:
        return ""
    _cost, projected, first_pass = live_health(run)
    parts = ([f"projected {cost(projected)}"] if projected is not None else []) + (
        [f"first pass {100 * first_pass:.0f}%"] if first_pass is not None else [])
    return "health: " + " · ".join(parts) if parts else ""


# ----------------------------------------------------------------------------- run summary
def run_elapsed(run: Run, now: float) -> float:
    """Seconds the run has been going (until it finished)."""
    end = run.finished if run.finished and run.status in TERMINAL_RUN_STATES else now
    return max(0.0, end - (run.created or end))


def budget_line(run: Run) -> str:
    """Tokens (and cost) against the run budget (with what a person added), unknown usage called out."""
    totals = run.totals
    budget = run.token_budget
    used = tokens(totals.tokens, totals.unknown_usage_turns, totals.turns)
    if used == "—":
        used = "0"
    text = f"{used} tok"
    if budget:
        text += f" / {count(int(budget))} ({100 * totals.tokens / int(budget):.0f}%)"
    if totals.turns:
        # turns of unknown usage are called out below; these are the others nobody could price
        text += f" · {cost(totals.cost_usd, max(0, totals.unknown_cost_turns - totals.unknown_usage_turns))}"
    if totals.unknown_usage_turns:
        text += f" · {totals.unknown_usage_turns} turn(s) usage unknown"
    return text


def open_checkpoints(run: Run | None) -> list[Checkpoint]:
    """Checkpoints waiting on the human, oldest first."""
    if run is None:
        return []
    return sorted(run.open_checkpoints(), key=lambda c: (c.created, c.id))


def tasks_in(run: Run | None, *states: str) -> list[Task]:
    """Tasks of the run in one of `states`, in creation order."""
    if run is None:
        return []
    return [t for t in run.tasks.values() if t.state in states]


def has_task_in(run: Run | None, *states: str) -> bool:
    """Whether any task of the run is in one of `states` (stops at the first)."""
    return run is not None and any(t.state in states for t in run.tasks.values())


def is_worktree_run(run: Run | None) -> bool:
    """Whether the run's writers work on git branches (so it has diffs to show and a branch to merge)."""
    return run is not None and run.in_worktrees


def can_merge(run: Run | None) -> bool:
    """Whether the run's integration branch is ready to be merged into the person's branch.

    Once the run has ended (done, failed or cancelled), not merged yet, with approved work
    on its branch. Not while it runs: a merge marks the run delivered, and the engine
    never offers to bring in what is approved after that.
    """
    return (is_worktree_run(run) and run is not None and run.git is not None and run.git.delivered is None
            and run.status in TERMINAL_RUN_STATES and any(t.merged for t in run.tasks.values()))


def short_stat(stat: str, files_shown: int = 15) -> str:
    """A `git diff --stat` with at most `files_shown` file lines (and its summary line)."""
    lines = stat.rstrip("\n").splitlines()
    if len(lines) <= files_shown + 1:
        return "\n".join(lines)
    hidden = len(lines) - 1 - files_shown
    return "\n".join([*lines[:files_shown], f" … {hidden} more file(s)", lines[-1]])


def queue_groups(run: Run | None) -> list[tuple[str, list[Task]]]:
    """Tasks grouped by state, in TASK_STATE_ORDER (unknown states last)."""
    if run is None:
        return []
    groups: dict[str, list[Task]] = {}
    for task in run.tasks.values():
        groups.setdefault(task.state, []).append(task)
    order = {state: index for index, state in enumerate(TASK_STATE_ORDER)}
    return sorted(groups.items(), key=lambda item: (order.get(item[0], len(order)), item[0]))


def live_tree_note(project_root: Path) -> str:
    """What a shared-workspace run's changes are, and (in a git repository only) where to see them."""
    in_git = any((d / ".git").exists() for d in (project_root, *project_root.parents))
    return ("this run works in the live tree (shared workspace): no branch records its changes"
            + ("; `git diff` shows them" if in_git else ""))


# ----------------------------------------------------------------------------- members
def run_crew(run: Run) -> set[str] | None:
    """The roles that take part in `run` (None: any role may, as in handoff mode).

    The mode's settings name some (a lead, a reviewer, the steps, the speakers, the graph's
    nodes); the rest are the roles the run gave work to (task assignees, turns run).
    """
    contract = run.contract
    settings: Any = contract.settings
    named: set[str] = set()
    if contract.mode == "handoff":
        return None
    if contract.mode == "hierarchical":
        named |= {settings.lead, *([settings.reviewer] if settings.reviewer else []),
                  *(getattr(settings, "reviewers", None) or [])}
    elif contract.mode == "sequential":
        named |= set(settings.steps)
    elif contract.mode == "group_chat":
        named |= {*settings.speakers, *(r for r in (settings.lead, settings.done_role) if r)}
    elif contract.mode == "graph" and contract.graph is not None:
        named |= {node.role for node in contract.graph.nodes}
    named |= {task.assignee for task in run.tasks.values()}
    named |= {job.role for job in run.jobs.values()}
    return named


def member_rows(crew: CrewInfo | None, run: Run | None, sessions: Mapping[str, Any],
                samples: Mapping[str, Any]) -> list[MemberRow]:
    """One row per member (busy ones first, then crew order): state, task, session, tokens, process."""
    roles: list[RoleInfo] = list(crew.roles) if crew else []
    if run is not None:
        known = {r.role for r in roles}
        roles += [RoleInfo(role, profile, "?") for role, profile in run.contract.roles.items() if role not in known]
        taking_part = run_crew(run)
        if taking_part is not None:
            roles = [info for info in roles if info.role in taking_part]
    records = list(sessions.values())
    rows = []
    for info in roles:
        state, task, session_id = member_state(info.role, run, records)
        mine = [r for r in records if r.role == info.role and (run is None or r.run_id == run.id)]
        known_tokens = sum(r.totals.tokens for r in mine)
        unknown_turns = sum(r.totals.unknown_usage_turns for r in mine)
        sample = samples.get(info.role) if state == "running" else None  # a sample outlives its turn by < 1 s
        rows.append(MemberRow(
            role=info.role, profile=info.profile, tool=info.tool, state=state, task=task or "—",
            session=short_id(session_id), session_id=session_id,
            tokens=tokens(known_tokens, unknown_turns, sum(r.turns for r in mine)),
            cpu=f"{sample.cpu_percent:.0f}%" if sample else "—",
            memory=size(sample.rss_bytes) if sample else "—",
            node=member_node(info.role, task, run),
        ))
    busy_first = {state: index for index, state in enumerate(MEMBER_STATES)}
    return sorted(rows, key=lambda row: busy_first.get(row.state, len(busy_first)))


def member_node(role: str, task_id: str | None, run: Run | None) -> str:
    """Where the member's current task (else its latest task) last ran on a cluster, shortened; "" here."""
    if run is None:
        return ""
    task = run.tasks.get(task_id or "")
    if task is None or not task.node:
        task = max((t for t in run.tasks.values() if t.assignee == role and t.node), key=lambda t: t.updated,
                   default=None)
    if task is None or not task.node:
        return ""
    node_id, _, host = task.node.partition("@")
    return f"{node_id[:12]}@{host}"


def member_state(role: str, run: Run | None, records: Iterable[Any]) -> tuple[str, str | None, str | None]:
    """(state, current task, session id): running > waiting > submitted > idle."""
    records = list(records)
    latest = max((r for r in records if r.role == role), key=lambda r: r.updated, default=None)
    latest_id = latest.id if latest else None
    if run is not None:
        for job in run.jobs.values():
            if job.started and job.role == role:
                return "running", job.task or job.kind, job.session_id
    talking = next((r for r in records if r.role == role and r.status == "running"), None)
    if talking is not None:
        return "running", talking.task_id or "talk", talking.id
    if run is not None and run.status not in TERMINAL_RUN_STATES:
        for cp in open_checkpoints(run):
            task = run.tasks.get(cp.task or "")
            if cp.role == role or (task is not None and task.assignee == role):
                return "waiting", cp.task or cp.id, task.session_id if task else latest_id
        for task in run.tasks.values():
            if task.assignee == role and task.state in ("submitted", "reviewing"):
                return "submitted", task.id, task.session_id
    return "idle", None, latest_id


def changes_summary(run: Run | None, task_id: str, limit: int = 12) -> str:
    """What a worktree task's branch changes (recorded from git after its last turn), for a decision dialog."""
    task = run.tasks.get(task_id) if run is not None else None
    if task is None or task.branch is None:
        return ""
    if not task.changed_files:
        return "\nIts branch changes no file."
    lines = [f"  {c.change} {c.path}" + ("" if c.added is None else f"  +{c.added} -{c.removed}")
             for c in task.changed_files[:limit]]
    beyond = len(task.changed_files) + task.changed_more - limit
    more = f"\n  … {beyond} more" if beyond > 0 else ""
    return "\nWhat its branch changes (from git; d shows the diff):\n" + "\n".join(lines) + more
