"""Reply rules a schema cannot express: known roles, no dependency cycles, no always-pass reviews.

`check_plan` and `check_verdict` take a reply that already validated (see
`agentbox.core.engine.replies`, which re-exports them) and return every problem as a short
human-readable reason, fit for `corrective_prompt`; [] when the reply is sound.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from agentbox.core.engine.replies import Plan, Verdict


def check_verdict(verdict: Verdict, acceptance_ids: Sequence[str]) -> list[str]:
    """What makes `verdict` unusable for a task with `acceptance_ids` ([] when it is sound).

    No always-pass reviews: every criterion is checked, a pass shows its evidence, an
    approval has no failing item and no blocker/major issue, and a rejection says why.
    """
    known = list(dict.fromkeys(acceptance_ids))
    known_text = ", ".join(known) or "(none)"
    problems: list[str] = []
    covered: set[str] = set()
    for index, item in enumerate(verdict.checklist):
        if item.acceptance_id not in known:
            problems.append(f"checklist[{index}]: unknown acceptance id {item.acceptance_id!r}; "
                            f"the task's acceptance ids are: {known_text}")
        covered.add(item.acceptance_id)
        if item.pass_ and not item.evidence.strip():
            problems.append(f"checklist[{index}] ({item.acceptance_id}): passes without evidence; "
                            "say what you ran or read that shows it")
    missing = [acceptance_id for acceptance_id in known if acceptance_id not in covered]
    if missing:
        problems.append(f"checklist does not cover acceptance ids: {', '.join(missing)}; "
                        "add one item per acceptance criterion")
    seen_issue_ids: set[str] = set()
    for index, issue in enumerate(verdict.blocking_issues):
        if issue.acceptance_id is not None and issue.acceptance_id not in known:
            problems.append(f"blocking_issues[{index}]: unknown acceptance id "
                            f"{issue.acceptance_id!r}; the task's acceptance ids are: {known_text}")
        if issue.id in seen_issue_ids:
            problems.append(f"blocking_issues[{index}]: duplicate issue id {issue.id!r}")
        seen_issue_ids.add(issue.id)
    failing = [(i, item) for i, item in enumerate(verdict.checklist) if not item.pass_]
    if verdict.verdict == "approve":
        for index, item in failing:
            problems.append(f"verdict is approve but checklist[{index}] ({item.acceptance_id}) "
                            "fails; reject, or re-check the item")
        for issue in verdict.blocking_issues:
            if issue.severity in ("blocker", "major"):
                problems.append(f"verdict is approve but blocking issue {issue.id!r} is "
                                f"{issue.severity}; reject, or downgrade it if it is minor")
    elif not failing and not verdict.blocking_issues:
        problems.append("verdict is reject but no checklist item fails and no blocking issue "
                        "is listed; say what must change")
    return problems


def _cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """Dependency cycles of `graph` (id → ids it depends on), each once, as `[a, b, a]`.

    An iterative depth-first search, so a long dependency chain cannot hit the recursion limit.
    """
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    found: dict[tuple[str, ...], list[str]] = {}
    for root in graph:
        if root in state:
            continue
        state[root] = 1
        path, pending = [root], [iter(graph[root])]
        while pending:
            dep = next(pending[-1], None)
            if dep is None:
                state[path.pop()] = 2
                pending.pop()
            elif state.get(dep) == 1:
                cycle = path[path.index(dep):]
                pivot = cycle.index(min(cycle))
                found.setdefault(tuple(cycle[pivot:] + cycle[:pivot]), [*cycle, dep])
            elif dep not in state:
                state[dep] = 1
                path.append(dep)
                pending.append(iter(graph.get(dep, [])))
    return list(found.values())


def check_plan(plan: Plan, roles: Collection[str], existing_task_ids: Collection[str] = ()) -> list[str]:
    """What makes `plan` unacceptable for a crew with `roles` ([] when it is sound).

    `existing_task_ids` are tasks already in the run: new tasks may depend on them but
    must not reuse their ids.
    """
    role_text = ", ".join(sorted(roles)) or "(none)"
    existing = set(existing_task_ids)
    plan_ids = [task.id for task in plan.tasks]
    known_text = ", ".join(dict.fromkeys([*plan_ids, *sorted(existing)]))
    problems: list[str] = []
    first_index: dict[str, int] = {}
    graph: dict[str, list[str]] = {}
    for index, task in enumerate(plan.tasks):
        label = f"task {task.id!r}"
        if task.assignee not in roles:
            problems.append(f"{label}: unknown assignee {task.assignee!r}; roles: {role_text}")
        if task.id in first_index:
            problems.append(f"duplicate task id {task.id!r} (tasks[{first_index[task.id]}] and tasks[{index}])")
        elif task.id in existing:
            problems.append(f"{label}: id already used by an existing task of this run")
        first_index.setdefault(task.id, index)
        acceptance_ids = [criterion.id for criterion in task.acceptance]
        for duplicate in sorted({a for a in acceptance_ids if acceptance_ids.count(a) > 1}):
            problems.append(f"{label}: duplicate acceptance id {duplicate!r}")
        for dep in task.depends_on:
            if dep == task.id:
                problems.append(f"{label}: depends on itself")
            elif dep not in plan_ids and dep not in existing:
                problems.append(f"{label}: depends on unknown task {dep!r}; known tasks: {known_text}")
        graph.setdefault(task.id, []).extend(
            dep for dep in task.depends_on if dep != task.id and dep in plan_ids
        )
    for cycle in _cycles(graph):
        problems.append(f"dependency cycle: {' -> '.join(cycle)}")
    return problems
