"""Helpers of the engine tests: scripted crews, the engine in-process or as a process, the log.

A test describes its crew as scenario rules for three scripted user profiles written
into the test's AGENT_BOX_HOME (`t-lead`, `t-worker`, `t-reviewer`; a user profile
shadows a bundled one) and a crew.yaml. Nothing in the engine is mocked; an engine built
in a test plays its agents in-process (tests/engine/inprocess.py) unless the test is marked
`local_runner`, when they are real processes under bwrap (tests/engine/conftest.py), as
they always are for an engine started as its own process.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import psutil

from agentbox.core import runs
from agentbox.core.engine.engine import Engine
from agentbox.core.engine.models import Job, Run
from agentbox.core.engine.run_store import RunStore
from agentbox.core.engine.runners.base import TurnRunner
from agentbox.core.paths import ProjectPaths

Human = Callable[[Engine], Awaitable[None]]
Rule = dict[str, Any]

WORK_RE = (r"\[agentbox:(?:work|rework) task=(?P<task>[\w.-]+).*?"
           r"Put files you hand on in (?P<handoff>/\S+/)\.")
"""Matches a work or rework prompt; `task` and the hand-on dir feed the templates."""
REVIEW_RE = r"\[agentbox:review task=(?P<task>[\w.-]+)"
"""Matches a review prompt."""
USAGE = {"input_tokens": 100, "output_tokens": 20}
"""What every scripted turn reports unless a rule says otherwise (120 tokens)."""
_RULE_IDS = itertools.count(1)


# ----------------------------------------------------------------------------- scenarios


def task(task_id: str, assignee: str = "builder", *, writes: list[str] | None = None,
         deps: Iterable[str] = (), acceptance: Iterable[str] = ("a1",)) -> dict[str, Any]:
    """One planned task as the lead's plan JSON spells it."""
    return {"id": task_id, "assignee": assignee, "brief": f"do {task_id}",
            "acceptance": [{"id": a, "criterion": f"{task_id} meets {a}"} for a in acceptance],
            "writes": [f"src/{task_id}/**"] if writes is None else writes, "depends_on": list(deps)}


def when(marker: str | None = None, *, regex: str | None = None, times: int | None = None) -> dict[str, Any]:
    """The `when` of a rule."""
    condition: dict[str, Any] = {}
    if marker is not None:
        condition["prompt_contains"] = marker
    if regex is not None:
        condition["prompt_regex"] = regex
    if times is not None:
        condition["times"] = times
    return condition


def plan_rule(tasks: list[dict[str, Any]], *, delay: float = 0.1, times: int | None = None,
              marker: str = "[agentbox:plan") -> Rule:
    """The lead answers a plan prompt with these tasks."""
    return {"id": f"plan-{next(_RULE_IDS)}", "when": when(marker, times=times),
            "do": {"delay_s": delay, "reply_json": {"tasks": tasks, "notes": "test plan"}}}


def synthesis_rule(delay: float = 0.1) -> Rule:
    """The lead answers the synthesis prompt."""
    return {"id": "synthesis", "when": when("[agentbox:synthesis"),
            "do": {"delay_s": delay, "reply": "# Synthesis\n\nall done"}}


def work_rule(delay: float = 0.1, *, task_id: str | None = None, times: int | None = None,
              rule_id: str | None = None, **extra: Any) -> Rule:
    """A worker does any task (or `task_id`): writes a hand-on file and submits it."""
    regex = WORK_RE if task_id is None else WORK_RE.replace(r"(?P<task>[\w.-]+)", f"(?P<task>{task_id})")
    action: dict[str, Any] = {
        "delay_s": delay,
        "write": {"{handoff}result.txt": "result of {task}\n"},
        "reply_json": {"summary": "did {task}", "artifacts": ["{handoff}result.txt"],
                       "evidence": ["wrote {handoff}result.txt"]},
        **extra,
    }
    return {"id": rule_id or f"work-{next(_RULE_IDS)}", "when": when(regex=regex, times=times), "do": action}


def verdict(verdict_: str, acceptance: Iterable[str] = ("a1",), *, issue: str = "not good enough") -> dict[str, Any]:
    """A verdict JSON: approve every criterion, or reject the first with `issue`."""
    ids = list(acceptance)
    if verdict_ == "approve":
        return {"verdict": "approve", "blocking_issues": [], "confidence": 0.9,
                "checklist": [{"item": f"criterion {a}", "acceptance_id": a, "pass": True,
                               "evidence": "checked {task}"} for a in ids]}
    return {"verdict": "reject", "confidence": 0.8,
            "blocking_issues": [{"id": "b1", "acceptance_id": ids[0], "severity": "major", "detail": issue}],
            "checklist": [{"item": f"criterion {a}", "acceptance_id": a, "pass": a != ids[0],
                           "evidence": "looked at {task}"} for a in ids]}


def review_rule(verdict_: str = "approve", *, task_id: str | None = None, delay: float = 0.1,
                times: int | None = None, rule_id: str | None = None, **extra: Any) -> Rule:
    """The reviewer answers review prompts (of any task, or `task_id`) with a verdict."""
    regex = REVIEW_RE if task_id is None else rf"\[agentbox:review task=(?P<task>{task_id}) "
    return {"id": rule_id or f"review-{verdict_}-{next(_RULE_IDS)}",
            "when": when(regex=regex, times=times),
            "do": {"delay_s": delay, "reply_json": verdict(verdict_), **extra}}


def write_profile(name: str, rules: list[Rule], *, usage: dict[str, Any] | str | None = None,
                  fallback: dict[str, Any] | None = None) -> Path:
    """A scripted user profile `name` in the test's AGENT_BOX_HOME; returns its scenario file."""
    directory = Path(os.environ["AGENT_BOX_HOME"]) / "profiles" / name
    directory.mkdir(parents=True, exist_ok=True)
    scenario: dict[str, Any] = {"defaults": {"usage": usage or USAGE}, "rules": rules}
    if fallback is not None:
        scenario["fallback"] = fallback
    path = directory / "scenario.json"
    path.write_text(json.dumps(scenario, indent=1))
    (directory / "profile.yaml").write_text(json.dumps(
        {"name": name, "runtime": {"tool": "scripted", "scenario": "scenario.json"}, "sandbox": {"network": False}}))
    return path


def setup_crew(root: Path, *, lead: list[Rule] | None = None, worker: list[Rule] | None = None,
               reviewer: list[Rule] | None = None, tasks: list[dict[str, Any]] | None = None,
               mode: str = "hierarchical", limits: dict[str, Any] | None = None,
               roles: dict[str, dict[str, Any]] | None = None, usage: dict[str, Any] | str | None = None,
               **settings: Any) -> ProjectPaths:
    """Write the three scripted profiles and crew.yaml; returns the project.

    Defaults: the lead plans `tasks` (two independent builder/tester tasks) and
    synthesises, workers do any task, the reviewer approves everything; each turn takes
    0.1 s and reports 120 tokens.
    """
    tasks = tasks if tasks is not None else [task("t1", "builder"), task("t2", "tester", writes=["tests/**"])]
    write_profile("t-lead", [*(lead or []), plan_rule(tasks), synthesis_rule()], usage=usage)
    write_profile("t-worker", [*(worker or []), work_rule()], usage=usage)
    write_profile("t-reviewer", [*(reviewer or []), review_rule()], usage=usage)
    crew_roles = roles or {
        "lead": {"profile": "t-lead", "writes": [], "instructions": "roles/lead.md"},
        "builder": {"profile": "t-worker", "writes": ["src/**", "docs/**"], "instructions": "roles/builder.md"},
        "tester": {"profile": "t-worker", "writes": ["tests/**", "src/**"], "instructions": "roles/tester.md"},
        "reviewer": {"profile": "t-reviewer", "writes": [], "instructions": "roles/reviewer.md"},
    }
    crew: dict[str, Any] = {
        "mode": mode, "roles": crew_roles,
        "limits": {"max_workers": 2, "task_timeout_s": 60, "max_auto_retries": 2, **(limits or {})},
        "hierarchical": {"lead": "lead", "reviewer": "reviewer", **settings.pop("hierarchical", {})},
        "sequential": {"steps": ["builder", "tester"], **settings.pop("sequential", {})},
        **settings,
    }
    (root / ".agent-box" / "crew.yaml").write_text(json.dumps(crew, indent=1))
    return ProjectPaths(root)


# ----------------------------------------------------------------------------- running


def create(project: ProjectPaths, goal: str = "build the thing", mode: str | None = None,
           graph: str | None = None) -> str:
    """A new run of the project's crew (graph mode: of the named graph); returns its id."""
    return runs.create_run(project, goal, mode, graph).id


async def drive(project: ProjectPaths, run_id: str, human: Human | None = None, timeout: float = 60,
                backoff: Sequence[float] | None = None, runner: TurnRunner | None = None) -> Run:
    """Run the engine in this event loop until the run ends; `human` plays the person meanwhile.

    A failing `human` (an assertion about the run) stops the engine and is raised at once.
    `backoff`: the waits before the environment retries (default: the engine's own).
    `runner`: who runs the turns (default: the engine's; in these tests the in-process runner unless the test
    is marked `local_runner`, see tests/engine/conftest.py).
    """
    options: dict[str, Any] = {} if backoff is None else {"backoff": lambda _cap: list(backoff)}
    if runner is not None:
        options["runner"] = runner
    engine = Engine.open(project, run_id, **options)
    flight = asyncio.ensure_future(engine.execute())
    helper = asyncio.ensure_future(human(engine)) if human is not None else None
    try:
        async with asyncio.timeout(timeout):
            while True:
                waiting = [flight] + ([helper] if helper is not None and not helper.done() else [])
                await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                if helper is not None and helper.done() and helper.exception() is not None:
                    raise helper.exception()  # type: ignore[misc]
                if flight.done():
                    return flight.result()
    finally:
        for pending in (flight, helper):
            if pending is not None and not pending.done():
                pending.cancel()
                with contextlib.suppress(BaseException):
                    await pending


async def send(project: ProjectPaths, run_id: str, **command: Any) -> tuple[bool, str]:
    """A human command through `runs.send_command` (the inbox while the engine runs), off the loop."""
    return await asyncio.to_thread(runs.send_command, project, run_id, command)


async def until(engine: Engine, predicate: Callable[[Engine], bool], timeout: float = 30) -> None:
    """Wait inside `drive`'s loop until `predicate(engine)` holds."""
    deadline = time.monotonic() + timeout
    while not predicate(engine):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out; run is {engine.run.status}: {engine.run.status_reason}")
        await asyncio.sleep(0.05)


def open_checkpoint(engine: Engine, kind: str) -> Any:
    """The first open checkpoint of `kind`, or None."""
    return next((c for c in engine.run.open_checkpoints() if c.kind == kind), None)


def answering(*answers: tuple[str, str]) -> Human:
    """A person who answers checkpoints in order: each `(kind, text)` once its checkpoint opens."""

    async def human(engine: Engine) -> None:
        for kind, text in answers:
            await until(engine, lambda e, k=kind: open_checkpoint(e, k) is not None)
            cp = open_checkpoint(engine, kind)
            ok, message = await send(engine.project, engine.run.id, action="answer", checkpoint=cp.id, text=text)
            assert ok, message

    return human


def start_engine(project: ProjectPaths, run_id: str) -> subprocess.Popen[bytes]:
    """`python -m agentbox --project P run --resume RUN --quiet` as a child process."""
    return subprocess.Popen(
        [sys.executable, "-m", "agentbox", "--project", str(project.root), "run", "--resume", run_id, "--quiet"],
        cwd=project.root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a child started by a test (and its process group) if it still runs."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def kill_engine_mid_work(project: ProjectPaths, run_id: str) -> Job:
    """Start the run's engine in its own process and SIGKILL it once a work turn is running; that turn's job."""
    store = RunStore(project)
    proc = start_engine(project, run_id)
    try:
        deadline = time.monotonic() + 30
        while not any(j.pid and j.kind == "work" for j in store.load(run_id).jobs.values()):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.02)
        (job,) = [j for j in store.load(run_id).jobs.values() if j.kind == "work"]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        stop(proc)
    return job


# ----------------------------------------------------------------------------- reading


def events(project: ProjectPaths, run_id: str) -> list[dict[str, Any]]:
    """The run's decision log."""
    return RunStore(project).events(run_id)[0]


def of_type(log: list[dict[str, Any]], type_: str, task_id: str | None = None) -> list[dict[str, Any]]:
    """The events of one type (of one task)."""
    return [e for e in log if e["type"] == type_ and (task_id is None or e.get("task") == task_id)]


def assert_log_consistent(project: ProjectPaths, run_id: str) -> list[dict[str, Any]]:
    """Every line of events.jsonl parses and seqs run 1, 2, 3… with no gap or repeat."""
    path = RunStore(project).events_path(run_id)
    lines = path.read_bytes().splitlines()
    log = [json.loads(line) for line in lines]
    assert [e["seq"] for e in log] == list(range(1, len(log) + 1))
    run = RunStore(project).load(run_id)
    assert run.seq == len(log)
    assert all(e["seq"] <= run.seq for e in run.outbox)
    return log


def prompts_of(project: ProjectPaths, session_id: str) -> list[str]:
    """The prompts of one agentbox session, oldest first."""
    for path in project.sessions_dir.glob(f"*/{session_id}.turns.jsonl"):
        return [json.loads(line)["prompt"] for line in path.read_text().splitlines() if line.strip()]
    return []


def agent_processes(marker: str) -> list[psutil.Process]:
    """Live processes whose command line or environment mentions `marker` (a test's tmp dir)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "pid"]):
        if proc.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error):
            cmdline = " ".join(proc.info["cmdline"] or [])
            if marker in cmdline and "scripted_agent" in cmdline:
                found.append(proc)
    return found


def session_processes(session_ids: Iterable[str]) -> list[psutil.Process]:
    """Live processes started for one of these agentbox sessions (AGENTBOX_SESSION_ID)."""
    wanted = set(session_ids)
    found = []
    for proc in psutil.process_iter(["pid"]):
        with contextlib.suppress(psutil.Error):
            if proc.environ().get("AGENTBOX_SESSION_ID") in wanted:
                found.append(proc)
    return found


def wait_gone(check: Callable[[], list[psutil.Process]], timeout: float = 5) -> list[psutil.Process]:
    """Poll until `check()` finds nothing (processes take a moment to be reaped); the leftovers."""
    deadline = time.monotonic() + timeout
    left = check()
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [p for p in check() if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    return left
