"""A node's turn's logs mirrored on the head as they grow (`ray_stream`), on real files, without a cluster.

The node side reads what a real `LiveWriter` and raw log wrote by offset; the head side
writes it into a real session store. The Ray tests (test_ray_runner.py) run the same code
on a cluster.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agentbox.core import runs
from agentbox.core.agents import live
from agentbox.core.agents.sessions import SessionRecord, SessionStore
from agentbox.core.engine.runners import ray_stream
from agentbox.core.engine.runners.travel import SessionBack
from agentbox.core.records import running_turn
from agentbox.core.reports.monitor import ProcessSample, node_samples
from agentbox.core.runtimes.base import DisplayEvent


def record(store: SessionStore, turns: int = 0, *, running: bool = True) -> SessionRecord:
    made = SessionRecord(id="3f0c6a52-1b1e-4a8e-9d55-0d2b8c6c1a01", owner="builder", role="builder", profile="p",
                         tool="scripted", cwd="/nowhere", created=1.0, updated=1.0, turns=turns)
    if running:
        made.status = "running"
        made.running = running_turn(turns + 1, started=2.0, log="", live="")
    store.save(made)
    return made


def files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def events_of(directory: Path) -> list[tuple[str, str]]:
    cursor = live.LiveCursor(directory)
    found = []
    while True:
        read = cursor.read()
        found += [(e.kind, e.text) for e in read.events]
        if read.ended or not read.events:
            return found


def test_the_node_s_pace_is_the_pace_faces_follow_a_run_at() -> None:
    assert ray_stream.STREAM_EVERY_S == runs.FOLLOW_POLL_S


def test_the_head_s_logs_grow_with_the_node_s_and_end_byte_for_byte_as_the_node_left_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live, "SEGMENT_BYTES", 2000)  # the live view's ring turns over within the test
    node, head = SessionStore(tmp_path / "node"), SessionStore(tmp_path / "head")
    mine = record(node)
    record(head)
    logs = node.logs_dir(mine)
    logs.mkdir(parents=True)
    writer = live.LiveWriter(logs / "turn-1.live", lambda line: [DisplayEvent("text", json.loads(line)["t"])],
                             ("s3cr3t-value",))
    raw = open(logs / "turn-1.log", "wb", buffering=0)  # noqa: SIM115
    reader = ray_stream.TurnLogs(logs, 1)
    mirror = ray_stream.LogMirror(SimpleNamespace(sessions=head))  # type: ignore[arg-type]
    mirror.start_of(mine.as_dict())
    shown_live: list[list[tuple[str, str]]] = []
    for step in range(60):
        line = json.dumps({"t": f"step {step} says s3cr3t-value " + "x" * 300}) + "\n"
        writer.feed_stdout(line.encode())
        raw.write(line.encode())
        said = reader.look(budget=700)  # a small budget: a look leaves some for the next
        if said is not None:
            mirror.take(said)
            if step % 7 == 0:
                mirror.take(said)  # a piece taken twice lands on the same bytes
        shown_live.append(events_of(head.logs_dir(mine) / "turn-1.live"))
    writer.end("ok")
    raw.close()
    while (said := reader.look()) is not None:
        mirror.take(said)
    here = head.logs_dir(mine)
    assert events_of(here / "turn-1.live")[-1] == ("end", "ok")  # the end came through the stream too
    assert any(len(seen) > 0 for seen in shown_live[:10])  # the head had output while the turn ran
    assert all(b"s3cr3t-value" not in data for name, data in files(here).items() if ".live" in name)  # masked
    left = files(logs)
    assert len([n for n in left if ".live/" in n]) == live.KEEP_SEGMENTS  # the node's ring turned over
    mirror.finish(SessionBack(config={}, record=None, logs=left))
    assert files(here) == left


def test_what_the_result_brings_replaces_what_streamed_and_removes_what_the_node_no_longer_had(
        tmp_path: Path) -> None:
    head = SessionStore(tmp_path / "head")
    mine = record(head)
    mirror = ray_stream.LogMirror(SimpleNamespace(sessions=head))  # type: ignore[arg-type]
    mirror.start_of(mine.as_dict())
    mirror.take(ray_stream.NodeOutput((ray_stream.LogPiece("turn-1.live/000001.jsonl", 0, b'{"k":"text"}\n'),
                                       ray_stream.LogPiece("turn-1.log", 0, b"partial"),
                                       ray_stream.LogPiece("../elsewhere.log", 0, b"no"),
                                       ray_stream.LogPiece("turn-2.log", 0, b"not this turn"))))
    here = head.logs_dir(mine)
    assert files(here) == {"turn-1.live/000001.jsonl": b'{"k":"text"}\n', "turn-1.log": b"partial"}
    final = {"turn-1.live/000002.jsonl": b"ended\n", "turn-1.log": b"partial and the rest"}
    for name, data in final.items():  # as `travel.store_back` writes them
        (here / name).parent.mkdir(parents=True, exist_ok=True)
        (here / name).write_bytes(data)
    mirror.finish(SessionBack(config={}, record=None, logs=final))
    assert files(here) == final


def test_an_earlier_attempt_s_unfinished_logs_are_kept_aside_before_the_next_writes(tmp_path: Path) -> None:
    head = SessionStore(tmp_path / "head")
    mine = record(head, turns=2)
    here = head.logs_dir(mine)
    (here / "turn-3.live").mkdir(parents=True)
    (here / "turn-3.live" / "000001.jsonl").write_bytes(b'{"k":"text","t":"lost"}\n')
    (here / "turn-3.log").write_bytes(b"what the lost attempt said")
    (here / "turn-2.log").write_bytes(b"an earlier turn, untouched")
    mirror = ray_stream.LogMirror(SimpleNamespace(sessions=head))  # type: ignore[arg-type]
    mirror.start_of(mine.as_dict())
    mirror.take(ray_stream.NodeOutput((ray_stream.LogPiece("turn-3.log", 0, b"again"),)))
    assert files(here) == {"turn-2.log": b"an earlier turn, untouched", "turn-3.log": b"again",
                           "turn-3.interrupted-1.log": b"what the lost attempt said"}
    [line] = head.turns(mine)
    assert line["turn"] == 3 and line["status"] == "interrupted" and "turn-3.interrupted-1.log" in line["error"]


def test_a_look_says_nothing_when_nothing_is_new(tmp_path: Path) -> None:
    (tmp_path / "turn-1.log").write_bytes(b"")
    reader = ray_stream.TurnLogs(tmp_path, 1)
    first = reader.look()
    assert first is not None and first.pieces == (ray_stream.LogPiece("turn-1.log", 0, b""),)  # made on the head
    assert reader.look() is None
    (tmp_path / "turn-1.log").write_bytes(b"more")
    said = reader.look()
    assert said is not None and said.pieces == (ray_stream.LogPiece("turn-1.log", 0, b"more"),)
    assert reader.look() is None


def test_a_node_s_sample_goes_in_the_session_s_record_where_the_members_table_reads_it(tmp_path: Path) -> None:
    import subprocess

    head = SessionStore(tmp_path / "head")
    mine = record(head)
    child = subprocess.Popen(["sleep", "30"])
    try:
        sampler = ray_stream.TreeSampler(os.getpid())
        time.sleep(0.1)
        sample = sampler.sample()
    finally:
        child.kill()
        child.wait()
    assert sample is not None and sample.processes >= 2 and sample.rss_bytes > 0  # this process and its child
    mirror = ray_stream.LogMirror(SimpleNamespace(sessions=head))  # type: ignore[arg-type]
    mirror.record = mine
    assert node_samples(head.list()) == {}  # a turn of this machine's: the dashboard samples its pid itself
    assert mine.running is not None
    mine.running["node"] = "n" * 56
    mirror.sample(sample)
    found: dict[str, Any] = node_samples(head.list())
    assert found == {"builder": ProcessSample(sample.cpu_percent, sample.rss_bytes, sample.processes)}
    assert ray_stream.TreeSampler(2**22 + 12345).sample() is None  # no such process
