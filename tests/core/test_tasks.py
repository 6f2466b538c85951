"""The task state machine: every (state, event) pair, the approval guard, slots, rounds."""

from __future__ import annotations

import itertools

import pytest

from agentbox.core.errors import IllegalTransitionError, UsageError
from agentbox.core.tasks import (
    SLOT_HOLDING_STATES,
    TERMINAL_STATES,
    TRANSITIONS,
    TaskEvent,
    TaskState,
    allowed_events,
    holds_slot,
    is_terminal,
    round_can_close,
    transition,
)

S = TaskState
E = TaskEvent

# The table written out by hand, independently of how the module builds it.
EXPECTED: dict[tuple[TaskState, TaskEvent], TaskState] = {
    (S.QUEUED, E.DISPATCH): S.EXECUTING,
    (S.REWORK, E.DISPATCH): S.EXECUTING,
    (S.EXECUTING, E.SUBMIT): S.SUBMITTED,
    (S.SUBMITTED, E.START_REVIEW): S.REVIEWING,
    (S.REVIEWING, E.APPROVE): S.APPROVED,
    (S.REVIEWING, E.REJECT): S.REWORK,
    (S.SUBMITTED, E.REJECT): S.REWORK,
    (S.EXECUTING, E.REQUEUE): S.QUEUED,
    (S.QUEUED, E.BLOCK): S.BLOCKED,
    (S.EXECUTING, E.BLOCK): S.BLOCKED,
    (S.SUBMITTED, E.BLOCK): S.BLOCKED,
    (S.REVIEWING, E.BLOCK): S.BLOCKED,
    (S.REWORK, E.BLOCK): S.BLOCKED,
    (S.PAUSED_FOR_BUDGET, E.BLOCK): S.BLOCKED,
    (S.BLOCKED, E.UNBLOCK): S.QUEUED,
    (S.QUEUED, E.PAUSE_BUDGET): S.PAUSED_FOR_BUDGET,
    (S.EXECUTING, E.PAUSE_BUDGET): S.PAUSED_FOR_BUDGET,
    (S.SUBMITTED, E.PAUSE_BUDGET): S.PAUSED_FOR_BUDGET,
    (S.REVIEWING, E.PAUSE_BUDGET): S.PAUSED_FOR_BUDGET,
    (S.REWORK, E.PAUSE_BUDGET): S.PAUSED_FOR_BUDGET,
    (S.PAUSED_FOR_BUDGET, E.RESUME): S.QUEUED,
    (S.QUEUED, E.CANCEL): S.CANCELLED,
    (S.EXECUTING, E.CANCEL): S.CANCELLED,
    (S.SUBMITTED, E.CANCEL): S.CANCELLED,
    (S.REVIEWING, E.CANCEL): S.CANCELLED,
    (S.REWORK, E.CANCEL): S.CANCELLED,
    (S.BLOCKED, E.CANCEL): S.CANCELLED,
    (S.PAUSED_FOR_BUDGET, E.CANCEL): S.CANCELLED,
}

ALL_PAIRS = list(itertools.product(TaskState, TaskEvent))
LEGAL = [pair for pair in ALL_PAIRS if pair in EXPECTED]
ILLEGAL = [pair for pair in ALL_PAIRS if pair not in EXPECTED]


def test_table_matches_the_spec_exactly() -> None:
    assert dict(TRANSITIONS) == EXPECTED


def test_every_pair_is_covered() -> None:
    assert len(LEGAL) + len(ILLEGAL) == len(TaskState) * len(TaskEvent) == 99


@pytest.mark.parametrize(("state", "event"), LEGAL, ids=lambda v: str(v))
def test_legal_pair_reaches_its_target(state: TaskState, event: TaskEvent) -> None:
    assert transition(state, event, evidence="pytest: 12 passed") == EXPECTED[(state, event)]


@pytest.mark.parametrize(("state", "event"), ILLEGAL, ids=lambda v: str(v))
def test_illegal_pair_is_refused(state: TaskState, event: TaskEvent) -> None:
    with pytest.raises(IllegalTransitionError) as info:
        transition(state, event, evidence="pytest: 12 passed")
    message = str(info.value)
    assert f"task in state {state} cannot {event}" in message
    assert "allowed events:" in message
    assert info.value.exit_code == 2


def test_refusal_lists_the_allowed_events_and_names_the_task() -> None:
    with pytest.raises(IllegalTransitionError) as info:
        transition("queued", "approve", task_id="t1")
    assert str(info.value) == (
        "task t1 in state queued cannot approve; allowed events: dispatch, block, pause_budget, cancel"
    )
    assert info.value.hint and "reviewing" in info.value.hint


def test_terminal_refusal_says_so() -> None:
    with pytest.raises(IllegalTransitionError, match=r"allowed events: none \(the state is terminal\)"):
        transition(S.APPROVED, E.CANCEL)


@pytest.mark.parametrize("evidence", [None, "", "   \n", [], ["", "  "], ()])
def test_approve_without_evidence_is_refused(evidence: object) -> None:
    with pytest.raises(IllegalTransitionError, match="without evidence"):
        transition(S.REVIEWING, E.APPROVE, evidence=evidence)  # type: ignore[arg-type]


@pytest.mark.parametrize("evidence", ["pytest -q: 12 passed", ["", "ruff: clean"], ("A1 ok",)])
def test_approve_with_evidence_is_accepted(evidence: object) -> None:
    assert transition(S.REVIEWING, E.APPROVE, evidence=evidence) is S.APPROVED  # type: ignore[arg-type]


def test_evidence_does_not_open_approval_outside_reviewing() -> None:
    for state in TaskState:
        if state is not S.REVIEWING:
            with pytest.raises(IllegalTransitionError):
                transition(state, E.APPROVE, evidence="all good")


def test_other_events_need_no_evidence() -> None:
    assert transition(S.REVIEWING, E.REJECT) is S.REWORK
    assert transition("queued", "dispatch") is S.EXECUTING


def test_strings_are_accepted_and_unknown_names_are_usage_errors() -> None:
    assert transition("executing", "submit") == "submitted"
    with pytest.raises(UsageError, match="unknown task state 'done'"):
        transition("done", "submit")
    with pytest.raises(UsageError, match="unknown task event 'finish'"):
        transition("executing", "finish")


@pytest.mark.parametrize("state", list(TaskState), ids=str)
def test_allowed_events_agree_with_the_table(state: TaskState) -> None:
    assert set(allowed_events(state)) == {event for (s, event) in EXPECTED if s is state}


@pytest.mark.parametrize("state", list(TaskState), ids=str)
def test_terminal_states_accept_nothing(state: TaskState) -> None:
    assert is_terminal(state) == (state in {S.APPROVED, S.CANCELLED})
    assert (allowed_events(state) == ()) == is_terminal(state)


@pytest.mark.parametrize("state", list(TaskState), ids=str)
def test_every_non_terminal_state_can_be_cancelled(state: TaskState) -> None:
    if not is_terminal(state):
        assert transition(state, E.CANCEL) is S.CANCELLED


@pytest.mark.parametrize("state", list(TaskState), ids=str)
def test_holds_slot(state: TaskState) -> None:
    expected = state in {S.EXECUTING, S.SUBMITTED, S.REVIEWING, S.REWORK}
    assert holds_slot(state) is expected
    assert (state in SLOT_HOLDING_STATES) is expected


def test_terminal_constant() -> None:
    assert frozenset({S.APPROVED, S.CANCELLED}) == TERMINAL_STATES


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        ([], True),
        ([S.APPROVED], True),
        ([S.APPROVED, S.CANCELLED, "approved"], True),
        ([S.APPROVED, S.REVIEWING], False),
        ([S.APPROVED, S.SUBMITTED], False),
        ([S.REWORK], False),
        ([S.BLOCKED, S.APPROVED], False),
        ([S.PAUSED_FOR_BUDGET], False),
        ([S.QUEUED], False),
    ],
)
def test_round_can_close(states: list[TaskState], expected: bool) -> None:
    assert round_can_close(states) is expected
    assert round_can_close(iter(states)) is expected


def test_happy_path_and_rework_loop() -> None:
    state = S.QUEUED
    for event in (E.DISPATCH, E.SUBMIT, E.START_REVIEW, E.REJECT, E.DISPATCH, E.SUBMIT, E.START_REVIEW):
        state = transition(state, event)
    assert state is S.REVIEWING
    assert transition(state, E.APPROVE, evidence=["tests pass"]) is S.APPROVED
