"""The only module that imports ruamel.yaml.

Reads keep line and column of every key so validation errors can name them; writes go
through the round-trip dumper so a person's comments, key order and quoting survive
when agentbox edits their file.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from agentbox.core.errors import ConfigError
from agentbox.core.store import atomic_write_text


def _yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.width = 4096
    return yaml


def parse_yaml(text: str, file: Path | str) -> Any:
    """Parse YAML text; a syntax error becomes a ConfigError with file, line and column."""
    try:
        return _yaml().load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "malformed YAML"
        raise ConfigError(
            f"malformed YAML: {problem}",
            file=file,
            line=mark.line + 1 if mark else None,
            column=mark.column + 1 if mark else None,
            hint="fix the syntax at that position",
        ) from None
    except YAMLError as exc:
        raise ConfigError(f"malformed YAML: {exc}", file=file) from None


def load_yaml(path: Path) -> Any:
    """Read and parse a YAML file (round-trip types, so it can be edited and written back)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("file not found", file=path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read: {exc}", file=path) from None
    return parse_yaml(text, path)


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
            ln, col = node.lc.key(key)
            line, column = ln + 1, col + 1
            node = node[key]
        elif isinstance(node, CommentedSeq) and isinstance(key, int) and 0 <= key < len(node):
            ln, col = node.lc.item(key)
            line, column = ln + 1, col + 1
            node = node[key]
        else:
            if line is None and hasattr(node, "lc"):
                line, column = node.lc.line + 1, node.lc.col + 1
            break
    return line, column
