"""The store: atomic replace, cross-process locking, append-only JSON lines."""

from __future__ import annotations

import json
import multiprocessing
import os
import stat
import threading
import time
from pathlib import Path

import pytest

from agentbox.core import store

#: fork keeps the workers cheap; each one is still a separate process with its own fds.
FORK = multiprocessing.get_context("fork")


def leftovers(directory: Path, keep: set[str]) -> list[str]:
    """Files in `directory` other than `keep` (temp files a write might leave behind)."""
    return sorted(p.name for p in directory.iterdir() if p.name not in keep)


# ----------------------------------------------------------------------------- atomic writes


def test_atomic_write_replaces_and_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "state" / "run.json"
    store.atomic_write_json(target, {"state": "queued", "n": 1})
    store.atomic_write_json(target, {"state": "running", "n": 2, "name": "é"})
    assert store.read_json(target) == {"state": "running", "n": 2, "name": "é"}
    assert target.read_text(encoding="utf-8").endswith("\n")
    assert leftovers(target.parent, {"run.json"}) == []
    store.atomic_write_text(tmp_path / "notes.md", "hello\n")
    store.atomic_write_bytes(tmp_path / "blob", b"\x00\x01")
    assert (tmp_path / "notes.md").read_text() == "hello\n"
    assert (tmp_path / "blob").read_bytes() == b"\x00\x01"


def test_atomic_write_keeps_the_file_mode(tmp_path: Path) -> None:
    target = tmp_path / "secret.json"
    store.atomic_write_json(target, {"v": 1})
    os.chmod(target, 0o600)
    store.atomic_write_json(target, {"v": 2})
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert store.read_json(target) == {"v": 2}


@pytest.mark.parametrize("failing", ["fsync", "replace"])
def test_failed_write_keeps_the_old_content(failing: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "run.json"
    store.atomic_write_json(target, {"state": "old"})

    def boom(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store.os, failing, boom)
    with pytest.raises(store.DiskFullError, match="No space left"):
        store.atomic_write_json(target, {"state": "new", "padding": "x" * 100_000})
    monkeypatch.undo()
    assert store.read_json(target) == {"state": "old"}
    assert leftovers(tmp_path, {"run.json"}) == []


def test_read_json_default_for_a_missing_file(tmp_path: Path) -> None:
    assert store.read_json(tmp_path / "absent.json") is None
    assert store.read_json(tmp_path / "absent.json", default={}) == {}


# ----------------------------------------------------------------------------- locking


def _increment(counter: str, times: int) -> None:
    path = Path(counter)
    for _ in range(times):
        with store.locked(path):
            value = store.read_json(path)["count"]
            time.sleep(0.0005)  # widen the read-modify-write window a race would need
            store.atomic_write_json(path, {"count": value + 1})


def test_lock_excludes_concurrent_read_modify_write_across_processes(tmp_path: Path) -> None:
    counter = tmp_path / "counter.json"
    store.atomic_write_json(counter, {"count": 0})
    workers = [FORK.Process(target=_increment, args=(str(counter), 50)) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    assert store.read_json(counter) == {"count": 200}
    assert leftovers(tmp_path, {"counter.json", "counter.json.lock"}) == []


def test_exclusive_lock_blocks_until_released_and_shared_locks_coexist(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    acquired_at: list[float] = []

    def contender() -> None:
        with store.locked(path):
            acquired_at.append(time.monotonic())

    with store.locked(path):
        thread = threading.Thread(target=contender)
        thread.start()
        time.sleep(0.2)
        assert acquired_at == [], "a second exclusive lock got in while the first was held"
        released_at = time.monotonic()
    thread.join(timeout=10)
    assert acquired_at and acquired_at[0] >= released_at

    with store.locked(path, shared=True):
        # a second shared holder does not wait for the first
        done = threading.Event()

        def second_reader() -> None:
            with store.locked(path, shared=True):
                done.set()

        reader = threading.Thread(target=second_reader)
        reader.start()
        assert done.wait(timeout=5)
        reader.join()


# ----------------------------------------------------------------------------- JSON lines


def _append_many(path: str, worker: int, count: int) -> None:
    for index in range(count):
        # lines far bigger than PIPE_BUF, so only the lock keeps them whole
        store.append_jsonl(Path(path), {"worker": worker, "index": index, "pad": str(worker) * 9000})


def test_append_jsonl_from_several_processes_gives_whole_lines(tmp_path: Path) -> None:
    log = tmp_path / "run" / "events.jsonl"
    workers = [FORK.Process(target=_append_many, args=(str(log), n, 60)) for n in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    raw_lines = log.read_bytes().split(b"\n")
    assert raw_lines[-1] == b""
    parsed = [json.loads(line) for line in raw_lines[:-1]]  # any torn line fails here
    assert len(parsed) == 240
    assert sorted((r["worker"], r["index"]) for r in parsed) == [(w, i) for w in range(4) for i in range(60)]
    assert all(r["pad"] == str(r["worker"]) * 9000 for r in parsed)
    records, offset = store.read_jsonl(log)
    assert len(records) == 240 and offset == log.stat().st_size


def test_read_jsonl_resumes_from_offset_and_waits_for_partial_lines(tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    assert store.read_jsonl(log) == ([], 0)
    assert store.read_jsonl(log, 17) == ([], 17)

    for n in range(3):
        store.append_jsonl(log, {"n": n})
    records, offset = store.read_jsonl(log)
    assert [r["n"] for r in records] == [0, 1, 2]
    assert offset == log.stat().st_size
    assert store.read_jsonl(log, offset) == ([], offset)

    store.append_jsonl(log, {"n": 3})
    with log.open("ab") as handle:
        handle.write(b'{"n": 4, "half": "writ')  # a writer caught mid-append
    records, offset2 = store.read_jsonl(log, offset)
    assert [r["n"] for r in records] == [3]
    assert offset2 == log.stat().st_size - len(b'{"n": 4, "half": "writ')
    assert store.read_jsonl(log, offset2) == ([], offset2)

    with log.open("ab") as handle:
        handle.write(b'ten"}\n')
    records, offset3 = store.read_jsonl(log, offset2)
    assert records == [{"n": 4, "half": "written"}]
    assert offset3 == log.stat().st_size
    all_records, _ = store.read_jsonl(log)
    assert [r["n"] for r in all_records] == [0, 1, 2, 3, 4]


def test_read_jsonl_skips_a_corrupt_complete_line(tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    log.write_bytes(b'{"n": 1}\nnot json\n\n{"n": 2}\n')
    records, offset = store.read_jsonl(log)
    assert records == [{"n": 1}, {"n": 2}]
    assert offset == log.stat().st_size
