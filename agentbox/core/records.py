"""The typed records of a session that cross from core to the faces: usage sums, turns, the running turn.

They are JSON on disk (a session's record and its `.turns.jsonl`), so the turn and the
running turn are `TypedDict`s: plain dicts at run time, typed for mypy. A file written by
an older agentbox loads unchanged (nothing is converted on the way in or out), and a warm
`agentbox invoke` pays nothing for them (no pydantic, no conversion). Readers of a
persisted record use `.get` for a key an older version may not have written.

`Totals` is the one sum of usage (a session's and a run's): a mutable dataclass, since
turns add to it in place; a run's model holds it as a field (pydantic validates a plain
dataclass like a model).

The records of a run (its decision-log events, the artifact manifest) are in
`agentbox.core.engine.records`: they are the engine's, and a session turn needs none of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NotRequired, TypedDict

from agentbox.core.runtimes.base import Usage


@dataclass
class Totals:
    """Sums of usage over turns (a session's or a run's); unknown usage is counted, never added as 0."""

    tokens: int = 0
    """All known tokens: the sum of the token counters (made with counters and no `tokens`, it is their sum)."""
    input_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float | None = None
    turns: int = 0
    """Turns added (a session's record also counts its turns itself, in `turns`)."""
    unknown_usage_turns: int = 0
    unknown_cost_turns: int = 0
    """Turns whose cost neither the tool nor the price table knew (not in `cost_usd`)."""
    subscription_turns: int = 0
    """Turns run on a subscription login (their cost is what the tokens would cost, not a bill)."""

    def __post_init__(self) -> None:
        if not self.tokens:
            self.tokens = self.known_tokens()

    def add(self, usage: Usage) -> None:
        """Add one turn's usage: a turn whose usage is unknown is counted in `unknown_usage_turns`,
        one whose cost is unknown in `unknown_cost_turns`; neither is ever summed as 0."""
        self.turns += 1
        if not usage.known:
            self.unknown_usage_turns += 1
        self.tokens += usage.total_tokens or 0
        self.input_tokens += usage.input_tokens or 0
        self.cached_input_tokens += usage.cached_input_tokens or 0
        self.cache_write_tokens += usage.cache_write_tokens or 0
        self.output_tokens += usage.output_tokens or 0
        self.reasoning_tokens += usage.reasoning_tokens or 0
        if usage.cost_usd is not None:
            self.cost_usd = (self.cost_usd or 0.0) + usage.cost_usd
        else:
            self.unknown_cost_turns += 1
        if usage.billing == "subscription":
            self.subscription_turns += 1

    def known_tokens(self) -> int:
        """The sum of the token counters (what `tokens` holds when every turn went through `add`)."""
        return (self.input_tokens + self.cached_input_tokens + self.cache_write_tokens + self.output_tokens
                + self.reasoning_tokens)


class UsageRecord(TypedDict):
    """`Usage.as_dict()`: one turn's usage as JSON (None: the tool did not say)."""

    input_tokens: int | None
    cached_input_tokens: int | None
    cache_write_tokens: int | None
    output_tokens: int | None
    reasoning_tokens: int | None
    cost_usd: float | None
    cost_source: NotRequired[str | None]
    billing: NotRequired[str | None]


TurnStatus = Literal["ok", "error", "interrupted"]
"""How a turn ended (`interrupted`: an engine crash cut it short and it was run again)."""


class TurnRecord(TypedDict):
    """One line of a session's `.turns.jsonl`: one turn, as the faces show it."""

    turn: int
    started: float | None
    finished: float | None
    prompt: str
    text: str
    status: str
    """`TurnStatus` for the turns agentbox writes (a string: an older file may hold another)."""
    error_kind: str | None
    error: str | None
    usage: UsageRecord
    duration_s: float
    exit_code: int | None
    native_id: str | None
    log_path: str | None
    model: NotRequired[str | None]
    """The model the turn ran on (asked for, else reported); absent on interrupted and typed turns."""
    network: NotRequired[dict[str, object]]
    """What the turn's network did through the egress proxy; absent without one."""
    interactive: NotRequired[bool]
    """True for a turn a person typed while attached to the session."""


class _TurnExtras(TypedDict, total=False):
    model: str | None
    network: dict[str, object]
    interactive: bool


def turn_record(turn: int, *, started: float | None, finished: float | None, prompt: str, text: str,
                status: TurnStatus, error_kind: str | None, error: str | None, usage: Usage,
                duration_s: float, exit_code: int | None, native_id: str | None, log_path: str | None,
                model: str | None = None, with_model: bool = True, network: dict[str, object] | None = None,
                interactive: bool = False) -> TurnRecord:
    """The one way a turn line is made (`with_model=False`: a turn no tool ran, which names no model)."""
    record = TurnRecord(turn=turn, started=started, finished=finished, prompt=prompt, text=text, status=status,
                        error_kind=error_kind, error=error, usage=usage_record(usage), duration_s=duration_s,
                        exit_code=exit_code, native_id=native_id, log_path=log_path)
    if with_model:
        record["model"] = model
    if network is not None:
        record["network"] = network
    if interactive:
        record["interactive"] = True
    return record


def usage_record(usage: Usage) -> UsageRecord:
    """`usage` as JSON."""
    return UsageRecord(input_tokens=usage.input_tokens, cached_input_tokens=usage.cached_input_tokens,
                       cache_write_tokens=usage.cache_write_tokens, output_tokens=usage.output_tokens,
                       reasoning_tokens=usage.reasoning_tokens, cost_usd=usage.cost_usd,
                       cost_source=usage.cost_source, billing=usage.billing)


class RunningTurn(TypedDict):
    """A session record's `running`: the turn in flight (written before its process starts)."""

    turn: int
    pid: int | None
    """None until the process is spawned."""
    started: float
    log: str
    """The turn's output log."""
    live: str
    """The directory of the turn's live view (`agentbox tail`, the dashboard)."""
    create_time: NotRequired[float]
    """The process's start time: with the pid, it tells the process from a later one with the same pid."""
    node: NotRequired[str]
    """The Ray node id the turn runs on (its `pid` is then None: the process is not this machine's)."""
    host: NotRequired[str]
    """That node's host name."""
    node_pid: NotRequired[int]
    """The turn's process id on that node."""
    sample: NotRequired[NodeSampleRecord]
    """The node's latest sample of the turn's process tree (the members table's CPU and memory)."""


class NodeSampleRecord(TypedDict):
    """A sample of a node's turn's process tree, as the node took it."""

    cpu_percent: float
    """Sum over the tree; 100 = one core busy."""
    rss_bytes: int
    processes: int
    at: float
    """When the node took it (seconds since the epoch)."""


def running_turn(turn: int, *, started: float, log: str, live: str) -> RunningTurn:
    """The record of a turn about to start (its pid comes once it is spawned)."""
    return RunningTurn(turn=turn, pid=None, started=started, log=log, live=live)
