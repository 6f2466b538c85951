"""The state of a run as persisted in `run.json` (pydantic, so a load is always validated).

The engine is the only writer while it runs; commands from other processes go through
the run's inbox (see `run_store`). Ids become path components (a task's hand-on folder, a
session's files), so every id read from run.json obeys `ID_PATTERN`, and the same rule is
checked where ids come from the command line (`check_id`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NamedTuple, Self, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    computed_field,
    field_serializer,
    field_validator,
    model_validator,
)

from agentbox.core.config.models import (
    Check,
    Gates,
    GateStage,
    GraphSettings,
    GroupChatSettings,
    HandoffSettings,
    HierarchicalSettings,
    Limits,
    Mode,
    SequentialSettings,
    WorkspaceSetup,
)
from agentbox.core.engine.ladder_model import LadderState, checkpoint_answers
from agentbox.core.engine.mode_state import HandoffHop, ModeState
from agentbox.core.engine.replies import BlockingIssue, ChecklistItem, NodeResult, Submission
from agentbox.core.graph.model import Graph
from agentbox.core.ids import ID_PATTERN, ID_RULE, check_id, is_valid_id  # noqa: F401  (re-exported)
from agentbox.core.tasks import TaskState, is_terminal

MAX_SEQ = 2**53
"""Largest event sequence number a run can reach (a bigger one in a file is damage)."""
MAX_PID = 1 << 22
"""Linux's largest pid (pid_max can be at most 2^22)."""

RunId = Annotated[str, Field(pattern=ID_PATTERN)]
TaskId = Annotated[str, Field(pattern=ID_PATTERN)]
SessionId = Annotated[str, Field(pattern=ID_PATTERN)]
ItemId = Annotated[str, Field(pattern=ID_PATTERN)]
"""A job's or checkpoint's id."""


RunStatus = Literal["planning", "running", "waiting_user", "paused", "blocked", "done", "failed",
                    "cancelled", "circuit_broken"]
TERMINAL_RUN_STATES: frozenset[str] = frozenset({"done", "failed", "cancelled"})


def no_engine_reason(run_id: str) -> str:
    """The status reason of a run a command changed while no engine ran: the engine must go on."""
    return f"the engine is not running: `agentbox run --resume {run_id}` continues"

NoteAuthor = Literal["human", "agentbox"]
"""Who left a task's note for its next dispatch."""
JobKind = Literal["plan", "work", "review", "synthesis", "speech", "handoff", "node", "rewrite"]
TASK_WORK_KINDS: frozenset[str] = frozenset({"work", "node"})
"""Job kinds that do a task's work (see `Job.works_on_task`)."""


class Model(BaseModel):
    """Base: attribute docstrings become descriptions; unknown keys in run.json are kept out."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="ignore", validate_assignment=False)


ModeSettings = SequentialSettings | HierarchicalSettings | GroupChatSettings | HandoffSettings | GraphSettings
"""The settings of one orchestration mode (crew.yaml's section of that name)."""
SETTINGS_BY_MODE: dict[str, type[ModeSettings]] = {
    "sequential": SequentialSettings, "hierarchical": HierarchicalSettings, "group_chat": GroupChatSettings,
    "handoff": HandoffSettings, "graph": GraphSettings,
}
S = TypeVar("S", bound=ModeSettings)


class Contract(Model):
    """What the run is for and the rules it runs under (fixed at creation)."""

    goal: str
    """The goal given by the person."""
    mode: Mode
    """Orchestration mode."""
    scope: list[str] = Field(default_factory=list)
    """Paths the run is about (informational)."""
    success_criteria: list[str] = Field(default_factory=list)
    """How the person will judge the outcome."""
    limits: Limits = Field(default_factory=Limits)
    """crew.yaml's limits at creation."""
    settings: ModeSettings = Field(default_factory=HierarchicalSettings)
    """The mode's settings at creation (the model of `mode`'s crew.yaml section)."""
    roles: dict[str, str] = Field(default_factory=dict)
    """Role → profile at creation."""
    graph: Graph | None = None
    """Graph mode: the validated work graph (nodes and edges)."""
    graph_file: str | None = None
    """Graph mode: the path the work graph was read from."""
    workspace: Literal["worktree", "shared"] = "shared"
    """Where writers work: each writer task in its own git worktree, or all in the live tree."""
    deliver: Literal["checkpoint", "manual", "merge"] = "checkpoint"
    """What happens to a done worktree run's branch (see crew.yaml's `deliver`)."""
    workspace_setup: WorkspaceSetup = Field(default_factory=WorkspaceSetup)
    """How a new task worktree is made ready."""
    checks: dict[str, Check] = Field(default_factory=dict)
    """crew.yaml's checks at creation."""
    gates: Gates = Field(default_factory=Gates)
    """crew.yaml's gates at creation: which checks run on each submission, merge and at the end."""
    ladder: bool = False
    """A task's counted failures climb the failure ladder (crew.yaml's `ladder`, on by default; a run.json
    written before it had this field keeps the retry it was started with, hence False here)."""
    no_compromise: list[str] = Field(default_factory=list)
    """crew.yaml's `no_compromise` paths at creation."""

    @model_validator(mode="before")
    @classmethod
    def _settings_of_mode(cls, data: Any) -> Any:
        """Read `settings` as the model of the run's mode.

        A run.json written before the settings were typed kept the graph's resolved path
        in `settings.file`: it moves to `graph_file`.
        """
        if not isinstance(data, dict):
            return data
        model = SETTINGS_BY_MODE.get(data.get("mode"))  # type: ignore[arg-type]
        settings = data.get("settings")
        if model is None or isinstance(settings, model):
            return data
        fields = dict(settings) if isinstance(settings, dict) else {}
        data = dict(data)
        if model is GraphSettings and isinstance(fields.get("file"), str) and fields["file"].startswith("/"):
            data.setdefault("graph_file", fields.pop("file"))
        data["settings"] = model.model_validate(fields)
        return data

    @field_serializer("graph")
    def _graph_as_written(self, graph: Graph | None) -> dict[str, Any] | None:
        """The graph with the keys of its file (an edge's `from`, not the attribute name `from_`)."""
        return None if graph is None else graph.model_dump(by_alias=True)

    def settings_as(self, kind: type[S]) -> S:
        """The settings as the model `kind` of the run's mode."""
        if not isinstance(self.settings, kind):
            raise TypeError(f"a {self.mode} run has no {kind.__name__}")
        return self.settings


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
    blocking_issues: list[BlockingIssue] = Field(default_factory=list)
    checklist: list[ChecklistItem] = Field(default_factory=list)
    confidence: float | None = None
    note: str | None = None
    commit: str | None = None
    """The commit it judged (worktree runs): an approval merges exactly that commit."""


class CheckResult(Model):
    """One check run by the code layer on one commit (a submission, the run's branch after a merge, its end)."""

    name: str
    stage: GateStage
    commit: str | None
    """The commit it judged (None: the live tree of a shared run)."""
    passed: bool
    status: Literal["passed", "failed", "error"]
    """green, red, or could not run (`error`: not found, timeout, killed; says nothing about the work)."""
    flaky: bool = False
    """It was red, ran once more and was green."""
    exit_status: int | None = None
    duration_s: float = 0.0
    log: str
    """The path of its output's log file."""
    command: str = ""
    cannot_run: str | None = None
    """Why it could not run (`status == "error"`)."""
    tail: str = ""
    """The end of its output (bounded, control characters made visible)."""
    at: float = 0.0
    task: TaskId | None = None
    """The task whose work it judged (a submission) or whose merge it followed (integration)."""

    def listing(self) -> dict[str, Any]:
        """What the faces show of it (`agentbox checks --json`, status, MCP): all but its output's tail."""
        return self.model_dump(exclude={"tail"})


class ReviewPanel(Model):
    """A double review of the task's current submission: two reviewers, compared in code."""

    reviewers: list[str]
    """The two reviewer roles, each in its own session."""
    verdicts: dict[str, Verdict] = Field(default_factory=dict)
    """Reviewer → its verdict (`invalid` when it gave none usable), as they come in."""
    outcome: Literal["approve", "rework", "checkpoint"] | None = None
    """What the comparison decided, once both verdicts are in."""
    reason: str | None = None
    """Why, in one sentence."""


class ChangedPath(Model):
    """One file a task changed, as git counts it."""

    path: str
    change: Literal["A", "M", "D", "R"]
    added: int | None = None
    """Lines added (None: a binary file)."""
    removed: int | None = None
    old_path: str | None = None
    """The path before a rename."""


class RunGit(Model):
    """Where a worktree run's work lives in git."""

    base: str
    """The commit the run started from (a snapshot of uncommitted changes when `dirty`)."""
    head: str
    """The person's HEAD when the run started."""
    branch: str | None = None
    """The person's branch when the run started (where `agentbox merge` brings the run by default)."""
    dirty: bool = False
    """The base is a snapshot of the person's uncommitted changes to tracked files."""
    integration_branch: str
    """`agentbox/<run-id>`: every approved task's work, merged."""
    delivered: str | None = None
    """The commit of the person's branch that brought the run in (`agentbox merge`)."""
    delivered_into: str | None = None
    """The branch the run was brought into (None before it was, or when a run recorded no branch)."""
    named_base: str | None = None
    """The branch or commit the person started the run from (`agentbox run --base`); None: their HEAD."""


class TaskNote(NamedTuple):
    """A note taken for a task's next dispatch, with who wrote it."""

    text: str
    by: NoteAuthor


class Task(Model):
    """One unit of work with an assignee, acceptance criteria and a write scope."""

    id: TaskId
    assignee: str
    brief: str
    acceptance: list[Acceptance] = Field(default_factory=list)
    writes: list[str] = Field(default_factory=list)
    depends_on: list[TaskId] = Field(default_factory=list)
    state: TaskState = TaskState.QUEUED
    """Where the task is in its life (the transition table in `tasks` moves it)."""
    attempts: int = 0
    """Work turns dispatched for this task."""
    session_id: SessionId | None = None
    """The worker's agentbox session for this task (rework resumes it)."""
    review_session_id: SessionId | None = None
    review: Literal["single", "double"] | None = None
    """How its submissions are reviewed: `double` by two reviewers compared in code (None: as the crew says)."""
    review_sessions: dict[str, SessionId] = Field(default_factory=dict)
    """Double review: each reviewer role's own session."""
    panel: ReviewPanel | None = None
    """Double review: the verdicts of the latest submission and their comparison."""
    submission: Submission | NodeResult | None = Field(default=None, union_mode="left_to_right")
    """The worker's last submission (a graph node's report in graph mode)."""
    verdicts: list[Verdict] = Field(default_factory=list)
    failures: list[Failure] = Field(default_factory=list)
    tokens: int = 0
    unknown_usage_turns: int = 0
    cost_usd: float | None = None
    """What its turns cost in US dollars, where known (see `unknown_cost_turns`)."""
    unknown_cost_turns: int = 0
    """Its turns whose cost is unknown (not in `cost_usd`)."""
    budget_extra: int = 0
    """Tokens a person added to this task's budget after a budget checkpoint."""
    budget_extra_usd: float = 0.0
    """US dollars a person added to this task's money budget after a budget checkpoint."""
    review_pending: bool = False
    """Its submitted work was paused for budget before review: resuming sends that work to review."""
    note: str | None = None
    """A note to pass on the next dispatch: a person's answer, or agentbox's (a merge
    conflict to resolve, a reply that could not be used)."""
    note_by: NoteAuthor = "human"
    """Who wrote `note`: the prompt names them, so a worker never takes agentbox's words for a person's."""
    round: int = 1
    node: str | None = None
    """Graph mode: the node this task runs."""
    created: float = 0.0
    updated: float = 0.0
    branch: str | None = None
    """Worktree runs: the task's git branch (`agentbox/<run>@<task>`)."""
    base: str | None = None
    """Worktree runs: the commit the task's work is measured from."""
    head: str | None = None
    """Worktree runs: the task branch's last commit (agentbox commits each work turn)."""
    changed_files: list[ChangedPath] = Field(default_factory=list)
    """Worktree runs: what the task changed, from git (base..head), not from the agent's reply; the
    first CHANGED_KEPT files of a flood (git has the rest)."""
    changed_more: int = 0
    """Worktree runs: files the task changed beyond `changed_files` (a flood of changes)."""
    merged: str | None = None
    """Worktree runs: the integration branch's commit that took the task's work in."""
    node: str | None = None
    """The cluster node its last work turn ran on, `NODE_ID@HOST` (None: this machine)."""
    checks: list[CheckResult] = Field(default_factory=list)
    """The checks run on its submissions and after its merge, oldest first."""
    ladder: LadderState = Field(default_factory=LadderState)
    """Where the task stands on the failure ladder (hierarchical runs, unless crew.yaml says `ladder: false`)."""

    @field_validator("state", mode="before")
    @classmethod
    def _known_state(cls, value: object) -> object:
        if isinstance(value, str) and value not in TaskState.__members__.values():
            raise ValueError(f"unknown task state {value[:40]!r} (one of {', '.join(TaskState)})")
        return value

    @property
    def is_terminal(self) -> bool:
        """Approved or cancelled: nothing more happens to it."""
        return is_terminal(self.state)

    @property
    def state_label(self) -> str:
        """The state as a person reads it: a graph node closed on the failure it reported (and that was
        routed on) says `failed (routed)`, not `approved`."""
        if self.state == TaskState.APPROVED and self.verdicts and self.verdicts[-1].verdict == "fail":
            return "failed (routed)"
        return str(self.state)

    @property
    def submitted_summary(self) -> str:
        """What the last submission says was done ("" before the first one)."""
        return self.submission.summary if self.submission is not None else ""

    @property
    def submitted_artifacts(self) -> list[str]:
        """The files the last submission lists ([] before the first one)."""
        return self.submission.artifacts if self.submission is not None else []


class JobData(Model):
    """What a turn carries besides its prompt: when it may start, what a retry sends, and its mode's bookkeeping."""

    not_before: float = 0.0
    """It starts no earlier than this (a back-off after an environment failure)."""
    original_prompt: str | None = None
    """The prompt before any correction or resume note: what a retry sends again (None: the job's prompt)."""
    session_key: str | None = None
    """The run's named session a turn without a task runs in (`lead`, `chat:<role>`, `node:<name>`...)."""
    writes: list[str] | None = None
    """The write scope of a turn without a task (a handoff turn); None: read-only."""
    hop: int | None = None
    """Handoff: the hop the turn answers (a late turn of an earlier hop is ignored)."""
    n: int | None = None
    """Group chat: the number the speech will have in the pool (a late speech is ignored)."""
    round: int | None = None
    """Group chat: the round of the speech."""
    graph_route: bool = False
    """Graph: not a turn but a loop's delivery passing through failure routing."""
    held: str | None = None
    """Why the runner holds the turn back although the scheduler would start it ("waiting for memory: …")."""

    def for_retry(self, original_prompt: str | None, *, not_before: float = 0.0) -> JobData:
        """The same extras for another turn of the same work: it sends `original_prompt` again, from `not_before` on."""
        return self.model_copy(update={"not_before": not_before, "original_prompt": original_prompt})


class EscalatedTurn(Model):
    """The turn a retry_escalation stopped: what a person's `retry` runs again."""

    kind: JobKind
    role: str
    task: TaskId | None = None
    session_id: SessionId | None = None
    prompt: str
    """The turn's original prompt."""
    data: JobData = Field(default_factory=JobData)


class PendingGate(Model):
    """A gate whose checks are still to run (kept so a crash runs an interrupted check again)."""

    id: ItemId
    stage: GateStage
    task: TaskId | None = None
    commit: str | None = None
    """The commit its checks judge."""
    checks: list[str] = Field(default_factory=list)
    """The checks still to run, in order."""
    started: float = 0.0
    """A check of it is running since then (0: none)."""
    attempt: int = 1
    """Environment retries of the current check (could not run)."""
    not_before: float = 0.0
    """The next check starts no earlier than this (a back-off)."""
    turn: EscalatedTurn | None = None
    """Submission: the work turn that submitted (what a red check sends back to rework)."""
    undo_to: str | None = None
    """Integration: where the run's branch stood before the merge (a red check moves it back)."""
    merged: str | None = None
    """Integration: the merge commit the checks judge (the branch must still be there to undo it)."""
    approved_commit: str | None = None
    """Integration: the commit the approval judged (what is merged; a moved branch makes it stale)."""
    evidence: list[str] = Field(default_factory=list)
    """Integration: the approval's evidence (the task is approved with it once the checks pass)."""
    approved_by: str | None = None
    """Integration: who approved (a reviewer role, or `human`)."""


class CheckpointData(Model):
    """What a checkpoint keeps for its answer, by kind."""

    fingerprint: str | None = None
    """retry_escalation: the failure that was retried too often (a `retry` resets its count)."""
    job: EscalatedTurn | None = None
    """retry_escalation: the turn to run again."""
    hop: HandoffHop | None = None
    """ping_pong: the handoff held until the person answers."""


class Checkpoint(Model):
    """Something that waits on a human."""

    id: ItemId
    kind: Literal["plan_approval", "question", "retry_escalation", "budget", "ping_pong", "run_budget", "deliver",
                  "review_disagreement", "ladder"]
    question: str
    options: list[str] = Field(default_factory=list)
    task: TaskId | None = None
    role: str | None = None
    status: Literal["open", "answered"] = "open"
    answer: str | None = None
    created: float = 0.0
    answered_at: float | None = None
    data: CheckpointData = Field(default_factory=CheckpointData)

    def ladder_answers(self) -> tuple[list[str], bool]:
        """A ladder checkpoint's answers (its options and cancel), and whether they are followed by a
        one-sentence root cause with evidence: what every face tells the person."""
        return checkpoint_answers(self.options)


class Job(Model):
    """An agent turn the engine has dispatched (kept so a crash can find interrupted turns)."""

    id: ItemId
    kind: JobKind
    role: str
    task: TaskId | None = None
    session_id: SessionId | None = None
    prompt: str = ""
    started: float = 0.0
    pid: int | None = Field(default=None, gt=1, le=MAX_PID)
    pid_create_time: float | None = None
    attempt: int = 1
    """Attempt of this same job (environment retries)."""
    corrective: bool = False
    """This turn is the one corrective re-prompt after an invalid structured reply."""
    data: JobData = Field(default_factory=JobData)

    @property
    def original_prompt(self) -> str:
        """The prompt a retry of this turn sends again (before any correction or resume note)."""
        return self.data.original_prompt or self.prompt

    @property
    def works_on_task(self) -> bool:
        """A work or graph node turn: it dispatches its task, holds the worker's slot and writes its scope."""
        return self.kind in TASK_WORK_KINDS


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
    unknown_cost_turns: int = 0
    """Turns whose cost neither the tool nor the price table knew (not in `cost_usd`)."""
    subscription_turns: int = 0
    """Turns run on a subscription login (their cost is what the tokens would cost, not a bill)."""


class RoleSpend(Model):
    """What one role's turns used in a run: tokens and cost (unknown cost counted, never added as 0)."""

    turns: int = 0
    tokens: int = 0
    cost_usd: float | None = None
    unknown_cost_turns: int = 0


class _OldRunKeys(Model):
    """The run-level keys a run.json written before the mode states were typed kept in `mode_state`."""

    started: bool = False
    budget_extra: int = 0


RUN_KEYS_IN_OLD_MODE_STATE = tuple(_OldRunKeys.model_fields)


class EngineHolder(Model):
    """The engine process running a run."""

    pid: int = Field(gt=1, le=MAX_PID)
    started: float
    """When it took the run."""


class RunResult(Model):
    """What a finished run produced; each mode fills the fields that apply to it."""

    summary: str = ""
    """The answer or synthesis, shortened."""
    artifact: str | None = None
    """Path of the run's main artifact (synthesis.md, result.md, final.md)."""
    transcript: str | None = None
    """Group chat and handoff: path of the transcript."""
    terminated_by: str | None = None
    """Group chat and handoff: what ended the run (done_signal, max_rounds, answer, max_handoffs, human)."""
    rounds: int | None = None
    """Group chat: rounds held."""
    messages: int | None = None
    """Group chat: messages in the pool."""
    final_by: str | None = None
    """Group chat: the member whose message is the final answer."""
    handoffs: int | None = None
    """Handoff: handoffs routed."""
    answered_by: str | None = None
    """Handoff: the role that answered."""
    nodes: dict[str, TaskId] | None = None
    """Graph: each node's latest run."""


class Run(Model):
    """Everything in run.json."""

    id: RunId
    saves: int = Field(default=0, ge=0)
    """How many times the state was saved; run.json's journal is `journal-<saves>.jsonl` (kept second: found by a scan)."""
    git: RunGit | None = None
    """Worktree runs: the base commit and the integration branch."""
    contract: Contract
    status: RunStatus = "planning"
    status_reason: str | None = None
    created: float = 0.0
    updated: float = 0.0
    finished: float | None = None
    seq: int = Field(default=0, ge=0, le=MAX_SEQ)
    """Sequence number of the last event written (or queued in `outbox`)."""
    tasks: dict[TaskId, Task] = Field(default_factory=dict)
    checkpoints: dict[ItemId, Checkpoint] = Field(default_factory=dict)
    jobs: dict[ItemId, Job] = Field(default_factory=dict)
    """Turns in flight."""
    totals: Totals = Field(default_factory=Totals)
    retries: dict[str, int] = Field(default_factory=dict)
    """Failure fingerprint → automatic retries made."""
    mode_state: ModeState = Field(default_factory=dict, validate_default=True, discriminator="mode")  # type: ignore[arg-type]
    """The mode's own progress (the model of the contract's mode; see `mode_state`)."""
    mode_started: bool = False
    """The mode's start has run (a resumed run does not start it again)."""
    budget_extra: int = 0
    """Tokens a person added to the run's token budget after a run_budget checkpoint."""
    budget_extra_usd: float = 0.0
    """US dollars a person added to the run's money budget after a run_budget checkpoint."""
    spend_by_role: dict[str, RoleSpend] = Field(default_factory=dict)
    """Role → what its turns used."""
    sessions: dict[str, SessionId] = Field(default_factory=dict)
    """Named sessions of the run (e.g. the lead's) → agentbox session id."""
    engine: EngineHolder | None = None
    """The engine process running it."""
    paused: bool = False
    result: RunResult | None = None
    outbox: list[dict[str, Any]] = Field(default_factory=list)
    """Events saved with the state and not yet confirmed in events.jsonl (crash safety)."""
    next_ids: dict[str, int] = Field(default_factory=dict)
    applied_commands: list[str] = Field(default_factory=list)
    """Ids of inbox commands already applied (a command is applied exactly once)."""
    inbox_offset: int = 0
    gates: dict[ItemId, PendingGate] = Field(default_factory=dict)
    """Gates whose checks are still to run."""
    checks: list[CheckResult] = Field(default_factory=list)
    """The run_end checks on the run's final branch."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def token_budget(self) -> int | None:
        """The run's token budget now: crew.yaml's `tokens_total` plus what a person added; None is unlimited."""
        total = self.contract.limits.budget.tokens_total
        return None if total is None else total + self.budget_extra

    @computed_field  # type: ignore[prop-decorator]
    @property
    def usd_budget(self) -> float | None:
        """The run's money budget now: crew.yaml's `usd_total` plus what a person added; None is unlimited."""
        total = self.contract.limits.budget.usd_total
        return None if total is None else total + self.budget_extra_usd

    def run_budget_left(self) -> bool:
        """False once the run's token or money budget (with what a person added) is spent.

        Turns of unknown cost are not in the money spent: a run whose tools report no cost
        and whose models are not priced is held by its token budget only.
        """
        budget = self.token_budget
        if budget is not None and self.totals.tokens >= budget:
            return False
        money = self.usd_budget
        return money is None or (self.totals.cost_usd or 0.0) < money

    def task_usd_budget(self, task: Task) -> float | None:
        """The task's money budget (crew.yaml's `usd_per_task` plus what a person added), None when unlimited."""
        per_task = self.contract.limits.budget.usd_per_task
        return None if per_task is None else per_task + task.budget_extra_usd

    def task_budget(self, task: Task) -> int | None:
        """The task's token budget (crew.yaml's `tokens_per_task` plus what a person added), None when unlimited."""
        per_task = self.contract.limits.budget.tokens_per_task
        return None if per_task is None else per_task + task.budget_extra

    @property
    def in_worktrees(self) -> bool:
        """Whether the run's writers work on git branches: it has diffs to show and a branch to merge."""
        return self.contract.workspace == "worktree" and self.git is not None

    def check_results(self, task_id: str | None = None) -> list[CheckResult]:
        """Every check the code layer ran in the run (of one task, when named), in the order they ran."""
        found = [c for t in self.tasks.values() if task_id is None or t.id == task_id for c in t.checks]
        if task_id is None:
            found += self.checks
        return sorted(found, key=lambda c: c.at)

    def checking(self) -> dict[str, PendingGate]:
        """Task id → its gate whose checks are still to run (the task is being checked)."""
        return {g.task: g for g in self.gates.values() if g.task is not None}

    def open_checkpoints(self) -> list[Checkpoint]:
        """Checkpoints still waiting on the human, in the order they were opened."""
        return [c for c in self.checkpoints.values() if c.status == "open"]

    def pending_jobs(self) -> list[Job]:
        """Turns waiting to start, oldest first."""
        return [j for j in self.jobs.values() if not j.started]

    def running_jobs(self) -> list[Job]:
        """Turns running now."""
        return [j for j in self.jobs.values() if j.started]

    @field_validator("mode_state", mode="wrap")
    @classmethod
    def _state_of_mode(cls, value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> ModeState:
        """Read `mode_state` as the model of the contract's mode.

        A run.json written before the mode states were typed kept two run-level keys in the
        mode's dict, `started` and `budget_extra`: they are set aside for `_consistent` to move
        to the run. (A field validator, not a model one: the rest of run.json stays on
        pydantic's fast path for JSON.)
        """
        contract = info.data.get("contract")
        if not isinstance(value, dict) or not isinstance(contract, Contract):
            return handler(value)
        fields = dict(value)
        run_keys = {key: fields.pop(key) for key in RUN_KEYS_IN_OLD_MODE_STATE if key in fields}
        fields.setdefault("mode", contract.mode)
        state = handler(fields)
        state.old_run_keys = run_keys
        return state

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        """Keys match ids; the mode state is the contract's mode's; the outbox holds events with seqs the run has given out."""
        if self.mode_state.mode != self.contract.mode:
            raise ValueError(f"mode_state is for {self.mode_state.mode} in a {self.contract.mode} run")
        if self.mode_state.old_run_keys:
            moved = _OldRunKeys.model_validate(self.mode_state.old_run_keys)
            self.mode_started = self.mode_started or moved.started
            self.budget_extra = self.budget_extra or moved.budget_extra
            self.mode_state.old_run_keys = {}
        for name, table in (("tasks", self.tasks), ("checkpoints", self.checkpoints), ("jobs", self.jobs)):
            for key, item in table.items():
                if key != item.id:
                    raise ValueError(f"{name}.{key[:40]} holds id {item.id[:40]!r}")
        for event in self.outbox:
            seq = event.get("seq")
            if type(seq) is not int or not 0 < seq <= self.seq:
                raise ValueError(f"outbox event with seq {str(seq)[:40]} (the run is at seq {self.seq})")
        return self
