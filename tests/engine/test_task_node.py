"""A graph task's node and the cluster node its turn ran on are two fields: one never overwrites the other."""

from __future__ import annotations

import time

from agentbox.core.engine.ledger import RunLedger
from agentbox.core.engine.models import Acceptance, Contract, Job, Run, Task
from agentbox.tui.model import member_node

RUN_ID = "run-20260101-120000-a1b2"


def graph_run() -> Run:
    run = Run(id=RUN_ID, status="running", contract=Contract(goal="a graph", mode="hierarchical"))
    run.tasks["t1"] = Task(id="t1", assignee="builder", brief="build it", node="build", state="executing",
                           acceptance=[Acceptance(id="a1", criterion="built")])
    return run


def test_a_placement_keeps_the_graph_node_of_its_task() -> None:
    run = graph_run()
    ledger = RunLedger(run, clock=time.time)
    ledger.record_placement(Job(id="job-1", kind="work", role="builder", task="t1"), "3f2a9c1d0b7e4d5a", "host")
    task = run.tasks["t1"]
    assert task.node == "build"
    assert task.ran_on == "3f2a9c1d0b7e4d5a@host"
    assert member_node("builder", "t1", run) == "3f2a9c1d0b7e@host"


def test_a_graph_node_is_not_a_cluster_node_on_the_members_table() -> None:
    assert member_node("builder", "t1", graph_run()) == ""
