"""How well a crew works across its runs: figures per role, profile, tool and model, each beside its health line.

Pure: it reads runs and their decision logs as given (`runs.history` loads them) and returns
typed figures; nothing here touches disk or a clock. What each figure counts:

- a task is one planned task of a run, counted under its assignee's role, the role's profile,
  and the tool and model its work turns ran (from the decision log's `turn` events; a run
  recorded before turns named their model counts under `unknown`);
- first pass: approved with no rework (no `task.reject` in its log); repair rounds: its
  `task.reject` events (a red check or a review sent it back);
- check failure and flaky rates: of the checks the code layer ran on its work;
- an escalation: a checkpoint about the task asking the human something other than a plan,
  a budget or a delivery;
- ladder levels: the highest level a task reached (from the log's ladder transitions, events
  with a `to_level`); a run without them has none, shown as "—";
- wall time: from the task's planning to its last change; waiting: the time its checkpoints
  stayed open.

The downgrade valve: when a role's model changed between runs and its first-pass rate fell
by more than `DOWNGRADE_DROP_POINTS` over at least `DOWNGRADE_MIN_TASKS` tasks since the
change, a warning; on fewer tasks the change is only reported.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from agentbox.core.engine.models import Run, Task
from agentbox.core.tasks import TaskState

FIRST_PASS_MIN = 0.60
REPAIR_ROUNDS_MAX = 1.5
ESCALATION_MAX = 0.15
L3_SHARE_MAX = 0.20
STUCK_AT_L1_MAX = 0
DOWNGRADE_DROP_POINTS = 10.0
"""A fall of the first-pass rate by more than this many percentage points after a model change warns."""
DOWNGRADE_MIN_TASKS = 30
"""Tasks of the role since the change needed before a fall warns (below: it is only reported)."""
NOT_ESCALATIONS = frozenset({"plan_approval", "budget", "run_budget", "deliver"})
"""Checkpoint kinds that ask the human for a decision about the run, not for help with a task."""
LEVELS = ("L0", "L1", "L2", "L3")


@dataclass(frozen=True)
class Health:
    """One health line: the figure's limit and whether the figure is outside it (None: no figure)."""

    rule: str
    outside: bool | None


@dataclass(frozen=True)
class TaskFacts:
    """What one task of one run contributes to the figures."""

    run_id: str
    run_created: float
    task_id: str
    role: str
    profile: str
    tool: str
    model: str
    first_pass: bool
    repair_rounds: int
    checks: int
    checks_failed: int
    checks_flaky: int
    escalated: bool
    top_level: str | None
    """The highest ladder level it reached (None: the run recorded no ladder levels)."""
    stuck_at_l1: bool
    tokens: int
    cost_usd: float | None
    unknown_cost_turns: int
    wall_s: float
    waiting_s: float


@dataclass
class Figures:
    """The figures of a group of tasks (one role/profile/tool/model, or all of them)."""

    role: str
    profile: str
    tool: str
    model: str
    tasks: int = 0
    first_pass_rate: float | None = None
    mean_repair_rounds: float | None = None
    check_failure_rate: float | None = None
    flaky_rate: float | None = None
    escalation_rate: float | None = None
    level_shares: dict[str, float] | None = None
    """Share of tasks by the highest ladder level reached (None: no run of the group recorded levels)."""
    stuck_at_l1: int | None = None
    tokens: int = 0
    cost_usd: float | None = None
    unknown_cost_turns: int = 0
    wall_s: float = 0.0
    waiting_s: float = 0.0
    health: dict[str, Health] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelChange:
    """A role whose model changed between runs, with its first-pass rate before and since."""

    role: str
    from_model: str
    to_model: str
    tasks_before: int
    rate_before: float
    tasks_since: int
    rate_since: float
    verdict: Literal["warning", "report"]
    """`warning`: the rate fell past the valve's line over enough tasks; `report`: shown, not judged."""

    @property
    def drop_points(self) -> float:
        """How many percentage points the first-pass rate fell (negative: it rose)."""
        return 100 * (self.rate_before - self.rate_since)


@dataclass(frozen=True)
class RunPoint:
    """One run on the time line of the stats screen: its cost and first-pass rate."""

    run_id: str
    created: float
    tasks: int
    cost_usd: float | None
    first_pass_rate: float | None


@dataclass
class Stats:
    """Everything `agentbox stats` shows."""

    runs: int
    groups: list[Figures]
    overall: Figures
    model_changes: list[ModelChange]
    timeline: list[RunPoint]

    @property
    def warnings(self) -> list[ModelChange]:
        """The model changes whose fall trips the downgrade valve."""
        return [c for c in self.model_changes if c.verdict == "warning"]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (`agentbox stats --json`)."""
        changes = [{**asdict(c), "drop_points": round(c.drop_points, 2)} for c in self.model_changes]
        return {"runs": self.runs, "groups": [asdict(g) for g in self.groups], "overall": asdict(self.overall),
                "model_changes": changes, "timeline": [asdict(p) for p in self.timeline],
                "health_lines": HEALTH_LINES}


HEALTH_LINES = {
    "first_pass_rate": f"≥ {FIRST_PASS_MIN:.0%}",
    "mean_repair_rounds": f"≤ {REPAIR_ROUNDS_MAX}",
    "escalation_rate": f"≤ {ESCALATION_MAX:.0%}",
    "l3_share": f"≤ {L3_SHARE_MAX:.0%}",
    "stuck_at_l1": f"= {STUCK_AT_L1_MAX}",
}


def _level_of(event: Mapping[str, Any]) -> str | None:
    level = event.get("to_level")
    return level if isinstance(level, str) and level in LEVELS else None


def task_facts(run: Run, events: Sequence[Mapping[str, Any]]) -> list[TaskFacts]:
    """The facts of each task of `run`, from the run and its decision log."""
    by_task: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for event in events:
        task_id = event.get("task")
        if isinstance(task_id, str):
            by_task[task_id].append(event)
    end = run.finished or run.updated
    facts = []
    for task in run.tasks.values():
        log = by_task.get(task.id, [])
        facts.append(_facts(run, task, log, end))
    return facts


def _facts(run: Run, task: Task, log: Sequence[Mapping[str, Any]], end: float) -> TaskFacts:
    role = task.assignee
    work_turns = [e for e in log if e.get("type") == "turn" and e.get("role") == role]
    models = [str(e["model"]) for e in work_turns if isinstance(e.get("model"), str) and e.get("model")]
    tools = [str(e["tool"]) for e in work_turns if isinstance(e.get("tool"), str) and e.get("tool")]
    rejects = sum(1 for e in log if e.get("type") == "task.reject")
    levels = [level for e in log if (level := _level_of(e)) is not None]
    approved = task.state == TaskState.APPROVED
    checkpoints = [c for c in run.checkpoints.values() if c.task == task.id]
    waiting = sum(max(0.0, (c.answered_at if c.answered_at is not None else end) - c.created)
                  for c in checkpoints if c.created)
    return TaskFacts(
        run_id=run.id, run_created=run.created, task_id=task.id, role=role,
        profile=run.contract.roles.get(role, "?"), tool=tools[-1] if tools else "?",
        model=models[-1] if models else "unknown",
        first_pass=approved and rejects == 0, repair_rounds=rejects,
        checks=len(task.checks), checks_failed=sum(1 for c in task.checks if c.status == "failed"),
        checks_flaky=sum(1 for c in task.checks if c.flaky),
        escalated=any(c.kind not in NOT_ESCALATIONS for c in checkpoints),
        top_level=max(levels, key=LEVELS.index) if levels else None,
        stuck_at_l1=bool(levels) and levels[-1] == "L1" and not task.is_terminal
        and run.status in ("done", "failed", "cancelled"),
        tokens=task.tokens, cost_usd=task.cost_usd, unknown_cost_turns=task.unknown_cost_turns,
        wall_s=max(0.0, task.updated - task.created) if task.created else 0.0, waiting_s=waiting,
    )


def _rate(part: int, whole: int) -> float | None:
    return None if whole == 0 else part / whole


def figures(facts: Sequence[TaskFacts], role: str = "*", profile: str = "*", tool: str = "*",
            model: str = "*") -> Figures:
    """The figures of `facts`, with their health lines."""
    group = Figures(role=role, profile=profile, tool=tool, model=model, tasks=len(facts))
    if not facts:
        return group
    n = len(facts)
    group.first_pass_rate = sum(f.first_pass for f in facts) / n
    group.mean_repair_rounds = sum(f.repair_rounds for f in facts) / n
    checks = sum(f.checks for f in facts)
    group.check_failure_rate = _rate(sum(f.checks_failed for f in facts), checks)
    group.flaky_rate = _rate(sum(f.checks_flaky for f in facts), checks)
    group.escalation_rate = sum(f.escalated for f in facts) / n
    laddered = [f for f in facts if f.top_level is not None]
    if laddered:
        counted = Counter(f.top_level for f in laddered)
        group.level_shares = {level: counted.get(level, 0) / len(laddered) for level in LEVELS}
        group.stuck_at_l1 = sum(f.stuck_at_l1 for f in laddered)
    group.tokens = sum(f.tokens for f in facts)
    costs = [f.cost_usd for f in facts if f.cost_usd is not None]
    group.cost_usd = sum(costs) if costs else None
    group.unknown_cost_turns = sum(f.unknown_cost_turns for f in facts)
    group.wall_s = sum(f.wall_s for f in facts)
    group.waiting_s = sum(f.waiting_s for f in facts)
    l3 = group.level_shares.get("L3") if group.level_shares is not None else None
    group.health = {
        "first_pass_rate": Health(HEALTH_LINES["first_pass_rate"], group.first_pass_rate < FIRST_PASS_MIN),
        "mean_repair_rounds": Health(HEALTH_LINES["mean_repair_rounds"],
                                     group.mean_repair_rounds > REPAIR_ROUNDS_MAX),
        "escalation_rate": Health(HEALTH_LINES["escalation_rate"], group.escalation_rate > ESCALATION_MAX),
        "l3_share": Health(HEALTH_LINES["l3_share"], None if l3 is None else l3 > L3_SHARE_MAX),
        "stuck_at_l1": Health(HEALTH_LINES["stuck_at_l1"],
                              None if group.stuck_at_l1 is None else group.stuck_at_l1 > STUCK_AT_L1_MAX),
    }
    return group


def model_changes(facts: Sequence[TaskFacts]) -> list[ModelChange]:
    """Each role whose model changed between runs: its latest change, judged by the downgrade valve."""
    changes = []
    by_role: dict[str, list[TaskFacts]] = defaultdict(list)
    for fact in sorted(facts, key=lambda f: (f.run_created, f.run_id)):
        if fact.model != "unknown":
            by_role[fact.role].append(fact)
    for role, mine in sorted(by_role.items()):
        runs_in_order: list[tuple[str, str]] = []  # (run id, the model most of its tasks ran)
        for run_id in dict.fromkeys(f.run_id for f in mine):
            models = Counter(f.model for f in mine if f.run_id == run_id)
            runs_in_order.append((run_id, models.most_common(1)[0][0]))
        changed_at = next((i for i in range(len(runs_in_order) - 1, 0, -1)
                           if runs_in_order[i][1] != runs_in_order[i - 1][1]), None)
        if changed_at is None:
            continue
        new_model, old_model = runs_in_order[changed_at][1], runs_in_order[changed_at - 1][1]
        since_runs = {run_id for run_id, _ in runs_in_order[changed_at:]}
        since = [f for f in mine if f.run_id in since_runs]
        before = [f for f in mine if f.run_id not in since_runs and f.model == old_model]
        rate_before = sum(f.first_pass for f in before) / len(before)
        rate_since = sum(f.first_pass for f in since) / len(since)
        fell = 100 * (rate_before - rate_since) > DOWNGRADE_DROP_POINTS
        changes.append(ModelChange(role, old_model, new_model, len(before), rate_before, len(since), rate_since,
                                   "warning" if fell and len(since) >= DOWNGRADE_MIN_TASKS else "report"))
    return changes


def compute(history: Iterable[tuple[Run, Sequence[Mapping[str, Any]]]], *, since: float | None = None,
            role: str | None = None) -> Stats:
    """The stats of the runs in `history` (created at or after `since`; tasks of `role` only when named)."""
    chosen = sorted(((run, log) for run, log in history if since is None or run.created >= since),
                    key=lambda item: (item[0].created, item[0].id))
    facts: list[TaskFacts] = []
    timeline = []
    for run, log in chosen:
        mine = [f for f in task_facts(run, log) if role is None or f.role == role]
        facts += mine
        costs = [f.cost_usd for f in mine if f.cost_usd is not None]
        timeline.append(RunPoint(run.id, run.created, len(mine), sum(costs) if costs else None,
                                 _rate(sum(f.first_pass for f in mine), len(mine))))
    keyed: dict[tuple[str, str, str, str], list[TaskFacts]] = defaultdict(list)
    for fact in facts:
        keyed[(fact.role, fact.profile, fact.tool, fact.model)].append(fact)
    groups = [figures(items, *key) for key, items in sorted(keyed.items())]
    return Stats(runs=len(chosen), groups=groups, overall=figures(facts), model_changes=model_changes(facts),
                 timeline=timeline)


def live_health(run: Run) -> tuple[float | None, float | None, float | None]:
    """A running run's cost so far, its cost projected at the current burn, and its first-pass rate.

    The projection assumes the tasks not yet approved cost what the approved ones cost on
    average (None until one is approved or while no cost is known); the first-pass rate is of
    the tasks that ended approved so far (None before the first).
    """
    cost = run.totals.cost_usd
    done = [t for t in run.tasks.values() if t.state == TaskState.APPROVED]
    projected = None
    if cost is not None and done and run.tasks:
        projected = cost * len(run.tasks) / len(done)
    first_pass = _rate(sum(1 for t in done if t.round <= 1 and not _was_reworked(t)), len(done))
    return cost, projected, first_pass


def _was_reworked(task: Task) -> bool:
    return any(v.verdict != "approve" for v in task.verdicts) or any(c.status == "failed" for c in task.checks)
