"""How the crew does across runs: cost and first-pass rate per run as sparklines, the figures by role and model.

The figures are `agentbox stats`' (`core.stats`), read in a thread worker; each is shown
beside its health line, marked when outside it, and the downgrade valve's warnings below.
The run shown on the dashboard also gets its cost per role.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Sparkline, Static

from agentbox.core.agents.pricing import usd
from agentbox.core.engine.models import Run
from agentbox.core.paths import ProjectPaths
from agentbox.core.reports.stats import Figures, Health, Stats
from agentbox.core.termtext import for_line

COLUMNS = ("role", "profile", "tool", "model", "tasks", "first pass", "repair rounds", "escalations", "L3 share",
           "cost")


@dataclass
class StatsLoaded(Message):
    """The project's figures were computed (None with an error when they could not be)."""

    stats: Stats | None
    error: str | None = None


def read_stats(project: ProjectPaths) -> StatsLoaded:
    """Every run's figures (in a worker: it reads every run and its decision log)."""
    from agentbox.core import runs
    from agentbox.core.errors import AgentboxError
    from agentbox.core.reports.stats import compute

    try:
        history, _damaged = runs.history(project)
    except AgentboxError as exc:
        return StatsLoaded(None, exc.message)
    return StatsLoaded(compute(history))


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.0f}%"


def _judged(text: str, health: Health | None) -> Text:
    """The figure, red and marked when outside its health line, with the line after it."""
    if health is None:
        return Text(text)
    if health.outside:
        return Text.assemble((f"{text} ✗", "bold red"), (f" {health.rule}", "dim"))
    return Text.assemble(text, (f" {health.rule}", "dim"))


def figure_row(group: Figures) -> list[Text]:
    """One row of the figures table."""
    health = group.health
    l3 = group.level_shares.get("L3") if group.level_shares is not None else None
    overall = group.role == "*"
    return [
        Text("all" if overall else for_line(group.role), style="bold"),
        *(Text("" if overall else for_line(name)) for name in (group.profile, group.tool, group.model)),
        Text(str(group.tasks), justify="right"),
        _judged(_percent(group.first_pass_rate), health.get("first_pass_rate")),
        _judged("—" if group.mean_repair_rounds is None else f"{group.mean_repair_rounds:.2f}",
                health.get("mean_repair_rounds")),
        _judged(_percent(group.escalation_rate), health.get("escalation_rate")),
        _judged(_percent(l3), health.get("l3_share") if l3 is not None else None),
        Text(usd(group.cost_usd, group.unknown_cost_turns)),
    ]


def spark_caption(name: str, values: list[float | None], shown: str) -> str:
    """What a sparkline plots, its range, and how many runs it leaves out (their figure is unknown)."""
    known = [v for v in values if v is not None]
    if not known:
        return f"{name}: no run has a known figure yet"
    left_out = len(values) - len(known)
    text = f"{name} per run, oldest first: {shown.format(min(known))} … {shown.format(max(known))}"
    return text + (f" ({left_out} run(s) unknown, not plotted)" if left_out else "")


def role_costs(run: Run | None) -> str:
    """The shown run's cost per role ("" without a run)."""
    if run is None or not run.spend_by_role:
        return ""
    parts = [f"{role} {usd(spend.cost_usd, spend.unknown_cost_turns)}" for role, spend in sorted(run.spend_by_role.items())]
    return f"{run.id} by role: " + " · ".join(parts)


class StatsScreen(Screen[None]):
    """The crew's figures across runs, with cost and first-pass sparklines."""

    BINDINGS = [Binding("escape", "back", "back"), Binding("g", "reload", "refresh")]
    DEFAULT_CSS = """
    StatsScreen #stats-sparks { height: auto; }
    StatsScreen .spark-box { width: 1fr; height: auto; padding: 0 1; }
    StatsScreen Sparkline { height: 3; }
    StatsScreen #stats-table { height: 1fr; }
    StatsScreen #stats-notes { height: auto; padding: 0 1; }
    """

    def __init__(self, project: ProjectPaths, run: Run | None = None) -> None:
        super().__init__()
        self.project = project
        self.shown_run = run
        self.stats: Stats | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="stats"):
            yield Static("reading the runs…", id="stats-title")
            with Horizontal(id="stats-sparks"):
                with Vertical(classes="spark-box"):
                    yield Static(id="cost-caption")
                    yield Sparkline([], id="cost-spark")
                with Vertical(classes="spark-box"):
                    yield Static(id="first-pass-caption")
                    yield Sparkline([], id="first-pass-spark")
            yield DataTable(id="stats-table", cursor_type="row", zebra_stripes=True)
            yield Static(id="stats-notes")
        yield Footer()

    def on_mount(self) -> None:
        """Columns, then compute the figures in a worker."""
        table = self.query_one(DataTable)
        table.border_title = "by role, profile, tool and model"
        for column in COLUMNS:
            table.add_column(column, key=column)
        table.focus()
        self.action_reload()

    def action_reload(self) -> None:
        """Read every run again."""
        self.run_worker(self._read, thread=True, exclusive=True, group="stats", exit_on_error=False)

    def _read(self) -> None:
        self.post_message(read_stats(self.project))

    def on_stats_loaded(self, message: StatsLoaded) -> None:
        """Show the figures."""
        if message.stats is None:
            self.notify(message.error or "the runs could not be read", title="stats", severity="error")
            return
        stats = self.stats = message.stats
        overall = stats.overall
        self.query_one("#stats-title", Static).update(Text.assemble(
            ("stats", "bold"), f"  {stats.runs} run(s) · {overall.tasks} task(s) · first pass ",
            _judged(_percent(overall.first_pass_rate), overall.health.get("first_pass_rate")),
            f" · cost {usd(overall.cost_usd, overall.unknown_cost_turns)}"))
        costs = [point.cost_usd for point in stats.timeline]
        rates = [None if point.first_pass_rate is None else 100 * point.first_pass_rate for point in stats.timeline]
        self.query_one("#cost-spark", Sparkline).data = [v for v in costs if v is not None]
        self.query_one("#first-pass-spark", Sparkline).data = [v for v in rates if v is not None]
        self.query_one("#cost-caption", Static).update(spark_caption("cost", costs, "${:.4f}"))
        self.query_one("#first-pass-caption", Static).update(spark_caption("first pass", rates, "{:.0f}%"))
        table = self.query_one(DataTable)
        table.clear()
        for group in stats.groups:
            table.add_row(*figure_row(group))
        if stats.groups:
            table.add_row(*figure_row(overall))
        notes = Text()
        for change in stats.model_changes:
            line = (f"{change.role}: {change.from_model} → {change.to_model}: first pass {_percent(change.rate_before)} "
                    f"({change.tasks_before} tasks) → {_percent(change.rate_since)} ({change.tasks_since} tasks)")
            if change.verdict == "warning":
                notes.append(f"⚠ {for_line(line)}: the cheaper model may not be up to this role\n", style="bold yellow")
            else:
                notes.append(f"{for_line(line)} (reported; judged from 30 tasks on)\n", style="dim")
        shown = role_costs(self.shown_run)
        if shown:
            notes.append(for_line(shown), style="dim")
        self.query_one("#stats-notes", Static).update(notes)

    def action_back(self) -> None:
        """Back to the dashboard."""
        self.app.pop_screen()
