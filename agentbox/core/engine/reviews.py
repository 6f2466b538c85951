"""Two independent reviews of one submission, compared in code (a pure policy).

Each reviewer judges the same submission in its own session, never seeing the other's
verdict. The comparison reads only structure, never the text: the blocking issues of each
verdict (severity blocker or major, and every failing checklist item) keyed by
`(id, acceptance_id)`.

- Both approve: approved.
- One side's blocking set is a subset of the other's (equal included): the reviewers
  agree; the task goes to rework with the union, the issues only one side raised marked
  *to verify* — unless one of those is a `blocker` (high severity), which is never
  downgraded to "to verify": a person decides.
- Neither set holds the other: they disagree, and a person decides.
- A reviewer whose verdict is invalid or empty (no checklist of every criterion, a pass
  without evidence, no JSON): no comparison is possible, and a person decides.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from agentbox.core.engine import models
from agentbox.core.engine.replies import BlockingIssue, ReplyError, Verdict, parse_reply
from agentbox.core.engine.reply_rules import check_verdict

HIGH_SEVERITY = "blocker"
"""The severity no subset tolerance applies to."""
BLOCKING_SEVERITIES = ("blocker", "major")
"""Severities that forbid approval (a minor issue is a note)."""

IssueKey = tuple[str, str | None]
"""How two reviewers' issues are matched: `(id, acceptance_id)`."""


@dataclass(frozen=True)
class Review:
    """One reviewer's outcome: a verdict that validated, or the reasons it did not (`verdict` None)."""

    by: str
    verdict: Verdict | None
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class Comparison:
    """What the two reviews decide, and why (one sentence)."""

    outcome: Literal["approve", "rework", "checkpoint"]
    reason: str
    issues: tuple[BlockingIssue, ...] = ()
    """The union of both sides' issues (blocking first): what rework must fix."""
    to_verify: tuple[IssueKey, ...] = field(default_factory=tuple)
    """Issues only one reviewer raised."""


def blocking(verdict: Verdict) -> dict[IssueKey, BlockingIssue]:
    """The blocking issues of `verdict` by key: blocker/major issues, and each failing checklist item."""
    found: dict[IssueKey, BlockingIssue] = {}
    for issue in verdict.blocking_issues:
        if issue.severity in BLOCKING_SEVERITIES:
            found.setdefault((issue.id, issue.acceptance_id), issue)
    for item in verdict.checklist:
        if not item.pass_:
            detail = f"{item.item}: {item.evidence}" if item.evidence.strip() else item.item
            found.setdefault(("checklist", item.acceptance_id),
                             BlockingIssue(id="checklist", acceptance_id=item.acceptance_id, severity="major",
                                           detail=detail))
    return found


def _label(key: IssueKey) -> str:
    return f"{key[0]}[{key[1]}]" if key[1] else key[0]


def _labels(keys: Sequence[IssueKey]) -> str:
    return ", ".join(_label(k) for k in keys)


def compare(first: Review, second: Review) -> Comparison:
    """Decide a double review (see the module docstring for the rules)."""
    unusable = [r for r in (first, second) if r.verdict is None]
    if unusable:
        why = "; ".join(f"{r.by}: {'; '.join(r.problems[:3]) or 'no verdict'}" for r in unusable)
        return Comparison("checkpoint", f"no comparison: an invalid or empty verdict ({why})")
    assert first.verdict is not None and second.verdict is not None
    if first.verdict.verdict == "approve" and second.verdict.verdict == "approve":
        return Comparison("approve", f"{first.by} and {second.by} both approve")
    ours, theirs = blocking(first.verdict), blocking(second.verdict)
    union = {**ours, **{k: v for k, v in theirs.items() if k not in ours}}
    minors = {(i.id, i.acceptance_id): i for v in (first.verdict, second.verdict) for i in v.blocking_issues
              if i.severity not in BLOCKING_SEVERITIES}
    named = {i.acceptance_id for k, i in union.items() if k[0] != "checklist"}
    issues = (*(i for k, i in union.items() if k[0] != "checklist" or i.acceptance_id not in named),
              *(i for k, i in minors.items() if k not in union))  # a failing item an issue explains is not repeated
    only_first = [k for k in ours if k not in theirs]
    only_second = [k for k in theirs if k not in ours]
    if only_first and only_second:
        return Comparison("checkpoint", f"the reviewers disagree: only {first.by} raised {_labels(only_first)}, "
                                        f"only {second.by} raised {_labels(only_second)}", issues,
                          (*only_first, *only_second))
    extra, by = (only_first, first.by) if only_first else (only_second, second.by)
    high = [k for k in extra if union[k].severity == HIGH_SEVERITY]
    if high:
        return Comparison("checkpoint", f"only {by} raised the blocker {_labels(high)}: a blocker is never "
                                        "downgraded to 'to verify'", issues, tuple(extra))
    if extra:
        reason = f"the reviewers agree; {_labels(extra)} (raised by {by} only) is to verify in the rework"
    else:
        reason = f"{first.by} and {second.by} raise the same issues"
    return Comparison("rework", reason, issues, tuple(extra))


# ----------------------------------------------------------------------------- the engine's side


def read_verdict(text: str, task: models.Task, role: str, at: float) -> models.Verdict:
    """A reviewer's reply as the verdict recorded on the task: `invalid` (with the reasons) when unusable."""
    try:
        reply = parse_reply(Verdict, text)
        problems = check_verdict(reply, [a.id for a in task.acceptance])
    except ReplyError as exc:
        reply, problems = None, list(exc.reasons)
    if reply is None or problems:
        return models.Verdict(verdict="invalid", by=role, at=at, note="; ".join(problems)[:1000] or "no verdict")
    return models.Verdict(verdict=reply.verdict, by=role, at=at,
                          evidence=[c.evidence for c in reply.checklist if c.pass_ and c.evidence],
                          blocking_issues=list(reply.blocking_issues), checklist=list(reply.checklist),
                          confidence=reply.confidence)


def _review(role: str, verdict: models.Verdict | None) -> Review:
    if verdict is None or verdict.verdict not in ("approve", "reject"):
        return Review(role, None, (verdict.note or "no verdict",) if verdict is not None else ("no verdict",))
    outcome: Literal["approve", "reject"] = "approve" if verdict.verdict == "approve" else "reject"
    return Review(role, Verdict(verdict=outcome, blocking_issues=list(verdict.blocking_issues),
                                checklist=list(verdict.checklist), confidence=verdict.confidence or 0.0))


def compare_panel(panel: models.ReviewPanel) -> Comparison:
    """`compare` of the two verdicts a double review recorded."""
    first, second = panel.reviewers[:2]
    return compare(_review(first, panel.verdicts.get(first)), _review(second, panel.verdicts.get(second)))


def _to_verify_note(decision: Comparison) -> str | None:
    if not decision.to_verify:
        return None
    return "raised by one reviewer only, to verify: " + _labels(decision.to_verify)


def combined_verdict(decision: Comparison, by: str, at: float) -> models.Verdict:
    """The rejection both reviews agree on: the union of their issues (what the rework prompt lists)."""
    return models.Verdict(verdict="reject", by=by, at=at, blocking_issues=list(decision.issues),
                          note=_to_verify_note(decision))


def checkpoint_question(task: models.Task, decision: Comparison) -> str:
    """What a person is asked when two reviews do not settle a task."""
    panel = task.panel
    lines = [f"The two reviews of {task.id} do not settle it: {decision.reason}."]
    for role in panel.reviewers if panel is not None else ():
        verdict = panel.verdicts.get(role) if panel is not None else None
        if verdict is None:
            continue
        issues = "; ".join(f"{b.id}[{b.acceptance_id or '-'}] {b.severity}: {b.detail}" for b in verdict.blocking_issues)
        failing = ", ".join(c.acceptance_id for c in verdict.checklist if not c.pass_)
        what = verdict.note if verdict.verdict == "invalid" else (issues or "no issue")
        lines.append(f"- {role}: {verdict.verdict}: {what}" + (f" (failing: {failing})" if failing else ""))
    lines.append("Answer 'approve' with what you checked, 'rework' (optionally with a note: the worker gets every "
                 "issue either review raised), or 'cancel'.")
    return "\n".join(lines)
