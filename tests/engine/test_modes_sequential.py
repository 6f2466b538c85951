"""Sequential mode with real scripted agents: the example crew's pipeline, reviewed step by step."""

from __future__ import annotations

from pathlib import Path

from agentbox.core.engine.run_store import RunStore
from agentbox.core.paths import ProjectPaths
from tests.engine.modes_support import drive, turn_prompts, write_crew, write_profile
from tests.engine.support import (
    assert_log_consistent,
    create,
    events,
    of_type,
    prompts_of,
    work_rule,
)


def test_example_crew_sequential_run_reviews_every_step_and_hands_results_on(project: Path) -> None:
    """The example crew (demo profiles as shipped): builder then tester, each reviewed; the builder's step reworked."""
    paths = ProjectPaths(project)
    run_id = create(paths, "add a greeting", mode="sequential")
    run = drive(paths, run_id, timeout=90)
    assert run.status == "done", run.status_reason
    builder, tester = run.tasks["step1-builder"], run.tasks["step2-tester"]
    assert list(run.tasks) == ["step1-builder", "step2-tester"]

    # Every step went through the review gate; the rejected one was reworked in its session.
    assert [(v.verdict, v.by) for v in builder.verdicts] == [("reject", "reviewer"), ("approve", "reviewer")]
    assert [(v.verdict, v.by) for v in tester.verdicts] == [("approve", "reviewer")]
    assert (builder.attempts, tester.attempts) == (2, 1)
    log = assert_log_consistent(paths, run_id)
    reviews = [e for e in of_type(log, "dispatch") if e["what"].startswith("review turn of reviewer")]
    assert [e["task"] for e in reviews] == ["step1-builder", "step1-builder", "step2-tester"]
    rework = prompts_of(paths, str(builder.session_id))[1]
    assert rework.startswith("[agentbox:rework task=step1-builder")
    assert "- [a1] major: src/greet.py has no module docstring" in rework and "[None]" not in rework

    # The tester's step gets the goal and the builder's result, not the builder's prompts.
    (step2,) = prompts_of(paths, str(tester.session_id))
    assert "Run goal: add a greeting" in step2
    assert "step1-builder (builder): Added the module and function docstrings the review asked for." in step2
    assert "src/greet.py" in step2
    assert "[agentbox:work task=step1" not in step2 and "[agentbox:rework task=step1" not in step2
    every_prompt = turn_prompts(paths, "builder") + turn_prompts(paths, "tester") + turn_prompts(paths, "reviewer")
    assert every_prompt and not any("Nothing to do" in p for p in every_prompt)
    assert all(p.count("[agentbox:") == 1 for p in every_prompt), "a prompt quotes another prompt"

    # A sensible result: the work is in the project and the result names what each step handed on.
    assert '"""Greetings for the demo crew."""' in (project / "src" / "greet.py").read_text()
    assert 'greet("Ada") == "Hello, Ada!"' in (project / "tests" / "test_greet.py").read_text()
    result = Path(run.result.artifact).read_text()
    assert result.startswith("# add a greeting\n")
    assert "- step1-builder (builder): Added the module and function docstrings" in result
    assert "- step2-tester (tester): Added tests/test_greet.py asserting the exact greeting. [tests/test_greet.py]" in result
    assert run.result.summary == "Added tests/test_greet.py asserting the exact greeting."


def test_without_a_reviewer_the_engine_accepts_each_step(project: Path) -> None:
    """A crew that names no reviewer keeps the pipeline unreviewed; step 3 sees steps 1 and 2."""
    write_profile("t-worker", [work_rule()])
    roles = {"builder": {"profile": "t-worker", "writes": ["src/**"]},
             "tester": {"profile": "t-worker", "writes": ["tests/**"]}}
    paths = write_crew(project, "sequential", roles, sequential={"steps": ["builder", "tester", "builder"]})
    run_id = create(paths, "pipe it", mode="sequential")
    run = drive(paths, run_id)
    assert run.status == "done", run.status_reason
    assert [[v.by for v in t.verdicts] for t in run.tasks.values()] == [["pipeline"]] * 3
    assert not [e for e in of_type(events(paths, run_id), "dispatch") if e["what"].startswith("review")]
    (step3,) = prompts_of(paths, str(run.tasks["step3-builder"].session_id))
    assert "- step1-builder (builder): did step1-builder" in step3
    assert "- step2-tester (tester): did step2-tester" in step3
    assert RunStore(paths).load(run_id).mode_state.reviewer is None
