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
the task and carries each `Decision.action` out; nothing here touches disk or a clock. The
types (state, policy, events, actions) are in `ladder_model.py`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence

from agentbox.core.engine.ladder_briefs import DEBT_TAG
from agentbox.core.engine.ladder_model import (
    CANCEL,
    L3_EXITS,
    Action,
    ApplyPatch,
    Ask,
    AskLeadToFill,
    Block,
    BriefReplied,
    Bypass,
    Cancel,
    ControlledRewrite,
    CoverageGap,
    Decision,
    EnvironmentFailed,
    Event,
    Exit,
    Failed,
    HighRot,
    HumanAnswered,
    HumanCancelled,
    LadderPolicy,
    LadderState,
    Level,
    Mode,
    Passed,
    Proceed,
    Question,
    RecordDebt,
    Refuse,
    RequestRewrite,
    RetryAfter,
    Rework,
    Transition,
    UpstreamNotReady,
    UseBrief,
)

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
        # the person looked at it: a fresh streak and a fresh budget
        return Decision(state.model_copy(update={"waiting_on": None, "environment_attempt": 0,
                                                 "environment_waited_s": 0.0}), RetryAfter(delay_s=0.0, attempt=1))
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
    """Advisor mode handed in its guide and patch: ask the human to apply it (or cancel)."""
    if state.mode != Mode.ADVISOR:
        return Decision(state, Refuse("the task is not in advisor mode"))
    return Decision(state.model_copy(update={"waiting_on": Question.APPLY_PATCH}), Ask(
        Question.APPLY_PATCH, f"{state.level.value}: the worker (read-only) wrote a guide and a patch",
        (("apply", "`agentbox apply TASK` applies the patch in the task's worktree and resubmits it; if it fails, L3"),
         CANCEL)))
