"""Deterministic run states for TUI tests, written by the real engine code with a fake clock.

A copy of `.agent-box.example/` plus a run driven through `Engine` (dispatch, results,
reviews, checkpoints) where each agent turn's result is given instead of run: the state
on disk is exactly what the engine would write, with fixed ids and timestamps.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from agentbox.core.admin.demo import DEMO_GOAL
from agentbox.core.agents.invoke import InvokeResult
from agentbox.core.agents.sessions import SessionRecord, SessionStore
from agentbox.core.config import project as project_mod
from agentbox.core.engine.engine import Engine
from agentbox.core.engine.models import Contract, Job, Run
from agentbox.core.engine.run_store import RunStore
from agentbox.core.paths import ProjectPaths
from agentbox.core.runtimes.base import Usage

REPO = Path(__file__).resolve().parents[2]
T0 = 1767268800.0
"""2026-01-01 12:00:00 UTC: when every fixture run starts."""
RUN_ID = "run-20260101-120000-a1b2"
STAGES = ("planning", "executing", "waiting", "done")
"""The points of the demo run a fixture can stop at."""

PLAN = {
    "notes": "Builder writes the greeting module, tester covers it, builder documents it.",
    "tasks": [
        {"id": "greet", "assignee": "builder", "brief": "Create src/greet.py with greet(name) returning 'Hello, <name>!'",
         "acceptance": [{"id": "a1", "criterion": "greet('Ada') returns 'Hello, Ada!'"},
                        {"id": "a2", "criterion": "the module has a docstring"}], "writes": ["src/**"]},
        {"id": "tests", "assignee": "tester", "brief": "Write tests/test_greet.py covering greet()",
         "acceptance": [{"id": "a1", "criterion": "a test calls greet with a name"},
                        {"id": "a2", "criterion": "the test asserts the exact greeting"}], "writes": ["tests/**"]},
        {"id": "docs", "assignee": "builder", "brief": "Document greet() in docs/usage.md",
         "acceptance": [{"id": "a1", "criterion": "docs/usage.md shows an example call"},
                        {"id": "a2", "criterion": "the docs are in the language the human chose"}],
         "writes": ["docs/**"], "depends_on": ["greet"]},
    ],
}
FILES = {
    "src/greet.py": 'def greet(name: str) -> str:\n    return f"Hello, {name}!"\n',
    "src/greet.py#2": '"""Greetings for the demo crew."""\n\n\ndef greet(name: str) -> str:\n'
                      '    """Return a friendly greeting for `name`."""\n    return f"Hello, {name}!"\n',
    "tests/test_greet.py": 'from src.greet import greet\n\n\ndef test_greet() -> None:\n'
                           '    assert greet("Ada") == "Hello, Ada!"\n',
    "docs/usage.md": '# Usage (English)\n\n```python\nfrom src.greet import greet\ngreet("Ada")  # \'Hello, Ada!\'\n```\n',
}


def approve(task: str) -> dict[str, Any]:
    """A reviewer's approving verdict covering a1 and a2."""
    return {"verdict": "approve", "blocking_issues": [], "confidence": 0.85,
            "checklist": [{"item": f"criterion {a} of {task}", "acceptance_id": a, "pass": True,
                           "evidence": f"checked the submitted files of {task}"} for a in ("a1", "a2")]}


REJECT_GREET = {
    "verdict": "reject", "confidence": 0.9,
    "blocking_issues": [{"id": "b1", "acceptance_id": "a2", "severity": "major", "detail": "src/greet.py has no module docstring"}],
    "checklist": [{"item": "greet('Ada') returns 'Hello, Ada!'", "acceptance_id": "a1", "pass": True, "evidence": "returns f'Hello, {name}!'"},
                  {"item": "module docstring", "acceptance_id": "a2", "pass": False, "evidence": "line 1 is the def"}],
}


class Clock:
    """A fake wall clock that moves only when told."""

    def __init__(self, start: float = T0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


def copy_example(root: Path) -> ProjectPaths:
    """A project made from `.agent-box.example/` (as `agentbox init` does)."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO / ".agent-box.example", root / ".agent-box")
    return ProjectPaths(root)


class RunBuilder:
    """Drives a run through the engine's own code; agent turns are given, not run."""

    def __init__(self, project: ProjectPaths, monkeypatch: pytest.MonkeyPatch) -> None:
        self.project = project
        self.clock = Clock()
        ids = (uuid.UUID(f"{n:02x}{n:02x}{n:02x}{n:02x}-a6e1-4b0c-8000-{n:012x}") for n in range(1, 256))
        monkeypatch.setattr(uuid, "uuid4", lambda: next(ids))
        monkeypatch.setattr("agentbox.core.agents.sessions.now", self.clock)
        self.sessions = SessionStore(project.sessions_dir)
        crew = project_mod.load_checked_crew(project)
        run = Run(id=RUN_ID, contract=Contract(
            goal=DEMO_GOAL, mode="hierarchical", limits=crew.limits.model_dump(),
            settings=crew.hierarchical.model_dump(), roles={n: r.profile for n, r in crew.roles.items()}),
            status="planning", created=T0)
        RunStore(project).create(run)
        self.engine = Engine(project, run, clock=self.clock)
        self.profiles = {n: r.profile for n, r in crew.roles.items()}

    @property
    def run(self) -> Run:
        return self.engine.run

    def _pending(self, kind: str, task: str | None = None) -> Job:
        return next(j for j in self.engine.pending() if j.kind == kind and j.task == task)

    def start(self, kind: str, task: str | None = None) -> Job:
        """Dispatch a pending turn the way the engine does (its process is never started)."""
        job = self._pending(kind, task)

        async def dispatch() -> None:
            self.engine._turn = lambda _job: asyncio.sleep(3600)  # type: ignore[method-assign]
            self.engine._start(job)
            flight = self.engine._flights.pop(job.id)
            flight.cancel()

        thread = threading.Thread(target=asyncio.run, args=(dispatch(),))  # its own loop, even inside a test's
        thread.start()
        thread.join()
        record = self._session(job)
        record.status = "running"
        record.running = {"turn": record.turns + 1, "pid": None, "started": self.clock(), "log": None}
        self.sessions.save(record)
        self.clock.advance(1)
        return job

    def _session(self, job: Job) -> SessionRecord:
        assert job.session_id is not None
        try:
            return self.sessions.find(job.session_id)
        except Exception:
            return SessionRecord(id=job.session_id, owner=job.role, role=job.role, profile=self.profiles[job.role],
                                 tool="scripted", cwd=str(self.project.root), created=self.clock(),
                                 updated=self.clock(), run_id=self.run.id, task_id=job.task)

    def finish(self, job: Job, reply: dict[str, Any] | str, *, usage: Usage | None = None, seconds: float = 2.0,
               files: tuple[str, ...] = ()) -> None:
        """The turn answered `reply`: record it in the session and hand it to the engine."""
        for name in files:
            path = self.project.root / name.split("#")[0]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(FILES[name])
        self.clock.advance(seconds)
        usage = usage if usage is not None else Usage(input_tokens=2400, cached_input_tokens=900, output_tokens=650,
                                                      cost_usd=0.0094)
        record = self._session(job)
        text = reply if isinstance(reply, str) else json.dumps(reply)
        result = InvokeResult(status="ok", session_id=record.id, text=text, usage=usage, duration_s=seconds,
                              turn=record.turns + 1, role=job.role, profile=record.profile, tool="scripted")
        record.turns += 1
        record.status, record.running, record.last_status = "idle", None, "ok"
        record.totals.add(usage)
        self.sessions.append_turn(record, {
            "turn": record.turns, "started": self.clock() - seconds, "finished": self.clock(), "prompt": job.prompt,
            "text": text, "status": "ok", "error_kind": None, "error": None, "usage": usage.as_dict(),
            "duration_s": seconds, "exit_code": 0, "native_id": record.id, "log_path": None})
        self.sessions.save(record)
        self.engine._complete(job, result)
        self.settle()

    def settle(self) -> None:
        """What the engine loop does after each turn: tick the mode, update the status, save."""
        self.engine.mode.tick()
        self.engine._update_status()
        self.engine.save()
        self.clock.advance(0.5)


def build_run(project: ProjectPaths, stage: str) -> Run:
    """The demo run at `stage`: planning, executing, waiting (a question is open) or done."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        return _build(RunBuilder(project, monkeypatch), stage)


def _build(b: RunBuilder, stage: str) -> Run:
    b.engine.ledger.event("engine.started", "engine pid 4242 took the run", None)
    b.run.mode_started = True
    b.engine.mode.start()
    b.settle()
    plan = b.start("plan")
    if stage == "planning":
        b.settle()
        return b.run
    b.finish(plan, PLAN, usage=Usage(input_tokens=1800, cached_input_tokens=600, output_tokens=420, cost_usd=0.0061))
    greet = b.start("work", "greet")
    tests = b.start("work", "tests")
    b.finish(tests, {"summary": "Added tests/test_greet.py asserting the exact greeting.",
                     "artifacts": ["tests/test_greet.py"], "evidence": ["test_greet asserts greet('Ada')"]},
             files=("tests/test_greet.py",))
    review_tests = b.start("review", "tests")
    if stage == "executing":
        b.settle()
        return b.run
    b.finish(review_tests, approve("tests"), usage=Usage())  # this tool reported no usage: unknown, not 0
    b.finish(greet, {"summary": "Added src/greet.py with greet(name).", "artifacts": ["src/greet.py"],
                     "evidence": ["greet('Ada') == 'Hello, Ada!' checked by hand"]}, files=("src/greet.py",))
    b.finish(b.start("review", "greet"), REJECT_GREET)
    b.finish(b.start("work", "greet"), {"summary": "Added the module and function docstrings.",
                                        "artifacts": ["src/greet.py"], "evidence": ["line 1 is the docstring"]},
             files=("src/greet.py#2",))
    b.finish(b.start("review", "greet"), approve("greet"))
    b.finish(b.start("work", "docs"), {"summary": "Before writing the docs I need a decision.",
                                       "question": "Should docs/usage.md be written in English or in French?"})
    if stage == "waiting":
        return b.run
    cp = next(iter(b.run.checkpoints))
    b.engine.apply_command({"action": "answer", "checkpoint": cp, "text": "English, please"})
    b.settle()
    b.finish(b.start("work", "docs"), {"summary": "Wrote docs/usage.md (English).", "artifacts": ["docs/usage.md"],
                                       "evidence": ["docs/usage.md shows greet('Ada')"]}, files=("docs/usage.md",))
    b.finish(b.start("review", "docs"), approve("docs"))
    b.finish(b.start("synthesis"), "# Greeting feature: done\n\n- src/greet.py\n- tests/test_greet.py\n- docs/usage.md\n")
    return b.run
