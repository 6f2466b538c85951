"""The decision log, `events.jsonl`: events leave a saved run's outbox for it, once each.

State and its new events are saved together (in the snapshot or the journal line), then
appended here, so a crash at any point neither loses nor duplicates an event (the outbox is
flushed again on resume). The engine lock makes its holder the log's only writer, so an
append takes no other lock.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from agentbox.core import store
from agentbox.core.engine.models import MAX_SEQ, Run
from agentbox.core.engine.records import Event, as_events
from agentbox.core.engine.rundir.damage import TAIL_BYTES, DamagedRunError, open_log

EVENTS_FILE = "events.jsonl"


def last_seq(path: Path, run_id: str) -> int:
    """The seq of the last complete line of the log (0 when empty)."""
    try:
        fd = open_log(path, run_id)
    except FileNotFoundError:
        return 0
    try:
        size = os.fstat(fd).st_size
        tail = os.pread(fd, TAIL_BYTES, max(0, size - TAIL_BYTES))
    finally:
        os.close(fd)
    for raw in reversed(tail.splitlines()):
        record = store.parse_line(raw)
        if record is not None and type(record.get("seq")) is int:
            return int(record["seq"])
    return 0


def flush_outbox(path: Path, run: Run) -> None:
    """Append the outbox events not yet in the log (idempotent by `seq`), and empty the outbox.

    A log whose last seq is beyond the run's own is damaged (appending after it would drop
    every new event): a DamagedRunError, not a silent loss. A last line cut short by a
    crash mid-append is ended first (the torn one is skipped by readers and re-sent here).
    """
    last = last_seq(path, run.id)
    if last > run.seq:
        raise DamagedRunError(path, f"the last event has seq {last}, beyond the run's seq {run.seq}",
                              run_id=run.id)
    fresh = []
    for event in run.outbox:
        if event["seq"] > last:
            fresh.append(event)
            last = event["seq"]
    if fresh:
        data = b"".join((json.dumps(r, ensure_ascii=False, default=str) + "\n").encode("utf-8") for r in fresh)
        store.append_lines(path, data)
    run.outbox = []


def read(path: Path, offset: int = 0) -> tuple[list[Event], int]:
    """Decision-log records from byte `offset`, and the next offset."""
    lines, offset = store.read_jsonl(path, offset)
    return as_events(lines), offset


def line_problem(record: dict[str, Any], state: dict[str, Any]) -> str | None:
    """What is wrong with one decision-log record (None when nothing): seqs rise up to the run's."""
    seq = record.get("seq")
    run: Run = state["run"]
    if type(seq) is not int or not 0 < seq <= MAX_SEQ:
        return f"event without a valid seq ({str(seq)[:40]})"
    if not isinstance(record.get("type"), str) or not isinstance(record.get("what", ""), str):
        return "event with a `type` or `what` that is not a string"
    if seq > run.seq:
        return f"event seq {seq} is beyond the run's seq {run.seq}"
    if seq <= state["seq"]:
        return f"event seq {seq} does not follow seq {state['seq']}"
    state["seq"] = seq
    return None
