"""Files an older agentbox wrote load into the typed records unchanged.

The files under tests/data/old_state/0cf4f06/ are real: `agentbox demo --no-tui --keep`
run by the build at commit 0cf4f06 (the scripted demo crew, four roles, one rework), and
its run.json, events.jsonl, artifact manifest and one builder session (record and turns)
copied as they were. That build's session totals had no `turns`, its run totals were a
pydantic model of their own, and neither counted turns of unknown cost or on a subscription.
"""

from __future__ import annotations

import json
import shutil
import typing
from pathlib import Path

import pytest

from agentbox.core import runs
from agentbox.core.agents.sessions import SessionStore
from agentbox.core.engine.records import Event, EventKind
from agentbox.core.engine.run_store import RunStore
from agentbox.core.paths import ProjectPaths
from agentbox.core.records import Totals, TurnRecord
from agentbox.tui.screens.sessions import turn_detail, turn_status, turn_tokens
from agentbox.tui.widgets.events import event_line

OLD = Path(__file__).resolve().parents[1] / "data" / "old_state" / "0cf4f06"
RUN_ID = "run-20261202-032838-2781"
SESSION = "1212048c-547a-475e-be19-2b1fafc354b5"


def _kinds(literal: object) -> set[str]:
    out: set[str] = set()
    for arg in typing.get_args(literal):
        out |= _kinds(arg) if typing.get_origin(arg) is typing.Literal else {arg}
    return out


@pytest.fixture
def project(tmp_path: Path) -> ProjectPaths:
    shutil.copytree(OLD, tmp_path / ".agent-box")
    return ProjectPaths(tmp_path)


def test_an_old_run_loads_with_its_totals_in_the_one_totals(project: ProjectPaths) -> None:
    on_disk = json.loads((OLD / "runs" / RUN_ID / "run.json").read_text())["totals"]
    run = RunStore(project).load(RUN_ID)
    assert isinstance(run.totals, Totals)
    assert {k: getattr(run.totals, k) for k in on_disk} == on_disk
    assert run.totals.turns == 10 and run.totals.tokens == run.totals.known_tokens() > 0
    newer = {"unknown_cost_turns": 0, "subscription_turns": 0}  # counters that build did not have yet
    assert set(newer).isdisjoint(on_disk)
    assert json.loads(run.model_dump_json())["totals"] == {**on_disk, **newer}


def test_an_old_decision_log_reads_as_events_of_known_kinds(project: ProjectPaths) -> None:
    events, _ = RunStore(project).events(RUN_ID)
    tail, _ = runs.tail_events(project, RUN_ID, 500)
    assert len(events) == 80 and tail == events
    assert {e["type"] for e in events} <= _kinds(EventKind)
    assert [e["seq"] for e in events] == list(range(1, 81))
    turns: list[Event] = [e for e in events if e["type"] == "turn"]
    assert len(turns) == 10 and all(isinstance(e.get("tokens"), int) for e in turns)
    for event in events:  # the dashboard's log draws each one
        assert event["what"][:20] in event_line(event).plain


def test_an_old_manifest_reads_as_artifact_entries(project: ProjectPaths) -> None:
    entries = RunStore(project).manifest(RUN_ID)
    followed, _ = runs.read_manifest(project, RUN_ID)
    assert entries == followed and entries
    assert all(e["path"] and len(e.get("sha256") or "") == 64 and e.get("role") for e in entries)


def test_an_old_session_loads_and_its_turns_have_the_turn_record_keys(project: ProjectPaths) -> None:
    sessions = SessionStore(project.root / ".agent-box" / "sessions")
    on_disk = json.loads((OLD / "sessions" / "builder" / f"{SESSION}.json").read_text())
    assert "turns" not in on_disk["totals"]  # written before the one Totals counted turns
    record = sessions.find(SESSION)
    assert record.turns == 2 and record.totals.turns == 2  # taken from the record's own count
    assert record.totals.tokens == on_disk["totals"]["tokens"] == record.totals.known_tokens()
    assert record.as_dict()["totals"] == {**on_disk["totals"], "turns": 2, "unknown_cost_turns": 0,
                                          "subscription_turns": 0}
    required = {k for k, hint in typing.get_type_hints(TurnRecord, include_extras=True).items()
                if typing.get_origin(hint) is not typing.NotRequired}
    turns = sessions.turns(record)
    assert len(turns) == 2 and all(required <= set(turn) for turn in turns)
    assert [t["status"] for t in turns] == ["ok", "ok"]
    assert all("model" not in t for t in turns)  # written before turns named their model: NotRequired
    for turn in turns:  # the sessions screen draws them
        assert turn_status(turn).plain and turn_tokens(turn) and turn_detail(turn).renderables
