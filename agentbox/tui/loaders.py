"""Reads for the TUI, run in thread workers: each calls core services and returns a message.

Nothing here touches a widget; the dashboard posts what these return and its handlers
update the snapshots.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from textual.message import Message

from agentbox.core import runs, store
from agentbox.core.agents.sessions import SessionRecord, SessionStore
from agentbox.core.engine.models import Run
from agentbox.core.errors import AgentboxError
from agentbox.core.paths import ProjectPaths
from agentbox.core.safe_io import inside
from agentbox.core.termtext import for_terminal
from agentbox.tui import messages as msg
from agentbox.tui.model import CrewInfo, RoleInfo

EVENTS_SHOWN = 200
"""Records of the decision log shown when a run is opened (the log is then followed)."""
TASK_EVENTS_SHOWN = 500
"""Most decision-log records about one task read at a time (and kept on its screen)."""
PREVIEW_BYTES = 256 * 1024
"""Most bytes of a file shown in a preview."""
DIFF_SHOWN_BYTES = 256 * 1024
"""Most bytes of a task's patch drawn (the command showing it whole is given when it is cut)."""
STAT_BYTES = 64 * 1024
"""Most bytes of a run's stat read (git writes the patch too: this bounds it)."""


def follow_read(reader: Callable[[], runs.RunLook], task_id: str | None = None) -> Message:
    """One look of a screen's follower (`runs.RunFollower.reader`), as the message of the part it read.

    The screen's handler gives the look back to its follower (`take`), which moves on, or
    drops a look made from a position it has left.
    """
    return as_message(reader(), task_id)


def as_message(look: runs.RunLook, task_id: str | None = None) -> Message:
    """A look at one part of a run as that part's message (a damaged log or manifest reads as empty)."""
    part = look.parts[0]
    if task_id is not None:
        return msg.TaskEventsLoaded(task_id, list(look.events), look.at.events or 0, look=look)
    if part == "events":
        return msg.EventsRead(look.run_id, list(look.events), look.at.events or 0, look.opening_events, look=look)
    if part == "manifest":
        return msg.ManifestRead(look.run_id, list(look.manifest), look.at.manifest or 0, look.opening_manifest,
                                look=look)
    if look.failure is not None:
        return msg.RunLoaded(look.run_id, None, look.failure.message, look=look)
    return msg.RunLoaded(look.run_id, look.run, unchanged=look.run is None, look=look)


def list_runs(project: ProjectPaths) -> msg.RunsListed:
    """The ids of the project's runs, oldest first."""
    return msg.RunsListed(tuple(runs.run_ids(project)))


def run_summaries(project: ProjectPaths) -> msg.RunSummariesLoaded:
    """id, status, mode, goal, tasks and creation time of every run, newest first."""
    summaries: list[msg.RunSummary] = []
    for run_id in reversed(runs.run_ids(project)):
        try:
            run = runs.read(project, run_id)
        except AgentboxError as exc:
            summaries.append({"id": run_id, "status": "unreadable", "goal": exc.message, "mode": "", "tasks": 0,
                              "created": 0.0})
            continue
        summaries.append(msg.RunSummary(id=run.id, status=run.status, goal=run.contract.goal, mode=run.contract.mode,
                                        tasks=len(run.tasks), created=run.created))
    return msg.RunSummariesLoaded(summaries)


def load_crew(project: ProjectPaths) -> msg.CrewLoaded:
    """The crew with each role's tool (from its profile)."""
    from agentbox.core.config import profiles
    from agentbox.core.config import project as project_mod

    try:
        crew = project_mod.load_crew(project).crew
    except AgentboxError as exc:
        return msg.CrewLoaded(None, exc.message)
    roles = []
    for name, role in crew.roles.items():
        tool = "?"
        with contextlib.suppress(AgentboxError):
            tool = profiles.resolve(role.profile, cached=True).tool  # checked before: no YAML parser
        roles.append(RoleInfo(name, role.profile, tool, role.description or ""))
    return msg.CrewLoaded(CrewInfo(tuple(roles), crew.mode, crew.graph.file))


def load_sessions(project: ProjectPaths) -> msg.SessionsLoaded:
    """Every session record of the project."""
    return msg.SessionsLoaded(SessionStore(project.sessions_dir).list(), complete=True)


def load_session(project: ProjectPaths, session_ids: list[str]) -> msg.SessionsLoaded:
    """The records of the sessions that changed (gone ones reported as removed)."""
    sessions = SessionStore(project.sessions_dir)
    records, removed = [], []
    for session_id in session_ids:
        try:
            records.append(sessions.find(session_id))
        except (AgentboxError, TypeError, ValueError):
            removed.append(session_id)
    return msg.SessionsLoaded(records, removed=tuple(removed))


def session_turns(project: ProjectPaths, record: SessionRecord) -> msg.TurnsLoaded:
    """Every turn of one session."""
    return msg.TurnsLoaded(record.id, SessionStore(project.sessions_dir).turns(record))


def session_turns_by_id(project: ProjectPaths, session_id: str) -> msg.TurnsLoaded:
    """Every turn of the session with this id (none when it is gone or unreadable)."""
    sessions = SessionStore(project.sessions_dir)
    try:
        return msg.TurnsLoaded(session_id, sessions.turns(sessions.find(session_id)))
    except (AgentboxError, TypeError, ValueError):
        return msg.TurnsLoaded(session_id, [])


def tail_events(project: ProjectPaths, run_id: str, limit: int = EVENTS_SHOWN) -> msg.EventsRead:
    """The end of a run's decision log, and where to follow it from (nothing when the log is damaged)."""
    return msg_of(runs.RunFollower(project, run_id, events="tail", tail=limit).reader("events"), msg.EventsRead)


def read_events(project: ProjectPaths, run_id: str, offset: int) -> msg.EventsRead:
    """Decision-log records appended since `offset`."""
    at = runs.FollowPosition(events=offset)
    return msg_of(runs.RunFollower(project, run_id, at=at).reader("events"), msg.EventsRead)


def read_manifest(project: ProjectPaths, run_id: str, offset: int, initial: bool) -> msg.ManifestRead:
    """Well-formed artifact manifest entries since `offset` (malformed lines are skipped)."""
    at = runs.FollowPosition(manifest=None if initial else offset)
    return msg_of(runs.RunFollower(project, run_id, at=at).reader("manifest"), msg.ManifestRead)


def task_events(project: ProjectPaths, run_id: str, task_id: str, offset: int) -> msg.TaskEventsLoaded:
    """The decision-log records about one task from `offset` (the last TASK_EVENTS_SHOWN of them)."""
    follower = runs.RunFollower(project, run_id, events="all", task=task_id, tail=TASK_EVENTS_SHOWN,
                                at=runs.FollowPosition(events=offset))
    return msg_of(follower.reader("events"), msg.TaskEventsLoaded, task_id)


M = TypeVar("M", bound=Message)


def msg_of(reader: Callable[[], runs.RunLook], kind: type[M], task_id: str | None = None) -> M:
    """A one-off look through a follower of its own, as the message `kind`."""
    message = follow_read(reader, task_id)
    assert isinstance(message, kind)
    return message


def read_text(path: str, root: Path | None = None) -> msg.TextLoaded:
    """A file's text for a preview (capped at PREVIEW_BYTES).

    Only a regular file is opened, never through a final symlink, never a FIFO or a
    device; with `root`, a path that leads out of it (through a linked directory) is
    refused. An agent can swap a recorded artifact for any of those.
    """
    if root is not None and not inside(Path(path), root):
        return msg.TextLoaded(path, "", error=f"it leads out of {root} (a symlink?)")
    try:
        fd = store.open_regular(Path(path))
    except AgentboxError as exc:
        return msg.TextLoaded(path, "", error=exc.message)
    except OSError as exc:
        return msg.TextLoaded(path, "", error=exc.strerror or str(exc))
    try:
        data = os.read(fd, PREVIEW_BYTES + 1)
    except OSError as exc:
        return msg.TextLoaded(path, "", error=exc.strerror or str(exc))
    finally:
        os.close(fd)
    truncated = len(data) > PREVIEW_BYTES
    if b"\0" in data[:8192]:
        return msg.TextLoaded(path, "", error="binary file")
    text = for_terminal(data[:PREVIEW_BYTES].decode("utf-8", errors="replace"))  # shown, never obeyed
    return msg.TextLoaded(path, text, truncated, highlighted=highlight(path, text))


def highlight(path: str, text: str) -> Any:
    """The text highlighted for its file type, with line numbers (done here, off the UI thread)."""
    from rich.syntax import Syntax
    from rich.text import Text

    lexer = Syntax.guess_lexer(path, code=text[:4096])
    body = Syntax(text, lexer, theme="ansi_dark").highlight(text)
    lines = body.split("\n", allow_blank=True)
    if lines and not lines[-1].plain:
        lines.pop()
    width = len(str(len(lines)))
    numbered = Text(no_wrap=True, overflow="ellipsis")
    for number, line in enumerate(lines, 1):
        numbered.append(f"{number:>{width}} ", style="dim")
        numbered.append_text(line)
        numbered.append("\n")
    return numbered


def task_diff(project: ProjectPaths, run: Run, task_id: str, page: int = 0) -> msg.TaskDiffLoaded:
    """One page of a worktree task's diff from git, cut per file and highlighted (a page of files,
    bounded at DIFF_SHOWN_BYTES: a flood of changed files is never read whole)."""
    from agentbox.core.reports import changes as run_changes
    from agentbox.tui.diffs import render_patch

    task = run.tasks[task_id]
    commits = (task.base, task.head)
    try:
        found = run_changes.task_diff_page(project, run, task_id, page, max_bytes=DIFF_SHOWN_BYTES)
    except AgentboxError as exc:
        return msg.TaskDiffLoaded(task_id, commits, error=exc.message, page=page)
    diff = found.diff
    return msg.TaskDiffLoaded(task_id, commits, render_patch(diff.patch, task.changed_files), diff.truncated,
                              diff.full_command, page=page, first=found.first, more_pages=found.more)


def run_stat(project: ProjectPaths, run: Run) -> msg.RunStatRead:
    """The stat of what a worktree run's integration branch holds over its base."""
    from agentbox.core.reports import changes as run_changes

    try:
        stat = run_changes.run_diff(project, run, stat_only=True, max_bytes=STAT_BYTES).stat
    except AgentboxError as exc:
        return msg.RunStatRead(run.id, "", exc.message)
    return msg.RunStatRead(run.id, stat)


def list_profiles() -> msg.ProfilesLoaded:
    """Every profile agentbox can use."""
    from agentbox.core.config import profiles

    errors: list[Any] = []
    found = profiles.all_profiles(errors)
    return msg.ProfilesLoaded(found, [getattr(e, "message", str(e)) for e in errors])


class Coalescer:
    """At most one read in flight per kind; requests made meanwhile collapse into one more read."""

    def __init__(self) -> None:
        self._busy: set[str] = set()
        self._again: set[str] = set()

    def request(self, key: str) -> bool:
        """True when a read of `key` should start now (else it is remembered for later)."""
        if key in self._busy:
            self._again.add(key)
            return False
        self._busy.add(key)
        return True

    def finished(self, key: str) -> bool:
        """Mark a read done; True when another was requested meanwhile and should start now."""
        if key in self._again:
            self._again.discard(key)
            return True
        self._busy.discard(key)
        return False
