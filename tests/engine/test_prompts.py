"""What the engine's prompts say, read as the agent reads them."""

from __future__ import annotations

from agentbox.core.engine import prompts
from agentbox.core.engine.models import Acceptance, Contract, Run, Task, Verdict


def rejected_task(issues: list[dict[str, object]]) -> tuple[Run, Task]:
    run = Run(id="run-1", contract=Contract(goal="add a greeting", mode="hierarchical"))
    task = Task(id="greet", assignee="builder", brief="write greet()",
                acceptance=[Acceptance(id="a1", criterion="greet('Ada') is 'Hello, Ada!'")],
                verdicts=[Verdict(verdict="reject", by="reviewer", at=1.0, blocking_issues=issues,  # type: ignore[arg-type]
                                  checklist=[{"item": "greeting", "acceptance_id": "a1", "pass": True,
                                              "evidence": "ran it"}])])
    return run, task


def test_rework_prompt_lists_an_issue_without_acceptance_id_without_none() -> None:
    run, task = rejected_task([
        {"id": "b1", "acceptance_id": None, "severity": "major", "detail": "the module has no docstring"},
        {"id": "b2", "severity": "minor", "detail": "trailing whitespace"},
    ])
    text = prompts.work_prompt(run, task, "/artifacts", "", None)
    assert text.startswith("[agentbox:rework task=greet")
    assert "None" not in text
    assert "- major: the module has no docstring" in text
    assert "- minor: trailing whitespace" in text


def test_rework_prompt_names_the_criterion_an_issue_breaks() -> None:
    run, task = rejected_task([{"id": "b1", "acceptance_id": "a1", "severity": "blocker", "detail": "wrong text"}])
    text = prompts.work_prompt(run, task, "/artifacts", "", None)
    assert "- [a1] blocker: wrong text" in text


def test_a_human_rework_note_reaches_the_worker_once() -> None:
    run = Run(id="run-1", contract=Contract(goal="add a greeting", mode="hierarchical"))
    note = "use an f-string, not concatenation"
    task = Task(id="greet", assignee="builder", brief="write greet()",
                verdicts=[Verdict(verdict="reject", by="human", at=1.0, note=note,
                                  blocking_issues=[{"id": "human", "acceptance_id": None,  # type: ignore[list-item]
                                                    "severity": "blocker", "detail": note}])])
    text = prompts.work_prompt(run, task, "/artifacts", "", None)
    assert text.count(note) == 1 and "- blocker: " + note in text


def test_a_reviewer_note_that_adds_something_is_kept() -> None:
    run, task = rejected_task([{"id": "b1", "severity": "major", "detail": "no docstring"}])
    task.verdicts[-1].note = "raised by one reviewer only, to verify: b1"
    text = prompts.work_prompt(run, task, "/artifacts", "", None)
    assert "Reviewer note: raised by one reviewer only, to verify: b1" in text
