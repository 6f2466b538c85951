"""A run whose files are not what agentbox wrote: the error naming the file, the line and what
to do, and the line-by-line check of a run's logs.

Every file of a run is read bounded and validated: a damaged run raises `DamagedRunError`
and is listed as damaged while the project's other runs list fine.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentbox.core import store
from agentbox.core.engine.models import Run
from agentbox.core.errors import StateError

MAX_LOG_BYTES = 1 << 30
"""Cap for events.jsonl, the inbox and the manifest when they are validated."""
TAIL_BYTES = 1 << 16
"""Bytes at the end of a log a quick check (`runs`, `status`) validates."""

LineProblem = Callable[[dict[str, Any], dict[str, Any]], "str | None"]
"""What is wrong with one record of a log, given the check's running state (None when nothing)."""


class DamagedRunError(StateError):
    """A run's files are corrupt or not what agentbox wrote; names the file and line (exit 2)."""

    exit_code = 2

    def __init__(self, file: Path, problem: str, *, line: int | None = None, run_id: str | None = None) -> None:
        where = f"{file}:{line}" if line is not None else str(file)
        super().__init__(f"run {run_id or file.parent.name} is damaged: {where}: {problem}",
                         f"fix or move away {file.name} (a backup of the run directory first); "
                         "the project's other runs are not affected")
        self.file = file
        self.line = line
        self.problem = problem


@dataclass(frozen=True)
class DamagedRun:
    """A run that cannot be read, as `agentbox runs` lists it."""

    id: str
    error: DamagedRunError


def line_of(message: str) -> int | None:
    """The line number in a `path:LINE: ...` message."""
    head = message.split(": ", 1)[0]
    number = head.rsplit(":", 1)[-1]
    return int(number) if number.isdigit() else None


def open_log(path: Path, run_id: str) -> int:
    """A read-only descriptor of one of the run's logs; a DamagedRunError when it is no regular file."""
    try:
        return store.open_regular(path)
    except FileNotFoundError:
        raise
    except StateError as exc:
        raise DamagedRunError(path, exc.message.removeprefix(f"{path} "), run_id=run_id) from None


def check_lines(run: Run, path: Path, full: bool, problem_of: LineProblem) -> None:
    """Raise DamagedRunError at the first line of the log at `path` that `problem_of` refuses.

    `full`: every line; else the end of the log. A last line without its newline is a
    writer caught mid-append (or a crash): not damage.
    """
    try:
        fd = open_log(path, run.id)
    except FileNotFoundError:
        return
    try:
        size = os.fstat(fd).st_size
        if size > MAX_LOG_BYTES:
            raise DamagedRunError(path, f"is {size:,} bytes, more than the {MAX_LOG_BYTES:,} allowed",
                                  run_id=run.id)
        start = 0 if full else max(0, size - TAIL_BYTES)
        data = os.pread(fd, size - start, start)
    finally:
        os.close(fd)
    lines = data.split(b"\n")[:-1]  # the part after the last newline is still being written
    first_line: int | None = 1
    if start > 0:
        first_line = None  # line numbers unknown in a tail; skip the first (cut) line
        lines = lines[1:]
    state: dict[str, Any] = {"seq": 0, "run": run}
    for index, raw in enumerate(lines):
        if not raw.strip():
            continue
        line = first_line + index if first_line is not None else None
        record = store.parse_line(raw)
        problem = "not a JSON object (garbage, invalid UTF-8 or the wrong shape)" if record is None \
            else problem_of(record, state)
        if problem:
            raise DamagedRunError(path, problem, line=line, run_id=run.id)
