"""The comparison of two independent reviews, a pure function: every rule, no process and no disk."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentbox.core.config.project import load_checked_crew
from agentbox.core.engine.commands import CancelTaskAt, SettleReview, decide_answer
from agentbox.core.engine.models import Checkpoint, Contract, Run
from agentbox.core.engine.replies import Verdict
from agentbox.core.engine.reviews import Review, compare
from agentbox.core.errors import ConfigError
from agentbox.core.paths import ProjectPaths


def verdict(*issues: tuple[str, str | None, str], failing: tuple[str, ...] = ()) -> Verdict:
    """A verdict over criteria a1, a2: approve when nothing is listed, else reject with these issues."""
    checklist = [{"item": f"criterion {a}", "acceptance_id": a, "pass": a not in failing,
                  "evidence": "ran the tests"} for a in ("a1", "a2")]
    blocking = [{"id": i, "acceptance_id": a, "severity": s, "detail": f"{i} is wrong"} for i, a, s in issues]
    rejects = any(s != "minor" for _, _, s in issues) or failing or issues
    data: dict[str, Any] = {"verdict": "reject" if rejects else "approve", "blocking_issues": blocking,
                            "checklist": checklist, "confidence": 0.8}
    return Verdict.model_validate(data)


A = ("b1", "a1", "major")
B = ("b2", "a2", "major")
C = ("b3", "a2", "major")
HIGH = ("b9", "a2", "blocker")
MINOR = ("m1", None, "minor")


@pytest.mark.parametrize(("first", "second", "outcome", "union", "to_verify"), [
    pytest.param(verdict(), verdict(), "approve", set(), set(), id="both-approve"),
    pytest.param(verdict(A, B), verdict(A, B), "rework", {"b1", "b2"}, set(), id="same-issues-agree"),
    pytest.param(verdict(A, B, C), verdict(A, B), "rework", {"b1", "b2", "b3"}, {("b3", "a2")},
                 id="subset-agree-union-to-verify"),
    pytest.param(verdict(A), verdict(A, B), "rework", {"b1", "b2"}, {("b2", "a2")}, id="subset-either-side"),
    pytest.param(verdict(), verdict(A), "rework", {"b1"}, {("b1", "a1")}, id="approve-vs-one-major"),
    pytest.param(verdict(A), verdict(B), "checkpoint", {"b1", "b2"}, {("b1", "a1"), ("b2", "a2")},
                 id="neither-subset-disagree"),
    pytest.param(verdict(A, HIGH), verdict(A), "checkpoint", {"b1", "b9"}, {("b9", "a2")}, id="extra-high"),
    pytest.param(verdict(), verdict(HIGH), "checkpoint", {"b9"}, {("b9", "a2")}, id="approve-vs-blocker"),
    pytest.param(verdict(A, HIGH), verdict(A, HIGH), "rework", {"b1", "b9"}, set(), id="shared-blocker-agrees"),
    pytest.param(verdict(A, MINOR), verdict(A), "rework", {"b1", "m1"}, set(), id="minor-is-no-disagreement"),
    pytest.param(verdict(A, B), verdict(("b1", "a2", "major"), B), "checkpoint", {"b1", "b2"},
                 {("b1", "a1"), ("b1", "a2")}, id="same-id-other-criterion-differs"),
    pytest.param(verdict(failing=("a1",)), verdict(failing=("a1",)), "rework", {"checklist"}, set(),
                 id="failing-items-match-by-criterion"),
])
def test_two_reviews_decide_by_their_blocking_issues(first: Verdict, second: Verdict, outcome: str,
                                                     union: set[str], to_verify: set[tuple[str, str]]) -> None:
    decision = compare(Review("reviewer", first), Review("critic", second))
    assert decision.outcome == outcome, decision.reason
    assert {i.id for i in decision.issues} == union
    assert set(decision.to_verify) == to_verify


@pytest.mark.parametrize("which", ["first", "second", "both"])
def test_an_invalid_or_empty_verdict_always_asks_a_person(which: str) -> None:
    good = Review("reviewer", verdict())
    bad = Review("critic", None, ("checklist does not cover acceptance ids: a2",))
    pair = {"first": (bad, good), "second": (good, bad), "both": (bad, bad)}[which]
    decision = compare(*pair)
    assert decision.outcome == "checkpoint" and "invalid or empty verdict" in decision.reason
    assert "checklist does not cover" in decision.reason


def test_the_reason_names_what_only_one_side_raised() -> None:
    decision = compare(Review("reviewer", verdict(A)), Review("critic", verdict(B)))
    assert "only reviewer raised b1[a1]" in decision.reason and "only critic raised b2[a2]" in decision.reason
    decision = compare(Review("reviewer", verdict(A, HIGH)), Review("critic", verdict(A)))
    assert "only reviewer raised the blocker b9[a2]" in decision.reason


def _crew_error(project: Path, hierarchical: str) -> ConfigError:
    (project / ".agent-box" / "crew.yaml").write_text(
        "mode: hierarchical\nroles:\n  lead: {profile: claude}\n  reviewer: {profile: claude}\n"
        f"hierarchical:\n{hierarchical}")
    with pytest.raises(ConfigError) as caught:
        load_checked_crew(ProjectPaths(project))
    return caught.value


def test_two_reviewers_must_be_two_different_roles_of_the_crew(project: Path) -> None:
    same = _crew_error(project, "  reviewers: [reviewer, reviewer]\n")
    assert same.line == 6 and same.field == "hierarchical.reviewers" and "two different roles" in same.message
    unknown = _crew_error(project, "  reviewers: [reviewer, critic]\n")
    assert unknown.line == 6 and "unknown role 'critic'" in unknown.message


@pytest.mark.parametrize(("text", "decision"), [
    ("approve", SettleReview(approve=True, note="approve")),
    ("Approve: I ran the suite myself", SettleReview(approve=True, note="Approve: I ran the suite myself")),
    ("rework", SettleReview(approve=False, note="")),
    ("rework mind the tests", SettleReview(approve=False, note="mind the tests")),
    ("the critic is right about b3", SettleReview(approve=False, note="the critic is right about b3")),
    ("cancel", CancelTaskAt()),
])
def test_an_answer_to_two_unsettled_reviews_approves_reworks_or_cancels(text: str, decision: object) -> None:
    run = Run(id="run-1", contract=Contract(goal="g", mode="hierarchical"))
    cp = Checkpoint(id="cp-1", kind="review_disagreement", question="?", task="t1")
    assert decide_answer(run, cp, text) == decision
