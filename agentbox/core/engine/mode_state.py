"""Each mode's own progress in a run (`Run.mode_state`): one typed model per mode, picked by the run's mode.

A mode reads its state as `self.state` and changes it only through the ledger
(`RunLedger.change_mode_state`), which validates each new value and marks the run for
saving. A mode never changes a state in place: a change hands the ledger a new value for a
field (a longer trail, a new map of deliveries), so every change is validated and seen.

A run.json written before the states were typed still loads: `Run` moves its run-level
keys (`started`, `budget_extra`) out of the old dict, and the few keys that were renamed
(`from` in a handoff hop or a graph delivery) are read under their old name too.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from agentbox.core.engine.replies import Plan
from agentbox.core.graph.model import EdgeKind


class State(BaseModel):
    """Base: attribute docstrings become descriptions; every assignment is validated; stray keys are dropped."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="ignore", validate_assignment=True)

    _old_run_keys: dict[str, Any] = PrivateAttr(default_factory=dict)

    @property
    def old_run_keys(self) -> dict[str, Any]:
        """Run-level keys a run.json written before the states were typed kept here, until `Run` moves them out."""
        return self._old_run_keys

    @old_run_keys.setter
    def old_run_keys(self, keys: dict[str, Any]) -> None:
        self._old_run_keys = keys


def _renamed(data: Any, old: str, new: str) -> Any:
    """`data` with the key `old` read as `new` (a run.json written before the rename)."""
    if isinstance(data, dict) and old in data and new not in data:
        data = dict(data)
        data[new] = data.pop(old)
    return data


# ----------------------------------------------------------------------------- sequential


class SequentialState(State):
    """Sequential mode: the pipeline's phase and the reviewer chosen once for the run."""

    mode: Literal["sequential"] = "sequential"
    """The run\'s mode: which model this is."""
    phase: Literal["new", "executing", "done"] = "new"
    reviewer: str | None = None
    """The role reviewing every step; None when the engine accepts a valid submission itself."""


# ----------------------------------------------------------------------------- hierarchical


class HierarchicalState(State):
    """Hierarchical mode: where the round is, and the plan waiting for the person's approval."""

    mode: Literal["hierarchical"] = "hierarchical"
    """The run\'s mode: which model this is."""
    phase: Literal["new", "planning", "plan_approval", "executing", "synthesis", "done"] = "new"
    proposed_plan: Plan | None = None
    """The lead's plan while it waits at a plan_approval checkpoint."""


# ----------------------------------------------------------------------------- group chat


class ChatMessage(State):
    """One message of the chat's pool (a line of `chat.jsonl`)."""

    n: int = Field(ge=0)
    """The message's number in the pool, from 0."""
    role: str
    """Who said it."""
    round: int
    """The round it was said in."""
    message: str
    next_speaker: str | None = None
    """Who the speaker asked to speak next (lead_selects)."""
    done: bool = False
    """The speaker said the discussion is done (it ends the chat only from the done role)."""
    at: float = 0.0
    session: str | None = None
    """The speaker's agentbox session."""


class ChatEnding(State):
    """Why and with which message the chat ended."""

    terminated_by: Literal["done_signal", "max_rounds"]
    why: str
    final: ChatMessage
    """The final answer: the done role's message, or the last one when the rounds ran out."""


class GroupChatState(State):
    """Group chat: who speaks, how far the chat is, and the messages not yet in the pool."""

    mode: Literal["group_chat"] = "group_chat"
    """The run\'s mode: which model this is."""
    phase: Literal["new", "chatting", "ended"] = "new"
    speakers: list[str] = Field(default_factory=list)
    """The members, in speaking order (the lead first under lead_selects)."""
    lead: str | None = None
    """The member who picks the next speaker (lead_selects)."""
    done_role: str | None = None
    """The member whose done signal ends the chat; None: only the round limit does."""
    count: int = 0
    """Messages accepted so far (the number of the next one)."""
    round: int = 0
    seen: dict[str, int] = Field(default_factory=dict)
    """Member → the first message number it has not been shown yet."""
    chat_outbox: list[ChatMessage] = Field(default_factory=list)
    """Messages committed here before they are appended to chat.jsonl (crash safety)."""
    ended: ChatEnding | None = None


# ----------------------------------------------------------------------------- handoff


class HandoffHop(State):
    """One handoff: `source` passes the conversation to `to` with a message."""

    source: str
    """The role handing off (`from` in a run.json written before the states were typed)."""
    to: str
    message: str
    hop: int
    """Which handoff of the run this is, from 1."""
    note: str | None = None
    """The person's note for `to` (after a ping-pong checkpoint); `not routed` for a refused last hop."""

    @model_validator(mode="before")
    @classmethod
    def _old_from(cls, data: Any) -> Any:
        return _renamed(data, "from", "source")


class HandoffAnswer(State):
    """The answer that ended a handoff run."""

    role: str
    message: str


class HandoffEnding(State):
    """How a handoff run ended (kept so a restarted engine can write its artifacts)."""

    status: Literal["done", "failed", "cancelled"]
    terminated_by: Literal["answer", "max_handoffs", "human"]
    why: str
    final: HandoffAnswer | None = None
    last: HandoffHop | None = None
    """The handoff that was asked for but not routed."""


class HandoffState(State):
    """Handoff mode: the active role, the trail of handoffs, the ping-pong count."""

    mode: Literal["handoff"] = "handoff"
    """The run\'s mode: which model this is."""
    phase: Literal["new", "active", "ended"] = "new"
    hop: int = 0
    """Handoffs routed so far."""
    active: str | None = None
    """The role whose turn it is."""
    trail: list[HandoffHop] = Field(default_factory=list)
    ping_pong: int = 0
    """Consecutive handoffs within the same pair of roles."""
    held: HandoffHop | None = None
    """A handoff held at a ping_pong checkpoint until the person answers."""
    ended: HandoffEnding | None = None


# ----------------------------------------------------------------------------- graph


class Delivery(State):
    """Work handed to a node: by an edge that fired, or the goal handed to the entry node."""

    source: str | None = None
    """The node whose edge fired; None for the entry (`from` before the states were typed)."""
    task: str | None = None
    """The run of `source` that fired it."""
    condition: Literal["entry", "success", "fail"]
    reason: str | None = None
    """The fail_reason the edge was taken for."""
    kind: EdgeKind = "forward"
    job: str | None = None
    """The turn whose report fired the edge."""

    @model_validator(mode="before")
    @classmethod
    def _old_from(cls, data: Any) -> Any:
        return _renamed(data, "from", "source")


class GraphState(State):
    """Graph mode: every node's runs and the deliveries that started them or wait for them."""

    mode: Literal["graph"] = "graph"
    """The run\'s mode: which model this is."""
    phase: Literal["new", "running", "done"] = "new"
    activations: dict[str, list[str]] = Field(default_factory=dict)
    """Node → the task ids of its runs, oldest first."""
    pending: dict[str, list[Delivery]] = Field(default_factory=dict)
    """Node → deliveries held until its current run ends."""
    inputs: dict[str, list[Delivery]] = Field(default_factory=dict)
    """Task id → the deliveries that run was given."""


# ----------------------------------------------------------------------------- by mode

ModeState = SequentialState | HierarchicalState | GroupChatState | HandoffState | GraphState
"""The progress of one orchestration mode."""
STATE_BY_MODE: dict[str, type[ModeState]] = {
    "sequential": SequentialState, "hierarchical": HierarchicalState, "group_chat": GroupChatState,
    "handoff": HandoffState, "graph": GraphState,
}
