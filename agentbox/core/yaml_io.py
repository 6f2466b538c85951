"""The only module that imports ruamel.yaml.

Reads keep line and column of every key so validation errors can name them. A file read
here may come from a cloned repository: it must be a regular file under a size cap, and
its document may nest at most `MAX_DEPTH` levels and expand (aliases counted each time
they are used) to at most `MAX_VALUES` values, so no file makes agentbox hang, run out
of memory or overflow the stack. Edits of a
person's file keep their comments, key order and quoting: adding or removing one entry of
a block mapping is a text edit of that entry's lines only (ruamel attaches a comment to
the node *before* it, so a round-trip dump would carry comments along with the wrong
entry); anything else goes through the round-trip dumper.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.composer import Composer, MaxDepthExceededError
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import AliasEvent
from ruamel.yaml.nodes import MappingNode, SequenceNode
from ruamel.yaml.scalarbool import ScalarBoolean
from ruamel.yaml.scalarfloat import ScalarFloat
from ruamel.yaml.scalarint import ScalarInt

from agentbox.core.errors import ConfigError
from agentbox.core.safe_io import UnsafeFileError, read_bounded
from agentbox.core.store import atomic_write_text

MAX_BYTES = 1 << 20
"""Largest YAML file agentbox reads (1 MiB): configs are a few kilobytes."""
MAX_DEPTH = 64
"""Deepest nesting of mappings and lists in one document."""
MAX_VALUES = 25_000
"""Most values (keys, scalars, lists, mappings) a document may hold with every alias
expanded: stops "billion laughs" and keeps reading any file under a second or two."""


class _LimitExceeded(MarkedYAMLError):
    """A document that is too deep or expands to too much (reported without "malformed")."""


class _BoundedComposer(Composer):
    """ruamel's composer, counting the values of the document with every alias expanded.

    ruamel shares an aliased node instead of copying it, so loading an alias bomb is cheap;
    whatever walks the data afterwards (validation, JSON) expands it. Counting here, node
    by node as they are composed, refuses the document before anything can expand it, and
    stops a huge document early (composing is the slow part of reading YAML).
    """

    def __init__(self, loader: Any = None) -> None:
        super().__init__(loader)
        self._expanded: dict[int, int] = {}
        self._total = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.parser.check_event(AliasEvent):
            event = self.parser.peek_event()
            target = self.anchors.get(event.anchor)
            if target is not None and id(target) not in self._expanded:
                raise _LimitExceeded(
                    None, None, f"the alias *{event.anchor} is used inside the value it names",
                    event.start_mark,
                )
            node = super().compose_node(parent, index)
            self._count(self._expanded[id(node)], event.start_mark)
            return node
        node = super().compose_node(parent, index)
        size = 1
        if isinstance(node, SequenceNode):
            size += sum(self._expanded[id(item)] for item in node.value)
        elif isinstance(node, MappingNode):
            size += sum(self._expanded[id(k)] + self._expanded[id(v)] for k, v in node.value)
        self._expanded[id(node)] = size
        self._count(1, node.start_mark)
        return node

    def _count(self, values: int, mark: Any) -> None:
        self._total += values
        if self._total > MAX_VALUES:
            raise _LimitExceeded(
                None, None,
                f"the document holds more than {MAX_VALUES:,} values (aliases counted each time they are used)",
                mark,
            )


def _yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.Composer = _BoundedComposer
    yaml.max_depth = MAX_DEPTH
    yaml.preserve_quotes = True
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.width = 4096
    return yaml


#: Contexts in which ruamel notices a construct that was opened and never closed; the
#: person needs the line where it was opened, not where the parser gave up.
_UNCLOSED = {
    "while scanning a quoted scalar": "the quoted string opened here is not closed",
    "while parsing a flow sequence": "the [ list opened here is not closed",
    "while parsing a flow mapping": "the { mapping opened here is not closed",
}


def parse_yaml(text: str, file: Path | str) -> Any:
    """Parse YAML text; a syntax error becomes a ConfigError with file, line and column."""
    try:
        return _yaml().load(text)
    except (_LimitExceeded, MaxDepthExceededError) as exc:
        raise _limit_error(exc, file) from None
    except MarkedYAMLError as exc:
        raise _syntax_error(exc, file) from None
    except YAMLError as exc:
        raise ConfigError(f"malformed YAML: {exc}", file=file) from None
    except RecursionError:  # MAX_DEPTH is well below the stack; kept as a backstop
        raise ConfigError(f"nested too deeply (more than {MAX_DEPTH} levels)", file=file, line=1) from None
    except ValueError as exc:  # an integer of more digits than Python converts
        if "digits" not in str(exc):
            raise
        long_number = re.search(r"\d{4000,}", text)
        raise ConfigError(
            "a number is too long to read",
            file=file,
            line=text.count("\n", 0, long_number.start()) + 1 if long_number else None,
            hint="numbers in agentbox files are small; remove the digits",
        ) from None
    except TypeError as exc:  # ruamel builds the key before it can refuse it: `? {a: 1}`
        if "unhashable" not in str(exc):
            raise
        complex_key = next(
            (n for n, line in enumerate(text.splitlines(), 1) if line.lstrip().startswith("? ")), None
        )
        raise ConfigError(
            "malformed YAML: a mapping or a list is used as a key",
            file=file,
            line=complex_key,
            hint="keys are plain names: remove the `? ` or the brackets before the colon",
        ) from None


def _limit_error(exc: MarkedYAMLError, file: Path | str) -> ConfigError:
    """A document beyond MAX_DEPTH or MAX_VALUES, at the line where it crossed the limit."""
    mark = exc.problem_mark
    if isinstance(exc, MaxDepthExceededError):
        message = f"nested too deeply (more than {MAX_DEPTH} levels of mappings and lists)"
        hint = "agentbox files nest only a few levels; flatten the document"
    else:
        message = str(exc.problem)
        hint = "agentbox files are small: split or shorten this one (or use fewer aliases)"
    return ConfigError(
        message,
        file=file,
        line=mark.line + 1 if mark else None,
        column=mark.column + 1 if mark else None,
        hint=hint,
    )


def _syntax_error(exc: MarkedYAMLError, file: Path | str) -> ConfigError:
    """One clear sentence for a ruamel syntax error, at the line a person should look at."""
    mark = exc.problem_mark or exc.context_mark
    problem = exc.problem or "malformed YAML"
    context = exc.context or ""
    hint = "fix the syntax at that position"
    if context in _UNCLOSED and exc.context_mark is not None:
        where = f" at line {mark.line + 1}" if mark is not None else ""
        message = f"{_UNCLOSED[context]} ({problem}{where})"
        mark = exc.context_mark
    elif problem.startswith("expected <block end>") and exc.context_mark is not None:
        message = (
            "inconsistent indentation: this line does not line up with the mapping "
            f"that starts at line {exc.context_mark.line + 1}"
        )
        hint = "indent the keys of one mapping by the same number of spaces"
    elif problem.startswith("but ") and context:
        message = f"{context}, {problem}"
        if "document" in problem:
            hint = "a file holds one YAML document: remove the extra `---`"
    else:
        message = problem
        if "'\\t'" in problem:
            hint = "YAML indentation must use spaces, not tabs"
        elif "duplicate key" in problem:
            hint = "each key may appear only once in a mapping: remove or rename one"
    return ConfigError(
        f"malformed YAML: {message}",
        file=file,
        line=mark.line + 1 if mark else None,
        column=mark.column + 1 if mark else None,
        hint=hint,
    )


def read_yaml_text(path: Path, max_bytes: int = MAX_BYTES) -> str:
    """The text of a YAML file; unreadable or non-UTF-8 content is a ConfigError naming the line.

    Only a regular file of at most `max_bytes` is read (a symlink to one is followed): a
    directory, FIFO or device, or a larger file, is refused without blocking on it.
    """
    try:
        data = read_bounded(path, max_bytes=max_bytes, follow_symlinks=True)
    except FileNotFoundError:
        raise ConfigError("file not found", file=path) from None
    except UnsafeFileError as exc:
        raise ConfigError(
            exc.reason, file=path, line=1,
            hint=f"agentbox reads a regular file of at most {max_bytes:,} bytes here",
        ) from None
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", file=path, line=1) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_start = data.rfind(b"\n", 0, exc.start) + 1
        raise ConfigError(
            f"not valid UTF-8 (byte 0x{data[exc.start]:02x})",
            file=path,
            line=data.count(b"\n", 0, exc.start) + 1,
            column=exc.start - line_start + 1,
            hint="save the file as UTF-8",
        ) from None


def load_yaml(path: Path) -> Any:
    """Read and parse a YAML file (round-trip types, so it can be edited and written back)."""
    return parse_yaml(read_yaml_text(path), path)


def dump_yaml(data: Any) -> str:
    """Serialise round-trip data (comments included) to text."""
    buffer = io.StringIO()
    _yaml().dump(data, buffer)
    return buffer.getvalue()


def write_yaml(path: Path, data: Any) -> None:
    """Write YAML atomically, keeping the comments and order carried by round-trip data."""
    atomic_write_text(path, dump_yaml(data))


def new_map(items: dict[str, Any] | None = None) -> CommentedMap:
    """A round-trip mapping to insert into a loaded document."""
    mapping = CommentedMap()
    for key, value in (items or {}).items():
        mapping[key] = value
    return mapping


def position(document: Any, location: Sequence[str | int]) -> tuple[int | None, int | None]:
    """The 1-based (line, column) of the deepest node of `location` found in `document`."""
    node = document
    line: int | None = None
    column: int | None = None
    for key in location:
        if isinstance(node, CommentedMap) and key in node:
            try:
                ln, col = node.lc.key(key)
            except KeyError:  # added in memory, not read from the file: it has no line
                break
            line, column = ln + 1, col + 1
            node = node[key]
        elif isinstance(node, CommentedSeq) and isinstance(key, int) and 0 <= key < len(node):
            try:
                ln, col = node.lc.item(key)
            except KeyError:
                break
            line, column = ln + 1, col + 1
            node = node[key]
        else:
            if line is None and hasattr(node, "lc"):
                line, column = node.lc.line + 1, node.lc.col + 1
            break
    return line, column


# ----------------------------------------------------------------------------- text edits


def _indent(line: str) -> int:
    """How many spaces a line starts with."""
    return len(line) - len(line.lstrip(" "))


def _is_content(line: str) -> bool:
    """A line that holds YAML data (not blank, not only a comment)."""
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def _block_entries(lines: list[str], mapping: Any) -> list[tuple[int, int]] | None:
    """(first line, end line) of each entry of a block mapping, 0-based, end exclusive.

    An entry runs from its key's line through its last line indented deeper than the
    keys; comment lines at the keys' own indentation after that belong to what follows.
    None when the mapping is empty or in flow style (`{...}`), which has no lines to edit.
    """
    if not isinstance(mapping, CommentedMap) or not mapping or mapping.fa.flow_style():
        return None
    try:
        starts = [mapping.lc.key(key)[0] for key in mapping]
    except KeyError:  # keys merged in from an anchor (`<<: *base`) have no lines here
        return None
    indent = mapping.lc.key(next(iter(mapping)))[1]
    if starts != sorted(starts) or len(set(starts)) != len(starts):
        return None
    block_end = len(lines)
    for number in range(starts[-1] + 1, len(lines)):
        line = lines[number]
        if (_is_content(line) and _indent(line) <= indent) or line.startswith(("---", "...")):
            block_end = number
            break
    entries = []
    for index, start in enumerate(starts):
        limit = starts[index + 1] if index + 1 < len(starts) else block_end
        end = start + 1
        for number in range(start + 1, limit):
            if lines[number].strip() and _indent(lines[number]) > indent:
                end = number + 1
        entries.append((start, end))
    return entries


def _node_at(document: Any, location: Sequence[str | int]) -> Any:
    """The node at `location` (keys and indexes) of a parsed document."""
    node = document
    for key in location:
        node = node[key]
    return node


def text_with_entry_added(
    text: str, document: Any, location: Sequence[str | int], key: str, value: Any
) -> str | None:
    """`text` with `key: value` appended after the last entry of the block mapping at
    `location` of `document` (parsed from `text`), every other line untouched.

    None when the mapping is not a non-empty block mapping (use the round-trip dumper).
    """
    lines = text.splitlines(keepends=True)
    mapping = _node_at(document, location)
    entries = _block_entries(lines, mapping)
    if entries is None:
        return None
    indent = " " * mapping.lc.key(next(iter(mapping)))[1]
    rendered = [indent + line if line.strip() else line for line in dump_yaml({key: value}).splitlines(keepends=True)]
    end = entries[-1][1]
    if not lines[end - 1].endswith("\n"):
        lines[end - 1] += "\n"
    return "".join(lines[:end] + rendered + lines[end:])


def text_with_entry_removed(
    text: str, document: Any, location: Sequence[str | int], key: str
) -> str | None:
    """`text` without the entry `key` of the block mapping at `location`: its lines and the
    comment lines directly above it go; every other line stays byte for byte.

    None when the mapping is not a non-empty block mapping (use the round-trip dumper).
    """
    lines = text.splitlines(keepends=True)
    mapping = _node_at(document, location)
    entries = _block_entries(lines, mapping)
    if entries is None:
        return None
    index = list(mapping).index(key)
    start, end = entries[index]
    indent = mapping.lc.key(key)[1]
    floor = entries[index - 1][1] if index > 0 else 0
    while (
        start - 1 >= floor
        and lines[start - 1].strip().startswith("#")
        and _indent(lines[start - 1]) == indent
    ):
        start -= 1
    if start > 0 and not lines[start - 1].strip() and end < len(lines) and not lines[end].strip():
        end += 1  # do not leave two blank lines where the entry was
    return "".join(lines[:start] + lines[end:])


def text_with_entry_replaced(
    text: str, document: Any, location: Sequence[str | int], key: str, value: Any
) -> str | None:
    """`text` with the value of the entry `key` of the block mapping at `location` replaced
    by `value`: that entry's lines are rewritten, every other line (comments included) stays
    byte for byte.

    None when the mapping is not a non-empty block mapping or has no `key` (add it, or use
    the round-trip dumper).
    """
    lines = text.splitlines(keepends=True)
    mapping = _node_at(document, location)
    entries = _block_entries(lines, mapping)
    if entries is None or key not in mapping:
        return None
    start, end = entries[list(mapping).index(key)]
    indent = " " * mapping.lc.key(key)[1]
    rendered = [indent + line if line.strip() else line for line in dump_yaml({key: value}).splitlines(keepends=True)]
    if end == len(lines) and not lines[-1].endswith("\n"):
        rendered[-1] = rendered[-1].rstrip("\n")
    return "".join(lines[:start] + rendered + lines[end:])


def plain(data: Any) -> Any:
    """Round-trip YAML containers and scalars → plain built-ins (pydantic wants those)."""
    if isinstance(data, dict):
        return {str(k): plain(v) for k, v in data.items()}
    if isinstance(data, list):
        return [plain(v) for v in data]
    if isinstance(data, str):
        return str(data)
    if isinstance(data, ScalarBoolean):  # an int subclass: `&flag true`
        return bool(data)
    if isinstance(data, ScalarInt):
        return int(data)
    if isinstance(data, ScalarFloat):
        return float(data)
    return data
