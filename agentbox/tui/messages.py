"""The TUI's messages: small dataclasses named as past-tense facts.

Workers compute and post these; handlers on the dashboard turn them into reactive
snapshots that the widgets render.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from textual.message import Message

from agentbox.core.agents.sessions import SessionRecord
from agentbox.core.engine.models import Checkpoint, Run
from agentbox.core.engine.records import ArtifactEntry, Event
from agentbox.core.records import TurnRecord
from agentbox.core.watch import BoxChange
from agentbox.tui.model import CrewInfo

if TYPE_CHECKING:  # highlighting (pygments) is loaded only once a diff is shown
    from agentbox.core.reports.monitor import ProcessSample
    from agentbox.core.runs import RunLook
    from agentbox.tui.diffs import RenderedFile


@dataclass
class BoxChanged(Message):
    """The watcher saw files change under `.agent-box/` (already turned into facts)."""

    facts: list[BoxChange]


@dataclass
class RunLoaded(Message):
    """A run's state was read from disk (None with an error when it could not be)."""

    run_id: str
    run: Run | None
    error: str | None = None
    unchanged: bool = False
    """Nothing but the save time differs from the run already shown (`run` is then None)."""
    look: RunLook | None = None
    """The follower's look it came from (the screen's follower takes it back, or drops it as stale)."""


@dataclass
class RunsListed(Message):
    """The project's run ids were listed, oldest first."""

    run_ids: tuple[str, ...]


class RunSummary(TypedDict):
    """One run as the run switcher lists it."""

    id: str
    status: str
    goal: str
    mode: str
    tasks: int
    created: float


@dataclass
class RunSummariesLoaded(Message):
    """One-line summaries of every run, for the run switcher."""

    summaries: list[RunSummary]


@dataclass
class CrewLoaded(Message):
    """crew.yaml was read (None with an error when it is broken)."""

    crew: CrewInfo | None
    error: str | None = None


@dataclass
class SessionsLoaded(Message):
    """Session records were read; `complete` means every record of the project."""

    records: list[SessionRecord]
    complete: bool = False
    removed: tuple[str, ...] = ()


@dataclass
class EventsRead(Message):
    """Decision-log records were read up to `offset` (`initial`: the tail of a newly opened run)."""

    run_id: str
    records: list[Event]
    offset: int
    initial: bool = False
    look: RunLook | None = None
    """The follower's look it came from."""


@dataclass
class ManifestRead(Message):
    """Artifact manifest entries were read up to `offset`."""

    run_id: str
    entries: list[ArtifactEntry]
    offset: int
    initial: bool = False
    look: RunLook | None = None
    """The follower's look it came from."""


@dataclass
class MembersSampled(Message):
    """CPU and memory of the members' agent processes were sampled (a newer sample replaces an older one)."""

    samples: dict[str, ProcessSample]

    def can_replace(self, message: Message) -> bool:
        """A pending older sample is dropped in favour of this one."""
        return isinstance(message, MembersSampled)


@dataclass
class CheckpointOpened(Message):
    """A checkpoint appeared that waits on the human."""

    run_id: str
    checkpoint: Checkpoint


@dataclass
class CommandApplied(Message):
    """A run command (approve, rework, answer, pause...) was applied or refused."""

    action: str
    ok: bool
    message: str
    target: str | None = None


class ActionRequested(Message):
    """A screen opened from the dashboard asks it to run one of its actions (approve, talk…)."""

    def __init__(self, action: str, *args: str | None, then: Callable[[], object] | None = None) -> None:
        super().__init__()
        self.action = action
        self.args = args
        self.then = then
        """Called once the action has run (the artifact viewer re-reads a file after the editor)."""

    @property
    def call(self) -> str:
        """The action as Textual's action syntax: `approve('t1')`."""
        return f"{self.action}({', '.join(repr(a) for a in self.args)})"


@dataclass
class RunStarted(Message):
    """A run was created and its engine started in the background."""

    run_id: str
    pid: int


@dataclass
class ActionFailed(Message):
    """A user action could not be done (shown as a notification, never a traceback)."""

    what: str
    error: str


@dataclass
class LiaisonAnswered(Message):
    """The liaison answered a question asked from the dashboard."""

    question: str
    answer: Any


@dataclass
class MemberReplied(Message):
    """A member answered a prompt from the talk box."""

    role: str
    prompt: str
    result: Any


@dataclass
class TextLoaded(Message):
    """A file's text was read for a preview or a viewer."""

    path: str
    text: str
    truncated: bool = False
    error: str | None = None
    highlighted: Any = None
    """The text with syntax highlighting and line numbers (a rich Text), made in the worker."""


@dataclass
class TaskEventsLoaded(Message):
    """The decision-log records about one task were read."""

    task_id: str
    records: list[Event] = field(default_factory=list)
    """The records after the offset the read started at."""
    offset: int = 0
    """Where the next read starts."""
    look: RunLook | None = None
    """The follower's look it came from."""


@dataclass
class TurnsLoaded(Message):
    """The turns of one session were read."""

    session_id: str
    turns: list[TurnRecord] = field(default_factory=list)


@dataclass
class ProfilesLoaded(Message):
    """The profiles (user, v1, bundled) were listed."""

    profiles: list[Any]
    errors: list[str] = field(default_factory=list)


@dataclass
class LoadFinished(Message):
    """A read of kind `key` ended (after its result was posted); another may start."""

    key: str


@dataclass
class TaskDiffLoaded(Message):
    """A worktree task's diff was read from git and highlighted (or could not be: `error`)."""

    task_id: str
    commits: tuple[str | None, str | None]
    """The task's base and head the diff was read for."""
    files: list[RenderedFile] = field(default_factory=list)
    truncated: bool = False
    full_command: str = ""
    error: str | None = None
    page: int = 0
    """Which page of the diff's files this is (from 0)."""
    first: int = 0
    """The position of the page's first file among all the diff's files."""
    more_pages: bool = False
    """Files follow this page."""


@dataclass
class DiscardPlanned(Message):
    """What discarding a run would remove, read for the person to confirm."""

    run_id: str
    lines: list[str]
    error: str | None = None


@dataclass
class RunStatRead(Message):
    """The stat of everything a worktree run's branch holds over its base (what a merge brings)."""

    run_id: str
    stat: str
    error: str | None = None


@dataclass
class RunStatusChanged(Message):
    """The shown run went from one status to another (seen on a reload, not on first opening it)."""

    run: Run
    previous: str


@dataclass
class LiveOutputRead(Message):
    """A member's live view was read: the turn it shows and what it added since the last read."""

    turn: str
    """Which session and turn the events belong to ("" when the member has had no turn)."""
    heading: str
    events: list[Any] = field(default_factory=list)
    """`agentbox.core.agents.live.LiveEvent`s, oldest first."""
    switched: bool = False
    """The events start a turn other than the one shown so far."""
