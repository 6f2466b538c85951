"""The task state machine as a pure transition table.

    queued ──dispatch──▶ executing ──submit──▶ submitted ──start_review──▶ reviewing
      ▲                     │  ▲                                            │    │
      └──────requeue────────┘  └──────────dispatch──── rework ◀──reject─────┘    │
                                                                        approve (evidence)
                                                                                 ▼
                                                                             approved

    reject:       submitted → rework too (a red check of the submission gate, before any review)
    block:        queued, executing, submitted, reviewing, rework, paused_for_budget → blocked
    unblock:      blocked → queued
    pause_budget: queued, executing, submitted, reviewing, rework → paused_for_budget
    resume:       paused_for_budget → queued
    cancel:       every non-terminal state → cancelled

Hard rules live here, not in prompts: only a task in `reviewing` can be
approved and approval carries evidence; a round closes only when every task is approved
or cancelled; a member whose work is submitted but not yet approved keeps its slot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from types import MappingProxyType

from agentbox.core.errors import IllegalTransitionError, UsageError


class TaskState(StrEnum):
    """Where a task is in its life; the value is what run.json stores."""

    QUEUED = "queued"
    """Waiting for a free worker, its dependencies and a non-overlapping write scope."""
    EXECUTING = "executing"
    """A worker's agent is working on it."""
    SUBMITTED = "submitted"
    """The worker handed in its work; waiting for a reviewer."""
    REVIEWING = "reviewing"
    """A reviewer is checking the submission against the acceptance criteria."""
    APPROVED = "approved"
    """Accepted with evidence; terminal."""
    REWORK = "rework"
    """The review rejected it; waiting to go back to its worker with the verdict."""
    BLOCKED = "blocked"
    """Cannot proceed (a dependency failed for good, an escalation waits on a human)."""
    CANCELLED = "cancelled"
    """Abandoned by a person or the engine; terminal."""
    PAUSED_FOR_BUDGET = "paused_for_budget"
    """Stopped because it went over 120% of its token budget; a human must resume it."""


class TaskEvent(StrEnum):
    """Something that happens to a task; the table decides where it leads."""

    DISPATCH = "dispatch"
    """A worker starts (or restarts after rework) the task."""
    SUBMIT = "submit"
    """The worker hands in its work."""
    START_REVIEW = "start_review"
    """A reviewer picks the submission up."""
    APPROVE = "approve"
    """The review accepts the work; needs evidence."""
    REJECT = "reject"
    """The review sends the work back for rework."""
    REQUEUE = "requeue"
    """The execution was interrupted (environment failure, crash) and goes back to the queue."""
    BLOCK = "block"
    """The task cannot proceed until something outside it changes."""
    UNBLOCK = "unblock"
    """What blocked the task is resolved; it queues again."""
    PAUSE_BUDGET = "pause_budget"
    """The task went over its token budget."""
    RESUME = "resume"
    """A human resumed a budget-paused task (more budget or approval)."""
    CANCEL = "cancel"
    """The task is abandoned."""


_S = TaskState
_E = TaskEvent

TERMINAL_STATES: frozenset[TaskState] = frozenset({_S.APPROVED, _S.CANCELLED})
"""States a task never leaves; nothing more happens to it."""

SLOT_HOLDING_STATES: frozenset[TaskState] = frozenset(
    {_S.EXECUTING, _S.SUBMITTED, _S.REVIEWING, _S.REWORK}
)
"""States in which the task keeps its worker's slot: submitted work is not done work."""


def _build_table() -> dict[tuple[TaskState, TaskEvent], TaskState]:
    """Spell the table out from the edges and the state groups of the module docstring."""
    table: dict[tuple[TaskState, TaskEvent], TaskState] = {
        (_S.QUEUED, _E.DISPATCH): _S.EXECUTING,
        (_S.REWORK, _E.DISPATCH): _S.EXECUTING,
        (_S.EXECUTING, _E.SUBMIT): _S.SUBMITTED,
        (_S.SUBMITTED, _E.START_REVIEW): _S.REVIEWING,
        (_S.REVIEWING, _E.APPROVE): _S.APPROVED,
        (_S.REVIEWING, _E.REJECT): _S.REWORK,
        (_S.SUBMITTED, _E.REJECT): _S.REWORK,
        (_S.EXECUTING, _E.REQUEUE): _S.QUEUED,
        (_S.BLOCKED, _E.UNBLOCK): _S.QUEUED,
        (_S.PAUSED_FOR_BUDGET, _E.RESUME): _S.QUEUED,
    }
    for state in (_S.QUEUED, _S.EXECUTING, _S.SUBMITTED, _S.REVIEWING, _S.REWORK, _S.PAUSED_FOR_BUDGET):
        table[(state, _E.BLOCK)] = _S.BLOCKED
    for state in (_S.QUEUED, _S.EXECUTING, _S.SUBMITTED, _S.REVIEWING, _S.REWORK):
        table[(state, _E.PAUSE_BUDGET)] = _S.PAUSED_FOR_BUDGET
    for state in TaskState:
        if state not in TERMINAL_STATES:
            table[(state, _E.CANCEL)] = _S.CANCELLED
    return table


TRANSITIONS: Mapping[tuple[TaskState, TaskEvent], TaskState] = MappingProxyType(_build_table())
"""Every legal `(state, event) -> next state`; any pair not in it is refused."""


def allowed_events(state: TaskState | str) -> tuple[TaskEvent, ...]:
    """The events a task in `state` accepts, in declaration order (empty when terminal)."""
    current = _state(state)
    return tuple(event for event in TaskEvent if (current, event) in TRANSITIONS)


def is_terminal(state: TaskState | str) -> bool:
    """True for approved and cancelled: the task will never change again."""
    return _state(state) in TERMINAL_STATES


def holds_slot(state: TaskState | str) -> bool:
    """True when the task occupies its worker's slot (executing, submitted, reviewing, rework).

    A member whose work is submitted but not approved keeps its slot, so new work waits in
    the queue instead of piling onto a worker that may still owe a rework.
    """
    return _state(state) in SLOT_HOLDING_STATES


def round_can_close(states: Iterable[TaskState | str]) -> bool:
    """True when every task is approved or cancelled; a round with no tasks can close.

    A round never closes while a task is unapproved: blocked, paused and rework tasks all
    keep it open until a person approves, cancels or resumes them.
    """
    return all(_state(state) in TERMINAL_STATES for state in states)


def has_evidence(evidence: str | Sequence[str] | None) -> bool:
    """True when `evidence` holds at least one non-blank string."""
    if evidence is None:
        return False
    if isinstance(evidence, str):
        return bool(evidence.strip())
    return any(isinstance(item, str) and item.strip() for item in evidence)


def transition(
    state: TaskState | str,
    event: TaskEvent | str,
    *,
    evidence: str | Sequence[str] | None = None,
    task_id: str | None = None,
) -> TaskState:
    """The state a task in `state` moves to on `event`, or IllegalTransitionError.

    `approve` additionally needs non-blank `evidence` (a string or a list of strings):
    approval without proof is refused. `task_id` only makes the error message name the task.
    """
    current = _state(state)
    what = _event(event)
    subject = f"task {task_id}" if task_id else "task"
    target = TRANSITIONS.get((current, what))
    if target is None:
        allowed = ", ".join(allowed_events(current)) or "none (the state is terminal)"
        raise IllegalTransitionError(
            f"{subject} in state {current} cannot {what}; allowed events: {allowed}",
            hint=_hint(current, what),
        )
    if what is _E.APPROVE and not has_evidence(evidence):
        raise IllegalTransitionError(
            f"{subject} in state {current} cannot approve without evidence",
            hint="approval needs evidence: the checks run, their output, the files inspected",
        )
    return target


def _state(value: TaskState | str) -> TaskState:
    """`value` as a TaskState, or UsageError naming the known states."""
    try:
        return TaskState(value)
    except ValueError:
        known = ", ".join(TaskState)
        raise UsageError(f"unknown task state {value!r}; known states: {known}") from None


def _event(value: TaskEvent | str) -> TaskEvent:
    """`value` as a TaskEvent, or UsageError naming the known events."""
    try:
        return TaskEvent(value)
    except ValueError:
        known = ", ".join(TaskEvent)
        raise UsageError(f"unknown task event {value!r}; known events: {known}") from None


def _hint(state: TaskState, event: TaskEvent) -> str | None:
    """A one-line hint for the refusals a person is most likely to hit."""
    if event is _E.APPROVE:
        return "only a task in reviewing can be approved; wait for its submission to be reviewed"
    if state in TERMINAL_STATES:
        return f"the task is {state} and will not change any more"
    return None
