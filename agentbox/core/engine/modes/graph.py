"""Graph mode: run the work graph of the run contract.

Every run of a node is a Task (`task.node`, `task.round`: 1 for the first run of the
node, 2 for the second...), so the queue, the scheduler (max_workers, the role's write
scope, one turn per role), budgets and failure routing apply as in every mode. A node
runs in its own session (`session_key node:<name>`), so a re-run resumes it.

A node's agent answers with a `NodeResult`: a summary, artifacts, evidence and an
`outcome`. On `success` the task is approved with the node's evidence and every success
edge leaving the node fires (several = parallel branches). On `fail` the node's
`fail_reason` picks the edge with exactly that reason, else the fallback fail edge (the
one without a reason); the report is accepted (approved, recorded with a `fail` verdict)
and the target node runs with the report and the `remediation` note as input. With no
edge to take, the node's task is **blocked** and a retry_escalation checkpoint asks the
human: `retry` (with a note) runs the node again, `cancel` cancels it.

Firing an edge delivers to its target. A node runs when it has a delivery and none of
its forward ancestors is live (a run queued, running or waiting on a human, or a
delivery of its own pending): a node with several forward in-edges thus waits for all
of its *activated* predecessors, and only for those — a branch that was never taken is
not waited for. Upstream results reach a node as its forward predecessors' latest
reports (summary, artifact paths and hand-on dir).

A backward edge (a rework loop) passes through the failure ledger: the engine's
`fail()` with an `implementation_defect` fingerprinted by the loop (source, reason,
target), so the same loop is taken automatically at most `max_auto_retries` times; the
next time the re-run is blocked and the human is asked (`retry` goes round again).

The run ends when nothing is live: `done` when every node's latest run is approved (the
summaries go to `artifacts/result.md`), `failed` when one was cancelled.
"""

from __future__ import annotations

from functools import cached_property

from agentbox.core.agents.invoke import InvokeResult
from agentbox.core.engine import mode_prompts
from agentbox.core.engine.failures import FailureKind, fingerprint
from agentbox.core.engine.mode_state import Delivery, GraphState
from agentbox.core.engine.models import Acceptance, Failure, Job, JobData, RunResult, Task, Verdict
from agentbox.core.engine.modes.base import ModeDriver
from agentbox.core.engine.replies import NodeResult
from agentbox.core.engine.workspaces import merge_conflict_note
from agentbox.core.graph import load as graph_mod
from agentbox.core.graph.model import Edge, Graph
from agentbox.core.tasks import TaskEvent, TaskState, round_can_close


class GraphMode(ModeDriver[GraphState]):
    """Nodes as tasks, edges as deliveries, backward edges through the failure ledger."""

    name = "graph"
    state_model = GraphState

    @property
    def graph(self) -> Graph:
        """The validated work graph of the run contract (`start` fails a run without one)."""
        if self.run.contract.graph is None:
            raise TypeError("a graph run without a work graph")
        return self.run.contract.graph

    @cached_property
    def order(self) -> list[str]:
        """Node names in forward topological order."""
        return graph_mod.topological_order(self.graph)

    @cached_property
    def ancestors(self) -> dict[str, set[str]]:
        """Node → the nodes with a forward path to it."""
        found: dict[str, set[str]] = {}
        for name in self.order:
            found[name] = set()
            for pred in graph_mod.forward_predecessors(self.graph, name):
                found[name] |= {pred} | found[pred]
        return found

    def reviewer_for(self, task: Task) -> str:
        """Review is a node of the graph, not a side step."""
        return task.assignee

    # ------------------------------------------------------------------ state
    def latest(self, node: str) -> Task | None:
        """The node's latest run."""
        runs = self.state.activations.get(node)
        return self.run.tasks.get(runs[-1]) if runs else None

    def _live(self, node: str) -> bool:
        task = self.latest(node)
        return bool(self.state.pending.get(node)) or (task is not None and not task.is_terminal)

    def _waiting(self, node: str) -> bool:
        """True while a forward ancestor of `node` may still deliver to it."""
        return any(self._live(a) for a in self.ancestors[node])

    def _has_job(self, task: Task) -> bool:
        return any(j.task == task.id for j in self.run.jobs.values())

    # ------------------------------------------------------------------ start
    def start(self) -> None:
        """Deliver the goal to the entry node."""
        if self.run.contract.graph is None:
            self.ctx.ledger.finish("failed", "graph mode needs a work graph in the run contract")
            return
        missing = sorted({n.role for n in self.graph.nodes} - set(self.ctx.crew.roles))
        if missing:
            self.ctx.ledger.finish("failed", f"the graph names roles the crew no longer has: {', '.join(missing)}")
            return
        self.update_state(phase="running", activations={}, pending={}, inputs={})
        entry = graph_mod.entry(self.graph)
        name = f"graph {self.graph.name}" if self.graph.name else "the graph"
        self.ctx.ledger.event("graph.started", f"{name} starts at {entry}",
                          f"{len(self.graph.nodes)} node(s), {len(self.graph.edges)} edge(s)")
        self._deliver(entry, Delivery(condition="entry"))
        self.advance()

    # ------------------------------------------------------------------ deliveries
    def _deliver(self, node: str, delivery: Delivery) -> None:
        """Hand a delivery to a node's waiting run, or start a new run, or hold it until the current ends."""
        task = self.latest(node)
        state = self.state
        if task is None or task.is_terminal:
            self._activate(node, [delivery])
        elif task.state == TaskState.QUEUED and task.attempts == 0 and not self._has_job(task):
            self.update_state(inputs={**state.inputs, task.id: [*state.inputs.get(task.id, []), delivery]})
            self._ledger(task, delivery)
        else:
            self.update_state(pending={**state.pending, node: [*state.pending.get(node, []), delivery]})

    def _activate(self, node_name: str, deliveries: list[Delivery]) -> Task:
        node = graph_mod.get_node(self.graph, node_name)
        runs = self.state.activations.get(node_name, [])
        round_no = len(runs) + 1
        task_id = node_name if round_no == 1 else f"{node_name}.{round_no}"
        while task_id in self.run.tasks:
            task_id += "x"
        role = self.ctx.crew.roles.get(node.role)
        writes = [] if role is None else ["**"] if role.writes is None else list(role.writes)
        task = Task(id=task_id, assignee=node.role, brief=node.brief, node=node_name, round=round_no,
                    acceptance=[Acceptance(id="a1", criterion=node.brief)], writes=writes)
        why = ", ".join(f"{d.source} ({d.condition}{': ' + d.reason if d.reason else ''})"
                        for d in deliveries if d.source) or "the entry node"
        self.ctx.ledger.add_task(task, f"node {node_name} run {round_no}, from {why}")
        state = self.state
        self.update_state(activations={**state.activations, node_name: [*runs, task_id]},
                          inputs={**state.inputs, task_id: list(deliveries)})
        backward = next((d for d in deliveries if d.kind == "backward"), None)
        if backward is not None:
            self._ledger(task, backward)  # one pass round a loop counts once
        return task

    def _ledger(self, task: Task, delivery: Delivery) -> None:
        """A backward delivery counts as a retry of its loop (or escalates to the human)."""
        if delivery.kind != "backward" or task.state != TaskState.QUEUED:
            return
        reason = f": {delivery.reason}" if delivery.reason else ""
        message = f"graph loop {delivery.source} -> {task.node} ({delivery.condition}{reason})"
        source_job = delivery.job or "graph"
        route = Job(id=source_job, kind="node", role=task.assignee, task=task.id, data=JobData(graph_route=True))
        self.ctx.fail(route, FailureKind.IMPLEMENTATION_DEFECT, message)

    def advance(self) -> None:
        """Start runs for held deliveries, and queue the runs whose ancestors are done."""
        for node in self.order:
            task = self.latest(node)
            held = self.state.pending.get(node)
            if held and (task is None or task.is_terminal):
                self.update_state(pending={n: d for n, d in self.state.pending.items() if n != node})
                self._activate(node, held)
        for node in self.order:
            task = self.latest(node)
            if task is not None and task.state == TaskState.QUEUED:
                self.requeue(task)

    # ------------------------------------------------------------------ turns
    def requeue(self, task: Task, queued: set[str] | None = None) -> None:
        """Enqueue the node's turn, unless it already has one or its ancestors may still deliver."""
        if task.state not in (TaskState.QUEUED, TaskState.REWORK) or self._has_job(task):
            return
        if task.attempts == 0 and task.node is not None and self._waiting(task.node):
            return
        prompt = self._prompt(task)
        self.ctx.ledger.enqueue("node", task.assignee, prompt, task=task.id,
                                data=JobData(session_key=f"node:{task.node}", original_prompt=prompt))

    def _prompt(self, task: Task) -> str:
        node = str(task.node)
        upstream = []
        for pred in graph_mod.forward_predecessors(self.graph, node):
            latest = self.latest(pred)
            if latest is not None and latest.state == TaskState.APPROVED and _succeeded(latest):
                upstream.append(latest)
        inputs = self.state.inputs.get(task.id, [])
        failures = [(self.run.tasks[d.task], d) for d in inputs
                    if d.condition == "fail" and d.task is not None and d.task in self.run.tasks]
        runs = self.state.activations.get(node, [])
        index = runs.index(task.id) if task.id in runs else len(runs)
        previous = self.run.tasks.get(runs[index - 1]) if index > 0 else None
        routes = []
        for edge in self.graph.edges:
            if edge.from_ == node and edge.condition == "fail":
                label = f"fail_reason {edge.fail_reason!r}" if edge.fail_reason else "any other reason (or none)"
                routes.append(f"- {label} → {edge.to}" + (" (back for rework)" if edge.kind == "backward" else ""))
        note = self.ctx.ledger.take_note(task)
        return mode_prompts.node_prompt(self.run, task, artifacts_dir=self.artifacts_root(), upstream=upstream,
                                        failures=failures, previous=previous, routes=routes, note=note)

    def on_success(self, job: Job, result: InvokeResult) -> None:
        """A node's report: approve and fire its edges, or block it."""
        if job.kind != "node":
            return
        task = self.run.tasks[str(job.task)]
        reply = self.ctx.structured(job, result, NodeResult)
        if reply is None:
            return
        self.ctx.ledger.bind_session(task, result.session_id)
        if reply.question:
            self.ask_human(task, job.role, reply.question, reply.question)
            return
        self.ctx.ledger.record_submission(task, reply)
        self.record_artifacts(task, reply.artifacts, job, result)
        conflicts = self.ctx.integrate(task) if reply.outcome == "success" else []
        if conflicts:  # nothing was merged: the node resolves what the approved work brought in
            self.ctx.fail(job, FailureKind.IMPLEMENTATION_DEFECT, merge_conflict_note(conflicts), tuple(conflicts))
            return
        self.ctx.ledger.transition(task, TaskEvent.SUBMIT, reply.summary[:200])
        node = str(task.node)
        if reply.outcome == "success":
            self._accept(task, "approve", list(reply.evidence) or [f"node report: {reply.summary}"], None)
            self.ctx.ledger.event("node.succeeded", f"{node} ({task.id}) succeeded", reply.summary[:300], task=task.id,
                              role=job.role, session=result.session_id, tokens=task.tokens, node=node)
            for edge in self.graph.edges:
                if edge.from_ == node and edge.condition == "success":
                    self._fire(edge, task, job, None)
        else:
            edge = graph_mod.fail_edge(self.graph, node, reply.fail_reason)
            reason = reply.fail_reason or "no reason given"
            if edge is None:
                self._block(job, task, reason, reply)
                return
            evidence = [f"outcome fail ({reason}) reported: {reply.summary}", *reply.evidence]
            self._accept(task, "fail", evidence, reply.remediation)
            self.ctx.ledger.event("node.failed", f"{node} ({task.id}) failed ({reason}) → {edge.to}"
                              + (" (backward)" if edge.kind == "backward" else ""),
                              reply.remediation or reply.summary[:300], task=task.id, role=job.role,
                              session=result.session_id, node=node, fail_reason=reply.fail_reason, edge=edge.describe())
            self._fire(edge, task, job, reply.fail_reason)
        self.advance()

    def _accept(self, task: Task, verdict: str, evidence: list[str], note: str | None) -> None:
        self.ctx.ledger.transition(task, TaskEvent.START_REVIEW, "graph node: the engine checks the report")
        why = "node succeeded" if verdict == "approve" else "node reported a routed failure"
        self.ctx.ledger.transition(task, TaskEvent.APPROVE, f"{why}: valid report", evidence=evidence)
        self.ctx.ledger.add_verdict(task, Verdict(verdict=verdict, by="graph", at=self.ctx.clock(), evidence=evidence,
                                                     note=note))

    def _fire(self, edge: Edge, task: Task, job: Job, reason: str | None) -> None:
        self._deliver(edge.to, Delivery(source=edge.from_, task=task.id, condition=edge.condition, reason=reason,
                                        kind=edge.kind, job=job.id))

    def _block(self, job: Job, task: Task, reason: str, reply: NodeResult) -> None:
        node = str(task.node)
        message = f"graph node {node} failed ({reason}) and has no fail edge for it"
        self.ctx.ledger.event("node.blocked", f"{node} ({task.id}) is blocked: no edge for {reason!r}",
                          reply.remediation or reply.summary[:300], task=task.id, role=job.role, node=node,
                          human_required=True)
        fp = fingerprint(FailureKind.IMPLEMENTATION_DEFECT, message)
        self.ctx.ledger.record_failure(task, Failure(kind=FailureKind.IMPLEMENTATION_DEFECT.value, fingerprint=fp,
                                                        message=message, at=self.ctx.clock(), job=job.id))
        self.ctx.escalate(job, fp, f"{message}: {reply.summary[:300]}"
                          + (f"\nRemediation: {reply.remediation}" if reply.remediation else ""),
                          job.original_prompt, job.data)

    # ------------------------------------------------------------------ failures
    def retry(self, job: Job, kind: FailureKind, message: str, original: str, data: JobData) -> None:
        """A loop allowed by the ledger runs its target; an unusable node reply runs the node again."""
        task = self.run.tasks.get(job.task or "")
        if data.graph_route and task is not None:
            self.requeue(task)
            return
        super().retry(job, kind, message, original, data)

    def on_task_approved(self, task: Task) -> None:
        """A human approval changes nothing the graph waits on but readiness."""
        self.advance()

    def on_task_cancelled(self, task: Task) -> None:
        """A cancelled run drops what it held; the graph goes on without it."""
        if task.node is not None and self.latest(task.node) is task and task.node in self.state.pending:
            self.update_state(pending={n: d for n, d in self.state.pending.items() if n != task.node})
        self.advance()

    # ------------------------------------------------------------------ end
    def tick(self) -> None:
        """Queue what became ready; finish when nothing is live."""
        if self.state.phase != "running":
            return
        self.advance()
        if self.run.jobs or self.state.pending:
            return
        if not round_can_close(t.state for t in self.run.tasks.values()):
            return
        latest = {n: t for n in self.order if (t := self.latest(n)) is not None}
        cancelled = [t.id for t in latest.values() if t.state == TaskState.CANCELLED]
        path = self.write_artifact("result.md", mode_prompts.graph_result(self.run, self.order, latest), role="engine",
                                   what="result.md of the work graph")
        ran = [t for n in self.order if (t := latest.get(n)) is not None and t.state == TaskState.APPROVED]
        summary = ran[-1].submitted_summary if ran else ""
        self.update_state(phase="done")
        result = RunResult(summary=summary[:4000], artifact=str(path), nodes={n: t.id for n, t in latest.items()})
        if cancelled:
            self.ctx.ledger.finish("failed", f"the graph stopped: {', '.join(cancelled)} cancelled", result)
        else:
            self.ctx.ledger.finish("done", f"every node's latest run is approved ({len(latest)} node(s) ran)", result)


def _succeeded(task: Task) -> bool:
    """The node run reported success (a routed failure is approved too, but hands no result on)."""
    return not (isinstance(task.submission, NodeResult) and task.submission.outcome == "fail")
