"""The liaison: a digest of the run's state with times, and a read-only turn that answers from it
(the demo's scripted liaison under real bwrap), continuing its session, never changing the run."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from pathlib import Path

import pytest

from agentbox.core.agents.sessions import SessionStore
from agentbox.core.engine.run_store import RunStore
from agentbox.core.paths import ProjectPaths
from agentbox.core.reports import liaison
from tests.conftest import run_cli
from tests.mcp.support import connected
from tests.tui.builders import RUN_ID, build_run, copy_example


@pytest.fixture
def waiting(tmp_path: Path) -> ProjectPaths:
    project = copy_example(tmp_path / "project")
    build_run(project, "waiting")
    return project


def _state_hashes(project: ProjectPaths) -> dict[str, str]:
    run_dir = RunStore(project).dir(RUN_ID)
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(run_dir.iterdir())
            if p.is_file() and p.name != "engine.lock"}  # asking whether an engine holds the lock makes the file


def _with_a_red_check(project: ProjectPaths) -> None:
    """The fixture run with a red submission check on greet (as the gates record one), saved by the store."""
    from agentbox.core.engine.models import CheckResult

    store = RunStore(project)
    run = store.load(RUN_ID)
    run.tasks["greet"].checks.append(CheckResult(
        name="smoke", stage="submission", commit="0123456789abcdef", passed=False, status="failed", exit_status=1,
        duration_s=1.5, log="runs/x/checks/smoke.log", command="pytest -q", tail="1 failed", at=1767268820.0,
        task="greet"))
    store.save(run)


def test_the_digest_gives_every_fact_with_its_time(waiting: ProjectPaths) -> None:
    _with_a_red_check(waiting)
    now = time.time()
    digest = liaison.digest_for(waiting, None)
    text = digest.text
    assert digest.run_id == RUN_ID and abs(digest.as_of - now) < 60
    assert text.startswith(f"Data as of {liaison.stamp(digest.as_of)}")
    assert "Engine: NOT running" in text and f"agentbox run --resume {RUN_ID}" in text
    assert "blocked (1):" in text and "docs (builder) in blocked since 2026-01-01 12:00:28 UTC" in text
    assert "cp-1 (question on docs), open since 2026-01-01 12:00:28 UTC" in text
    assert "English or in French" in text
    assert "greet (builder) in approved" in text and "attempt 2" in text
    assert "Last decisions (oldest first, 12):" in text and "checkpoint: cp-1 (question) waits" in text
    assert "cost where reported: $" in text
    assert "submission check smoke FAILED (exit 1) on 0123456789 at 2026-01-01 12:00:20 UTC" in text
    assert text.splitlines()[-1] == ("Summary: 2 approved, 1 blocked; 1 waiting for the human; 1 red check(s); "
                                     "engine NOT running.")


def test_without_a_run_the_digest_is_the_runs_list(tmp_path: Path) -> None:
    project = copy_example(tmp_path / "empty")
    digest = liaison.digest_for(project, None)
    assert digest.run_id is None and "Runs: none yet." in digest.text
    assert digest.text.splitlines()[-1] == "Summary: 0 run(s)."


@pytest.mark.bwrap
def test_the_liaison_answers_with_the_data_time_continues_and_changes_nothing(waiting: ProjectPaths) -> None:
    before = _state_hashes(waiting)
    first = asyncio.run(liaison.ask(waiting, "where are we?"))
    assert first.ok, first.error
    assert first.text.startswith(f"As of {liaison.stamp(first.as_of)}:")
    assert "1 blocked" in first.text and "engine NOT running" in first.text and "0 red check(s)" in first.text
    assert first.tokens == 960 and first.cost_usd == pytest.approx(0.0009)
    second = asyncio.run(liaison.ask(waiting, "and now?", RUN_ID))
    assert second.ok and second.session_id == first.session_id, "a follow-up continues the liaison's session"
    assert "You asked before" in second.text and second.as_of >= first.as_of
    [record] = SessionStore(waiting.sessions_dir).list("liaison")
    assert record.turns == 2 and record.run_id == RUN_ID
    turns = SessionStore(waiting.sessions_dir).turns(record)
    assert "Question: where are we?" in turns[0]["prompt"] and "--- state digest ---" in turns[1]["prompt"]
    assert _state_hashes(waiting) == before, "run.json, the decision log and the rest are byte-identical"
    assert SessionStore(waiting.sessions_dir).list("lead") == [] or all(
        r.id != first.session_id for r in SessionStore(waiting.sessions_dir).list("lead"))


@pytest.mark.bwrap
def test_agentbox_ask_prints_the_answer_under_its_data_time(waiting: ProjectPaths) -> None:
    result = run_cli("--project", str(waiting.root), "ask", RUN_ID[:12], "where", "are", "we?")
    assert result.code == 0, result.err
    first, answer, footer = result.out.splitlines()[:3]
    assert first.startswith(f"liaison on {RUN_ID} · data as of 20")
    assert answer.startswith("As of ") and footer.startswith("— 960 tokens · $0.0009 · session ")
    as_json = run_cli("--project", str(waiting.root), "ask", "--runs", "how many runs?", "--json")
    data = json.loads(as_json.out)
    assert data["ok"] and data["run"] is None and "1 run(s): 1 waiting_user" in data["answer"]
    assert run_cli("--project", str(waiting.root), "ask", "  ").code == 2


@pytest.mark.bwrap
async def test_the_mcp_ask_tool(waiting: ProjectPaths) -> None:
    async with connected(waiting) as client:
        answer = await client.ok("ask", question="where are we?")
    assert answer["run"] == RUN_ID and answer["answer"].startswith(f"As of {answer['data_as_of']}:")
    assert answer["tokens"] == 960


def test_a_questions_first_word_is_never_taken_for_the_end_of_a_run_id(waiting: ProjectPaths) -> None:
    from agentbox.cli.ask import _split

    tail = RUN_ID.rsplit("-", 1)[1]  # run ids end in four hex digits, which a word may spell
    assert _split(waiting, [tail, "is", "it", "done?"]) == (None, f"{tail} is it done?")
    assert _split(waiting, [RUN_ID[:12], "is", "it", "done?"]) == (RUN_ID, "is it done?")
    assert _split(waiting, ["latest", "where?"]) == (RUN_ID, "where?")


def test_a_crew_liaison_role_lends_its_profile_never_its_sessions(waiting: ProjectPaths) -> None:
    crew = waiting.root / ".agent-box" / "crew.yaml"
    text = crew.read_text()
    lines = [line for line in text.splitlines() if not line.startswith("liaison:")]
    crew.write_text("\n".join(lines) + "\nliaison: lead\n")
    agent = liaison.liaison_agent(waiting)
    assert agent.label == liaison.LIAISON_OWNER and agent.writes == ()
