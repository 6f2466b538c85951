"""`core.runs` as the faces' one door: what every face shows the same way is defined there once.

How to answer a checkpoint (the CLI's commands and the MCP face's tool calls name the same
answers), following a run (one follower for the CLI's person and MCP's `follow`), human
commands as typed models (checked once on the direct path), the mode names.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from agentbox.cli.runs import answer_commands
from agentbox.core import runs
from agentbox.core.config.models import MODES
from agentbox.core.engine import commands
from agentbox.core.engine.engine import Engine
from agentbox.core.engine.mode_state import STATE_BY_MODE
from agentbox.core.engine.models import SETTINGS_BY_MODE, Checkpoint, Contract, Run, Task
from agentbox.core.errors import UsageError
from agentbox.core.paths import ProjectPaths
from agentbox.core.tasks import TaskState
from agentbox.mcp.views import how_to_answer


@pytest.fixture
def paths(project: Path) -> ProjectPaths:
    return ProjectPaths(project)


def a_run(*checkpoints: Checkpoint, reviewing: bool = False) -> Run:
    task = Task(id="t1", assignee="builder", brief="b", state=TaskState.REVIEWING if reviewing else TaskState.PAUSED_FOR_BUDGET)
    return Run(id="run-1", contract=Contract(goal="g", mode="hierarchical"), tasks={"t1": task},
               checkpoints={c.id: c for c in checkpoints})


# ----------------------------------------------------------------------------- how to answer a checkpoint
@pytest.mark.parametrize(("kind", "options", "words"), [
    ("budget", [], ["TOKENS to add", "continue", "cancel"]),
    ("retry_escalation", [], ["retry [NOTE]", "cancel"]),
    ("run_budget", [], ["raise TOKENS", "cancel"]),
    ("ladder", ["rewrite", "advisor", "abandon"], ["rewrite", "advisor", "abandon"]),
])
def test_the_cli_and_mcp_offer_the_same_answers_to_a_checkpoint(kind: str, options: list[str],
                                                                 words: list[str]) -> None:
    """The answers are defined once, in core; each face only words the call that gives them
    (a budget pause once said 'TOKENS to add' on the CLI and 'continue' over MCP)."""
    cp = Checkpoint(id="cp-1", kind=kind, question="?", task="t1", options=options)  # type: ignore[arg-type]
    view = runs.checkpoint_view(a_run(cp), cp)
    assert [w for w in words if w in view.words] == words
    cli = " ".join(command for _, command in answer_commands(view))
    mcp = how_to_answer(view)
    for word in view.words:
        assert word in cli and f"'{word}'" in mcp, (word, cli, mcp)
    assert 'agentbox answer run-1 cp-1 "' in cli and 'answer_checkpoint(checkpoint="cp-1", run="run-1"' in mcp


def test_a_task_in_review_is_approved_or_sent_back_in_both_faces() -> None:
    cp = Checkpoint(id="cp-2", kind="question", question="ok?", task="t1")
    view = runs.checkpoint_view(a_run(cp, reviewing=True), cp)
    assert view.offers("approve_task") and view.offers("rework_task")
    assert dict(answer_commands(view))["approve"] == "agentbox approve t1 --run run-1"
    assert 'approve_task(task="t1", run="run-1")' in how_to_answer(view)


def test_a_deliver_checkpoint_names_its_answers_over_mcp_too() -> None:
    """The deliver answers (merge, squash, later) reach MCP, which used to say only 'your answer'."""
    cp = Checkpoint(id="cp-3", kind="deliver", question="merge?")
    view = runs.checkpoint_view(a_run(cp), cp)
    assert [what for what, _ in answer_commands(view)] == ["merge", "one commit", "look first"]
    assert all(f"'{word}'" in how_to_answer(view) for word in ("merge", "squash", "later"))


# ----------------------------------------------------------------------------- commands as models
def test_a_command_model_is_its_inbox_line() -> None:
    assert commands.as_json(commands.Approve(task="t1", note="fine")) == {"action": "approve", "task": "t1", "note": "fine"}
    assert commands.parse(commands.as_json(commands.Deliver(into=None, squash=True))) == \
        commands.Deliver(into=None, squash=True)


def test_a_bad_value_from_a_person_is_a_usage_error_naming_the_field() -> None:
    with pytest.raises(UsageError, match="malformed command: commit"):
        commands.Approve.of(task="t1", note="n", commit="not-hex")


def test_the_direct_path_checks_a_command_once(paths: ProjectPaths, monkeypatch: pytest.MonkeyPatch) -> None:
    """A face's command is checked once on its way in: as JSON it is parsed once (it was
    parsed twice: by the door and again by the engine), as a model not at all."""
    calls: list[object] = []
    parse = commands.parse
    monkeypatch.setattr(commands, "parse", lambda raw: calls.append(raw) or parse(raw))
    run = runs.create_run(paths, "pause me")
    assert runs.send_command(paths, run.id, {"action": "pause"})[0]
    assert len(calls) == 1
    assert runs.send_command(paths, run.id, commands.Resume())[0]
    assert len(calls) == 1
    assert not runs.load(paths, run.id).paused


def test_a_typed_command_reaches_a_running_engine_as_json(paths: ProjectPaths) -> None:
    """Through the inbox a model travels as its JSON line (the fields given, no nulls); the engine applies it."""
    from tests.engine.test_run_store import FakeEngineProcess

    run = runs.create_run(paths, "steer me")
    with FakeEngineProcess(paths, run.id):
        ok, message = runs.send_command(paths, run.id, commands.Pause(note="coffee"))
    assert ok and message.startswith("pause applied"), message
    (line,) = (json.loads(raw) for raw in (paths.run_dir(run.id) / "inbox.jsonl").read_text().splitlines())
    assert {k: v for k, v in line.items() if k not in ("id", "at")} == {"action": "pause", "note": "coffee"}
    assert runs.load(paths, run.id).paused


# ----------------------------------------------------------------------------- following a run
def test_the_follower_reads_what_is_new_and_rereads_a_run_only_when_it_changed(paths: ProjectPaths) -> None:
    engine = Engine(paths, runs.create_run(paths, "follow me"))
    engine.ledger.event("note", "before")
    engine.save()
    follower = runs.RunFollower(paths, engine.run.id, events="new")
    first = follower.poll()
    assert first.changed and first.events == () and not first.settled
    assert not follower.poll().changed  # nothing saved: not parsed again
    engine.ledger.event("note", "after")
    engine.save()
    update = follower.poll()
    assert update.changed and [e["what"] for e in update.events] == ["after"]
    everything = runs.RunFollower(paths, engine.run.id, events="all").poll()
    assert [e["what"] for e in everything.events][-2:] == ["before", "after"]


def test_following_ends_when_the_run_needs_a_person(paths: ProjectPaths) -> None:
    engine = Engine(paths, runs.create_run(paths, "ask me"))
    engine.ledger.checkpoint("question", "Which colour?")
    engine.save()

    async def followed() -> list[runs.RunUpdate]:
        return [u async for u in runs.follow(paths, engine.run.id, 60.0, from_start=True, poll_s=0.01)]

    updates = asyncio.run(followed())
    assert len(updates) == 1 and updates[0].settled
    assert [c.kind for c in updates[0].open_checkpoints] == ["question"]
    assert any(e["type"] == "checkpoint" for e in updates[0].events)


def test_following_from_a_thread_stops_when_told(paths: ProjectPaths) -> None:
    run = runs.create_run(paths, "watch me")
    looks = iter([True, True, False])
    updates = list(runs.follow_sync(paths, run.id, lambda: next(looks), events="none"))
    assert [u.changed for u in updates] == [True, False, False]


# ----------------------------------------------------------------------------- mode names
def test_mode_names_are_defined_once() -> None:
    from agentbox.cli.parser import build_parser

    assert set(SETTINGS_BY_MODE) == set(STATE_BY_MODE) == set(MODES)
    parser = build_parser()
    assert parser.parse_args(["run", "--mode", "group_chat", "g"]).mode == "group_chat"
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "--mode", "committee", "g"])
