"""The typed records of a run that cross from the engine to the faces: decision-log events and manifest entries.

Both are JSON lines on disk (events.jsonl, the artifact manifest) and travel as they are
read, so they are `TypedDict`s: plain dicts at run time, typed for mypy. Nothing is
converted on the way in or out, so a file an older agentbox wrote loads unchanged, and a
face that reads them imports no pydantic.

`Event` is a union discriminated by `type`: each kind has its own fields (beside the
fields every event has, `EventBase`). The ledger writes them (`RunLedger.event`, whose
kind is an `EventKind`); a test checks every call's fields against its kind's record.
The per-kind fields are what this version writes: a reader of a persisted event uses
`.get` for them (a line an older version wrote may lack one, or be of a kind no longer
written).

The records of a session (turns, the running turn, usage totals) are in `agentbox.core.records`.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict, cast


class EventBase(TypedDict):
    """The fields of every decision-log event."""

    seq: int
    """The event's number in its run (1, 2, …; events.jsonl holds them in order)."""
    at: float
    run: str
    what: str
    why: str | None
    task: str | None
    role: str | None
    session: str | None
    fingerprint: str | None
    tokens: int | None
    human_required: bool


TaskEventKind = Literal[
    "task.created", "task.dispatch", "task.submit", "task.start_review", "task.approve", "task.reject",
    "task.requeue", "task.block", "task.unblock", "task.pause_budget", "task.resume", "task.cancel",
]
"""A task was created, or moved by one `TaskEvent` (`task.<event>`)."""

PlainKind = Literal[
    TaskEventKind, "answer", "chat.ended", "engine.started", "escalation", "graph.started", "handoff.refused",
    "handoff.stale", "ladder.refused", "plan", "reply.invalid", "round.closed", "run.finished", "run.status",
    "speech.stale", "submission", "verdict", "verdict.ignored", "workspace",
]
"""The kinds that carry no field beyond `EventBase`'s."""


class PlainEvent(EventBase):
    """An event told by its `what` and `why` alone."""

    type: PlainKind


class JobEvent(EventBase):
    """A turn waits for room or is admitted (`admission`), or was stopped (`turn.aborted`)."""

    type: Literal["admission", "turn.aborted"]
    job: str


class DispatchEvent(EventBase):
    """A turn starts (its trace span is keyed by its job and start)."""

    type: Literal["dispatch"]
    job: str
    attempt: int
    kind: str
    """The job's kind (work, review, plan, …)."""
    started: float


class TurnEvent(EventBase):
    """A turn ended."""

    type: Literal["turn"]
    job: str
    kind: str
    turn: int
    duration_s: float
    cost_usd: float | None
    model: str | None
    profile: str
    tool: str


class NetworkEvent(EventBase):
    """A turn's egress proxy refused a connection."""

    type: Literal["network"]
    turn: int


class PlacementEvent(EventBase):
    """A turn ran on a cluster node."""

    type: Literal["placement"]
    job: str
    node: str
    host: str


class CheckpointEvent(EventBase):
    """A checkpoint was opened, or answered."""

    type: Literal["checkpoint", "checkpoint.answered"]
    checkpoint: str


class CommandEvent(EventBase):
    """A human command of the inbox was applied or refused."""

    type: Literal["command"]
    command_id: str | None
    ok: bool


class FailureEvent(EventBase):
    """A typed failure (`failure`) or its automatic retry (`retry`); `check` when a check failed."""

    type: Literal["failure", "retry"]
    check: NotRequired[str]


class RecoverEvent(EventBase):
    """A turn or a check interrupted by a crash is taken up again."""

    type: Literal["recover"]
    check: NotRequired[str]
    gate: NotRequired[str]


class GateOpenedEvent(EventBase):
    """A gate's checks wait to run."""

    type: Literal["gate.opened"]
    gate: str
    stage: str
    commit: str | None
    checks: list[str]


class GatePassedEvent(EventBase):
    """Every check of a gate passed."""

    type: Literal["gate.passed"]
    gate: str
    commit: str | None


class GateDroppedEvent(EventBase):
    """A gate's checks were dropped."""

    type: Literal["gate.dropped"]
    gate: str


class CheckEvent(EventBase):
    """One check ended."""

    type: Literal["check"]
    gate: str
    check: str
    stage: str
    commit: str | None
    passed: bool
    status: str
    """passed, failed or error (could not run)."""
    flaky: bool
    exit_status: int | None
    duration_s: float
    log: str


class CheckNamedEvent(EventBase):
    """A check was red then green (`check.flaky`), or a red one blocks its gate (`gate.blocked`)."""

    type: Literal["check.flaky", "gate.blocked"]
    check: str
    commit: str | None


class CommitEvent(EventBase):
    """A turn's work was committed on its branch."""

    type: Literal["commit"]
    commit: str | None
    head: str | None
    files: list[str]


class MergedEvent(EventBase):
    """A task's work was merged (`merge`), or an advisor's patch was applied and committed (`advisor.applied`)."""

    type: Literal["merge", "advisor.applied"]
    commit: str | None


class HeadMovedEvent(EventBase):
    """An approval no longer matches the branch (`approval.stale`), or a merge was taken back (`merge.undone`)."""

    type: Literal["approval.stale", "merge.undone"]
    commit: str | None
    head: str | None


class MergeConflictEvent(EventBase):
    """A task's work conflicts with the run's approved work."""

    type: Literal["merge.conflict"]
    files: list[str]


class DeliverEvent(EventBase):
    """The run's work was delivered, or waits to be (`commit` once it was merged)."""

    type: Literal["deliver"]
    commit: NotRequired[str | None]


class ArtifactEvent(EventBase):
    """A file was added to the run's manifest."""

    type: Literal["artifact"]
    sha256: NotRequired[str]


class ReviewComparedEvent(EventBase):
    """The two verdicts of a double review were compared."""

    type: Literal["review.compared"]
    outcome: str
    reviewers: list[str]
    to_verify: list[list[str | None]]


class SpeechEvent(EventBase):
    """One message of a group chat."""

    type: Literal["speech"]
    n: int
    round: int
    done: bool


class HandoffEvent(EventBase):
    """One agent handed the conversation to another."""

    type: Literal["handoff"]
    to: str
    hop: int


class NodeEvent(EventBase):
    """A graph node succeeded, or is blocked (no edge for its outcome)."""

    type: Literal["node.succeeded", "node.blocked"]
    node: str


class NodeFailedEvent(EventBase):
    """A graph node failed and its `fail` edge fired."""

    type: Literal["node.failed"]
    node: str
    edge: str
    fail_reason: str | None


class LadderEvent(EventBase):
    """A task moved on the failure ladder (or stayed, its failure registered)."""

    type: Literal["ladder"]
    from_level: str
    to_level: str
    from_mode: str
    to_mode: str


class LadderBriefEvent(EventBase):
    """The lead rewrote a failing task's brief (counted), or filled its coverage (not counted)."""

    type: Literal["ladder.brief"]
    counted: bool
    evidence: NotRequired[list[str]]


class LadderCoverageEvent(EventBase):
    """A review cites acceptance ids the brief lacks: the lead fills them (not counted)."""

    type: Literal["ladder.coverage"]
    acceptance: list[str]
    counted: bool


class LadderUpstreamEvent(EventBase):
    """A failure names only files of a dependency's writes: the task waits on its upstream (not counted)."""

    type: Literal["ladder.upstream"]
    upstream: str
    files: list[str]
    counted: bool


class AdvisorEvent(EventBase):
    """A read-only worker handed in a guide and a patch."""

    type: Literal["advisor"]
    patch: str


class DebtEvent(EventBase):
    """Tech debts were recorded in debt.yaml (or could not be)."""

    type: Literal["debt"]
    debts: NotRequired[list[str]]
    files: NotRequired[list[str]]


class ZoneEvent(EventBase):
    """A module was recorded as a high-rot zone (or zones.yaml could not be read or written)."""

    type: Literal["zone"]
    module: NotRequired[str]
    zone: NotRequired[str]


Event = (
    PlainEvent | JobEvent | DispatchEvent | TurnEvent | NetworkEvent | PlacementEvent | CheckpointEvent |
    CommandEvent | FailureEvent | RecoverEvent | GateOpenedEvent | GatePassedEvent | GateDroppedEvent |
    CheckEvent | CheckNamedEvent | CommitEvent | MergedEvent | HeadMovedEvent | MergeConflictEvent | DeliverEvent |
    ArtifactEvent | ReviewComparedEvent | SpeechEvent | HandoffEvent | NodeEvent | NodeFailedEvent | LadderEvent |
    LadderBriefEvent | LadderCoverageEvent | LadderUpstreamEvent | AdvisorEvent | DebtEvent | ZoneEvent
)
"""One line of a run's decision log (events.jsonl), discriminated by `type`."""

EventKind = Literal[
    PlainKind, "admission", "turn.aborted", "dispatch", "turn", "network", "placement", "checkpoint",
    "checkpoint.answered", "command", "failure", "retry", "recover", "gate.opened", "gate.passed", "gate.dropped",
    "check", "check.flaky", "gate.blocked", "commit", "merge", "advisor.applied", "approval.stale", "merge.undone",
    "merge.conflict", "deliver", "artifact", "review.compared", "speech", "handoff", "node.succeeded",
    "node.blocked", "node.failed", "ladder", "ladder.brief", "ladder.coverage", "ladder.upstream", "advisor",
    "debt", "zone",
]
"""Every kind of event the engine writes (each is the `type` of one `Event` member)."""


class EventFields(TypedDict, total=False):
    """The per-kind fields `RunLedger.event` takes as keywords (which kind has which: the `Event` members)."""

    job: str
    attempt: int
    kind: str
    started: float
    turn: int
    duration_s: float
    cost_usd: float | None
    model: str | None
    profile: str
    tool: str
    node: str
    host: str
    checkpoint: str
    command_id: str | None
    ok: bool
    check: str
    gate: str
    stage: str
    commit: str | None
    head: str | None
    checks: list[str]
    passed: bool
    status: str
    flaky: bool
    exit_status: int | None
    log: str
    files: list[str]
    sha256: str
    outcome: str
    reviewers: list[str]
    to_verify: list[list[str | None]]
    n: int
    round: int
    done: bool
    to: str
    hop: int
    edge: str
    fail_reason: str | None
    from_level: str
    to_level: str
    from_mode: str
    to_mode: str
    counted: bool
    evidence: list[str]
    acceptance: list[str]
    upstream: str
    patch: str
    debts: list[str]
    module: str
    zone: str


class ArtifactEntry(TypedDict):
    """One line of a run's artifact manifest: who made which file (its hash and size when it was recorded).

    The engine writes every key; a reader gets the rest with `.get` (a manifest line needs
    only its `path`, and a face may name a file by its path alone)."""

    path: str
    role: NotRequired[str | None]
    session: NotRequired[str | None]
    task: NotRequired[str | None]
    sha256: NotRequired[str]
    size: NotRequired[int]
    at: NotRequired[float]


def as_events(lines: list[dict[str, Any]]) -> list[Event]:
    """Lines read from events.jsonl (or a run's outbox), as the events the engine wrote.

    Only a claim for the type checker (nothing is converted): the log's readers check a
    line's `seq`, `type` and `what`; a reader of a kind's own fields uses `.get`.
    """
    return cast("list[Event]", lines)


def as_artifact_entries(lines: list[dict[str, Any]]) -> list[ArtifactEntry]:
    """Manifest lines that passed `manifest_problem`, as the entries the engine wrote."""
    return cast("list[ArtifactEntry]", lines)
