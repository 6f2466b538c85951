"""The failure ladder of one task: a pure state machine, `decide(state, event, policy) -> Decision`.

Failures are filtered first and never counted when they are not the work's fault:

    environment failure   retried after 1 s / 4 s / 16 s (± jitter), only for retryable errors,
                          at most `environment_budget_s` of waiting per task, then a checkpoint
    brief coverage gap    an acceptance id the brief has no entry for: back to the lead to fill it
    upstream not ready    a dependency's output does not match: the task is blocked

Then a counted failure moves the task up the ladder, only by these transitions:

    L0  the first counted failure registers its fingerprint (normal rework)
    L1  the same fingerprint as the last counted one: the lead rewrites the brief (one
        automatic rewrite, a second only when the human allows it, two in all)
    L2  a different fingerprint: compromise mode (a patch tagged `FIXME: Tech Debt`), or
        straight to advisor mode for a `no_compromise` path; compromise failing → advisor
        mode (the worker is read-only and hands in a guide and a patch the human applies)
    L3  advisor failing, or L1 exhausted: the task's module is a high-rot zone and the human
        picks one of four exits (controlled rewrite, advisor again, bypass, abandon)

A human can cancel at any level. Every change of level or mode is one `Transition` in the
state's history, with why, the fingerprint and when. The engine persists the state with
the task and carries each `Decision.action` out; nothing here touches disk or a clock.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agentbox.core.engine.failures import (
    BACKOFF_BASES_S,
    BACKOFF_JITTER,
    ENVIRONMENT_RETRY_BUDGET_S,
)
from agentbox.core.engine.ladder_briefs import DEBT_TAG, BriefChange

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
    """Advisor mode handed in a patch: apply it, or choose an exit."""
    EXIT = "exit"
    """L3: controlled rewrite, advisor again, bypass, or abandon."""


class Exit(StrEnum):
    """The four exits of L3 (and `apply` for an advisor's patch)."""

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
        """The level as the faces show it: `L0`, `L1 (rewrite 1/2)`, `L2 compromise`, `L3 waiting for an exit`."""
        if self.counted_failures == 0 and self.mode == Mode.NORMAL:
            return "-"
        words = {Mode.COMPROMISE: "compromise", Mode.ADVISOR: "advisor", Mode.HIGH_ROT: "waiting for an exit",
                 Mode.CLOSED: "closed"}
        label = f"{self.level.value} {words[self.mode]}" if self.mode in words else self.level.value
        if self.level == Level.L1 and self.mode == Mode.NORMAL:
            label += f" (rewrites {self.rewrites_total})"
        return label


class LadderPolicy(_Model):
    """The limits of the ladder (crew.yaml and built-in defaults)."""

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


@dataclass(frozen=True)
class HumanAnswered:
    """The human's answer to the task's ladder checkpoint."""

    answer: Literal["retry", "rewrite", "apply", "controlled_rewrite", "advisor_again", "bypass", "abandon"]
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


# ----------------------------------------------------------------------------- the machine


def decide(state: LadderState, event: Event, policy: LadderPolicy | None = None) -> Decision:
    """What the ladder does with `event` for a task in `state` (`state` itself is not changed)."""
    decision = _decide(state, event, policy or LadderPolicy())
    if len(decision.state.history) > len(state.history):
        return Decision(decision.state, decision.action, decision.counted, decision.state.history[-1])
    return decision


def _decide(state: LadderState, event: Event, policy: LadderPolicy) -> Decision:
    if state.mode == Mode.CLOSED:
        return Decision(state, Refuse("the task's ladder is closed (it was cancelled or replaced)"))
    if isinstance(event, HumanCancelled):
        new = _move(state, state.level, Mode.CLOSED, "cancelled by a human", None, event.at)
        return Decision(new.model_copy(update={"waiting_on": None}), Cancel())
    if isinstance(event, EnvironmentFailed):
        return _environment(state, event, policy)
    state = state.model_copy(update={"environment_attempt": 0}) if state.environment_attempt else state
    if isinstance(event, CoverageGap):
        return Decision(state, AskLeadToFill(event.acceptance_ids))
    if isinstance(event, UpstreamNotReady):
        return Decision(state, Block(event.upstream))
    if isinstance(event, Failed):
        return _failed(state, event, policy)
    if isinstance(event, Passed):
        return _passed(state, event)
    if isinstance(event, BriefReplied):
        return _brief(state, event)
    return _answered(state, event, policy)


def _move(state: LadderState, level: Level, mode: Mode, why: str, fp: str | None, at: float,
          **update: object) -> LadderState:
    """`state` moved to `level`/`mode`, the move appended to its history."""
    step = Transition(from_level=state.level, to_level=level, from_mode=state.mode, to_mode=mode, why=why,
                      fingerprint=fp, at=at)
    return state.model_copy(update={"level": level, "mode": mode, "history": [*state.history, step], **update})


def _environment(state: LadderState, event: EnvironmentFailed, policy: LadderPolicy) -> Decision:
    if event.error not in policy.retryable_errors:
        return Decision(state.model_copy(update={"waiting_on": Question.ENVIRONMENT}), Ask(
            Question.ENVIRONMENT, f"the environment failed ({event.error}), which waiting does not fix; not counted "
            "against the task", (("retry", "run the turn again once it is fixed"), CANCEL)))
    attempt = state.environment_attempt + 1
    if attempt <= len(policy.backoff_bases_s):
        sample = min(max(event.jitter_sample, 0.0), 1.0)
        delay = policy.backoff_bases_s[attempt - 1] * (1 - policy.jitter + 2 * policy.jitter * sample)
        if state.environment_waited_s + delay <= policy.environment_budget_s:
            new = state.model_copy(update={"environment_attempt": attempt,
                                           "environment_waited_s": state.environment_waited_s + delay})
            return Decision(new, RetryAfter(delay_s=delay, attempt=attempt))
    waited = state.environment_waited_s
    return Decision(state.model_copy(update={"environment_attempt": 0, "waiting_on": Question.ENVIRONMENT}), Ask(
        Question.ENVIRONMENT, f"the environment kept failing ({event.error}) after {state.environment_attempt} "
        f"retries and {waited:.0f} s of waiting; not counted against the task",
        (("retry", "run the turn again"), CANCEL)))


def matches_any(paths: Sequence[str], globs: Sequence[str]) -> bool:
    """Whether any project-relative path lies under one of `globs` (`*` crosses `/`; `dir/**` and `dir`
    also cover the directory itself and what is inside it)."""
    for pattern in globs:
        base = pattern.removesuffix("/**").rstrip("/")
        for path in paths:
            clean = path.strip("/")
            if fnmatch.fnmatchcase(clean, pattern) or fnmatch.fnmatchcase(clean, base) or \
                    fnmatch.fnmatchcase(clean, base + "/*"):
                return True
    return False


def _failed(state: LadderState, event: Failed, policy: LadderPolicy) -> Decision:
    fp, at = event.fingerprint, event.at
    base = {"counted_failures": state.counted_failures + 1, "last_fingerprint": fp, "rewrite_pending": False,
            "waiting_on": None}
    if state.mode == Mode.HIGH_ROT:
        return Decision(state, Refuse("the task waits for the human to choose an exit; no turn of it should run"))
    if state.counted_failures == 0:
        new = _move(state, Level.L0, Mode.NORMAL, "first counted failure: its fingerprint is registered", fp, at,
                    **base)
        return Decision(new, Rework(Mode.NORMAL), counted=True)
    if state.mode == Mode.ADVISOR:
        return _high_rot(state, "the advisor's patch failed too", fp, at, base)
    if state.mode == Mode.COMPROMISE:
        new = _move(state, Level.L2, Mode.ADVISOR, "the compromise failed too: advisor mode (the worker is read-only)",
                    fp, at, **base, escape_hatches_used=[*state.escape_hatches_used, "advisor"],
                    advisor_information=[*state.advisor_information, fp])
        return Decision(new, Rework(Mode.ADVISOR), counted=True)
    if state.rewrites_total >= policy.brief_rewrite_total:
        return _high_rot(state, f"L1 is exhausted: {state.rewrites_total} brief rewrites did not fix it", fp, at, base)
    if fp == state.last_fingerprint:
        if state.rewrites_auto < policy.brief_rewrite_auto:
            new = _move(state, Level.L1, Mode.NORMAL, "the same failure again: the lead rewrites the brief", fp, at,
                        **{**base, "rewrite_pending": True, "rewrite_automatic": True})
            return Decision(new, RequestRewrite(automatic=True), counted=True)
        new = _move(state, Level.L1, Mode.NORMAL, "the same failure again, the automatic rewrite is used: "
                    "a human decides", fp, at, **{**base, "waiting_on": Question.SECOND_REWRITE})
        return Decision(new, Ask(Question.SECOND_REWRITE, (
            f"L1: the same failure came back after {state.rewrites_total} brief rewrite(s)"),
            (("rewrite", "the lead rewrites the brief once more (the last rewrite allowed)"),
             CANCEL)), counted=True)
    if matches_any(event.paths, policy.no_compromise):
        new = _move(state, Level.L2, Mode.ADVISOR, "a different failure on a no_compromise path: straight to "
                    "advisor mode", fp, at, **base, escape_hatches_used=[*state.escape_hatches_used, "advisor"],
                    advisor_information=[*state.advisor_information, fp])
        return Decision(new, Rework(Mode.ADVISOR), counted=True)
    new = _move(state, Level.L2, Mode.COMPROMISE, "a different failure than the last one (drift): compromise mode",
                fp, at, **base, escape_hatches_used=[*state.escape_hatches_used, "compromise"])
    return Decision(new, Rework(Mode.COMPROMISE), counted=True)


def _high_rot(state: LadderState, why: str, fp: str, at: float, base: dict[str, object]) -> Decision:
    new = _move(state, Level.L3, Mode.HIGH_ROT, why + ": a high-rot zone", fp, at,
                **{**base, "waiting_on": Question.EXIT})
    text = (f"L3: {why}. The module is recorded as a high-rot zone. Choose: controlled_rewrite (a new task "
            "rewrites the module), advisor_again (only with new information), bypass (a new module beside the "
            "old one, whose files become protected), or abandon (the task is cancelled, the run goes on); "
            "give a one-sentence root cause with evidence")
    return Decision(new, HighRot(text), counted=True)


def _passed(state: LadderState, event: Passed) -> Decision:
    if state.mode == Mode.COMPROMISE:
        if event.debt_tags == 0:
            return Decision(state, Refuse(f"a compromise patch must tag every change `{DEBT_TAG}`; its diff adds "
                                          "no such tag"))
        return Decision(state, RecordDebt())
    return Decision(state, Proceed())


def _brief(state: LadderState, event: BriefReplied) -> Decision:
    change = event.change
    if change.kind == "unchanged":
        return Decision(state, Refuse("the new plan entry is the same as the old one"))
    if change.kind == "fill":
        return Decision(state, UseBrief(counted=False))
    if not state.rewrite_pending:
        return Decision(state, Refuse(f"no rewrite was asked for ({change.why}): a coverage fill only adds "
                                      "acceptance items"))
    if event.root_cause_problem is not None:
        return Decision(state, Refuse(f"a brief rewrite needs a root-cause line with evidence: "
                                      f"{event.root_cause_problem}"))
    automatic = state.rewrite_pending and state.rewrite_automatic
    new = state.model_copy(update={"rewrites_total": state.rewrites_total + 1,
                                   "rewrites_auto": state.rewrites_auto + (1 if automatic else 0),
                                   "rewrite_pending": False, "rewrite_automatic": False})
    return Decision(new, UseBrief(counted=True))


def _answered(state: LadderState, event: HumanAnswered, policy: LadderPolicy) -> Decision:
    asked, answer = state.waiting_on, event.answer
    if asked is None:
        return Decision(state, Refuse("no ladder question is open for this task"))
    if asked == Question.ENVIRONMENT and answer == "retry":
        return Decision(state.model_copy(update={"waiting_on": None, "environment_attempt": 0}),
                        RetryAfter(delay_s=0.0, attempt=1))
    if asked == Question.SECOND_REWRITE and answer == "rewrite":
        if state.rewrites_total >= policy.brief_rewrite_total:
            return Decision(state, Refuse(f"at most {policy.brief_rewrite_total} brief rewrites in all"))
        return Decision(state.model_copy(update={"waiting_on": None, "rewrite_pending": True,
                                                 "rewrite_automatic": False}), RequestRewrite(automatic=False))
    if asked == Question.APPLY_PATCH and answer == "apply":
        return Decision(state.model_copy(update={"waiting_on": None}), ApplyPatch())
    if asked == Question.EXIT and answer in {e.value for e in L3_EXITS}:
        return _exit(state, Exit(answer), event)
    return Decision(state, Refuse(f"{answer!r} does not answer the open question ({asked.value})"))


def _exit(state: LadderState, exit_: Exit, event: HumanAnswered) -> Decision:
    at = event.at
    if exit_ != Exit.ABANDON and event.root_cause_problem is not None:
        return Decision(state, Refuse(f"the choice needs a root-cause line with evidence: {event.root_cause_problem}"))
    used = [*state.escape_hatches_used, exit_.value]
    if exit_ == Exit.ABANDON:
        new = _move(state, Level.L3, Mode.CLOSED, "abandoned by a human", state.last_fingerprint, at,
                    waiting_on=None, escape_hatches_used=used)
        return Decision(new, Cancel(abandoned=True))
    if exit_ == Exit.ADVISOR_AGAIN:
        info = event.new_information.strip()
        if "advisor" in state.escape_hatches_used and (not info or info in state.advisor_information):
            return Decision(state, Refuse("advisor mode ran already: advisor again needs new information "
                                          "(say what the next round knows that the last did not)"))
        new = _move(state, Level.L3, Mode.ADVISOR, "advisor again, with new information", state.last_fingerprint, at,
                    waiting_on=None, escape_hatches_used=[*used, "advisor"],
                    advisor_information=[*state.advisor_information, info or (state.last_fingerprint or "")])
        return Decision(new, Rework(Mode.ADVISOR))
    if exit_ == Exit.CONTROLLED_REWRITE and event.overdue_debts:
        return Decision(state, Refuse("overdue tech debt on the module blocks a controlled rewrite until it is "
                                      f"closed or waived: {', '.join(event.overdue_debts)} (`agentbox debt`)"))
    action: Action = ControlledRewrite() if exit_ == Exit.CONTROLLED_REWRITE else Bypass()
    new = _move(state, Level.L3, Mode.CLOSED, f"{exit_.value} chosen by a human: a new task replaces this one",
                state.last_fingerprint, at, waiting_on=None, escape_hatches_used=used)
    return Decision(new, action)


def advisor_delivered(state: LadderState) -> Decision:
    """Advisor mode handed in its guide and patch: ask the human to apply it (or pick an exit)."""
    if state.mode != Mode.ADVISOR:
        return Decision(state, Refuse("the task is not in advisor mode"))
    return Decision(state.model_copy(update={"waiting_on": Question.APPLY_PATCH}), Ask(
        Question.APPLY_PATCH, f"{state.level.value}: the worker (read-only) wrote a guide and a patch",
        (("apply", "`agentbox apply TASK` applies the patch in the task's worktree and resubmits it; if it fails, L3"),
         CANCEL)))
