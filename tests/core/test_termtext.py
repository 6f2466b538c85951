"""Untrusted text on a terminal: every control character and escape sequence made visible, content kept."""

from __future__ import annotations

import json

import pytest

from agentbox.core.termtext import for_line, for_markup, for_terminal, json_for_terminal, safe_text

OSC52 = "\x1b]52;c;SGVsbG8=\x07"
"""Sets the clipboard of the terminal that prints it."""


@pytest.mark.parametrize(("raw", "shown"), [
    ("plain text, ünïcödé, 日本, emoji 👍🏽", "plain text, ünïcödé, 日本, emoji 👍🏽"),
    (OSC52, "␛]52;c;SGVsbG8=␇"),
    ("\x1b[2J\x1b[H", "␛[2J␛[H"),
    ("\x1bP1$qm\x1b\\", "␛P1$qm␛\\"),  # DCS ... ST
    ("bare \x1b escape", "bare ␛ escape"),
    ("bell\x07 backspace\x08 nul\x00 del\x7f", "bell␇ backspace␈ nul␀ del␡"),
    ("safe\rEVIL", "safe␍EVIL"),  # a carriage return would overwrite the line
    ("windows\r\nline", "windows\nline"),
    ("vt\x0b ff\x0c", "vt␋ ff␌"),
    ("c1 csi \x9b2J osc \x9d52 nel \x85", "c1 csi \\x9b2J osc \\x9d52 nel \\x85"),
    ("bidi \u202egnp.exe\u202c \u2066x\u2069 \u200f", "bidi \\u202egnp.exe\\u202c \\u2066x\\u2069 \\u200f"),
    ("line\u2028sep\u2029para", "line\\u2028sep\\u2029para"),
    ("lone \udcff surrogate", "lone \\udcff surrogate"),
    ("two\nlines\tand a tab", "two\nlines\tand a tab"),
])
def test_text_is_shown_never_obeyed(raw: str, shown: str) -> None:
    assert for_terminal(raw) == shown


@pytest.mark.parametrize(("raw", "shown"), [
    ("brief\n12:00:00 run.finished     run done", "brief␤12:00:00 run.finished     run done"),
    ("a\tb", "a␉b"),
    ("crlf\r\nnext", "crlf␤next"),
    (OSC52, "␛]52;c;SGVsbG8=␇"),
])
def test_one_line_values_keep_to_one_line(raw: str, shown: str) -> None:
    assert for_line(raw) == shown == for_terminal(raw, single_line=True)
    assert "\n" not in for_line(raw)


@pytest.mark.parametrize("code", [*range(0x20), *range(0x7F, 0xA0)])
def test_no_control_character_survives(code: int) -> None:
    raw = f"x{chr(code)}y"
    for shown in (for_line(raw), for_terminal(raw) if chr(code) not in "\n\t" else ""):
        assert all(not (ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0) for c in shown), repr(shown)


def test_non_strings_are_shown_as_their_text() -> None:
    assert for_terminal(None) == "None" and for_line(42) == "42"


def test_a_rich_text_is_made_of_the_visible_text_and_never_of_markup() -> None:
    text = safe_text(f"[bold red]x[/] [@click=app.quit]y[/]{OSC52}", style="dim")
    assert text.plain == "[bold red]x[/] [@click=app.quit]y[/]␛]52;c;SGVsbG8=␇"
    assert str(text.style) == "dim" and not text.spans
    assert safe_text("a\nb", single_line=True).plain == "a␤b"


def test_notification_markup_is_escaped() -> None:
    assert for_markup("<b>bold</b> & <a href='x'>link</a>\x1b[2J") == \
        "&lt;b&gt;bold&lt;/b&gt; &amp; &lt;a href='x'&gt;link&lt;/a&gt;␛[2J"


@pytest.mark.parametrize("value", [OSC52, "csi \x9b2J", "bidi \u202e", "sep\u2028", "del\x7f", "lone \udcff", "plain"])
def test_json_keeps_every_string_exact_and_nothing_a_terminal_obeys(value: str) -> None:
    document = json_for_terminal(json.dumps({"text": value, "list": [value]}, ensure_ascii=False))
    assert json.loads(document) == {"text": value, "list": [value]}
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 or c in "\u202e\u2028" for c in document)
