"""The liaison: answers "where are we?" from a digest of the run's state, never from guesses.

The code layer reads the run from disk and writes a **state digest**: tasks by state with
their ages, checks, open checkpoints, the last decisions, tokens and cost, whether an engine
drives the run — every fact with its time, and the digest's own "data as of". The liaison is
a read-only turn (the crew's `liaison:` role, else the lead's profile) in a session of its
own per run, so a follow-up question has the conversation so far; its prompt is the digest
and the question. It costs tokens like any turn and never changes the run: nothing here
writes run state, and the turn can write nothing in the project. Without a run it answers
about the project's list of runs.
"""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from agentbox.core.agents import resolve as services
from agentbox.core.agents.sessions import SessionStore
from agentbox.core.engine.models import TERMINAL_RUN_STATES, CheckResult, Run
from agentbox.core.errors import NotFoundError
from agentbox.core.paths import ProjectPaths

LIAISON_OWNER = "liaison"
"""Session owner of the default liaison (the lead's profile, read-only, apart from the lead's sessions)."""
DECISIONS_SHOWN = 12
RUNS_SHOWN = 20

RULES = """\
You are the crew's liaison. Answer the person's question about where the work stands, from the
state digest below and nothing else. Start your answer with the digest's data time ("As of ...").
Give each fact with its time. Say what is running, what is blocked and why, what is submitted and
waiting for review, and what waits for the human. Never infer that something failed from silence
or from the absence of news, and never tell an old record as the present. When the digest does not
say, say that you do not know. You cannot change anything and must not offer to."""


@dataclass(frozen=True)
class Digest:
    """What the liaison is told: plain text, and the moment its data was read."""

    text: str
    as_of: float
    run_id: str | None


@dataclass(frozen=True)
class Answer:
    """The liaison's reply, with the time of the data it answered from."""

    text: str
    as_of: float
    run_id: str | None
    ok: bool
    session_id: str
    tokens: int | None
    cost_usd: float | None
    error: str | None = None


def stamp(when: float | None) -> str:
    """`2026-12-01 21:20:03 UTC` (or `unknown`)."""
    if not when:
        return "unknown"
    return dt.datetime.fromtimestamp(when, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def ago(seconds: float) -> str:
    """`42 s`, `5 min`, `3 h 10 min`, `2 d 4 h` ago."""
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s ago"
    minutes = seconds / 60
    if minutes < 90:
        return f"{minutes:.0f} min ago"
    hours = minutes / 60
    if hours < 48:
        return f"{int(hours)} h {int(minutes % 60)} min ago"
    return f"{int(hours / 24)} d {int(hours % 24)} h ago"


def _at(when: float | None, now: float) -> str:
    return f"{stamp(when)} ({ago(now - when)})" if when else "at an unknown time"


def run_digest(project: ProjectPaths, run: Run, *, engine_running: bool, now: float | None = None) -> Digest:
    """The digest of one run, read at `now`."""
    from agentbox.core import watch

    now = time.time() if now is None else now
    lines = [f"Data as of {stamp(now)} (read from the run's files at that moment).",
             f"Run {run.id}: goal {run.contract.goal!r}; mode {run.contract.mode}; status {run.status}"
             + (f" ({run.status_reason})" if run.status_reason else "") + f"; last saved {_at(run.updated, now)}."]
    if run.status in TERMINAL_RUN_STATES:
        lines.append("Engine: none needed, the run has ended.")
    elif engine_running:
        lines.append("Engine: running (it drives the run now).")
    else:
        lines.append("Engine: NOT running. Nothing moves until someone runs `agentbox run --resume "
                     f"{run.id}`; answers and approvals wait on disk meanwhile.")
    by_state: dict[str, list[Any]] = {}
    for task in run.tasks.values():
        by_state.setdefault(str(task.state), []).append(task)
    lines.append(f"Tasks ({len(run.tasks)}):" if run.tasks else "Tasks: none yet (no plan).")
    for state, tasks in sorted(by_state.items()):
        lines.append(f"  {state} ({len(tasks)}):")
        for task in sorted(tasks, key=lambda t: t.id):
            extra = [f"attempt {task.attempts}" if task.attempts > 1 else "",
                     f"depends on {', '.join(task.depends_on)}" if task.depends_on else "",
                     f"last failure: {task.failures[-1].kind} at {stamp(task.failures[-1].at)}" if task.failures else "",
                     f"last verdict: {task.verdicts[-1].verdict} by {task.verdicts[-1].by} at {stamp(task.verdicts[-1].at)}"
                     if task.verdicts else ""]
            extra += _checks_of(task)
            detail = "; ".join(e for e in extra if e)
            lines.append(f"    {task.id} ({task.assignee}) in {state} since {_at(task.updated, now)}"
                         + (f"; {detail}" if detail else ""))
    running = [job for job in run.jobs.values() if job.started]
    lines.append(f"Turns running now ({len(running)}):" if running else "Turns running now: none.")
    for job in running:
        lines.append(f"  {job.kind} turn of {job.role}" + (f" on {job.task}" if job.task else "")
                     + f", started {_at(job.started, now)}")
    open_cps = [cp for cp in run.checkpoints.values() if cp.status == "open"]
    lines.append(f"Waiting for the human ({len(open_cps)}):" if open_cps else "Waiting for the human: nothing.")
    for cp in open_cps:
        about = f" on {cp.task}" if cp.task else ""
        lines.append(f"  {cp.id} ({cp.kind}{about}), open since {_at(cp.created, now)}: {cp.question.strip()[:400]!r}")
    totals = run.totals
    lines.append(f"Tokens so far: {totals.tokens} over {totals.turns} turn(s)"
                 + (f" (+ {totals.unknown_usage_turns} turn(s) whose usage the tool did not report)"
                    if totals.unknown_usage_turns else "")
                 + (f"; cost where reported: ${totals.cost_usd:.4f}" if totals.cost_usd is not None
                    else "; cost: not reported by the tools"))
    events, _ = watch.tail_events(project, run.id, DECISIONS_SHOWN)
    lines.append(f"Last decisions (oldest first, {len(events)}):" if events else "Last decisions: none recorded.")
    for event in events:
        what = " — ".join(str(event.get(k)) for k in ("what", "why") if event.get(k)).replace("\n", " ")[:240]
        lines.append(f"  {stamp(event.get('at'))} {event.get('type')}" + (f": {what}" if what else ""))
    counts = Counter(str(t.state) for t in run.tasks.values())
    summary = ", ".join(f"{n} {state}" for state, n in sorted(counts.items())) or "no tasks"
    red = sum(1 for t in run.tasks.values() for c in _latest_checks(t).values() if not c.passed)
    lines.append(f"Summary: {summary}; {len(open_cps)} waiting for the human; {red} red check(s); engine "
                 f"{'not needed' if run.status in TERMINAL_RUN_STATES else ('running' if engine_running else 'NOT running')}.")
    return Digest("\n".join(lines), now, run.id)


def _latest_checks(task: Any) -> dict[tuple[str, str], CheckResult]:
    """The task's latest check of each name and stage."""
    return {(check.name, check.stage): check for check in task.checks}


def _checks_of(task: Any) -> list[str]:
    """The task's checks, the latest of each name and stage: passed, or FAILED with its exit and time."""
    latest = _latest_checks(task)
    shown = []
    for (name, stage), check in latest.items():
        if check.passed:
            outcome = "passed" + (" (flaky)" if check.flaky else "")
        elif check.status == "error":
            outcome = f"could not run ({check.cannot_run or 'error'})"
        else:
            outcome = f"FAILED (exit {check.exit_status})"
        commit = f" on {check.commit[:10]}" if check.commit else ""
        shown.append(f"{stage} check {name} {outcome}{commit} at {stamp(check.at)}")
    return shown


def runs_digest(project: ProjectPaths, now: float | None = None) -> Digest:
    """The digest of the project's runs, for a question asked without a run."""
    from agentbox.core import runs

    now = time.time() if now is None else now
    listed = runs.list_runs(project)
    lines = [f"Data as of {stamp(now)} (read from the project's run files at that moment).",
             f"Runs ({len(listed)}, newest first):" if listed else "Runs: none yet."]
    for run in listed[:RUNS_SHOWN]:
        if not isinstance(run, Run):
            lines.append(f"  {run.id}: damaged, cannot be read")
            continue
        done = sum(1 for t in run.tasks.values() if str(t.state) == "approved")
        alive = run.status not in TERMINAL_RUN_STATES and runs.engine_alive(project, run.id)
        engine = "" if run.status in TERMINAL_RUN_STATES else (", engine running" if alive else ", engine NOT running")
        lines.append(f"  {run.id}: {run.status}{engine}; goal {run.contract.goal!r}; {done}/{len(run.tasks)} "
                     f"tasks approved; last saved {_at(run.updated, now)}")
    states = Counter(run.status if isinstance(run, Run) else "damaged" for run in listed)
    lines.append(f"Summary: {len(listed)} run(s)" + (": " + ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
                                                    if listed else "") + ".")
    return Digest("\n".join(lines), now, None)


def digest_for(project: ProjectPaths, run_id: str | None, *, whole_project: bool = False) -> Digest:
    """The digest of `run_id` (default: the latest run), or of the project's runs."""
    from agentbox.core import runs

    if whole_project:
        return runs_digest(project)
    try:
        run = runs.load(project, run_id)
    except NotFoundError:
        if run_id is not None:
            raise
        return runs_digest(project)
    return run_digest(project, run, engine_running=runs.engine_alive(project, run.id))


def liaison_agent(project: ProjectPaths) -> Any:
    """The liaison's agent: the crew's `liaison:` role, else the lead's profile; read-only either way."""
    from dataclasses import replace

    from agentbox.core.config import project as project_mod

    crew = project_mod.load_crew(project).crew
    role = crew.liaison or crew.hierarchical.lead
    if role not in crew.roles:
        role = next(iter(crew.roles))
    agent = services.role_agent(project, role, crew=crew)
    # sessions of its own, whichever role lends the profile: `liaison: lead` must never continue the
    # lead's planning conversation (nor run in it beside the lead's own turn)
    return replace(agent, label=LIAISON_OWNER, role=LIAISON_OWNER, writes=(), instructions=None)


def prompt_for(digest: Digest, question: str) -> str:
    """The liaison's turn: its rules, the fresh digest, the question."""
    tag = f"[agentbox:liaison run={digest.run_id}]" if digest.run_id else "[agentbox:liaison project]"
    return f"{tag}\n\n{RULES}\n\n--- state digest ---\n{digest.text}\n--- end of digest ---\n\nQuestion: {question.strip()}\n"


def session_of(project: ProjectPaths, owner: str, run_id: str | None) -> str | None:
    """The liaison's session for this run (or for the project), to continue the conversation."""
    for record in SessionStore(project.sessions_dir).list(owner):
        if record.run_id == run_id:
            return record.id
    return None


async def ask(project: ProjectPaths, question: str, run_id: str | None = None, *,
              whole_project: bool = False) -> Answer:
    """Answer `question` about `run_id` (default the latest run; the runs list with `whole_project`)."""
    from agentbox.core.agents.invoke import invoke

    if not question.strip():
        from agentbox.core.errors import UsageError

        raise UsageError("the question is empty", "agentbox ask [RUN] \"where are we?\"")
    digest = digest_for(project, run_id, whole_project=whole_project)
    agent = liaison_agent(project)
    session = session_of(project, agent.label, digest.run_id)
    result = await invoke(agent, prompt_for(digest, question), session, run_id=digest.run_id)
    return Answer(text=result.text.strip(), as_of=digest.as_of, run_id=digest.run_id, ok=result.ok,
                  session_id=result.session_id, tokens=result.usage.total_tokens, cost_usd=result.usage.cost_usd,
                  error=None if result.ok else str(result.error or result.error_kind))
