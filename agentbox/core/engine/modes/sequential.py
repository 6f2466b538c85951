"""Sequential mode: a pipeline of roles, each given the goal and the upstream artifacts."""

from __future__ import annotations

from agentbox.core import store
from agentbox.core.engine.models import Acceptance, Task, Verdict
from agentbox.core.engine.modes.base import ModeDriver
from agentbox.core.tasks import TaskEvent

STEP_CRITERION = "The step's output advances the goal and is handed on as artifacts or a summary"


class SequentialMode(ModeDriver):
    """One task per step, each depending on the previous one; steps are accepted by the engine."""

    name = "sequential"

    def start(self) -> None:
        """Create the pipeline's tasks and start the first step."""
        steps = list(self.engine.settings.get("steps") or self.engine.crew.roles)
        previous: str | None = None
        for index, role_name in enumerate(steps, start=1):
            role = self.engine.crew.roles[role_name]
            writes = ["**"] if role.writes is None else list(role.writes)
            task = Task(id=f"step{index}-{role_name}", assignee=role_name, brief=self.run.contract.goal,
                        acceptance=[Acceptance(id="a1", criterion=STEP_CRITERION)], writes=writes,
                        depends_on=[previous] if previous else [])
            self.engine.add_task(task, f"pipeline step {index} of {len(steps)}")
            previous = task.id
        self.state["phase"] = "executing"
        self.release_dependents()

    def reviewer_for(self, task: Task) -> str:
        """Pipelines have no reviewer role."""
        return task.assignee

    def after_submit(self, task: Task) -> None:
        """A step is accepted once its submission is valid; its summary and evidence are the evidence."""
        sub = task.submission or {}
        evidence = list(sub.get("evidence") or []) or [f"submission: {sub.get('summary', '')}"]
        self.engine.transition(task, TaskEvent.START_REVIEW, "pipeline step: the engine checks the submission")
        self.engine.transition(task, TaskEvent.APPROVE, "pipeline step accepted: valid submission", evidence=evidence)
        task.verdicts.append(Verdict(verdict="approve", by="pipeline", at=self.engine.clock(), evidence=evidence))
        self.on_task_approved(task)

    def tick(self) -> None:
        """Finish when the last step is approved."""
        if self.state.get("phase") != "executing" or not self.all_closed():
            return
        last = list(self.run.tasks.values())[-1]
        if last.state != "approved":
            self.engine.finish("failed", f"step {last.id} was cancelled")
            return
        summary = (last.submission or {}).get("summary", "")
        path = self.engine.store.artifacts_dir(self.run.id) / "result.md"
        store.atomic_write_text(path, summary.strip() + "\n")
        self.state["phase"] = "done"
        self.engine.finish("done", "every step completed", {"summary": summary, "artifact": str(path)})
