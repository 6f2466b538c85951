"""The state of a run as persisted in `run.json` (pydantic, so a load is always validated).

The engine is the only writer while it runs; commands from other processes go through
the run's inbox (see `run_store`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

RunStatus = Literal["planning", "running", "waiting_user", "paused", "blocked", "done", "failed",
                    "cancelled", "circuit_broken"]
TERMINAL_RUN_STATES: frozenset[str] = frozenset({"done", "failed", "cancelled"})

JobKind = Literal["plan", "work", "review", "synthesis", "speech", "handoff", "node"]


class Model(BaseModel):
    """Base: attribute docstrings become descriptions; unknown keys in run.json are kept out."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="ignore", validate_assignment=False)


class Contract(Model):
    """What the run is for and the rules it runs under (fixed at creation)."""

    goal: str
    """The goal given by the person."""
    mode: str
    """Orchestration mode."""
    scope: list[str] = Field(default_factory=list)
    """Paths the run is about (informational)."""
    success_criteria: list[str] = Field(default_factory=list)
    """How the person will judge the outcome."""
    limits: dict[str, Any] = Field(default_factory=dict)
    """Snapshot of crew.yaml's limits at creation."""
    settings: dict[str, Any] = Field(default_factory=dict)
    """Snapshot of the mode's settings at creation."""
    roles: dict[str, str] = Field(default_factory=dict)
    """Role → profile at creation."""
    graph: dict[str, Any] | None = None
    """Graph mode: the validated work graph (nodes and edges)."""


class Acceptance(Model):
    """One acceptance criterion of a task."""

    id: str
    criterion: str


class Failure(Model):
    """One typed failure of a task or job."""

    kind: str
    """environment_failure, implementation_defect, contract_defect or domain_gap."""
    fingerprint: str
    message: str
    at: float
    job: str | None = None


class Verdict(Model):
    """A review outcome recorded on the task."""

    verdict: str
    by: str
    """reviewer role, or `human`."""
    at: float
    evidence: list[str] = Field(default_factory=list)
    blocking_issues: list[dict[str, Any]] = Field(default_factory=list)
    checklist: list[dict[str, Any]] = Field(default_factory=list)
    confidence: float | None = None
    note: str | None = None


class Task(Model):
    """One unit of work with an assignee, acceptance criteria and a write scope."""

    id: str
    assignee: str
    brief: str
    acceptance: list[Acceptance] = Field(default_factory=list)
    writes: list[str] = Field(default_factory=list)
    depends_on: list[str] = Field(default_factory=list)
    state: str = "queued"
    attempts: int = 0
    """Work turns dispatched for this task."""
    session_id: str | None = None
    """The worker's agentbox session for this task (rework resumes it)."""
    review_session_id: str | None = None
    submission: dict[str, Any] | None = None
    verdicts: list[Verdict] = Field(default_factory=list)
    failures: list[Failure] = Field(default_factory=list)
    tokens: int = 0
    unknown_usage_turns: int = 0
    cost_usd: float | None = None
    budget_extra: int = 0
    """Tokens a person added to this task's budget after a budget checkpoint."""
    note: str | None = None
    """A human note to pass on the next dispatch (rework note, answer)."""
    round: int = 1
    node: str | None = None
    """Graph mode: the node this task runs."""
    created: float = 0.0
    updated: float = 0.0


class Checkpoint(Model):
    """Something that waits on a human."""

    id: str
    kind: Literal["plan_approval", "question", "retry_escalation", "budget", "ping_pong", "run_budget"]
    question: str
    options: list[str] = Field(default_factory=list)
    task: str | None = None
    role: str | None = None
    status: Literal["open", "answered"] = "open"
    answer: str | None = None
    created: float = 0.0
    answered_at: float | None = None
    data: dict[str, Any] = Field(default_factory=dict)


class Job(Model):
    """An agent turn the engine has dispatched (kept so a crash can find interrupted turns)."""

    id: str
    kind: JobKind
    role: str
    task: str | None = None
    session_id: str | None = None
    prompt: str = ""
    started: float = 0.0
    pid: int | None = None
    pid_create_time: float | None = None
    attempt: int = 1
    """Attempt of this same job (environment retries)."""
    corrective: bool = False
    """This turn is the one corrective re-prompt after an invalid structured reply."""
    data: dict[str, Any] = Field(default_factory=dict)


class Totals(Model):
    """Token and cost sums of the run; unknown usage is counted, never added as 0."""

    tokens: int = 0
    input_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float | None = None
    turns: int = 0
    unknown_usage_turns: int = 0


class Run(Model):
    """Everything in run.json."""

    id: str
    contract: Contract
    status: RunStatus = "planning"
    status_reason: str | None = None
    created: float = 0.0
    updated: float = 0.0
    finished: float | None = None
    seq: int = 0
    """Sequence number of the last event written (or queued in `outbox`)."""
    tasks: dict[str, Task] = Field(default_factory=dict)
    checkpoints: dict[str, Checkpoint] = Field(default_factory=dict)
    jobs: dict[str, Job] = Field(default_factory=dict)
    """Turns in flight."""
    totals: Totals = Field(default_factory=Totals)
    retries: dict[str, int] = Field(default_factory=dict)
    """Failure fingerprint → automatic retries made."""
    mode_state: dict[str, Any] = Field(default_factory=dict)
    """Per-mode progress (phase, round, cursor, chat offset...)."""
    sessions: dict[str, str] = Field(default_factory=dict)
    """Named sessions of the run (e.g. the lead's) → agentbox session id."""
    engine: dict[str, Any] | None = None
    """pid and start time of the engine process running it."""
    paused: bool = False
    result: dict[str, Any] | None = None
    outbox: list[dict[str, Any]] = Field(default_factory=list)
    """Events saved with the state and not yet confirmed in events.jsonl (crash safety)."""
    next_ids: dict[str, int] = Field(default_factory=dict)
    applied_commands: list[str] = Field(default_factory=list)
    """Ids of inbox commands already applied (a command is applied exactly once)."""
    inbox_offset: int = 0
