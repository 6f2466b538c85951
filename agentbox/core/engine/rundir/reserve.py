"""The disk reserve, `disk-reserve`: space an engine keeps aside while it runs, so that a run
caught by a full disk can still be saved paused (the reserve is given back to hold that save)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from agentbox.core import store
from agentbox.core.engine.rundir.snapshot import RUN_FILE

RESERVE_FILE = "disk-reserve"
RESERVE_MIN_BYTES = 1 << 20


def reserve(directory: Path) -> None:
    """Set space aside (twice run.json, at least RESERVE_MIN_BYTES) for saving the run on a full disk.

    A DiskFullError when even that space is not there: the run cannot go on safely.
    """
    try:
        state_bytes = os.lstat(directory / RUN_FILE).st_size
    except OSError:
        state_bytes = 0
    store.reserve_space(directory / RESERVE_FILE, max(RESERVE_MIN_BYTES, 2 * state_bytes + (64 << 10)))


def release(directory: Path) -> None:
    """Give the reserved space back (to save the run in it)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(directory / RESERVE_FILE)
