"""Hierarchical mode: the lead plans, workers execute, a reviewer gates, the lead synthesises."""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path

from agentbox.core.agents.invoke import InvokeResult
from agentbox.core.config.models import HierarchicalSettings
from agentbox.core.engine import prompts
from agentbox.core.engine.ledger import RunLedger
from agentbox.core.engine.mode_state import HierarchicalState
from agentbox.core.engine.models import Acceptance, Checkpoint, Job, JobData, Run, RunResult, Task
from agentbox.core.engine.modes.base import ModeDriver
from agentbox.core.engine.replies import Plan
from agentbox.core.engine.reply_rules import check_plan
from agentbox.core.sandbox.protected import overlaps
from agentbox.core.sandbox.scopes import glob_static_prefix

APPROVE_WORDS = {"approve", "approved", "yes", "y", "ok", "go"}
_GOAL_PATH = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)+[\w.*-]*|[\w-]+\.[A-Za-z]\w{0,5})(?![\w/])")


def rot_near_goal(root: Path, run: Run, ledger: RunLedger) -> str:
    """What zones.yaml and debt.yaml say of the goal's files (its scope, else the paths its text names,
    else the whole project), for the lead's planning prompt ("" when nothing touches them)."""
    from agentbox.core.config import zones
    from agentbox.core.errors import AgentboxError

    box = root / ".agent-box"
    if not (box / zones.ZONES_FILE).exists() and not (box / zones.DEBT_FILE).exists():
        return ""
    files = list(run.contract.scope) or _GOAL_PATH.findall(run.contract.goal) or ["."]
    try:
        return zones.planning_notes(zones.load_zones(box), zones.load_debts(box), files, date.today())
    except AgentboxError as exc:  # a damaged file is the person's to fix: the plan goes on without it
        ledger.event("zone", "zones.yaml or debt.yaml could not be read for the plan", exc.message)
        return ""


class HierarchicalMode(ModeDriver[HierarchicalState]):
    """plan → (plan approval) → queue → execute in parallel → review → rework/approve → synthesis."""

    name = "hierarchical"
    state_model = HierarchicalState

    @property
    def settings(self) -> HierarchicalSettings:
        """The run's hierarchical settings."""
        return self.run.contract.settings_as(HierarchicalSettings)

    @property
    def lead(self) -> str:
        """The planning role."""
        return self.settings.lead

    def reviewer_for(self, task: Task) -> str:
        """The reviewer role, else the lead."""
        return self.settings.reviewer or self.lead

    def reviewers_for(self, task: Task) -> list[str]:
        """`hierarchical.reviewers` for every task; for a task planned with `review: double`, the reviewer and the lead."""
        if self.settings.reviewers:
            return list(self.settings.reviewers)
        single = self.reviewer_for(task)
        return [single, self.lead] if task.review == "double" and single != self.lead else [single]

    def _roles_for_planner(self) -> dict[str, str]:
        described = {}
        for name, role in self.ctx.crew.roles.items():
            if name == self.lead:
                continue
            scope = "read-only" if role.read_only else ("whole project" if role.writes is None else ", ".join(role.writes))
            described[name] = f"{role.description or role.profile} (may write: {scope})"
        return described

    def start(self) -> None:
        """Ask the lead for a plan."""
        self.update_state(phase="planning")
        self._ask_plan(None)

    def _ask_plan(self, feedback: str | None) -> None:
        prompt = prompts.plan_prompt(self.run, self._roles_for_planner(), feedback, self.ctx.crew.protected,
                                     rot_near_goal(self.ctx.project_root, self.run, self.ctx.ledger))
        self.ctx.ledger.enqueue("plan", self.lead, prompt, data=JobData(session_key="lead", original_prompt=prompt))

    def on_success(self, job: Job, result: InvokeResult) -> None:
        """Plans and syntheses here; work and reviews in the base driver."""
        if job.kind == "plan":
            self._handle_plan(job, result)
        elif job.kind == "synthesis":
            self._handle_synthesis(result)
        else:
            super().on_success(job, result)

    def _scope_problems(self, plan: Plan) -> list[str]:
        problems = []
        for task in plan.tasks:
            if task.review == "double" and not self.settings.reviewers and (self.settings.reviewer or self.lead) == self.lead:
                problems.append(f"task {task.id}: review: double needs two reviewers, and this crew has one "
                                f"({self.lead}); plan it without `review`")
            for pattern in task.writes:
                for guarded in self.ctx.crew.protected:
                    if overlaps(pattern, guarded):
                        problems.append(f"task {task.id}: writes {pattern!r}, which reaches the protected path "
                                        f"{guarded!r} (no role may write it); narrow the task's writes")
            role = self.ctx.crew.roles.get(task.assignee)
            if role is None or role.writes is None:
                continue
            allowed_prefixes = [glob_static_prefix(r)[0] for r in role.writes]
            for pattern in task.writes:
                static, _ = glob_static_prefix(pattern)
                inside = any(static[: len(prefix)] == prefix for prefix in allowed_prefixes)
                if not inside:
                    allowed = ", ".join(role.writes) or "nothing (read-only)"
                    problems.append(f"task {task.id}: {task.assignee} may not write {pattern!r} (allowed: {allowed})")
        return problems

    def _handle_plan(self, job: Job, result: InvokeResult) -> None:
        roles = [r for r in self.ctx.crew.roles if r != self.lead] or list(self.ctx.crew.roles)
        plan = self.ctx.structured(job, result, Plan,
                                      lambda p: check_plan(p, roles, self.run.tasks) + self._scope_problems(p))
        if plan is None:
            return
        self.ctx.ledger.event("plan", f"plan of {len(plan.tasks)} task(s) accepted", plan.notes, role=job.role,
                          session=result.session_id, tokens=result.usage.total_tokens)
        if self.settings.plan_approval:
            self.update_state(phase="plan_approval", proposed_plan=plan)
            listing = "\n".join(f"- {t.id} → {t.assignee}: {t.brief}" for t in plan.tasks)
            self.ctx.ledger.checkpoint("plan_approval", f"Approve this plan? Answer 'approve', or feedback to re-plan.\n{listing}",
                                   options=["approve"], role=self.lead)
            return
        self._release(plan)

    def _release(self, plan: Plan) -> None:
        for planned in plan.tasks:
            task = Task(id=planned.id, assignee=planned.assignee, brief=planned.brief,
                        acceptance=[Acceptance(id=a.id, criterion=a.criterion) for a in planned.acceptance],
                        writes=list(planned.writes), depends_on=list(planned.depends_on), review=planned.review)
            self.ctx.ledger.add_task(task, "from the lead's plan")
        self.update_state(phase="executing")
        self.release_dependents()

    def on_answer(self, checkpoint: Checkpoint, text: str) -> None:
        """Plan approval: approve releases the plan; anything else is feedback for a new plan."""
        if checkpoint.kind != "plan_approval":
            return
        proposed = self.state.proposed_plan
        self.update_state(proposed_plan=None)
        if text.split()[0].lower() in APPROVE_WORDS and proposed is not None:
            self._release(proposed)
        else:
            self.update_state(phase="planning")
            self._ask_plan(f"The human's feedback: {text}")

    def tick(self) -> None:
        """When the round has closed (every task approved or cancelled), ask for the synthesis.

        A plan or synthesis turn the human cancelled at a retry escalation leaves nothing to
        run: the run fails.
        """
        phase = self.state.phase
        if phase in ("planning", "synthesis") and not self.run.jobs and not self.run.open_checkpoints():
            self.ctx.ledger.finish("failed", f"the lead's {'plan' if phase == 'planning' else 'synthesis'} turn "
                                         "was cancelled: the run cannot go on")
            return
        if phase != "executing" or not self.all_closed():
            return
        if any(j.task for j in self.run.jobs.values()):
            return
        approved = [t for t in self.run.tasks.values() if t.state == "approved"]
        if not approved:
            self.ctx.ledger.finish("failed", "every task was cancelled")
            return
        self.update_state(phase="synthesis")
        self.ctx.ledger.event("round.closed", f"round closed: {len(approved)} task(s) approved", None)
        prompt = prompts.synthesis_prompt(self.run)
        self.ctx.ledger.enqueue("synthesis", self.lead, prompt,
                                data=JobData(session_key="lead", original_prompt=prompt))

    def _handle_synthesis(self, result: InvokeResult) -> None:
        path = self.write_artifact("synthesis.md", result.text.strip() + "\n", role=self.lead,
                                   what=f"synthesis.md by {self.lead}", session=result.session_id)
        self.update_state(phase="done")
        self.ctx.ledger.finish("done", "round closed and synthesised",
                               RunResult(summary=result.text.strip()[:4000], artifact=str(path)))
