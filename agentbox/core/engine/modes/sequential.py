"""Sequential mode: a pipeline of roles, each given the goal and the results of the steps before it.

Each step is a task of its role that depends on the step before. When the crew names a
reviewer (`hierarchical.reviewer`), every step goes
through the review gate like any task: a rejected step is reworked in its session before
the next step starts. Without a reviewer the engine accepts a valid submission itself.
A step is given the summaries and artifacts of the steps before it, never their prompts.
"""

from __future__ import annotations

from agentbox.core import store
from agentbox.core.config.models import SequentialSettings
from agentbox.core.engine.mode_state import SequentialState
from agentbox.core.engine.models import Acceptance, RunResult, Task, Verdict
from agentbox.core.engine.modes.base import ModeDriver
from agentbox.core.tasks import TaskEvent, TaskState

STEP_CRITERION = ("The step does its role's part of the goal within the files the role may write, and its "
                  "summary and artifacts say what it hands on")
"""What every pipeline step is reviewed against (acceptance id a1)."""


class SequentialMode(ModeDriver[SequentialState]):
    """One task per step, each depending on the previous one; steps are reviewed when the crew has a reviewer."""

    name = "sequential"
    state_model = SequentialState

    def start(self) -> None:
        """Create the pipeline's tasks, choose its reviewer once for the run, and start the first step."""
        crew = self.ctx.crew
        steps = list(self.run.contract.settings_as(SequentialSettings).steps or crew.roles)
        named = crew.hierarchical.reviewer
        self.update_state(reviewer=named if named in crew.roles else None)
        previous: str | None = None
        for index, role_name in enumerate(steps, start=1):
            role = crew.roles[role_name]
            writes = ["**"] if role.writes is None else list(role.writes)
            what = f" ({role.description})" if role.description else ""
            brief = (f"Step {index} of {len(steps)} of a pipeline, as {role_name}{what}: do your part of the "
                     "run goal, building on what the earlier steps handed on"
                     + (", and hand on what the next step needs." if index < len(steps) else
                        ". Yours is the last step: finish the goal."))
            task = Task(id=f"step{index}-{role_name}", assignee=role_name, brief=brief,
                        acceptance=[Acceptance(id="a1", criterion=STEP_CRITERION)],
                        writes=writes, depends_on=[previous] if previous else [])
            self.ctx.ledger.add_task(task, f"pipeline step {index} of {len(steps)}")
            previous = task.id
        self.update_state(phase="executing")
        self.release_dependents()

    @property
    def reviewer(self) -> str | None:
        """The role reviewing the steps, None when the engine accepts them."""
        return self.state.reviewer

    def reviewer_for(self, task: Task) -> str:
        """The crew's reviewer (a step is never reviewed by its own role)."""
        return self.reviewer or task.assignee

    def upstream_of(self, task: Task) -> list[Task]:
        """Every earlier step (all approved once this one runs): the goal is built step by step."""
        earlier: list[Task] = []
        for other in self.run.tasks.values():
            if other.id == task.id:
                break
            if other.state == TaskState.APPROVED:
                earlier.append(other)
        return earlier

    def after_submit(self, task: Task) -> None:
        """Review the step, or accept a valid submission when the crew has no other reviewer."""
        if self.reviewer is not None and self.reviewer != task.assignee:
            super().after_submit(task)
            return
        submitted = list(task.submission.evidence) if task.submission is not None else []
        evidence = submitted or [f"submission: {task.submitted_summary}"]
        self.ctx.ledger.transition(task, TaskEvent.START_REVIEW, "pipeline step without a reviewer: the engine checks it")
        conflicts = self.ctx.integrate(task)
        if conflicts:  # the step's branch cannot be merged: it goes back with the conflicting files
            self.ctx.ledger.transition(task, TaskEvent.REJECT, "merge conflict with the run's approved work")
            self.requeue(task)
            return
        self.ctx.ledger.transition(task, TaskEvent.APPROVE, "pipeline step accepted: valid submission", evidence=evidence)
        self.ctx.ledger.add_verdict(task, Verdict(verdict="approve", by="pipeline", at=self.ctx.clock(),
                                                     evidence=evidence))
        self.on_task_approved(task)

    def tick(self) -> None:
        """Finish when the last step is approved; the result lists what every step handed on."""
        if self.state.phase != "executing" or not self.all_closed():
            return
        steps = list(self.run.tasks.values())
        last = steps[-1]
        if last.state != TaskState.APPROVED:
            self.ctx.ledger.finish("failed", f"step {last.id} was cancelled")
            return
        lines = [f"# {self.run.contract.goal}", ""]
        for step in steps:
            files = ", ".join(step.submitted_artifacts) or "no files"
            lines.append(f"- {step.id} ({step.assignee}): {step.submitted_summary} [{files}]")
        path = self.ctx.store.artifacts_dir(self.run.id) / "result.md"
        store.atomic_write_text(path, "\n".join(lines) + "\n")
        self.update_state(phase="done")
        self.ctx.ledger.finish("done", "every step completed", RunResult(summary=last.submitted_summary, artifact=str(path)))
