"""The prompts the engine sends. Judgement lives here (in words); hard rules live in code.

Each prompt starts with a marker line `[agentbox:<kind> ...]` so agents (and the
scripted runtime's scenarios) can tell what is being asked.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence

from agentbox.core.engine.ladder_briefs import (
    advisor_section,
    compromise_section,
    rework_prompt_head,
)
from agentbox.core.engine.models import CheckResult, Run, Task, TaskNote
from agentbox.core.engine.replies import FORMAT_HINTS, BlockingIssue


def _acceptance(task: Task) -> str:
    return "\n".join(f"- [{a.id}] {a.criterion}" for a in task.acceptance) or "- (none given)"


def _issue_line(issue: BlockingIssue) -> str:
    """One blocking issue of a verdict: `- [a2] major: detail`, without the brackets when it names no criterion."""
    label = f"[{issue.acceptance_id}] " if issue.acceptance_id else ""
    return f"- {label}{issue.severity}: {issue.detail}"


def _scope(writes: list[str]) -> str:
    return ", ".join(writes) if writes else "(read-only: do not modify files)"


def plan_prompt(run: Run, roles: dict[str, str], feedback: str | None = None,
                protected: Sequence[str] = (), rot: str = "") -> str:
    """Ask the lead for a task plan (`protected`: the paths no task may write; `rot`: the high-rot
    zones and tech debt near the goal's files, from zones.yaml and debt.yaml)."""
    listing = "\n".join(f"- {name}: {desc}" for name, desc in roles.items())
    parts = [
        f"[agentbox:plan run={run.id}]",
        f"Goal: {run.contract.goal}",
        "Break the goal into tasks for the crew. Roles you can assign:",
        listing,
    ]
    if protected:
        parts.append("Protected paths (the work is judged by them; no task may write them, so keep every "
                     "task's writes clear of them): " + ", ".join(protected))
    if rot:
        parts.append(rot)
    if run.contract.success_criteria:
        parts.append("Success criteria:\n" + "\n".join(f"- {c}" for c in run.contract.success_criteria))
    if feedback:
        parts.append(f"Your previous plan was not accepted:\n{feedback}\nSend a corrected plan.")
    parts.append(FORMAT_HINTS["Plan"])
    return "\n\n".join(parts)


def upstream(tasks: Iterable[Task], artifacts_dir: str) -> str:
    """What finished tasks handed on: their summaries and artifact paths."""
    lines = []
    for task in tasks:
        files = ", ".join(task.submitted_artifacts) or "none"
        lines.append(f"- {task.id} ({task.assignee}): {task.submitted_summary} [artifacts: {files}]")
    if not lines:
        return ""
    return f"Upstream work (artifacts are under {artifacts_dir} or the project):\n" + "\n".join(lines)


def note_line(note: TaskNote) -> str:
    """A task's note as its prompt gives it, naming who wrote it."""
    return f"Note from {'the human' if note.by == 'human' else 'agentbox'}: {note.text}"


PROMPT_TAIL_CHARS = 3000
"""Characters of a red check's output put in the worker's rework prompt (the log has the rest)."""


def red_check(task: Task) -> CheckResult | None:
    """The red check the task goes back for: its latest check, when red and newer than its latest verdict."""
    if not task.checks:
        return None
    latest = task.checks[-1]
    if latest.passed or latest.status != "failed":
        return None
    if task.verdicts and task.verdicts[-1].at > latest.at:
        return None
    return latest


def _fenced(text: str) -> str:
    """`text` in a code fence longer than any run of backticks inside it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text.rstrip()}\n{fence}"


def check_section(check: CheckResult) -> str:
    """What a worker is told of the check its work failed: name, command, exit status, the end of its output."""
    where = f"commit {check.commit[:10]}" if check.commit else "the live tree"
    when = ("on your submission" if check.stage == "submission"
            else "on the run's branch after your approved work was merged into it (the merge was undone)")
    flaky = " It was red, then green when run again: it is flaky, and flaky counts as red here." if check.flaky else ""
    tail = check.tail[-PROMPT_TAIL_CHARS:]
    return (f"The check `{check.name}` failed {when} ({where}).{flaky}\n"
            f"Command: {check.command}\nExit status: {check.exit_status}\n"
            f"The end of its output:\n{_fenced(tail or '(no output)')}\n"
            "Fix the cause (not the check) and submit again.")


def checks_listing(task: Task) -> str:
    """The checks run on the task's current commit, for its reviewer: result, duration and log of each."""
    mine = [c for c in task.checks if c.stage == "submission" and (task.head is None or c.commit == task.head)]
    if not mine:
        return ""
    lines = []
    for check in mine:
        result = "passed" if check.passed else ("could not run" if check.status == "error" else "failed")
        flaky = " (flaky: red, then green)" if check.flaky else ""
        lines.append(f"- {check.name}: {result}{flaky} in {check.duration_s:.1f} s, exit status "
                     f"{check.exit_status}; `{check.command[:200]}`; log: {check.log}")
    where = f"commit {task.head[:10]}" if task.head else "the live tree"
    return (f"Checks agentbox ran on this submission ({where}), before this review:\n" + "\n".join(lines)
            + "\nThey passed: judge what they cannot (the acceptance criteria, the design, what is untested).")


def work_prompt(run: Run, task: Task, artifacts_dir: str, upstream_text: str, note: TaskNote | None) -> str:
    """Ask a worker to do (or redo) a task and submit."""
    red = red_check(task)
    rejected = task.verdicts and task.verdicts[-1].verdict == "reject" and red is None
    kind = "rework" if rejected or red is not None else "work"
    ladder_mode = task.ladder.mode.value if run.contract.ladder else "normal"
    head = rework_prompt_head(task.id, ladder_mode)
    advisor = ladder_mode == "advisor"
    parts = [
        f"{head[:-1]} attempt={task.attempts + 1}]" if head else f"[agentbox:{kind} task={task.id} attempt={task.attempts + 1}]",
        f"Run goal: {run.contract.goal}",
        f"Task {task.id}: {task.brief}",
        f"Acceptance criteria:\n{_acceptance(task)}",
        f"You may write: {_scope([] if advisor else task.writes)}. Put files you hand on in {artifacts_dir}/{task.id}/.",
    ]
    if ladder_mode == "compromise":
        parts.append(compromise_section(task.id, artifacts_dir))
    elif advisor:
        parts.append(advisor_section(task.id, artifacts_dir))
    if upstream_text:
        parts.append(upstream_text)
    if red is not None:
        parts.append(check_section(red))
    elif kind == "rework":
        verdict = task.verdicts[-1]
        issues = "\n".join(_issue_line(i) for i in verdict.blocking_issues)
        failing = "\n".join(f"- [{c.acceptance_id}] {c.item}: {c.evidence}" for c in verdict.checklist if not c.pass_)
        parts.append(f"The review rejected your submission ({verdict.by}). Fix these:\n{issues or ''}\n{failing or ''}".strip())
        if verdict.note and verdict.note.strip() not in {i.detail.strip() for i in verdict.blocking_issues}:
            parts.append(f"Reviewer note: {verdict.note}")  # a note that is one of the issues is not said twice
    if note:
        parts.append(note_line(note))
    parts.append(FORMAT_HINTS["Submission"])
    return "\n\n".join(parts)


def review_prompt(run: Run, task: Task) -> str:
    """Ask the reviewer for a verdict on a submission."""
    sub = task.submission.model_dump() if task.submission is not None else {}
    ids = ", ".join(a.id for a in task.acceptance)
    return "\n\n".join([
        f"[agentbox:review task={task.id} assignee={task.assignee}]",
        f"Run goal: {run.contract.goal}",
        f"Task {task.id}: {task.brief}",
        f"Acceptance criteria:\n{_acceptance(task)}",
        "Submission:\n" + json.dumps(sub, indent=2, ensure_ascii=False),
        *([listing] if (listing := checks_listing(task)) else []),
        f"Check every acceptance criterion ({ids}) against the files, citing evidence for each item. "
        "Reject when any criterion is not met.",
        FORMAT_HINTS["Verdict"],
    ])


def synthesis_prompt(run: Run) -> str:
    """Ask the lead for the final synthesis of the round."""
    done = [t for t in run.tasks.values() if t.state == "approved"]
    return "\n\n".join([
        f"[agentbox:synthesis run={run.id}]",
        f"Goal: {run.contract.goal}",
        upstream(done, "artifacts") or "No task was approved.",
        "Write the final synthesis for the human: what was done, where the results are, what is left.",
    ])


def interrupted_prompt(original: str) -> str:
    """Re-send a turn that was interrupted by an engine crash."""
    return f"[agentbox:resume]\n\nYour previous turn was interrupted before it finished. Here is the request again.\n\n{original}"
