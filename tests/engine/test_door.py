"""`core.runs` as the faces' one door: what every face shows the same way is defined there once.

How to answer a checkpoint (the CLI's commands and the MCP face's tool calls name the same
answers), following a run (one follower for the CLI's person, MCP's `follow` and the TUI's
dashboard and task screen, and no face reading a run's log or state on its own), human
commands as typed models (checked once on the direct path), the mode names.
"""

from __future__ import annotations

import ast
import asyncio
import json
import os
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


def test_a_look_between_a_save_and_its_log_append_still_hands_on_the_saves_events(paths: ProjectPaths) -> None:
    """The engine saves its state (events in its outbox), then appends them to the log: a follower
    that sees the state in between has its events from the outbox, and the log's copy is not handed on twice."""
    engine = Engine(paths, runs.create_run(paths, "ask me"))
    engine.ledger.event("note", "logged")
    engine.save()
    follower = runs.RunFollower(paths, engine.run.id, events="all")
    assert [e["what"] for e in follower.poll().events][-1] == "logged"
    engine.ledger.checkpoint("question", "Which colour?")
    store = engine.store
    store._state.save(store.dir(engine.run.id), engine.run, engine.ledger.changes)  # saved, not appended yet
    between = follower.poll()
    assert between.settled and [e["type"] for e in between.events] == ["checkpoint"]
    store.flush_outbox(engine.run)
    engine.ledger.event("note", "later")
    engine.save()
    assert [e["what"] for e in follower.poll().events] == ["later"]  # the checkpoint's log line is not handed on again
    with store.events_path(engine.run.id).open("a") as log:  # a hand-made line: its seq no number
        log.write(json.dumps({"seq": "x", "type": "note", "what": "by hand"}) + "\n")
    assert [e["what"] for e in runs.RunFollower(paths, engine.run.id, events="all").poll().events][-1] == "by hand"
    assert follower.poll().events == ()  # after a hand-on from the outbox: not a crash, the line left out


def test_following_from_a_thread_stops_when_told(paths: ProjectPaths) -> None:
    run = runs.create_run(paths, "watch me")
    looks = iter([True, True, False])
    updates = list(runs.follow_sync(paths, run.id, lambda: next(looks), events="none"))
    assert [u.changed for u in updates] == [True, False, False]


def test_a_tail_follower_opens_a_big_log_at_its_end_then_follows_it(paths: ProjectPaths) -> None:
    """The dashboard's way in: the last records first (a big log is never read whole), then what is appended."""
    engine = Engine(paths, runs.create_run(paths, "a long log"))
    for n in range(300):
        engine.ledger.event("note", f"old {n}")
    engine.save()
    follower = runs.RunFollower(paths, engine.run.id, events="tail", tail=20)
    first = follower.poll()
    assert [e["what"] for e in first.events] == [f"old {n}" for n in range(280, 300)]
    from agentbox.core.engine.run_store import RunStore

    assert follower.offset == RunStore(paths).events_path(engine.run.id).stat().st_size
    engine.ledger.event("note", "new one")
    engine.save()
    assert [e["what"] for e in follower.poll().events] == ["new one"]


def test_a_look_changes_nothing_until_it_is_taken(paths: ProjectPaths) -> None:
    """A look is made where the follower stands and read anywhere; only `take` moves the follower,
    once: the same look again (or a look another follower made) is dropped, so no record shows twice."""
    engine = Engine(paths, runs.create_run(paths, "look at me"))
    engine.save()
    follower = runs.RunFollower(paths, engine.run.id, events="all")
    follower.take(follower.reader("events")())
    engine.ledger.event("note", "one")
    engine.save()
    reader = follower.reader("events")
    look = reader()
    assert [e["what"] for e in look.events] == ["one"] and not look.opening_events
    assert follower.offset == look.since.events != look.at.events  # read, not yet taken
    assert follower.take(look) and follower.offset == look.at.events
    assert not follower.take(look)  # overtaken by itself: nothing moves twice
    assert not follower.take(reader())  # made from a position the follower has left
    other = runs.RunFollower(paths, engine.run.id, events="all", at=look.since)
    assert not follower.take(other.reader("events")())  # another follower's look
    assert follower.offset == look.at.events


def test_each_part_of_a_look_moves_only_its_own_offset(paths: ProjectPaths) -> None:
    """The dashboard reads the log, the manifest and the state separately: one part taken leaves
    the others where they were, and a look at one part is not stale because another moved."""
    engine = Engine(paths, runs.create_run(paths, "parts"))
    engine.ledger.event("note", "e1")
    engine.save()
    from agentbox.core.engine.run_store import RunStore

    store = RunStore(paths)
    made = paths.root / "made.txt"
    made.write_text("x")
    store.record_artifact(engine.run.id, made, role="builder", session=None, task=None)
    follower = runs.RunFollower(paths, engine.run.id, events="tail", manifest=True)
    manifest_look = follower.reader("manifest")
    assert follower.take(follower.reader("events")())
    assert follower.offset is not None and follower.manifest_offset is None
    taken = manifest_look()  # made before the log was taken: still current for the manifest
    assert taken.opening_manifest and [Path(e["path"]).name for e in taken.manifest] == ["made.txt"]
    assert follower.take(taken) and follower.manifest_offset == taken.at.manifest
    run_look = follower.reader("run")()
    assert run_look.run is not None and follower.take(run_look) and follower.run is run_look.run
    update = follower.poll()
    assert update.manifest == () and update.events == () and not update.changed


def test_a_followed_run_whose_files_did_not_change_is_not_read_again(paths: ProjectPaths,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The state is read again only when a stat of its files changed (and parsed only when more than
    the save time differs): what the dashboard does on every fact of the watcher, and the CLI at every look."""
    engine = Engine(paths, runs.create_run(paths, "stat me"))
    engine.save()
    reads: list[str] = []
    real = runs.read_run_if_changed
    monkeypatch.setattr(runs, "read_run_if_changed", lambda *a: reads.append(a[1]) or real(*a))
    follower = runs.RunFollower(paths, engine.run.id, events="none")
    assert follower.poll().changed and len(reads) == 1
    assert not follower.poll().changed and len(reads) == 1  # same stat: not read
    engine.ledger.event("note", "a change")
    engine.save()
    changed = follower.poll()
    assert changed.changed and len(reads) == 2 and changed.run.seq == engine.run.seq


def test_a_task_follower_reads_only_that_tasks_records(paths: ProjectPaths) -> None:
    engine = Engine(paths, runs.create_run(paths, "two tasks"))
    engine.ledger.event("note", "about a", task="ta")
    engine.ledger.event("note", "about b", task="tb")
    engine.save()
    follower = runs.RunFollower(paths, engine.run.id, events="all", task="ta")
    assert [e["what"] for e in follower.poll().events] == ["about a"]
    engine.ledger.event("note", "more about b", task="tb")
    engine.ledger.event("note", "more about a", task="ta")
    engine.save()
    assert [e["what"] for e in follower.poll().events] == ["more about a"]


def test_a_damaged_log_is_a_failure_of_the_look(paths: ProjectPaths) -> None:
    """Following from a poll raises it (the CLI skips that look, MCP reports it); the dashboard's look
    carries it, and its follower opens the log as read (empty) rather than asking again and again."""
    from agentbox.core.engine.run_store import RunStore
    from agentbox.core.errors import AgentboxError

    run = runs.create_run(paths, "damaged")
    log = RunStore(paths).events_path(run.id)
    log.unlink(missing_ok=True)
    os.mkfifo(log)  # not a regular file: never opened
    follower = runs.RunFollower(paths, run.id, events="tail")
    with pytest.raises(AgentboxError):
        follower.poll()
    look = follower.reader("events")()
    assert isinstance(look.failure, AgentboxError) and look.events == ()
    assert follower.take(look) and follower.offset == 0


# ----------------------------------------------------------------------------- no face follows on its own
FACE_DIRS = ("cli", "tui", "mcp", "web")
FOLLOW_PRIMITIVES = frozenset({"read_events", "tail_events", "read_manifest", "task_events", "read_run_if_changed"})
"""The door's readers that resume from an offset or a digest: only its follower calls them for a face."""
FOLLOWERS = frozenset({"RunFollower", "follow", "follow_sync"})


def _door_names(tree: ast.AST) -> set[str]:
    """The names a module binds to `agentbox.core.runs` (`from agentbox.core import runs as x`, `import ... as x`)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "agentbox.core":
            names |= {a.asname or a.name for a in node.names if a.name == "runs"}
        elif isinstance(node, ast.Import):
            names |= {a.asname for a in node.names if a.name == "agentbox.core.runs" and a.asname}
    return names


def follows_on_its_own(source: str) -> list[str]:
    """Where a face's source reads a run's log, manifest or state from an offset or digest of its own."""
    tree = ast.parse(source)
    door = _door_names(tree)
    found = [f"line {node.lineno}: runs.{node.attr}" for node in ast.walk(tree)
             if isinstance(node, ast.Attribute) and node.attr in FOLLOW_PRIMITIVES
             and isinstance(node.value, ast.Name) and node.value.id in door]
    found += [f"line {node.lineno}: imports {a.name} from the door" for node in ast.walk(tree)
              if isinstance(node, ast.ImportFrom) and node.module == "agentbox.core.runs"
              for a in node.names if a.name in FOLLOW_PRIMITIVES]
    return found


def _face_sources() -> dict[str, str]:
    package = Path(runs.__file__).resolve().parents[1]
    return {str(path.relative_to(package.parent)): path.read_text(encoding="utf-8")
            for face in FACE_DIRS for path in sorted((package / face).rglob("*.py"))}


def test_no_face_follows_a_run_but_through_the_doors_follower() -> None:
    """Log offsets, change detection and a first read's tail are the follower's: a face that read
    `runs.read_events` from an offset of its own would keep a second copy of them."""
    violations = {name: found for name, source in _face_sources().items() if (found := follows_on_its_own(source))}
    assert violations == {}


def test_the_contract_sees_a_face_following_on_its_own() -> None:
    """The scan above could pass by seeing nothing: planted reads, in each spelling, are found."""
    planted = ("from agentbox.core import runs as door\n"
               "def f(p, r, o):\n    return door.read_events(p, r, o)\n")
    assert follows_on_its_own(planted) == ["line 3: runs.read_events"]
    assert follows_on_its_own("from agentbox.core.runs import tail_events, load\n") == \
        ["line 1: imports tail_events from the door"]
    assert follows_on_its_own("import agentbox.core.runs as r\nr.read_run_if_changed(1, 2, None)\n") == \
        ["line 2: runs.read_run_if_changed"]
    assert follows_on_its_own("from agentbox.core import runs\nruns.recent_events(p, r, 5)\n") == []


def test_every_face_that_follows_a_run_uses_the_follower() -> None:
    """The CLI's person, MCP's `follow`, the dashboard and the task screen: each names the door's follower."""
    sources = _face_sources()
    for module, follower in (("agentbox/cli/runs.py", "follow_sync"), ("agentbox/mcp/server.py", "follow"),
                             ("agentbox/tui/screens/dashboard.py", "RunFollower"),
                             ("agentbox/tui/screens/task.py", "RunFollower")):
        tree = ast.parse(sources[module])
        assert any(isinstance(node, ast.Attribute) and node.attr == follower for node in ast.walk(tree)) or \
            any(isinstance(node, ast.ImportFrom) and node.module == "agentbox.core.runs"
                and follower in {a.name for a in node.names} for node in ast.walk(tree)), (module, follower)


def test_the_faces_follow_at_the_doors_pace() -> None:
    """One poll interval and one engine grace for following a run: the CLI's person and MCP kept their own copies."""
    import agentbox.mcp.server as mcp_server
    from agentbox.cli.runs import Person

    assert not hasattr(Person, "POLL_S") and not hasattr(mcp_server, "FOLLOW_POLL_S")
    assert not hasattr(mcp_server, "ENGINE_GRACE_S")
    assert Person(ProjectPaths(Path("/nonexistent")), "r", interactive=False).poll_s == runs.FOLLOW_POLL_S


# ----------------------------------------------------------------------------- mode names
def test_mode_names_are_defined_once() -> None:
    from agentbox.cli.parser import build_parser

    assert set(SETTINGS_BY_MODE) == set(STATE_BY_MODE) == set(MODES)
    parser = build_parser()
    assert parser.parse_args(["run", "--mode", "group_chat", "g"]).mode == "group_chat"
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "--mode", "committee", "g"])
