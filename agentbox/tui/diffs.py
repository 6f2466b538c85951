"""A git patch cut per file and highlighted for reading: pure functions, no widgets.

Called in thread workers (highlighting a big patch takes a while). Each file's lines
are highlighted for its language (old and new side apart, so the lexer reads each as
code), with the old and new line numbers in a gutter and the added and removed lines
marked.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

from rich.syntax import Syntax
from rich.text import Text

from agentbox.core.engine.models import ChangedPath
from agentbox.core.termtext import for_line, for_terminal

THEME = "ansi_dark"
"""The code colours (the terminal's own palette, as in the artifact preview)."""
ADDED_STYLE = "on #10301a"
REMOVED_STYLE = "on #3a1418"
CHANGE_STYLE = {"A": "bold green", "M": "bold yellow", "D": "bold red", "R": "bold cyan"}
_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@(.*)$")
_PREFIXES = ("a/", "b/", "c/", "i/", "o/", "w/")
"""What git puts before a path in a patch (`a/` `b/`, or the mnemonic ones)."""
_ESCAPES = {"n": b"\n", "t": b"\t", '"': b'"', "\\": b"\\", "a": b"\a", "b": b"\b", "f": b"\f", "r": b"\r",
            "v": b"\v"}


@dataclass(frozen=True)
class FilePatch:
    """One file's part of a patch: what changed and its hunk lines."""

    path: str
    change: str
    """A, M, D or R (as in `ChangedPath.change`)."""
    added: int
    removed: int
    binary: bool = False
    old_path: str | None = None
    """The path before a rename."""
    lines: tuple[str, ...] = ()
    """The hunks: `@@` headers and their lines, as git wrote them."""


@dataclass(frozen=True)
class RenderedFile:
    """A file's patch and its lines ready to show."""

    file: FilePatch
    body: Text


# ----------------------------------------------------------------------------- splitting
def split_patch(patch: str, changed: Iterable[ChangedPath] = ()) -> list[FilePatch]:
    """The patch cut at each `diff --git` header, in git's order.

    `changed` (what git counted for the task) gives each file's exact line counts; a file
    missing from it (or a patch cut short) is counted from its own lines.
    """
    counts = {c.path: c for c in changed}
    files: list[FilePatch] = []
    chunk: list[str] = []
    for line in patch.split("\n"):
        if line.startswith("diff --git ") and chunk:
            files.append(_file(chunk, counts))
            chunk = []
        if line.startswith("diff --git ") or chunk:
            chunk.append(line)
    if chunk:
        files.append(_file(chunk, counts))
    return files


def _file(chunk: list[str], counts: dict[str, ChangedPath]) -> FilePatch:
    header_path = _header_path(chunk[0].removeprefix("diff --git "))
    change, old_path, new_path, gone_path, binary = "M", None, None, None, False
    body_start = len(chunk)
    for index, line in enumerate(chunk[1:], 1):
        if line.startswith("@@"):
            body_start = index
            break
        if line.startswith("new file mode"):
            change = "A"
        elif line.startswith("deleted file mode"):
            change = "D"
        elif line.startswith("rename from "):
            change, old_path = "R", _unquote(line.removeprefix("rename from "))
        elif line.startswith("rename to "):
            new_path = _unquote(line.removeprefix("rename to "))
        elif line.startswith("--- ") and line != "--- /dev/null":
            gone_path = _strip_prefix(_unquote(line[4:].rstrip("\t")))
        elif line.startswith("+++ ") and line != "+++ /dev/null":
            new_path = _strip_prefix(_unquote(line[4:].rstrip("\t")))
        elif line.startswith("Binary files ") or line == "GIT binary patch":
            binary = True
    lines = tuple(line for line in chunk[body_start:] if line)  # the split leaves an empty last line
    path = new_path or gone_path or header_path
    known = counts.get(path)
    if known is not None and known.added is not None and known.removed is not None:
        added, removed = known.added, known.removed
    else:
        added, removed = _count(lines)
    return FilePatch(path, change, added, removed, binary or (known is not None and known.added is None),
                     old_path, lines)


def _count(lines: tuple[str, ...]) -> tuple[int, int]:
    added = removed = 0
    for line in lines:
        if line.startswith("+"):
            added += 1
        elif line.startswith("-"):
            removed += 1
    return added, removed


def _header_path(rest: str) -> str:
    """The path of a `diff --git a/P b/P` header (both sides name the same file when no rename line follows)."""
    if rest.startswith('"'):
        end = rest.find('" ', 1)
        return _strip_prefix(_unquote(rest[: end + 1])) if end > 0 else rest
    half = (len(rest) - 1) // 2
    return _strip_prefix(rest[:half]) if half > 0 else rest


def _strip_prefix(path: str) -> str:
    return path[2:] if path.startswith(_PREFIXES) else path


def _unquote(text: str) -> str:
    """A path as git writes one that holds odd characters: in quotes, C escapes, bytes in octal."""
    if len(text) < 2 or text[0] != '"' or text[-1] != '"':
        return text
    body, out, index = text[1:-1], bytearray(), 0
    while index < len(body):
        char = body[index]
        if char == "\\" and index + 1 < len(body):
            after = body[index + 1]
            if re.fullmatch(r"[0-7]{3}", body[index + 1:index + 4]):
                out.append(int(body[index + 1:index + 4], 8) & 0xFF)
                index += 4
                continue
            out += _ESCAPES.get(after, after.encode("utf-8", "surrogateescape"))
            index += 2
            continue
        out += char.encode("utf-8", "surrogateescape")
        index += 1
    return os.fsdecode(bytes(out))


# ----------------------------------------------------------------------------- highlighting
def render_patch(patch: str, changed: Iterable[ChangedPath] = ()) -> list[RenderedFile]:
    """Every file of the patch with its lines highlighted."""
    return [RenderedFile(f, render_file(f)) for f in split_patch(patch, changed)]


def file_heading(file: FilePatch) -> Text:
    """`M src/app.py  +3 −1`, a rename as `old → new`."""
    heading = Text.assemble((f" {file.change} ", CHANGE_STYLE.get(file.change, "bold")), " ")
    if file.old_path:
        heading.append(for_line(file.old_path), "bold")
        heading.append(" → ", "dim")
    heading.append(for_line(file.path), "bold")
    if file.binary:
        heading.append("  binary", "dim")
    else:
        heading.append(f"  +{file.added}", "green")
        heading.append(f" −{file.removed}", "red")
    return heading


def render_file(file: FilePatch) -> Text:
    """The file's hunks: old and new line numbers, the +/- mark, the code highlighted for the file's type."""
    if file.binary:
        return Text("  binary file: no lines to show", style="dim italic")
    if not file.lines:
        what = {"R": "renamed, content unchanged", "A": "an empty file"}.get(file.change, "mode change only")
        return Text(f"  {what}", style="dim italic")
    lines = [for_terminal(line) for line in file.lines]  # a patch holds what an agent wrote: shown, never obeyed
    old_side, new_side = [], []
    for line in lines:
        if line.startswith("@@"):
            continue
        if line[:1] in (" ", "-"):
            old_side.append(line[1:])
        if line[:1] in (" ", "+"):
            new_side.append(line[1:])
    lexer = Syntax.guess_lexer(file.path, code="\n".join(new_side[:200]) or "\n".join(old_side[:200]))
    old_lines = _highlight(old_side, lexer)
    new_lines = _highlight(new_side, lexer)
    width = len(str(_last_line_number(file.lines)))
    old_code, new_code = iter(old_lines), iter(new_lines)  # one highlighted line per " " / "-" and " " / "+" line
    body = Text(no_wrap=True, overflow="ellipsis", end="")
    old_no = new_no = 0
    for line in lines:
        hunk = _HUNK.match(line)
        if hunk:
            old_no, new_no = int(hunk.group(1)), int(hunk.group(2))
            if body:
                body.append("\n")
            body.append(" " * (2 * width + 2) + line[: line.find("@@", 2) + 2], "cyan")
            body.append(hunk.group(3), "dim")
            continue
        mark = line[:1]
        body.append("\n")
        if mark == " ":
            body.append(f"{old_no:>{width}} {new_no:>{width}}  ", "dim")
            next(old_code)
            body.append_text(next(new_code))
            old_no, new_no = old_no + 1, new_no + 1
        elif mark == "-":
            _append_marked(body, f"{old_no:>{width}} {'':>{width}} ", "-", "bold red", next(old_code), REMOVED_STYLE)
            old_no += 1
        elif mark == "+":
            _append_marked(body, f"{'':>{width}} {new_no:>{width}} ", "+", "bold green", next(new_code), ADDED_STYLE)
            new_no += 1
        else:  # "\ No newline at end of file"
            body.append(" " * (2 * width + 2) + line, "dim italic")
    return body


def _append_marked(body: Text, gutter: str, mark: str, mark_style: str, code: Text, line_style: str) -> None:
    """An added or removed line: its gutter, then the mark and the code on the line's background."""
    body.append(gutter, "dim")
    start = len(body)
    body.append(mark, mark_style)
    body.append_text(code)
    body.stylize(line_style, start, len(body))


def _highlight(code_lines: list[str], lexer: str) -> list[Text]:
    """The lines highlighted as one piece of code (so strings and comments spanning lines come out right)."""
    if not code_lines:
        return []
    code = "\n".join(code_lines)
    lines = Syntax(code, lexer, theme=THEME).highlight(code).split("\n", allow_blank=True)
    if len(lines) > len(code_lines) and not lines[-1].plain:
        lines.pop()
    if len(lines) != len(code_lines):  # a lexer that rewrote the text: show it plain rather than misaligned
        return [Text(line) for line in code_lines]
    return list(lines)


def _last_line_number(lines: tuple[str, ...]) -> int:
    """The largest line number the hunks reach (for the gutter's width)."""
    biggest = 1
    for line in lines:
        hunk = _HUNK.match(line)
        if hunk:
            old_start, new_start = int(hunk.group(1)), int(hunk.group(2))
            biggest = max(biggest, old_start, new_start)
    return biggest + len(lines)
