"""Untrusted text made safe to show on a terminal: shown, never executed.

Whatever an agent or a repository wrote (a reply, a checkpoint question, a brief, a file
name, a patch) may hold escape sequences a terminal would obey: OSC 52 sets the clipboard,
`ESC[2J` clears the screen, a carriage return or a newline forges what looks like another
line of agentbox's own output. `for_terminal` turns every such character into a visible
stand-in before the text reaches a terminal, a widget or a notification:

- C0 control characters and DEL become their Unicode control pictures: ESC is `␛`, BEL
  `␇`, backspace `␈`, a carriage return `␍`, NUL `␀`, DEL `␡`. An escape sequence so stays
  readable (`␛[2J`, `␛]52;c;…␇`) and does nothing.
- C1 control characters (U+0080–U+009F, among them the one-byte CSI and OSC), bidirectional
  overrides and isolates (which reorder what is shown, "Trojan source"), the Unicode line
  and paragraph separators and lone surrogates become Python-style escapes: `\\x9b`,
  `\\u202e`, `\\u2028`, `\\udcff`.
- Newlines and tabs are content and stay; `\\r\\n` is a newline. In a value shown as one
  line (a log line, a table cell, a file name, a headline) `single_line=True` makes them
  visible too (`␤`, `␉`), so nothing an agent wrote starts a line of its own.

`--json` output never goes through here: scripts get the exact string (JSON escapes it).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.text import Text

_SHOWN_AS_ESCAPE = "\x80-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff"
_IN_TEXT = re.compile(f"[\x00-\x08\x0b-\x1f\x7f{_SHOWN_AS_ESCAPE}]")
"""What is made visible in text that may span lines (newline and tab stay)."""
_IN_LINE = re.compile(f"[\x00-\x1f\x7f{_SHOWN_AS_ESCAPE}]")
"""What is made visible in a one-line value (newline and tab too)."""


def _stand_in(char: str) -> str:
    code = ord(char)
    if code < 0x20:
        return chr(0x2400 + code)  # the control pictures block: ␀ … ␟ (␊ for a newline, ␉ for a tab)
    if code == 0x7F:
        return "\u2421"  # ␡
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


_STAND_INS: dict[str, str] = {chr(c): _stand_in(chr(c)) for c in [*range(0x20), *range(0x7F, 0xA0)]}
_STAND_INS["\n"] = "\u2424"  # ␤, the symbol for a newline, in one-line values


def _replace(match: re.Match[str]) -> str:
    char = match.group()
    return _STAND_INS.get(char) or _stand_in(char)


def for_terminal(value: object, *, single_line: bool = False) -> str:
    """`value` as text a terminal shows and never obeys (see the module's rules).

    `single_line=True` for a value shown inside one line of output: its newlines and tabs
    become visible too.
    """
    text = value if isinstance(value, str) else str(value)
    pattern = _IN_LINE if single_line else _IN_TEXT
    if pattern.search(text) is None:  # the common case costs one scan
        return text
    if "\r\n" in text:
        text = text.replace("\r\n", "\n")
    return pattern.sub(_replace, text)


def for_line(value: object) -> str:
    """`for_terminal(value, single_line=True)`: a value shown inside one line."""
    return for_terminal(value, single_line=True)


def for_block(value: object, indent: str) -> str:
    """`value` made visible by `for_terminal`, its lines after the first starting with `indent`: a
    multi-line value quoted under a heading, where no line of it passes for a line of agentbox's own."""
    return for_terminal(value).replace("\n", "\n" + indent)


def safe_text(value: object, style: str = "", *, single_line: bool = False, **kwargs: Any) -> Text:
    """A Rich `Text` of untrusted `value`, made visible by `for_terminal` (never parsed as markup).

    For the TUI and Rich consoles: `Text` alone keeps an ESC it is given.
    """
    from rich.text import Text

    return Text(for_terminal(value, single_line=single_line), style=style, **kwargs)


def for_markup(value: object, *, single_line: bool = False) -> str:
    """Untrusted `value` for a notification body that renders a subset of HTML (notify-send):
    made visible by `for_terminal`, then `&`, `<` and `>` escaped so no tag or entity works."""
    return (for_terminal(value, single_line=single_line)
            .replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"))


_IN_JSON = re.compile(f"[\x7f{_SHOWN_AS_ESCAPE}]")
"""What JSON leaves raw (with `ensure_ascii=False`) that a terminal may still obey."""


def json_for_terminal(document: str) -> str:
    """A JSON document with the characters JSON may leave raw but a terminal may obey (C1
    controls, DEL, bidirectional controls, line separators, lone surrogates) written as
    `\\uXXXX` escapes: every string decodes to exactly what it was."""
    if _IN_JSON.search(document) is None:
        return document
    return _IN_JSON.sub(lambda match: f"\\u{ord(match.group()):04x}", document)
