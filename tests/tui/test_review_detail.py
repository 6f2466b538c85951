"""The task detail shows both independent reviews and what their comparison decided."""

from __future__ import annotations

from rich.console import Console

from agentbox.core.engine.models import ReviewPanel, Task, Verdict
from agentbox.tui.screens.task import task_summary


def rendered(task: Task) -> str:
    console = Console(record=True, width=160, color_system=None)
    console.print(task_summary(task))
    return console.export_text()


def test_the_task_detail_shows_both_verdicts_and_the_comparison() -> None:
    first = Verdict(verdict="reject", by="reviewer", at=0.0, confidence=0.8,
                    blocking_issues=[{"id": "b1", "acceptance_id": "a1", "severity": "major", "detail": "no test"}])
    second = Verdict(verdict="invalid", by="critic", at=0.0, note="no JSON object found in the reply")
    panel = ReviewPanel(reviewers=["reviewer", "critic"], verdicts={"reviewer": first, "critic": second},
                        outcome="checkpoint", reason="no comparison: an invalid or empty verdict")
    task = Task(id="t1", assignee="builder", brief="do it", state="reviewing", verdicts=[first, second], panel=panel)
    text = rendered(task)
    assert "Verdicts (2)" in text and "reviewer" in text and "[a1] no test" in text
    assert "critic" in text and "no JSON object found" in text
    assert "two reviews reviewer + critic → checkpoint" in text and "invalid or empty verdict" in text


def test_a_double_review_under_way_says_what_it_waits_for() -> None:
    panel = ReviewPanel(reviewers=["reviewer", "critic"])
    assert "→ waiting for 2 review(s)" in rendered(Task(id="t1", assignee="b", brief="x", panel=panel))
