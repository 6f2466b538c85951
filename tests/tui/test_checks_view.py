"""The checks in the TUI: a task being checked says so in the queue; its detail lists its checks."""

from __future__ import annotations

from rich.console import Console

from agentbox.core.engine.models import CheckResult, Contract, PendingGate, Run, Task
from agentbox.tui.screens.task import task_summary
from agentbox.tui.widgets.queue import label, queue_rows


def rendered(renderable: object) -> str:
    console = Console(width=160, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def a_run() -> Run:
    red = CheckResult(name="smoke", stage="submission", commit="a" * 40, passed=False, status="failed",
                      exit_status=1, duration_s=1.25, log="/runs/r/checks/smoke.log", tail="ok\nFAILED test_x\x1b[2J\n")
    checked = Task(id="t1", assignee="builder", brief="b", state="submitted", checks=[red])
    other = Task(id="t2", assignee="builder", brief="b", state="submitted")
    return Run(id="run-1", contract=Contract(goal="g", mode="hierarchical"), tasks={"t1": checked, "t2": other},
               gates={"gate-1": PendingGate(id="gate-1", stage="submission", task="t1", checks=["smoke"])})


def test_the_queue_shows_a_task_being_checked() -> None:
    rows = {row.key: row for row in queue_rows(a_run(), set())}
    assert "⧗ checking" in label(rows["t1"].look).plain and "checking" not in label(rows["t2"].look).plain


def test_the_task_detail_lists_its_checks_with_the_log_and_a_red_ones_output() -> None:
    text = rendered(task_summary(a_run().tasks["t1"]))
    assert "Checks (1)" in text and "smoke" in text and "failed" in text and "aaaaaaaaaa" in text
    assert "/runs/r/checks/smoke.log" in text and "1.2 s" in text and "FAILED test_x" in text
    assert "Checks" not in rendered(task_summary(a_run().tasks["t2"]))  # no gate, no section


def test_a_blocking_gate_is_a_notification() -> None:
    from agentbox.core.engine.notify import notice_kind, terminal_banner

    event = {"type": "gate.blocked", "run": "run-1", "what": "t1: submission check smoke is red; back to builder",
             "why": "`pytest` exited 1"}
    assert notice_kind(event) == ("gate_blocked", ("on_failure",))
    assert terminal_banner(event) == "⚑ run-1 has a red check: a gate blocked — `pytest` exited 1"
    assert notice_kind({"type": "check", "what": "passed"}) is None


async def test_l_opens_the_log_of_the_tasks_red_check() -> None:
    from agentbox.tui import messages as msg
    from agentbox.tui.screens.task import TaskDetailScreen

    posted: list[msg.ActionRequested] = []

    class Board:
        run = a_run()

    screen = TaskDetailScreen(Board(), "t1")  # type: ignore[arg-type]
    screen.post_message = posted.append  # type: ignore[method-assign,assignment]
    screen.action_check_log()
    assert [(m.action, m.args) for m in posted] == [("view_artifact", ("/runs/r/checks/smoke.log",))]


def test_the_header_names_the_runs_gates() -> None:
    from agentbox.core.config.models import Gates
    from agentbox.tui.widgets.header import gates_line

    run = a_run()
    assert gates_line(run) == ""
    run.contract.gates = Gates(submission=["smoke", "full"], run_end=["full"])
    assert gates_line(run) == "gates: submission smoke,full · run end full (1 checking)"
