"""The failure ladder's level in the TUI queue and the task detail (pure renderings of a task)."""

from __future__ import annotations

from rich.console import Console

from agentbox.core.engine.ladder import decide
from agentbox.core.engine.ladder_model import Failed, LadderState
from agentbox.core.engine.models import Task
from agentbox.tui.screens.task import task_summary
from agentbox.tui.widgets.queue import label, task_look


def climbed(*fingerprints: str) -> LadderState:
    state = LadderState()
    for fp in fingerprints:
        state = decide(state, Failed(fp)).state
    return state


def rendered(renderable: object) -> str:
    console = Console(width=120, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_the_queue_row_shows_the_level_only_once_the_task_is_on_the_ladder() -> None:
    fresh = Task(id="t1", assignee="builder", brief="do it")
    assert "▲" not in label(task_look(fresh)).plain
    drifted = fresh.model_copy(update={"ladder": climbed("fp-a", "fp-b")})
    assert "▲ L2 compromise" in label(task_look(drifted, checking=True)).plain
    assert "checking" in label(task_look(drifted, checking=True)).plain


def test_the_task_detail_lists_the_level_and_each_move() -> None:
    task = Task(id="t1", assignee="builder", brief="do it", ladder=climbed("fp-a", "fp-a"))
    text = rendered(task_summary(task))
    assert "Failure ladder: L1 (rewrites 0)" in text
    assert "L0 normal → L1 normal  the same failure again: the lead rewrites the brief" in text
    assert "Failure ladder" not in rendered(task_summary(Task(id="t2", assignee="builder", brief="x")))
