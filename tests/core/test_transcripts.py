"""An attached session's turns are read back from files the agent could rewrite: hostile ones give no turns, fast."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

import pytest

from agentbox.core.runtimes.transcripts import typed_turns


def _hermes_db(path: Path, *, view: bool = False) -> None:
    db = sqlite3.connect(path)
    if view:
        db.execute("CREATE TABLE raw (session_id TEXT, role TEXT, content TEXT, id INTEGER)")
        db.execute("CREATE VIEW messages AS SELECT * FROM raw")
    else:
        db.execute("CREATE TABLE messages (id INTEGER PRIMARY KEY, session_id TEXT, role TEXT, content TEXT)")
        db.executemany("INSERT INTO messages (session_id, role, content) VALUES (?, ?, ?)",
                       [("s1", "user", "hi"), ("s1", "assistant", "hello"), ("s2", "user", "other")])
    db.commit()
    db.close()


def test_hermes_turns_come_from_its_messages_table(tmp_path: Path) -> None:
    _hermes_db(tmp_path / "state.db")
    [turn] = typed_turns("hermes", tmp_path, "s1")
    assert (turn.prompt, turn.text, turn.usage.input_tokens) == ("hi", "hello", None)


@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory", "view", "garbage"])
def test_a_hostile_database_gives_no_turns_and_never_blocks(tmp_path: Path, kind: str) -> None:
    real = tmp_path / "real.db"
    _hermes_db(real)
    db = tmp_path / "home" / "state.db"
    db.parent.mkdir()
    if kind == "symlink":
        db.symlink_to(real)
    elif kind == "fifo":
        os.mkfifo(db)
    elif kind == "directory":
        db.mkdir()
    elif kind == "view":
        _hermes_db(db, view=True)
    else:
        db.write_bytes(b"SQLite format 3\x00" + os.urandom(4096))
    started = time.monotonic()
    assert typed_turns("hermes", db.parent, "s1") == []
    assert time.monotonic() - started < 5


def test_a_codex_rollout_behind_a_symlinked_dir_is_not_read(tmp_path: Path) -> None:
    outside = tmp_path / "outside" / "01"
    outside.mkdir(parents=True)
    line = {"type": "response_item", "payload": {"type": "message", "role": "user",
                                                 "content": [{"type": "input_text", "text": "planted"}]}}
    (outside / "rollout-x-abc.jsonl").write_text(json.dumps(line) + "\n")
    home = tmp_path / "home" / "sessions" / "2026" / "12"
    home.mkdir(parents=True)
    (home / "01").symlink_to(outside)
    assert typed_turns("codex", tmp_path / "home", "abc") == []
    (home / "02").mkdir()
    (home / "02" / "rollout-x-abc.jsonl").write_text(json.dumps(line) + "\n")
    assert [t.prompt for t in typed_turns("codex", tmp_path / "home", "abc")] == ["planted"]


@pytest.mark.parametrize("native", ["../x", "", ".", "a/b"])
def test_ids_that_are_paths_give_no_turns(tmp_path: Path, native: str) -> None:
    assert typed_turns("codex", tmp_path, native) == []
