"""The scheduler's rules as pure functions: write-scope overlap, dependencies, `pick`."""

from __future__ import annotations

import pytest

from agentbox.core.engine.models import Contract, Job, Run, Task
from agentbox.core.engine.scheduler import deps_state, globs_overlap, member_busy, pick

OVERLAP_TABLE = [
    # (first, second, overlap?)
    (["src/**"], ["src/app/*.py"], True),
    (["src/**"], ["tests/**"], False),
    (["src/a.py"], ["src/a.py"], True),
    (["src/a.py"], ["src/b.py"], False),
    (["src/a.py"], ["src/**"], True),
    (["src/a.py"], ["src/*"], True),
    (["src/a.py"], ["src/sub/*.py"], False),
    (["src"], ["src/a.py"], True),
    (["src"], ["src/x/*.py"], True),
    (["docs"], ["docs/**"], True),
    (["**"], ["anything/at/all.txt"], True),
    (["*.md"], ["README.md"], True),
    (["docs/**"], ["src/**"], False),
    (["src/*.py"], ["src/pkg/mod.py"], True),
    (["src/[ab].py"], ["src/c.py"], True),
    (["./src/**"], ["src/x.py"], True),
    (["/src/**"], ["src/x.py"], True),
    (["src/**", "docs/**"], ["docs/index.md"], True),
    (["src/**", "docs/**"], ["tests/**", "README.md"], False),
    ([], ["src/**"], False),
    ([], [], False),
    (["src/**"], [], False),
    (["srcs/**"], ["src/**"], False),
    (["src/app.py"], ["src/app.pyc"], False),
]


@pytest.mark.parametrize(("first", "second", "expected"), OVERLAP_TABLE,
                         ids=[f"{a}~{b}" for a, b, _ in OVERLAP_TABLE])
def test_globs_overlap_table(first: list[str], second: list[str], expected: bool) -> None:
    assert globs_overlap(first, second) is expected
    assert globs_overlap(second, first) is expected


def make_run(*tasks: Task) -> Run:
    return Run(id="run-x", contract=Contract(goal="g", mode="hierarchical"), tasks={t.id: t for t in tasks})


def make_task(task_id: str, state: str = "queued", *, deps: tuple[str, ...] = (), assignee: str = "builder",
              writes: tuple[str, ...] | None = None) -> Task:
    return Task(id=task_id, assignee=assignee, brief=task_id, state=state, depends_on=list(deps),
                writes=list(writes) if writes is not None else [f"src/{task_id}/**"])


DEPS_TABLE = [
    # (state of the dependency, deps_state of the dependent)
    ("approved", "ready"),
    ("queued", "waiting"),
    ("executing", "waiting"),
    ("submitted", "waiting"),
    ("reviewing", "waiting"),
    ("rework", "waiting"),
    ("paused_for_budget", "waiting"),
    ("blocked", "waiting"),
    ("cancelled", "failed"),
]


@pytest.mark.parametrize(("dep_state", "expected"), DEPS_TABLE)
def test_deps_state_of_one_dependency(dep_state: str, expected: str) -> None:
    dep = make_task("a", dep_state)
    task = make_task("b", deps=("a",))
    assert deps_state(task, make_run(dep, task).tasks) == expected


def test_deps_state_no_dependency_is_ready() -> None:
    task = make_task("b")
    assert deps_state(task, make_run(task).tasks) == "ready"


def test_deps_state_unknown_dependency_failed() -> None:
    task = make_task("b", deps=("ghost",))
    assert deps_state(task, make_run(task).tasks) == "failed"


def test_deps_state_all_must_be_approved() -> None:
    tasks = [make_task("a", "approved"), make_task("b", "reviewing"), make_task("c", deps=("a", "b"))]
    assert deps_state(tasks[2], make_run(*tasks).tasks) == "waiting"
    tasks[1].state = "approved"
    assert deps_state(tasks[2], make_run(*tasks).tasks) == "ready"


def test_deps_state_failed_wins_over_waiting() -> None:
    tasks = [make_task("a", "executing"), make_task("b", "cancelled"), make_task("c", deps=("a", "b"))]
    assert deps_state(tasks[2], make_run(*tasks).tasks) == "failed"


def test_deps_state_a_dependency_blocked_by_a_failed_one_has_failed_for_good() -> None:
    """A task blocked because its own dependency was cancelled can never run: neither can its dependents."""
    tasks = [make_task("a", "cancelled"), make_task("b", "blocked", deps=("a",)), make_task("c", deps=("b",))]
    assert deps_state(tasks[2], make_run(*tasks).tasks) == "failed"


def test_deps_state_a_dependency_waiting_on_a_human_is_waiting() -> None:
    """Blocked on a question or an escalation is not failed: the human may unblock it."""
    tasks = [make_task("a", "approved"), make_task("b", "blocked", deps=("a",)), make_task("c", deps=("b",))]
    assert deps_state(tasks[2], make_run(*tasks).tasks) == "waiting"


# ----------------------------------------------------------------------------- pick


def work(job_id: str, task_id: str, role: str = "builder", *, started: float = 0.0, not_before: float = 0.0) -> Job:
    return Job(id=job_id, kind="work", role=role, task=task_id, started=started, data={"not_before": not_before})


def review(job_id: str, task_id: str, *, started: float = 0.0) -> Job:
    return Job(id=job_id, kind="review", role="reviewer", task=task_id, started=started)


def test_pick_respects_max_workers() -> None:
    tasks = [make_task(f"t{i}", assignee=f"w{i}") for i in range(5)]
    run = make_run(*tasks)
    pending = [work(f"j{i}", f"t{i}", f"w{i}") for i in range(5)]
    assert [j.id for j in pick(pending, [], run, 3, now=0)] == ["j0", "j1", "j2"]
    running = [work("jr", "t0", "w0", started=1.0)]
    assert [j.id for j in pick(pending[1:], running, run, 3, now=0)] == ["j1", "j2"]
    three = [running[0], work("jr1", "t3", "w3", started=1.0), work("jr2", "t4", "w4", started=1.0)]
    assert pick(pending[1:3], three, run, 3, now=0) == []


def test_pick_reviews_and_plans_are_not_workers() -> None:
    """max_workers caps the workers; read-only turns (reviews, the lead's plan) start beside them."""
    tasks = [make_task(f"t{i}", "submitted" if i < 2 else "executing", assignee=f"w{i}") for i in range(4)]
    run = make_run(*tasks)
    busy = [work("ja", "t2", "w2", started=1.0), work("jb", "t3", "w3", started=1.0)]
    plan = Job(id="jp", kind="plan", role="lead")
    chosen = pick([review("r0", "t0"), review("r1", "t1"), plan], busy, run, 2, now=0)
    assert [j.id for j in chosen] == ["r0", "r1", "jp"]
    # running reviews do not use up the workers either
    tasks.append(make_task("t4", assignee="w4"))
    run = make_run(*tasks)
    reviewing = [review("r0", "t0", started=1.0), review("r1", "t1", started=1.0)]
    assert [j.id for j in pick([work("j4", "t4", "w4")], [busy[0], *reviewing], run, 2, now=0)] == ["j4"]


def test_pick_a_writing_turn_is_a_worker() -> None:
    """A handoff turn may write: it counts against max_workers like work does."""
    run = make_run(make_task("t0", "executing", assignee="w0", writes=("docs/**",)))
    handoff = Job(id="jh", kind="handoff", role="dev", data={"writes": ["src/**"]})
    speech = Job(id="js", kind="speech", role="critic")
    running = [work("j0", "t0", "w0", started=1.0)]
    assert [j.id for j in pick([handoff, speech], running, run, 1, now=0)] == ["js"]
    assert [j.id for j in pick([handoff, speech], running, run, 2, now=0)] == ["jh", "js"]


def test_pick_keeps_order_and_skips_what_cannot_start() -> None:
    tasks = [make_task("a", writes=("src/**",), assignee="w1"), make_task("b", writes=("src/x.py",), assignee="w2"),
             make_task("c", writes=("docs/**",), assignee="w3")]
    run = make_run(*tasks)
    chosen = pick([work("ja", "a", "w1"), work("jb", "b", "w2"), work("jc", "c", "w3")], [], run, 8, now=0)
    assert [j.id for j in chosen] == ["ja", "jc"]


def test_pick_never_runs_overlapping_write_scopes_together() -> None:
    tasks = [make_task("a", "executing", writes=("src/**",), assignee="w1"),
             make_task("b", writes=("src/app/*.py",), assignee="w2"),
             make_task("c", writes=("tests/**",), assignee="w3")]
    run = make_run(*tasks)
    running = [work("ja", "a", "w1", started=1.0)]
    chosen = pick([work("jb", "b", "w2"), work("jc", "c", "w3")], running, run, 8, now=0)
    assert [j.id for j in chosen] == ["jc"]


def test_pick_read_only_work_overlaps_nothing() -> None:
    tasks = [make_task("a", "executing", writes=("**",), assignee="w1"), make_task("b", writes=(), assignee="w2")]
    run = make_run(*tasks)
    assert [j.id for j in pick([work("jb", "b", "w2")], [work("ja", "a", "w1", started=1)], run, 8, now=0)] == ["jb"]


def test_pick_reviews_do_not_hold_write_scopes() -> None:
    tasks = [make_task("a", "reviewing", writes=("src/**",), assignee="w1"),
             make_task("b", writes=("src/**",), assignee="w2")]
    run = make_run(*tasks)
    chosen = pick([work("jb", "b", "w2")], [review("ra", "a", started=1.0)], run, 8, now=0)
    assert [j.id for j in chosen] == ["jb"]


@pytest.mark.parametrize("holding", ["executing", "submitted", "reviewing", "rework"])
def test_pick_member_slot_is_held_until_approval(holding: str) -> None:
    """A member whose work is submitted but not approved keeps its slot: new work waits."""
    tasks = [make_task("a", holding), make_task("b")]
    run = make_run(*tasks)
    assert member_busy("builder", "b", run)
    assert pick([work("jb", "b")], [], run, 8, now=0) == []


@pytest.mark.parametrize("free", ["queued", "approved", "cancelled", "blocked", "paused_for_budget"])
def test_pick_member_slot_is_free_otherwise(free: str) -> None:
    tasks = [make_task("a", free), make_task("b")]
    run = make_run(*tasks)
    assert not member_busy("builder", "b", run)
    assert [j.id for j in pick([work("jb", "b")], [], run, 8, now=0)] == ["jb"]


def test_pick_a_task_does_not_block_its_own_next_turn() -> None:
    """The rework (or corrective) turn of a task in rework/executing reuses the member's slot."""
    tasks = [make_task("a", "rework")]
    run = make_run(*tasks)
    assert [j.id for j in pick([work("ja", "a")], [], run, 8, now=0)] == ["ja"]


def test_pick_one_work_turn_per_role_at_a_time() -> None:
    tasks = [make_task("a", "queued"), make_task("b", "queued", writes=("docs/**",))]
    run = make_run(*tasks)
    chosen = pick([work("ja", "a"), work("jb", "b")], [], run, 8, now=0)
    assert [j.id for j in chosen] == ["ja"]


def test_pick_reviews_are_not_member_slots() -> None:
    tasks = [make_task("a", "submitted"), make_task("b", "submitted", assignee="tester")]
    run = make_run(*tasks)
    chosen = pick([review("ra", "a"), review("rb", "b")], [], run, 8, now=0)
    assert [j.id for j in chosen] == ["ra", "rb"]


def test_pick_waits_for_not_before() -> None:
    tasks = [make_task("a"), make_task("b", assignee="tester")]
    run = make_run(*tasks)
    pending = [work("ja", "a", not_before=100.0), work("jb", "b", "tester")]
    assert [j.id for j in pick(pending, [], run, 8, now=99.9)] == ["jb"]
    assert [j.id for j in pick(pending, [], run, 8, now=100.0)] == ["ja", "jb"]
    assert pick(pending, [], run, 8, now=float("-inf")) == []


def test_pick_non_task_jobs_use_their_declared_writes() -> None:
    run = make_run(make_task("a", "executing", writes=("src/**",)))
    node = Job(id="n", kind="synthesis", role="lead", data={"writes": ["src/x.py"]})
    plan = Job(id="p", kind="plan", role="lead")
    chosen = pick([node, plan], [work("ja", "a", started=1.0)], run, 8, now=0)
    assert [j.id for j in chosen] == ["p"]
