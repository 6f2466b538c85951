"""Money: the price table, a cost for every turn (the tool's, the table's, or unknown), logins, money budgets.

The engine tests run scripted crews under the real sandbox: a worker whose tool reports its
own cost, a reviewer priced from the user's config.yaml, a lead nobody prices.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from agentbox.core.agents import pricing
from agentbox.core.agents.sessions import SessionStore
from agentbox.core.config import billing
from agentbox.core.engine.run_store import RunStore
from agentbox.core.errors import ConfigError
from agentbox.core.runtimes.base import Usage
from agentbox.mcp import views
from tests.conftest import run_cli
from tests.engine.support import (
    answering,
    create,
    drive,
    events,
    open_checkpoint,
    send,
    setup_crew,
    until,
    work_rule,
)
from tests.engine.support import task as planned

OLD_SESSIONS = Path(__file__).resolve().parent.parent / "data" / "old_sessions"
OLD_RUNS = Path(__file__).with_name("old_runs")
REVIEW_PRICE = {"input": 1.0, "output": 2.0}
"""The user's price of the reviewer's model: 100 input + 20 output tokens cost $0.00014."""
REVIEW_COST = (100 * 1.0 + 20 * 2.0) / 1_000_000


# ----------------------------------------------------------------------------- the table and a turn's cost


def test_the_shipped_table_is_dated_and_says_it_is_a_snapshot() -> None:
    table = pricing.bundled_prices()
    assert table.taken[:4].isdigit() and "snapshot" in table.note
    assert table.vendors["anthropic"] and table.vendors["openai"]


@pytest.mark.parametrize(("tool", "model", "expected"), [
    ("claude", "claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),  # a dated id is its family's entry
    ("claude", "sonnet", "claude-sonnet-4-5"),  # claude's alias
    ("claude", "claude-opus-4-5[1m]", "claude-opus-4-5"),
    ("codex", "gpt-5-codex", "gpt-5-codex"),  # not gpt-5
    ("codex", "gpt-5-2025-08-07", "gpt-5"),
    ("claude", "claude-opus-4-6", None),  # a newer model of a family is not the older one's price
    ("codex", "gpt-5.2", None),
    ("opencode", "openai/gpt-5-mini", "gpt-5-mini"),  # the provider prefix names the vendor
    ("codex", "fake-model", None),
    ("codex", None, None),
])
def test_a_model_is_found_in_the_table(tool: str, model: str | None, expected: str | None) -> None:
    table = pricing.bundled_prices()
    found = table.find(tool, model)
    if expected is None:
        assert found is None
    else:
        vendor = "anthropic" if expected.startswith("claude") else "openai"
        assert found is table.vendors[vendor][expected]


def test_tokens_times_price_counts_each_kind_of_token_at_its_rate() -> None:
    price = pricing.Price(input=2.0, output=10.0, cached_input=0.5, cache_write=3.0, reasoning=20.0)
    usage = Usage(input_tokens=1_000_000, cached_input_tokens=2_000_000, cache_write_tokens=1_000_000,
                  output_tokens=100_000, reasoning_tokens=50_000)
    assert price.cost(usage) == pytest.approx(2.0 + 1.0 + 3.0 + 1.0 + 1.0)
    plain = pricing.Price(input=2.0, output=10.0)  # cached and cache writes at the input price, reasoning at output
    assert plain.cost(usage) == pytest.approx(2.0 + 4.0 + 2.0 + 1.0 + 0.5)


def test_the_tools_own_figure_wins_then_the_table_then_unknown_never_zero() -> None:
    table = pricing.bundled_prices()
    usage = Usage(input_tokens=1000, output_tokens=100)
    own = pricing.priced(Usage(input_tokens=1000, output_tokens=100, cost_usd=0.5), tool="claude",
                         model="sonnet", table=table, billing="subscription")
    assert (own.cost_usd, own.cost_source, own.billing) == (0.5, "tool", "subscription")
    by_table = pricing.priced(usage, tool="codex", model="gpt-5", table=table, billing="api_key")
    assert by_table.cost_usd == pytest.approx((1000 * 1.25 + 100 * 10.0) / 1e6) and by_table.cost_source == "price_table"
    unknown = pricing.priced(usage, tool="codex", model="fake-model", table=table, billing=None)
    assert unknown.cost_usd is None and unknown.cost_source is None
    no_usage = pricing.priced(Usage(), tool="codex", model="gpt-5", table=table, billing=None)
    assert no_usage.cost_usd is None
    assert pricing.usd(None) == "unknown" and pricing.usd(0.25, 2) == "$0.2500 + 2 turns unknown"
    assert pricing.usd(0.25, 0, 3) == "$0.2500 (subscription)"


def test_the_users_config_yaml_corrects_and_adds_prices(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("prices:\n  openai:\n    gpt-5: {input: 2, output: 20}\n  local:\n    qwen2.5-coder: {input: 0.1, output: 0.2}\n")
    table = pricing.price_table(config)
    assert table.find("codex", "gpt-5") == pricing.Price(input=2.0, output=20.0)
    assert table.find("opencode", "local/qwen2.5-coder") == pricing.Price(input=0.1, output=0.2)
    assert table.find("codex", "gpt-5-mini") == pricing.bundled_prices().find("codex", "gpt-5-mini")


def test_a_bad_price_in_config_yaml_names_the_file_line_and_field(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("prices:\n  openai:\n    gpt-5:\n      input: -3\n      output: 10\n")
    with pytest.raises(ConfigError) as caught:
        pricing.price_table(config)
    assert f"{config}:4" in str(caught.value) and "prices.openai.gpt-5.input" in str(caught.value)


def test_subscription_and_key_logins_are_told_apart_per_tool(tmp_path: Path) -> None:
    claude = tmp_path / "dot-claude"
    claude.mkdir()
    assert billing.login_kind("claude", claude, {}) is None
    (claude / ".credentials.json").write_text(json.dumps({"claudeAiOauth": {"accessToken": "x"}}))
    assert billing.login_kind("claude", claude, {}) == "subscription"
    assert billing.login_kind("claude", claude, {"ANTHROPIC_API_KEY": "sk-x"}) == "api_key"
    codex = tmp_path / "dot-codex"
    codex.mkdir()
    (codex / "auth.json").write_text(json.dumps({"auth_mode": "chatgpt", "tokens": {"id_token": "x"}}))
    assert billing.login_kind("codex", codex, {}) == "subscription"
    (codex / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": "sk-x"}))
    assert billing.login_kind("codex", codex, {}) == "api_key"
    (codex / "config.toml").write_text('model_provider = "local"\n')
    assert billing.login_kind("codex", codex, {}) == "api_key"
    opencode = tmp_path / "dot-opencode"
    (opencode / billing.OPENCODE_AUTH).parent.mkdir(parents=True)
    (opencode / billing.OPENCODE_AUTH).write_text(json.dumps({"anthropic": {"type": "oauth"}, "openai": {"type": "api"}}))
    assert billing.login_kind("opencode", opencode, {}, "anthropic/claude-sonnet-4-5") == "subscription"
    assert billing.login_kind("opencode", opencode, {}, "openai/gpt-5") == "api_key"
    assert billing.login_kind("hermes", tmp_path, {}) is None


# ----------------------------------------------------------------------------- with real agents


def priced_crew(project: Path, **kwargs: object):  # type: ignore[no-untyped-def]
    """A crew whose reviewer runs the model `s-review`, priced in the user's config.yaml."""
    home = Path(__import__("os").environ["AGENT_BOX_HOME"])
    (home / "config.yaml").write_text(json.dumps({"prices": {"scripted": {"s-review": REVIEW_PRICE}}}))
    roles = {
        "lead": {"profile": "t-lead", "writes": [], "instructions": "roles/lead.md"},
        "builder": {"profile": "t-worker", "writes": ["src/**", "docs/**"], "instructions": "roles/builder.md"},
        "reviewer": {"profile": "t-reviewer", "writes": [], "instructions": "roles/reviewer.md", "model": "s-review"},
    }
    return setup_crew(project, roles=roles, sequential={"steps": ["builder"]}, **kwargs)  # type: ignore[arg-type]


@pytest.mark.bwrap
def test_every_turn_gets_its_cost_in_the_turn_record_the_task_the_role_and_the_run(project: Path) -> None:
    """Worker: the tool's $0.25. Reviewer: 120 tokens at the user's price. Lead (plan, synthesis): unknown."""
    paths = priced_crew(project, tasks=[planned("t1")], worker=[work_rule(cost_usd=0.25)])
    run_id = create(paths)
    run = asyncio.run(drive(paths, run_id))
    assert run.status == "done", run.status_reason
    totals = run.totals
    assert totals.cost_usd == pytest.approx(0.25 + REVIEW_COST) and totals.unknown_cost_turns == 2
    t1 = run.tasks["t1"]
    assert t1.cost_usd == pytest.approx(0.25 + REVIEW_COST) and t1.unknown_cost_turns == 0
    spend = run.spend_by_role
    assert spend["lead"].cost_usd is None and spend["lead"].unknown_cost_turns == 2
    assert spend["builder"].cost_usd == pytest.approx(0.25)
    assert spend["reviewer"].cost_usd == pytest.approx(REVIEW_COST)
    store = SessionStore(paths.sessions_dir)
    worker = store.find(t1.session_id)
    reviewer = store.find(t1.review_session_id)
    assert [t["usage"]["cost_source"] for t in store.turns(worker)] == ["tool"]
    assert [(t["usage"]["cost_source"], t["model"]) for t in store.turns(reviewer)] == [("price_table", "s-review")]
    assert reviewer.totals.cost_usd == pytest.approx(REVIEW_COST)
    turns = [e for e in events(paths, run_id) if e["type"] == "turn"]
    assert {(e["role"], e["cost_usd"] is None) for e in turns} == {("lead", True), ("builder", False), ("reviewer", False)}

    text = run_cli("status", run_id, cwd=project)
    assert text.code == 0, text.err
    assert f"cost ${0.25 + REVIEW_COST:.4f} + 2 turns unknown" in text.out
    assert "by role: builder $0.2500 · lead unknown · reviewer $0.0001" in text.out
    listed = run_cli("runs", "--json", cwd=project)
    assert listed.code == 0, listed.err
    row = json.loads(listed.out)[0]
    assert row["cost_usd"] == pytest.approx(0.25 + REVIEW_COST) and row["unknown_cost_turns"] == 2
    assert "+ 2 turns unknown" in run_cli("runs", cwd=project).out
    view = views.run_status(paths, RunStore(paths).load(run_id))
    assert view["cost_unknown_turns"] == 2 and view["cost_known"] is False
    assert view["cost_by_role"]["lead"] == {"cost_usd": None, "cost_unknown_turns": 2, "cost_known": False,
                                            "subscription_turns": 0}
    assert view["tasks"][0]["cost_usd"] == pytest.approx(0.25 + REVIEW_COST)
    assert views.run_list(paths)[0]["cost_unknown_turns"] == 2


@pytest.mark.bwrap
def test_a_money_budget_pauses_the_task_before_review_until_the_person_adds_one(project: Path) -> None:
    """One work turn of $0.50 against a task budget of $0.30 (tokens unlimited): paused, then 'continue'."""
    paths = setup_crew(project, tasks=[planned("t1")], worker=[work_rule(cost_usd=0.5)],
                       limits={"budget": {"usd_per_task": 0.3}})
    run_id = create(paths)
    seen: dict[str, object] = {}

    async def person(engine):  # type: ignore[no-untyped-def]
        await until(engine, lambda e: open_checkpoint(e, "budget") is not None)
        t1 = engine.run.tasks["t1"]
        cp = open_checkpoint(engine, "budget")
        seen.update(state=t1.state, cost=t1.cost_usd, verdicts=len(t1.verdicts), question=cp.question)
        ok, message = await send(paths, run_id, action="answer", checkpoint=cp.id, text="continue")
        assert ok, message

    run = asyncio.run(drive(paths, run_id, person))
    assert seen["state"] == "paused_for_budget" and seen["cost"] == pytest.approx(0.5) and seen["verdicts"] == 0
    assert "cost $0.5000, over 120% of its money budget ($0.3000)" in str(seen["question"])
    assert run.status == "done", run.status_reason
    t1 = run.tasks["t1"]
    assert t1.state == "approved" and t1.attempts == 1
    assert t1.budget_extra_usd == pytest.approx(0.5) and run.task_usd_budget(t1) == pytest.approx(0.8)
    pauses = [e for e in events(paths, run_id) if e["type"] == "task.pause_budget"]
    assert len(pauses) == 1 and "money budget" in pauses[0]["why"]


@pytest.mark.bwrap
def test_a_spent_money_budget_stops_the_run_until_the_person_raises_it_in_dollars(project: Path) -> None:
    """Two tasks one after the other at $0.50 a work turn, $0.60 for the run: after t2's work the run
    starts nothing more and asks; 'raise $1' lets it finish."""
    paths = setup_crew(project, tasks=[planned("t1"), planned("t2", deps=["t1"])],
                       worker=[work_rule(cost_usd=0.5)], limits={"budget": {"usd_total": 0.6}})
    run_id = create(paths)
    run = asyncio.run(drive(paths, run_id, answering(("run_budget", "raise $1"))))
    assert run.status == "done", run.status_reason
    assert run.usd_budget == pytest.approx(1.6) and run.totals.cost_usd == pytest.approx(1.0)
    asked = next(c for c in run.checkpoints.values() if c.kind == "run_budget")
    assert "money budget is spent ($1.0000 of $0.6000)" in asked.question
    broken = [e for e in events(paths, run_id) if e["type"] == "run.status" and "circuit_broken" in e["what"]]
    assert broken and broken[0]["why"] == "run money budget spent"
    text = run_cli("status", run_id, cwd=project)
    assert "cost $1.0000 / $1.6000 + 4 turns unknown" in text.out, text.out


# ----------------------------------------------------------------------------- old files


def test_an_old_session_record_without_cost_fields_still_loads(tmp_path: Path) -> None:
    """A record and turns written before turns were priced (no cost source, no unknown-cost count)."""
    home = Path(__import__("os").environ["AGENT_BOX_HOME"])
    shutil.copytree(OLD_SESSIONS, home / "sessions")
    store = SessionStore(home / "sessions")
    record = store.find("f9b9c9cc")
    assert record.totals.cost_usd == pytest.approx(0.0012) and record.totals.unknown_cost_turns == 0
    turns = store.turns(record)
    assert [Usage.from_dict(t["usage"]).cost_source for t in turns] == [None, None]
    shown = run_cli("sessions", "show", "f9b9c9cc", cwd=tmp_path)
    assert shown.code == 0, shown.err


def test_an_old_run_without_cost_fields_loads_and_shows_its_cost_as_unknown(project: Path) -> None:
    """A finished run.json written before costs were kept per role and unknown-cost turns were counted."""
    data = json.loads((OLD_RUNS / "hierarchical-budget.json").read_text())
    assert "spend_by_role" not in data and "unknown_cost_turns" not in data["totals"]
    run_dir = project / ".agent-box" / "runs" / data["id"]
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps(data))
    (run_dir / "events.jsonl").write_text("")
    status = run_cli("status", data["id"], cwd=project)
    assert status.code == 0, status.err
    assert "cost unknown" in status.out
    stats = run_cli("stats", "--json", cwd=project)
    assert stats.code == 0, stats.err
    assert json.loads(stats.out)["runs"] == 1
