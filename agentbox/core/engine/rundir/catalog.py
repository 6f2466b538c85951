"""Which runs a project has: their ids listed, the latest, a prefix resolved, a new id made."""

from __future__ import annotations

import os
import secrets
import time
from datetime import datetime
from pathlib import Path

from agentbox.core.engine.rundir.snapshot import RUN_FILE
from agentbox.core.errors import NotFoundError, UsageError
from agentbox.core.ids import by_prefix, check_id, is_valid_id


def new_run_id(now: float | None = None) -> str:
    """A sortable, readable run id: `run-YYYYMMDD-HHMMSS-xxxx`."""
    stamp = datetime.fromtimestamp(now or time.time()).strftime("%Y%m%d-%H%M%S")
    return f"run-{stamp}-{secrets.token_hex(2)}"


def list_ids(runs: Path) -> list[str]:
    """Run ids, oldest first (ids sort by time); directories whose name is no valid id are left out."""
    if not runs.is_dir():
        return []
    return sorted(p.name for p in runs.iterdir() if is_valid_id(p.name) and os.path.lexists(p / RUN_FILE))


def latest_id(runs: Path) -> str:
    """The newest run's id."""
    ids = list_ids(runs)
    if not ids:
        raise NotFoundError("this project has no runs yet", "start one with `agentbox run GOAL`")
    return ids[-1]


def resolve_id(runs: Path, run_id: str | None) -> str:
    """`None`/`latest` → the latest run; a unique prefix (or end) of an id → the full id."""
    if run_id in (None, "", "latest"):
        return latest_id(runs)
    assert run_id is not None
    check_id("run", run_id)
    if os.path.lexists(runs / run_id / RUN_FILE):
        return run_id
    known = list_ids(runs)
    chosen = by_prefix("run", run_id, known)
    if chosen is not None:
        return chosen
    matches = [r for r in known if r.endswith(run_id)]  # the end of an id, which differs between runs
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise UsageError(f"{run_id!r} ends {len(matches)} run ids: {', '.join(matches[:10])}",
                         "give more of the run id")
    raise NotFoundError(f"no run {run_id!r}", "`agentbox runs` lists the runs")
