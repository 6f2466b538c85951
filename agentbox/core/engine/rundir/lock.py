"""The engine lock, `engine.lock`: whoever holds it is the run's only writer.

The engine holds it for as long as it runs the run; a process that changes a run no engine
holds takes it first, so there is never a second writer of run.json, the log or the manifest.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from agentbox.core import store

ENGINE_LOCK = "engine.lock"


@contextlib.contextmanager
def engine_lock(directory: Path, *, wait: bool = False) -> Iterator[bool]:
    """Try to become the run's only writer; yields False when another process is.

    `wait`: block on it (a caller that must be sure to get it); never used on a run an agent
    can reach.
    """
    with store.exclusive_lock(directory / ENGINE_LOCK, wait=wait) as mine:
        yield mine


def engine_running(directory: Path) -> bool:
    """True when some process holds the run's engine lock."""
    with engine_lock(directory) as mine:
        return not mine
