"""A checked crew.yaml kept as plain data, so the engine and the TUI read it without the YAML parser.

Parsing crew.yaml takes ruamel (~3.3 MB resident, 29 modules), which a long-lived process
would hold only to read one small file it has read before. Once a crew.yaml has passed
`project.load_crew` (its schema, the files it names, its gates' checks), the plain data
the parser gave for it is written here as JSON, under `$AGENT_BOX_HOME/cache/crews/`, with
the identity of the file it came from, exactly as `profile_cache` keeps a profile: path,
device, inode, size, mtime_ns, ctime_ns and a BLAKE2b hash of its bytes, and a stamp of
the code that checked it. A later load reads the file's bytes and identity again and uses
the entry only when all of them are equal; the data is then validated by the same model
again (pydantic, no YAML), and what depends on other files (the instructions and graph
files it names) is checked again on every load. Any edit misses, and the file is parsed
and checked as before, with the same messages (file, line, field; exit 2).

An entry is a cache, never an authority: `profile_cache`'s rules hold (a regular file, not
a symlink, owned by this user, mode 0600 or stricter, bounded, its digest matching its
content; written atomically; a failure to write is not an error).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentbox.core.config.profile_cache import (
    Source,
    code_stamp,
    content_hash,
    read_entry,
    read_source,
    write_entry,
)

FORMAT = 1
"""The entry layout; an entry of another format is ignored."""
_CHECKING_CODE = ("core/config/models.py", "core/config/project.py", "core/config/crew_cache.py",
                  "core/config/profile_cache.py", "core/config/secrets.py", "core/validation.py", "core/yaml_io.py",
                  "core/sandbox/scopes.py", "core/sandbox/egress.py", "core/tools.py", "core/paths.py")
"""The modules whose code decides what a crew.yaml's data and validity are: an entry made by other code is not used."""

__all__ = ["Source", "content_hash", "lookup", "read_source", "store"]


def cache_dir() -> Path:
    from agentbox.core import paths

    return paths.agent_box_home() / "cache" / "crews"


def _entry_path(directory: Path, file: Path) -> Path:
    return directory / f"{content_hash(str(file).encode('utf-8', 'surrogateescape'))[:32]}.json"


def lookup(file: Path, source: Source, directory: Path | None = None) -> dict[str, Any] | None:
    """The plain data that `source` (crew.yaml `file` as read now) was checked as, or None."""
    body = read_entry(_entry_path(directory or cache_dir(), file))
    if (body is None or body.get("format") != FORMAT or body.get("identity") != source.identity
            or body.get("file") != str(file) or body.get("code") != code_stamp(_CHECKING_CODE)):
        return None
    data = body.get("data")
    return data if isinstance(data, dict) else None


def store(file: Path, source: Source, data: Any, directory: Path | None = None) -> None:
    """Keep `data` (the parser's plain data of checked `source`) as what `file` is; a failure is ignored."""
    directory = directory or cache_dir()
    body = {"format": FORMAT, "identity": source.identity, "file": str(file), "code": code_stamp(_CHECKING_CODE), "data": data}
    try:
        if not isinstance(data, dict) or json.loads(json.dumps(data)) != data:
            return  # what JSON cannot give back exactly (a date, a tuple) is not kept
        write_entry(_entry_path(directory, file), body, sort_keys=False)  # key order kept: roles are in file order
    except (OSError, TypeError, ValueError):
        return
