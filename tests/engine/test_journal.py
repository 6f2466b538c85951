"""Saving a run costs what changed: run.json is a snapshot, each later save one journal line.

A load replays the journal onto the snapshot; a torn last line (a crash mid-append) is a
save that never happened; a damaged line is located; a big journal is folded into a new
snapshot; readers in other processes always get a whole state.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agentbox.core import runs
from agentbox.core.engine.engine import Engine
from agentbox.core.engine.models import Task
from agentbox.core.engine.run_store import RUN_FILE, DamagedRunError, RunStore, journal_name
from agentbox.core.engine.rundir import snapshot
from agentbox.core.errors import StateError
from agentbox.core.paths import ProjectPaths
from agentbox.core.tasks import TaskEvent


@pytest.fixture
def paths(project: Path) -> ProjectPaths:
    return ProjectPaths(project)


def engine_with_tasks(paths: ProjectPaths, count: int) -> Engine:
    engine = Engine(paths, runs.create_run(paths, "journal things"))
    for n in range(count):
        engine.ledger.add_task(Task(id=f"t{n}", assignee="lead", brief=f"task {n} " + "x" * 200), "planned")
    engine.save()  # the engine's first save: a snapshot
    return engine


def journal(paths: ProjectPaths, engine: Engine) -> Path:
    files = sorted(RunStore(paths).dir(engine.run.id).glob("journal-*.jsonl"))
    assert len(files) == 1, files
    return files[0]


def test_a_save_after_the_snapshot_appends_one_line_and_leaves_run_json_alone(paths: ProjectPaths) -> None:
    engine = engine_with_tasks(paths, 5)
    state = RunStore(paths).dir(engine.run.id) / RUN_FILE
    before = state.stat()
    engine.ledger.transition(engine.run.tasks["t3"], TaskEvent.DISPATCH, "go")
    engine.save()
    assert (state.stat().st_ino, state.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    lines = journal(paths, engine).read_bytes().splitlines()
    assert len(lines) == 1 and b'"t3"' in lines[0] and b'"t2"' not in lines[0]
    loaded = RunStore(paths).load(engine.run.id)
    assert loaded.tasks["t3"].state == "executing" and loaded.tasks["t2"].state == "queued"
    assert loaded.model_dump(exclude={"outbox"}) == engine.run.model_dump(exclude={"outbox"})


def test_what_a_save_writes_follows_the_change_not_the_run(paths: ProjectPaths) -> None:
    sizes = []
    for count in (10, 1000):
        engine = engine_with_tasks(paths, count)
        engine.ledger.transition(engine.run.tasks["t1"], TaskEvent.DISPATCH, "go")
        engine.save()
        sizes.append(journal(paths, engine).stat().st_size)
    snapshot_growth = 100  # the 1000-task snapshot is ~100 times the 10-task one; the line is not
    assert sizes[1] < 1.5 * sizes[0] < sizes[0] * snapshot_growth, sizes


def test_a_torn_last_line_is_a_save_that_never_happened(paths: ProjectPaths) -> None:
    engine = engine_with_tasks(paths, 3)
    engine.ledger.transition(engine.run.tasks["t0"], TaskEvent.DISPATCH, "go")
    engine.save()
    path = journal(paths, engine)
    with path.open("ab") as handle:
        handle.write(b'{"n":99,"run":{"status":"do')
    loaded = RunStore(paths).load(engine.run.id)
    assert loaded.tasks["t0"].state == "executing" and loaded.status == engine.run.status
    # the next engine starts from a snapshot: the torn journal is gone, nothing is lost
    resumed = Engine.open(paths, engine.run.id)
    resumed.ledger.transition(resumed.run.tasks["t1"], TaskEvent.DISPATCH, "go")
    resumed.save()
    assert not path.exists()
    again = RunStore(paths).load(engine.run.id)
    assert again.tasks["t0"].state == again.tasks["t1"].state == "executing"


def test_a_damaged_journal_line_is_located(paths: ProjectPaths) -> None:
    engine = engine_with_tasks(paths, 3)
    for name in ("t0", "t1"):
        engine.ledger.transition(engine.run.tasks[name], TaskEvent.DISPATCH, "go")
        engine.save()
    path = journal(paths, engine)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(lines[0] + b"garbage\n")
    with pytest.raises(DamagedRunError) as caught:
        RunStore(paths).load(engine.run.id)
    assert caught.value.file == path and caught.value.line == 2
    path.write_bytes(lines[1])  # a save missing before it
    with pytest.raises(DamagedRunError, match="does not follow") as caught:
        RunStore(paths).load(engine.run.id)
    assert caught.value.line == 1


def test_a_big_journal_is_folded_into_a_new_snapshot(paths: ProjectPaths, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshot, "JOURNAL_MIN_BYTES", 0)
    engine = engine_with_tasks(paths, 3)
    state = RunStore(paths).dir(engine.run.id) / RUN_FILE
    first = state.stat().st_ino
    for n in range(40):
        engine.ledger.event("note", f"event {n} " + "y" * 100)
        engine.save()
    assert state.stat().st_ino != first  # replaced by a snapshot at least once
    files = [f.name for f in RunStore(paths).dir(engine.run.id).glob("journal-*.jsonl")]
    assert files in ([], [journal_name(json.loads(state.read_bytes())["saves"])])  # older journals are gone
    loaded = RunStore(paths).load(engine.run.id)
    assert loaded.model_dump(exclude={"outbox"}) == engine.run.model_dump(exclude={"outbox"})
    assert [e["what"] for e in RunStore(paths).events(engine.run.id)[0]][-1] == "event 39 " + "y" * 100


def test_a_reader_that_loses_the_race_with_a_snapshot_reads_the_new_one(paths: ProjectPaths) -> None:
    """The journal vanished between reading run.json and opening it: run.json is read again."""
    engine = engine_with_tasks(paths, 3)
    engine.ledger.transition(engine.run.tasks["t0"], TaskEvent.DISPATCH, "go")
    engine.save()
    reader = RunStore(paths)
    real_read = snapshot.read_bounded
    calls = {"n": 0}

    def snapshot_in_between(path: Path, **kw: object) -> bytes:
        calls["n"] += 1
        if calls["n"] == 2:  # run.json was read; a newer snapshot lands before its journal is opened
            engine.store.save(engine.run)
        return real_read(path, **kw)  # type: ignore[arg-type]

    snapshot.read_bounded = snapshot_in_between  # type: ignore[assignment]
    try:
        loaded = reader.load(engine.run.id)
    finally:
        snapshot.read_bounded = real_read  # type: ignore[assignment]
    assert calls["n"] >= 4 and loaded.saves == engine.run.saves
    assert loaded.tasks["t0"].state == "executing"


def test_a_change_made_behind_the_ledgers_back_is_caught(paths: ProjectPaths) -> None:
    """The test-suite reads every journalled save back (AGENTBOX_VERIFY_JOURNAL): a lost change fails loudly."""
    assert os.environ.get("AGENTBOX_VERIFY_JOURNAL") == "1" and snapshot.VERIFY_JOURNAL
    engine = engine_with_tasks(paths, 3)
    engine.run.tasks["t2"].brief = "changed without the ledger"
    engine.ledger.event("note", "something else")
    with pytest.raises(StateError, match="lost a change to tasks"):
        engine.save()
