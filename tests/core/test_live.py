"""The live view of a turn: each tool's stream lines as display events, and the bounded live log."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agentbox.core.agents import live
from agentbox.core.agents.live_text import visible
from agentbox.core.runtimes import adapter_for
from agentbox.core.runtimes.base import CapturedOutput, DisplayEvent, TurnRequest

STREAMS = Path(__file__).resolve().parents[1] / "data" / "streams"
"""stdout of the real CLIs (a tool turn against tests/fakes/model_server.py), recorded as they printed it."""


def shown(tool: str, lines: list[str]) -> list[tuple[str, str, str | None]]:
    adapter = adapter_for(tool)
    return [(e.kind, e.text, e.name) for line in lines for e in adapter.display(line)]


def recorded(tool: str) -> list[str]:
    return (STREAMS / f"{tool}.jsonl").read_text().splitlines()


def test_claude_stream_json() -> None:
    assert shown("claude", recorded("claude")) == [
        ("note", "claude started (model claude-opus-4-8[1m])", None),
        ("text", "looking", None),
        ("tool", "echo by-claude > tool.txt; echo hi", "Bash"),
        ("result", "hi", None),
        ("text", "echo: hi", None),
        ("note", "finished after 2 model turn(s)", None),
    ]
    failed = '{"type":"result","subtype":"success","is_error":true,"result":"API Error: 400 fake bad request"}'
    assert shown("claude", [failed]) == [("error", "API Error: 400 fake bad request", None)]


def test_claude_stream_json_parses_to_the_same_result(tmp_path: Path) -> None:
    """stream-json ends with the object `--output-format json` prints: same text, id and usage."""
    stdout = (STREAMS / "claude.jsonl").read_text()
    request = TurnRequest(prompt="do it", session_id="bac43ca8-2e41-48c4-90f7-96c7f1367448", native_id=None,
                          first_turn=True, instructions=None, model=None, extra_args=(), read_only=False,
                          cwd=tmp_path, home=tmp_path, scratch=tmp_path, executable="claude", config_dir=tmp_path)
    parsed = adapter_for("claude").parse(CapturedOutput(stdout, "", 0, False, tmp_path), request)
    assert (parsed.text, parsed.native_id, parsed.is_error) == ("echo: hi", request.session_id, False)
    assert (parsed.usage.input_tokens, parsed.usage.cached_input_tokens, parsed.usage.output_tokens) == (18, 8, 12)
    assert parsed.usage.cost_usd is not None and parsed.usage.cost_usd > 0
    argv = adapter_for("claude").build(request).argv
    assert argv[1:5] == ["-p", "--output-format", "stream-json", "--verbose"]


def test_codex_events() -> None:
    assert shown("codex", recorded("codex")) == [
        ("note", "codex thread 01a23343-385b-7fb0-9464-e2367af362f5", None),
        ("note", "Model metadata for `fake-model` not found. Defaulting to fallback metadata; this can degrade "
                 "performance and cause issues.", None),
        ("tool", "/bin/bash -lc 'echo by-codex'", "shell"),
        ("result", "by-codex", "shell"),
        ("text", "echo: Chunk ID: 725fee\nWall time: 0.0000 seconds\nProcess exited with code 0\n"
                 "Original token count: 3\nOutput:\nby-codex\n", None),
        ("note", "turn finished", None),
    ]
    failing = ['{"type":"item.completed","item":{"id":"i","type":"command_execution","command":"false",'
               '"aggregated_output":"","exit_code":1,"status":"failed"}}',
               '{"type":"turn.failed","error":{"message":"fake bad request"}}']
    assert shown("codex", failing) == [("error", "\n(exit code 1)", "shell"), ("error", "fake bad request", None)]


def test_opencode_events() -> None:
    assert shown("opencode", recorded("opencode")) == [
        ("tool", "echo by-opencode", "bash"),
        ("result", "by-opencode", "bash"),
        ("text", "echo: by-opencode\n", None),
    ]
    error = ('{"type":"error","sessionID":"ses_x","error":{"name":"APIError","data":{"message":"fake bad request",'
             '"statusCode":400}}}')
    assert shown("opencode", [error]) == [("error", "fake bad request", None)]


def test_hermes_and_the_default_show_lines_as_text() -> None:
    assert shown("hermes", ["echo: alpha one", "", "  "]) == [("text", "echo: alpha one", None)]
    assert shown("claude", ["not json at all", "{broken"]) == [("text", "not json at all", None),
                                                              ("text", "{broken", None)]


def test_scripted_stream_events() -> None:
    lines = ['{"type": "text", "text": "hi"}', '{"type": "tool", "text": "Bash", "input": {"command": "ls"}}',
             '{"type": "tool_result", "text": "a.txt"}', "flood flood",
             '{"type": "result", "is_error": false, "result": "x"}']
    assert shown("scripted", lines) == [("text", "hi", None), ("tool", "ls", "Bash"), ("result", "a.txt", None),
                                        ("text", "flood flood", None), ("note", "finished", None)]


# ----------------------------------------------------------------------------- the live log


def text_writer(directory: Path, secrets: tuple[str, ...] = (), **rate: float) -> live.LiveWriter:
    return live.LiveWriter(directory, lambda line: [DisplayEvent("text", line)], secrets, **rate)


def test_lines_are_joined_across_chunks_and_cut_when_too_long(tmp_path: Path) -> None:
    writer = text_writer(tmp_path / "t.live")
    writer.feed_stdout(b"one\ntw")
    writer.feed_stdout(b"o\n" + b"x" * (3 * live.LINE_BYTES))
    writer.feed_stdout(b"y" * 100 + b"\nlast without newline")
    writer.feed_stderr(b"warning: careful\n")
    writer.end("ok")
    events = live.LiveCursor(tmp_path / "t.live").read().events
    assert [(e.kind, e.text[:4]) for e in events] == [("text", "one"), ("text", "two"), ("text", "xxxx"),
                                                     ("stderr", "warn"), ("text", "last"), ("end", "ok")]
    long_line = events[2].text
    assert len(long_line) <= live.EVENT_CHARS and long_line.endswith("…") and "y" not in long_line
    assert events[4].text == "last without newline" and events[3].text == "warning: careful"
    assert events[5].ended


def test_secrets_never_reach_the_live_log(tmp_path: Path) -> None:
    writer = text_writer(tmp_path / "t.live", secrets=("sk-live-123456",))
    writer.feed_stdout(b"my key is sk-live-12")
    writer.feed_stdout(b"3456 ok\n")
    writer.end("ok")
    data = b"".join(p.read_bytes() for p in (tmp_path / "t.live").iterdir())
    assert b"sk-live" not in data and b"****" in data


def test_a_follower_stays_bounded_while_the_writer_rotates(tmp_path: Path) -> None:
    directory = tmp_path / "t.live"
    writer = text_writer(directory, rate_bytes_s=float("inf"))  # every byte shown: the ring does the bounding
    cursor = live.LiveCursor(directory)
    line = b"z" * 1000 + b"\n"
    writer.feed_stdout(line * 10)
    assert cursor.read().events
    for _ in range(4 * live.KEEP_SEGMENTS * live.SEGMENT_BYTES // (len(line) * 100)):  # ~4× what is kept
        writer.feed_stdout(line * 100)
        assert len(os.listdir(directory)) <= live.KEEP_SEGMENTS
    writer.end("ok")
    reads = []
    while not cursor.ended:
        read = cursor.read()
        reads.append(read.events)
        assert sum(len(e.text) for e in read.events) <= live.READ_BYTES + 2 * live.LINE_BYTES  # bounded per call
    assert reads[0][0].kind == "cut"  # the reader learns that output went by unseen
    assert reads[-1][-1].ended
    assert sum(len(events) for events in reads) < live.KEEP_SEGMENTS * live.SEGMENT_BYTES // 1000


def test_output_faster_than_anyone_reads_is_counted_not_shown(tmp_path: Path) -> None:
    writer = text_writer(tmp_path / "t.live", rate_bytes_s=0, burst_bytes=100)
    writer.feed_stdout(b"first\n")
    for _ in range(50):
        writer.feed_stdout(b"flood\n" * 1000)
    writer.feed_stdout(b"the last words")
    writer.end("ok")
    events = live.LiveCursor(tmp_path / "t.live").read().events
    assert [(e.kind, e.text) for e in events] == [
        ("text", "first"), ("cut", "… 50,000 lines went by too fast to show (the turn's raw log has them)"),
        ("text", "the last words"), ("end", "ok")]


def test_a_reader_ignores_what_is_not_a_live_log(tmp_path: Path) -> None:
    directory = tmp_path / "t.live"
    directory.mkdir()
    os.mkfifo(directory / f"{1:06d}{live.SUFFIX}")  # would block a plain open() forever
    (directory / f"{2:06d}{live.SUFFIX}").write_text('not json\n{"k": 1, "t": "x"}\n' +
                                                     json.dumps({"k": "text", "t": "fine"}) + "\n")
    events = live.LiveCursor(directory).read().events
    assert [(e.kind, e.text) for e in events] == [("text", "fine")]


@pytest.mark.parametrize("raw, shown_as", [
    ("\x1b[2J\x1b]0;title\x07", "␛[2J␛]0;title␇"),  # the one rule of termtext.for_terminal
    ("a\rb\u202ec\x9b", "a␍b\\u202ec\\x9b"),
    ("tab\tand\nnewline stay", "tab\tand\nnewline stay"),
])
def test_visible_shows_control_characters(raw: str, shown_as: str) -> None:
    assert visible(raw) == shown_as
