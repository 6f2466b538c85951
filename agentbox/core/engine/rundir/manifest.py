"""The artifact manifest, `artifacts/manifest.jsonl`: who made which file a role handed on.

The engine lock makes its holder the manifest's only writer, so an entry takes no lock file.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any

from agentbox.core import store
from agentbox.core.engine.records import ArtifactEntry, as_artifact_entries
from agentbox.core.errors import StateError

MANIFEST_FILE = "manifest.jsonl"


def record(manifest: Path, path: Path, *, role: str, session: str | None, task: str | None) -> ArtifactEntry | None:
    """Add a file to the manifest; None when it is not a plain regular file.

    A symlink, FIFO or device is never opened (an agent may have put one there).
    """
    try:
        fd = store.open_regular(path)
    except (FileNotFoundError, StateError):
        return None
    digest = hashlib.sha256()
    try:
        size = os.fstat(fd).st_size
        while chunk := os.read(fd, 1 << 20):
            digest.update(chunk)
    finally:
        os.close(fd)
    entry = ArtifactEntry(path=str(path), role=role, session=session, task=task, sha256=digest.hexdigest(),
                          size=size, at=time.time())
    store.append_jsonl(manifest, entry, single_writer=True)
    return entry


def entries(manifest: Path) -> list[ArtifactEntry]:
    """Every well-formed manifest entry, oldest first."""
    found, _ = store.read_jsonl(manifest)
    return as_artifact_entries([e for e in found if manifest_problem(e) is None])


def line_problem(record: dict[str, Any], state: dict[str, Any]) -> str | None:
    """What is wrong with one artifact manifest entry (None when nothing)."""
    if not isinstance(record.get("path"), str):
        return "manifest entry without a string `path`"
    for key in ("role", "session", "task", "sha256"):
        if record.get(key) is not None and not isinstance(record[key], str):
            return f"manifest field {key!r} is not a string"
    for key in ("size", "at"):
        if record.get(key) is not None and (isinstance(record[key], bool) or not isinstance(record[key], int | float)):
            return f"manifest field {key!r} is not a number"
    return None


def manifest_problem(entry: dict[str, Any]) -> str | None:
    """What is wrong with the shape of an artifact manifest entry (None when nothing)."""
    return line_problem(entry, {})
