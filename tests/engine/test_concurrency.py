"""CLI processes and the engine writing together: no corrupt file, no lost or doubled command.

The engine runs in its own process; several `agentbox pause|resume|answer|status`
processes run at once while it works. A reader thread parses run.json and events.jsonl
the whole time. Every command must be acknowledged exactly once in the decision log.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agentbox.core.engine.run_store import RunStore
from agentbox.core.paths import ProjectPaths
from tests.engine.support import (
    assert_log_consistent,
    create,
    of_type,
    setup_crew,
    start_engine,
    stop,
    task,
    work_rule,
)

pytestmark = pytest.mark.bwrap


class Reader(threading.Thread):
    """Reads run.json and events.jsonl in a loop, as the TUI and `agentbox status` do."""

    def __init__(self, paths: ProjectPaths, run_id: str) -> None:
        super().__init__(daemon=True)
        self.store, self.run_id = RunStore(paths), run_id
        self.stop = threading.Event()
        self.reads = 0
        self.problems: list[str] = []

    def run(self) -> None:
        events_path = self.store.events_path(self.run_id)
        while not self.stop.is_set():
            try:
                self.store.load(self.run_id)
                data = events_path.read_bytes() if events_path.exists() else b""
                complete = data[: data.rfind(b"\n") + 1]
                seqs = [json.loads(line)["seq"] for line in complete.splitlines()]
                if seqs != list(range(1, len(seqs) + 1)):
                    self.problems.append(f"seqs {seqs[-5:]}")
                self.reads += 1
            except Exception as exc:  # any failure to read is what this test looks for
                self.problems.append(repr(exc))
            time.sleep(0.005)


def cli(project: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "agentbox", *args], cwd=project, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(procs: list[subprocess.Popen[str]]) -> list[tuple[int, str, str]]:
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        results.append((proc.returncode, out, err))
    return results


def test_cli_commands_and_the_engine_never_corrupt_or_lose_anything(project: Path) -> None:
    ask = [{"id": "ask", "when": {"prompt_contains": "[agentbox:work task=t1", "times": 1},
            "do": {"delay_s": 0.1, "reply_json": {"summary": "need a decision", "question": "Which name?"}}}]
    tasks = [task("t1"), *(task(f"t{n}", "tester", writes=[f"tests/t{n}/**"]) for n in range(2, 6))]
    paths = setup_crew(project, tasks=tasks, worker=[*ask, work_rule(delay=0.3)], limits={"max_workers": 3})
    run_id = create(paths)
    engine = start_engine(paths, run_id)
    reader = Reader(paths, run_id)
    reader.start()
    try:
        deadline = time.monotonic() + 30
        while not RunStore(paths).load(run_id).tasks:
            assert time.monotonic() < deadline and engine.poll() is None
            time.sleep(0.02)
        storm = [cli(project, action, run_id) for action in ("pause", "resume") * 4]
        storm += [cli(project, "status", run_id, "--json") for _ in range(2)]
        results = finish(storm)
        for code, out, err in results[:8]:
            assert code == 0, err
            assert out.startswith(("pause applied", "resume applied")), out + err
        for code, out, err in results[8:]:
            assert code == 0 and json.loads(out)["id"] == run_id, err
        (code, out, err), = finish([cli(project, "resume", run_id)])
        assert code == 0 and out.startswith("resume applied"), out + err

        deadline = time.monotonic() + 30
        while not any(c.status == "open" for c in RunStore(paths).load(run_id).checkpoints.values()):
            assert time.monotonic() < deadline, RunStore(paths).load(run_id).status_reason
            time.sleep(0.05)
        cp = next(c for c in RunStore(paths).load(run_id).checkpoints.values() if c.status == "open")
        assert cp.kind == "question"
        second = finish([cli(project, "answer", run_id, cp.id, "Ada"), cli(project, "pause", run_id),
                         cli(project, "answer", run_id, cp.id, "Grace")])
        assert second[1][0] == 0
        answered = sorted(code for code, _, _ in (second[0], second[2]))
        assert answered == [0, 2], "one answer wins, the other is refused: already answered"
        (code, out, err), = finish([cli(project, "resume", run_id)])
        assert code == 0, err
        assert engine.wait(timeout=60) == 0, engine.stderr.read().decode() if engine.stderr else ""
    finally:
        reader.stop.set()
        reader.join(5)
        stop(engine)
    assert reader.problems == [] and reader.reads > 50
    run = RunStore(paths).load(run_id)
    assert run.status == "done" and not run.paused
    log = assert_log_consistent(paths, run_id)
    inbox = [json.loads(line) for line in (RunStore(paths).dir(run_id) / "inbox.jsonl").read_text().splitlines()]
    assert len(inbox) == 8 + 1 + 3 + 1
    acks = of_type(log, "command")
    assert sorted(a["command_id"] for a in acks) == sorted(c["id"] for c in inbox), "each command acknowledged once"
    assert len(run.applied_commands) == len(set(run.applied_commands)) == len(inbox)
    assert [a["ok"] for a in acks].count(False) == 1


def test_an_engine_starting_while_a_command_holds_the_lock_waits_for_it(project: Path) -> None:
    """A CLI applying a command directly (or a reader probing the lock) must not make the engine give up."""
    paths = setup_crew(project, tasks=[task("t1")])
    run_id = create(paths)
    held = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with RunStore(paths).engine_lock(run_id) as mine:
            assert mine
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert held.wait(5)
    engine = start_engine(paths, run_id)
    try:
        time.sleep(1.5)
        assert engine.poll() is None, engine.stderr.read().decode() if engine.stderr else ""
        release.set()
        holder.join(5)
        assert engine.wait(timeout=60) == 0, engine.stderr.read().decode() if engine.stderr else ""
    finally:
        release.set()
        stop(engine)
    assert RunStore(paths).load(run_id).status == "done"


def test_a_second_engine_on_the_same_run_is_refused(project: Path) -> None:
    paths = setup_crew(project, worker=[work_rule(delay=30, rule_id="slow")], tasks=[task("t1")])
    run_id = create(paths)
    first = start_engine(paths, run_id)
    try:
        deadline = time.monotonic() + 20
        while not RunStore(paths).engine_running(run_id):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        second = subprocess.run([sys.executable, "-m", "agentbox", "run", "--resume", run_id, "--quiet"],
                                cwd=project, capture_output=True, text=True, timeout=60)
        assert second.returncode == 2
        assert "already has an engine running" in second.stderr
        assert first.poll() is None
    finally:
        stop(first)
