"""The run store's crash-safety and single-writer rules, without agents.

Events reach events.jsonl through the outbox saved with the state (flushed again on
resume, idempotent by seq); human commands reach a running engine through the inbox,
or are applied directly under the engine lock when no engine runs.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agentbox.core import runs, store
from agentbox.core.engine.engine import Engine
from agentbox.core.engine.run_store import RUN_FILE, RunStore, new_run_id
from agentbox.core.paths import ProjectPaths


@pytest.fixture
def paths(project: Path) -> ProjectPaths:
    return ProjectPaths(project)


def fresh_engine(paths: ProjectPaths) -> Engine:
    return Engine(paths, runs.create_run(paths, "store things"))


def seqs(paths: ProjectPaths, run_id: str) -> list[int]:
    return [e["seq"] for e in RunStore(paths).events(run_id)[0]]


def test_run_ids_sort_by_time_and_read_well() -> None:
    first, second = new_run_id(1_800_000_000.0), new_run_id(1_800_000_001.0)
    assert first.startswith("run-2027") and len(first) == len("run-20270115-080000-abcd")
    assert sorted([second, first]) == [first, second]


def test_save_moves_the_outbox_into_the_log(paths: ProjectPaths) -> None:
    engine = fresh_engine(paths)
    for n in range(3):
        engine.ledger.event("note", f"event {n}")
    assert len(engine.run.outbox) == 3
    engine.save()
    assert engine.run.outbox == []
    assert seqs(paths, engine.run.id) == [1, 2, 3]


def test_flush_is_idempotent_by_seq(paths: ProjectPaths) -> None:
    engine = fresh_engine(paths)
    rs = RunStore(paths)
    records = [engine.ledger.event("note", f"event {n}") for n in range(4)]
    engine.save()
    engine.run.outbox = list(records)
    rs.flush_outbox(engine.run)
    rs.flush_outbox(engine.run)
    assert seqs(paths, engine.run.id) == [1, 2, 3, 4]


def test_a_crash_between_the_state_write_and_the_append_loses_nothing(paths: ProjectPaths) -> None:
    """run.json holds the outbox; only part of it reached the log; resume appends the rest once."""
    engine = fresh_engine(paths)
    rs = RunStore(paths)
    engine.ledger.event("note", "before")
    engine.save()
    pending = [engine.ledger.event("note", f"pending {n}") for n in range(3)]
    state_path = rs.dir(engine.run.id) / RUN_FILE
    store.atomic_write_bytes(state_path, engine.run.model_dump_json().encode())
    store.append_jsonl(rs.events_path(engine.run.id), pending[0])
    resumed = rs.load(engine.run.id)
    assert [e["seq"] for e in resumed.outbox] == [2, 3, 4]
    Engine(paths, resumed).recover()
    rs.save(resumed)
    log = rs.events(engine.run.id)[0]
    assert [e["seq"] for e in log] == [1, 2, 3, 4, 5]
    assert log[-1]["type"] == "engine.started"


def test_a_crash_before_the_state_write_rolls_the_events_back_too(paths: ProjectPaths) -> None:
    """Events of a state never saved never reach the log, and their seqs are reused: no gap."""
    engine = fresh_engine(paths)
    engine.ledger.event("note", "saved")
    engine.save()
    engine.ledger.event("note", "lost with its state")
    resumed = Engine.open(paths, engine.run.id)
    resumed.ledger.event("note", "after the restart")
    resumed.save()
    log = RunStore(paths).events(engine.run.id)[0]
    assert [(e["seq"], e["what"]) for e in log] == [(1, "saved"), (2, "after the restart")]


def test_a_torn_last_line_is_terminated_before_appending(paths: ProjectPaths) -> None:
    engine = fresh_engine(paths)
    engine.ledger.event("note", "one")
    engine.save()
    with RunStore(paths).events_path(engine.run.id).open("ab") as handle:
        handle.write(b'{"seq": 2, "type": "no')
    engine.ledger.event("note", "two")
    engine.save()
    log = RunStore(paths).events(engine.run.id)[0]
    assert [(e["seq"], e["what"]) for e in log] == [(1, "one"), (2, "two")]


# ----------------------------------------------------------------------------- commands


def test_send_command_applies_directly_when_no_engine_runs(paths: ProjectPaths) -> None:
    run = runs.create_run(paths, "pause me")
    ok, message = runs.send_command(paths, run.id, {"action": "pause"})
    assert ok and "paused" in message
    state = RunStore(paths).load(run.id)
    assert state.paused
    (event,) = [e for e in RunStore(paths).events(run.id)[0] if e["type"] == "command"]
    assert event["type"] == "command" and event["ok"] is True
    assert not (RunStore(paths).dir(run.id) / "inbox.jsonl").exists()


def test_send_command_refusal_is_reported_and_logged(paths: ProjectPaths) -> None:
    run = runs.create_run(paths, "answer nothing")
    ok, message = runs.send_command(paths, run.id, {"action": "answer", "checkpoint": "cp-9", "text": "hi"})
    assert not ok and "cp-9" in message
    (event,) = [e for e in RunStore(paths).events(run.id)[0] if e["type"] == "command"]
    assert event["ok"] is False
    ok, message = runs.send_command(paths, run.id, {"action": "approve", "task": "nope"})
    assert not ok and "no task 'nope'" in message


class FakeEngineProcess:
    """Holds the engine lock in a thread and applies the inbox like the engine loop does."""

    def __init__(self, paths: ProjectPaths, run_id: str, *, applies: bool = True, hold_s: float = 10.0) -> None:
        self.paths, self.run_id, self.applies, self.hold_s = paths, run_id, applies, hold_s
        self.locked = threading.Event()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        with RunStore(self.paths).engine_lock(self.run_id) as mine:
            assert mine
            engine = Engine.open(self.paths, self.run_id)
            self.locked.set()
            deadline = time.monotonic() + self.hold_s
            while not self.stop.is_set() and time.monotonic() < deadline:
                if self.applies:  # what the engine's loop does with its inbox
                    engine._apply_inbox()
                    engine.save_if_changed()
                time.sleep(0.02)

    def __enter__(self) -> FakeEngineProcess:
        self.thread.start()
        assert self.locked.wait(5)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.thread.join(5)


def test_send_command_goes_through_the_inbox_while_an_engine_runs(paths: ProjectPaths) -> None:
    run = runs.create_run(paths, "steer me")
    with FakeEngineProcess(paths, run.id):
        ok, message = runs.send_command(paths, run.id, {"action": "pause", "note": "coffee"})
        assert ok and message.startswith("pause applied"), message
        ok, message = runs.send_command(paths, run.id, {"action": "answer", "checkpoint": "cp-1", "text": "x"})
        assert not ok and message.startswith("answer refused")
    rs = RunStore(paths)
    inbox = [json.loads(line) for line in (rs.dir(run.id) / "inbox.jsonl").read_text().splitlines()]
    assert [c["action"] for c in inbox] == ["pause", "answer"]
    state = rs.load(run.id)
    assert state.paused and state.applied_commands == [c["id"] for c in inbox]
    acks = [e for e in rs.events(run.id)[0] if e["type"] == "command"]
    assert [(e["command_id"], e["ok"], e["why"]) for e in acks] == [
        (inbox[0]["id"], True, "coffee"), (inbox[1]["id"], False, None)]


def test_a_command_the_engine_never_applied_is_applied_once_when_it_exits(paths: ProjectPaths) -> None:
    """The engine dies holding an unread command: the sender applies it itself; a later engine skips it."""
    run = runs.create_run(paths, "die on me")
    with FakeEngineProcess(paths, run.id, applies=False, hold_s=0.4):
        ok, message = runs.send_command(paths, run.id, {"action": "pause"})
    assert ok and "paused" in message
    rs = RunStore(paths)
    assert rs.load(run.id).paused
    engine = Engine.open(paths, run.id)
    engine._apply_inbox()
    engine.save()
    acks = [e for e in rs.events(run.id)[0] if e["type"] == "command"]
    assert len(acks) == 1
    assert rs.load(run.id).inbox_offset > 0


def test_an_unacknowledged_command_waits_in_the_inbox(paths: ProjectPaths, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runs, "COMMAND_ACK_TIMEOUT_S", 0.3)
    run = runs.create_run(paths, "busy engine")
    with FakeEngineProcess(paths, run.id, applies=False):
        ok, message = runs.send_command(paths, run.id, {"action": "pause"})
        assert ok and "queued for the engine" in message
        assert not RunStore(paths).load(run.id).paused
    engine = Engine.open(paths, run.id)
    engine._apply_inbox()
    assert engine.run.paused


def test_the_same_command_is_applied_once(paths: ProjectPaths) -> None:
    run = runs.create_run(paths, "twice")
    rs = RunStore(paths)
    command = {"id": "cmd-fixed", "action": "pause"}
    rs.post_command(run.id, command)
    rs.post_command(run.id, command)
    engine = Engine.open(paths, run.id)
    engine._apply_inbox()
    assert engine.apply_command(command) == (True, "already applied")
    engine.save()
    assert len([e for e in rs.events(run.id)[0] if e["type"] == "command"]) == 1
