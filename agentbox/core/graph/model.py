"""Pydantic models of a work graph: `.agent-box/graphs/<name>.yaml`.

```yaml
name: build                       # optional
description: plan, build, review  # optional
nodes:
  - {name: plan,   role: lead,     brief: Split the goal into steps.}
  - {name: build,  role: builder,  brief: Implement the steps.}
  - {name: review, role: reviewer, brief: Check the build against the plan.}
edges:
  - {from: plan,   to: build,  condition: success}
  - {from: build,  to: review, condition: success}
  - {from: review, to: build,  condition: fail, kind: backward}
```

These models check the *shape* of the file only (keys, types, allowed values). The
graph rules — references, acyclic, single-entry, reachable, backward-labeled,
fail-fallback-edge — live in `agentbox.core.graph.rules`, which reports every violation.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from agentbox.core.config.models import Strict
from agentbox.core.validation import NAME_PATTERN

Condition = Literal["success", "fail"]
EdgeKind = Literal["forward", "backward"]


class Node(Strict):
    """One node of the graph: one call of a role, doing one thing."""

    name: str = Field(pattern=NAME_PATTERN)
    """Unique name of the node in this graph; edges refer to it."""
    role: str = Field(pattern=NAME_PATTERN)
    """The crew role (in crew.yaml) that does this node's work."""
    brief: str = Field(min_length=1)
    """What the node must do, in a sentence or two: when it counts as a success."""


class Edge(Strict):
    """Where the work goes when the `from` node ends with `condition`."""

    model_config = ConfigDict(populate_by_name=True)

    from_: str = Field(alias="from")
    """Name of the node this edge leaves."""
    to: str
    """Name of the node this edge enters."""
    condition: Condition
    """`success`: followed when the node succeeds (several = parallel branches); `fail`: a
    candidate route when the node fails."""
    fail_reason: str | None = Field(default=None, min_length=1)
    """Fail edges only: taken when the failure carries exactly this reason. A fail edge
    without a reason is the node's fallback, taken for any other reason."""
    kind: EdgeKind = "forward"
    """`backward` for an edge that goes back to an earlier node (a rework loop); every other
    edge is `forward`. Only forward edges count for order, entry and reachability."""

    @field_validator("fail_reason", mode="before")
    @classmethod
    def _reason_not_empty(cls, value: object) -> object:
        if value == "":
            raise ValueError("must not be empty (leave fail_reason out for the fallback edge)")
        return value

    @model_validator(mode="after")
    def _reason_needs_fail(self) -> Edge:
        if self.fail_reason is not None and self.condition != "fail":
            raise ValueError("fail_reason applies only to edges with condition: fail")
        return self

    @property
    def source(self) -> str:
        """The node this edge leaves (the file's `from`)."""
        return self.from_

    def describe(self) -> str:
        """`a -> b (fail: reason, backward)`: the edge as it appears in messages."""
        label = (
            self.condition if self.fail_reason is None else f"{self.condition}: {self.fail_reason}"
        )
        if self.kind == "backward":
            label += ", backward"
        return f"{self.from_} -> {self.to} ({label})"


class Graph(Strict):
    """A work graph: nodes call roles, edges route success and failure between them."""

    name: str | None = None
    """A short name for the graph (default: the file name)."""
    description: str | None = None
    """What the graph is for."""
    nodes: list[Node] = Field(min_length=1)
    """The nodes; each calls one role of the crew."""
    edges: list[Edge] = Field(default_factory=list)
    """The edges: `{from, to, condition, fail_reason, kind}`; may be left empty."""

    @field_validator("nodes", mode="before")
    @classmethod
    def _at_least_one_node(cls, value: object) -> object:
        if value == []:
            raise ValueError("a graph needs at least one node")
        return value

    @field_validator("edges", mode="before")
    @classmethod
    def _empty_edges(cls, value: object) -> object:
        return [] if value is None else value
