"""The failure ladder's types: a task's `LadderState`, the `LadderPolicy`, the events the engine
feeds it and the actions `ladder.decide` hands back (see `ladder.py` for the rules)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agentbox.core.engine.failures import (
    BACKOFF_BASES_S,
    BACKOFF_JITTER,
    ENVIRONMENT_RETRY_BUDGET_S,
)
from agentbox.core.engine.ladder_briefs import BriefChange

RETRYABLE_ENVIRONMENT_ERRORS: frozenset[str] = frozenset(
    {"spawn_failed", "timeout", "killed", "nonzero_exit", "tool_error", "output_limit"})
"""Environment errors worth waiting out (a busy machine, a flaky tool). A command that is not
found or not executable, or a sandbox that refuses to start, does not heal by waiting: asked at once."""


class Level(StrEnum):
    """How far up the ladder a task is."""

    L0 = "L0"
    L1 = "L1"
    L2 = "L2"
    L3 = "L3"

    @property
    def rank(self) -> int:
        """0..3, for comparisons."""
        return int(self.value[1])


class Mode(StrEnum):
    """How the task's next turn works."""

    NORMAL = "normal"
    """Ordinary rework."""
    COMPROMISE = "compromise"
    """A patch that makes the checks pass is allowed, every change tagged `FIXME: Tech Debt`."""
    ADVISOR = "advisor"
    """The worker is read-only: it writes a guide and a patch, a human applies it."""
    HIGH_ROT = "high_rot"
    """L3: waiting for the human to pick an exit."""
    CLOSED = "closed"
    """The ladder is over for this task (cancelled, abandoned, or replaced by a new task)."""


class Question(StrEnum):
    """What an open ladder checkpoint asks the human."""

    ENVIRONMENT = "environment"
    """The environment kept failing: retry or cancel."""
    SECOND_REWRITE = "second_rewrite"
    """The automatic rewrite is used: allow one more rewrite, or cancel."""
    APPLY_PATCH = "apply_patch"
    """Advisor mode handed in a patch: apply it, or cancel."""
    EXIT = "exit"
    """L3: controlled rewrite, advisor again, bypass, or abandon."""


class Exit(StrEnum):
    """The four exits of L3."""

    CONTROLLED_REWRITE = "controlled_rewrite"
    ADVISOR_AGAIN = "advisor_again"
    BYPASS = "bypass"
    ABANDON = "abandon"


L3_EXITS: tuple[Exit, ...] = (Exit.CONTROLLED_REWRITE, Exit.ADVISOR_AGAIN, Exit.BYPASS, Exit.ABANDON)

Option = tuple[str, str]
"""An answer of a ladder checkpoint and what it does."""
CANCEL: Option = ("cancel", "cancel the task")
EXIT_OPTIONS: tuple[Option, ...] = (
    ("controlled_rewrite", "a new task rewrites the module, its brief says so (refused while an overdue debt is on it)"),
    ("advisor_again", "one more advisor round, only with information the last one did not have"),
    ("bypass", "a new module beside the old one; the old files become protected"),
    ("abandon", "cancel the task; the run goes on without it"),
)
"""The four exits of L3."""


def checkpoint_answers(options: list[str]) -> tuple[list[str], bool]:
    """The answers a ladder checkpoint takes (its options and cancel), and whether they are followed by a
    one-sentence root cause with evidence (the L3 exits): what every face tells the person."""
    return list(dict.fromkeys([*options, CANCEL[0]])), any(o in options for o, _ in EXIT_OPTIONS)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class Transition(_Model):
    """One move of the ladder: a level or mode change (or the first fingerprint registered)."""

    from_level: Level
    to_level: Level
    from_mode: Mode
    to_mode: Mode
    why: str
    fingerprint: str | None = None
    at: float = 0.0


class LadderState(_Model):
    """Where one task stands on the ladder; persisted with the task."""

    level: Level = Level.L0
    mode: Mode = Mode.NORMAL
    last_fingerprint: str | None = None
    """The fingerprint of the last counted failure (None before the first)."""
    counted_failures: int = 0
    rewrites_auto: int = 0
    """Brief rewrites made without asking the human."""
    rewrites_total: int = 0
    """Brief rewrites in all (coverage fills are not counted)."""
    rewrite_pending: bool = False
    """A rewrite turn was asked for and its reply has not come back."""
    rewrite_automatic: bool = False
    """Whether the pending rewrite is the automatic one (else the human allowed it)."""
    waiting_on: Question | None = None
    """The ladder checkpoint open for this task, if any."""
    escape_hatches_used: list[str] = Field(default_factory=list)
    """compromise, advisor and the L3 exits taken, in order."""
    advisor_information: list[str] = Field(default_factory=list)
    """What each advisor round was given that the one before was not (the first: its fingerprint)."""
    environment_attempt: int = 0
    """Environment retries in the current streak (reset by any other event)."""
    environment_waited_s: float = 0.0
    """Back-off waited for this task in all."""
    history: list[Transition] = Field(default_factory=list)

    @property
    def label(self) -> str:
        """The level as the faces show it: `L0`, `L1 (rewrites 1)`, `L2 compromise`, `L3 waiting for an exit`."""
        if self.counted_failures == 0 and self.mode == Mode.NORMAL:
            return "-"
        words = {Mode.COMPROMISE: "compromise", Mode.ADVISOR: "advisor", Mode.HIGH_ROT: "waiting for an exit",
                 Mode.CLOSED: "closed"}
        label = f"{self.level.value} {words[self.mode]}" if self.mode in words else self.level.value
        if self.level == Level.L1 and self.mode == Mode.NORMAL:
            label += f" (rewrites {self.rewrites_total})"
        return label


class LadderPolicy(_Model):
    """The limits of the ladder: one automatic brief rewrite, two in all, the back-off of environment
    failures, and the paths that never get a compromise (crew.yaml's `no_compromise`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    brief_rewrite_auto: int = Field(default=1, ge=0)
    brief_rewrite_total: int = Field(default=2, ge=0)
    no_compromise: tuple[str, ...] = ()
    """Globs whose failures go from drift straight to advisor mode (`auth/**`, `payments/**`)."""
    retryable_errors: frozenset[str] = RETRYABLE_ENVIRONMENT_ERRORS
    backoff_bases_s: tuple[float, ...] = BACKOFF_BASES_S
    jitter: float = Field(default=BACKOFF_JITTER, ge=0, lt=1)
    environment_budget_s: float = Field(default=ENVIRONMENT_RETRY_BUDGET_S, ge=0)


# ----------------------------------------------------------------------------- events


@dataclass(frozen=True)
class EnvironmentFailed:
    """The machinery failed (invoke error kind, or why a check could not run)."""

    error: str
    fingerprint: str
    jitter_sample: float = 0.5
    """A uniform sample in [0, 1) the caller draws; 0.5 is the delay without jitter."""
    at: float = 0.0


@dataclass(frozen=True)
class CoverageGap:
    """Acceptance ids of the plan that the task's brief has no entry for (found by comparing the two)."""

    acceptance_ids: tuple[str, ...]
    at: float = 0.0


@dataclass(frozen=True)
class UpstreamNotReady:
    """A dependency's output does not match what the task needs."""

    upstream: str
    why: str = ""
    at: float = 0.0


@dataclass(frozen=True)
class Failed:
    """A counted failure: a red check, a rejected review, a failing advisor patch."""

    fingerprint: str
    paths: tuple[str, ...] = ()
    """The task's files (its writes or what it changed), for the `no_compromise` rule."""
    at: float = 0.0


@dataclass(frozen=True)
class Passed:
    """The task's submission passed its checks; `debt_tags` is how many `FIXME: Tech Debt` tags its diff added."""

    debt_tags: int = 0
    at: float = 0.0


@dataclass(frozen=True)
class BriefReplied:
    """The lead's reply to a rewrite (or fill) turn, classified by `classify_brief_change`."""

    change: BriefChange
    root_cause_problem: str | None = None
    """What is wrong with its root-cause line (`root_cause_problem`), None when it is sound."""
    at: float = 0.0


LadderAnswer = Literal["retry", "rewrite", "apply", "controlled_rewrite", "advisor_again", "bypass", "abandon"]
"""The words a person answers a ladder checkpoint with (besides `cancel`)."""


@dataclass(frozen=True)
class HumanAnswered:
    """The human's answer to the task's ladder checkpoint."""

    answer: LadderAnswer
    root_cause_problem: str | None = None
    """At L3, what is wrong with the root-cause line of the choice (None: sound)."""
    new_information: str = ""
    """Advisor again: what the next round knows that the last one did not."""
    overdue_debts: tuple[str, ...] = ()
    """Controlled rewrite: ids of overdue debts on the module (they block it until closed or waived)."""
    at: float = 0.0


@dataclass(frozen=True)
class HumanCancelled:
    """The human cancelled the task (always allowed)."""

    at: float = 0.0


Event = (EnvironmentFailed | CoverageGap | UpstreamNotReady | Failed | Passed | BriefReplied | HumanAnswered
         | HumanCancelled)


# ----------------------------------------------------------------------------- actions


@dataclass(frozen=True)
class RetryAfter:
    """Run the same turn again after `delay_s` (not counted)."""

    delay_s: float
    attempt: int


@dataclass(frozen=True)
class AskLeadToFill:
    """Back to the lead: add the missing acceptance entries to the brief (not counted)."""

    acceptance_ids: tuple[str, ...]


@dataclass(frozen=True)
class Block:
    """The task waits for its upstream to be fixed first (not counted)."""

    upstream: str


@dataclass(frozen=True)
class Rework:
    """Send the failure back to the worker in `mode` (normal, compromise or advisor)."""

    mode: Mode


@dataclass(frozen=True)
class RequestRewrite:
    """A lead turn rewrites the task's plan entry (`REWRITE_PROMPT_HEAD`)."""

    automatic: bool


@dataclass(frozen=True)
class UseBrief:
    """The lead's new brief is taken; `counted` is False for a coverage fill."""

    counted: bool


@dataclass(frozen=True)
class RecordDebt:
    """A compromise patch passed: record its tagged changes in debt.yaml."""


@dataclass(frozen=True)
class Proceed:
    """Nothing for the ladder to do: the task goes on (review, merge)."""


@dataclass(frozen=True)
class Ask:
    """Open a checkpoint: `question` with `options`, each an answer and what it does."""

    question: Question
    text: str
    options: tuple[Option, ...]


@dataclass(frozen=True)
class HighRot:
    """L3: record the task's module as a high-rot zone, then ask the human for an exit."""

    text: str
    options: tuple[Option, ...] = EXIT_OPTIONS


@dataclass(frozen=True)
class ApplyPatch:
    """Apply the advisor's patch in the task's worktree and resubmit it."""


@dataclass(frozen=True)
class ControlledRewrite:
    """Replace the task with a new one whose brief says it rewrites the module."""


@dataclass(frozen=True)
class Bypass:
    """Replace the task with a new module beside the old one; the old files become protected."""


@dataclass(frozen=True)
class Cancel:
    """Cancel the task; the run goes on without it (`abandoned` when the human chose the exit)."""

    abandoned: bool = False


@dataclass(frozen=True)
class Refuse:
    """The event is refused (a contract defect of a reply, an answer that does not apply): say why."""

    reason: str


Action = (RetryAfter | AskLeadToFill | Block | Rework | RequestRewrite | UseBrief | RecordDebt | Proceed | Ask
          | HighRot | ApplyPatch | ControlledRewrite | Bypass | Cancel | Refuse)


@dataclass(frozen=True)
class Decision:
    """The ladder's new state and what the engine does next."""

    state: LadderState
    action: Action
    counted: bool = False
    """Whether the event counted against the task."""
    transition: Transition | None = None
    """The move the event made, if any: one decision-log event (from/to level, why, fingerprint)."""
