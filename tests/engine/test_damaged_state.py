"""Hostile or corrupt run state, through the real CLI: every case a clean, located error in seconds.

Each case damages one file of one run (garbage, invalid UTF-8, a directory, a symlink to
/dev/zero, a FIFO, the wrong JSON shape, an unknown task state, a huge seq, a `../` id,
an unknown role). `agentbox runs` must list that run as damaged and the other run fine;
`status` and `run --resume` of it must exit 2 naming the file (and the line), never with a
traceback and never hanging (each command runs under a timeout).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentbox.core.engine.models import Run
from agentbox.core.engine.run_store import DamagedRunError, RunStore
from agentbox.core.errors import UsageError
from agentbox.core.paths import ProjectPaths
from tests.engine.support import create, setup_crew

TIMEOUT_S = 20


def cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m agentbox --project ROOT ARGS` under a timeout: a hang fails the test."""
    return subprocess.run([sys.executable, "-m", "agentbox", "--project", str(root), *args], cwd=root,
                          capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)


def edit_run(paths: ProjectPaths, run_id: str, change: Callable[[dict[str, Any]], None]) -> None:
    path = RunStore(paths).dir(run_id) / "run.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def a_task(task_id: str, state: str = "queued", assignee: str = "builder") -> dict[str, Any]:
    return {"id": task_id, "assignee": assignee, "brief": "b", "state": state}


def replace_with(kind: str) -> Callable[[Path], None]:
    """Put a directory, a FIFO, a /dev/zero link or bytes where a file should be."""
    def put(path: Path) -> None:
        if path.exists() or path.is_symlink():
            path.unlink()
        if kind == "dir":
            path.mkdir()
        elif kind == "fifo":
            os.mkfifo(path)
        elif kind == "zero":
            path.symlink_to("/dev/zero")
    return put


def append(data: bytes) -> Callable[[Path], None]:
    def put(path: Path) -> None:
        with path.open("ab") as handle:
            handle.write(data)
    return put


RUN_JSON_CASES: dict[str, Callable[[Path], None]] = {
    "garbage": lambda p: p.write_bytes(b"\x00\x01garbage{{{"),
    "invalid-utf8": lambda p: p.write_bytes(b'{"id": "\xff\xfe"}'),
    "empty": lambda p: p.write_bytes(b""),
    "list": lambda p: p.write_text("[1, 2, 3]"),
    "directory": replace_with("dir"),
    "dev-zero": replace_with("zero"),
    "fifo": replace_with("fifo"),
    "deep-nesting": lambda p: p.write_text("[" * 100_000 + "]" * 100_000),
}


@pytest.fixture
def two_runs(project: Path) -> tuple[ProjectPaths, str, str]:
    """A project with two healthy runs: (paths, the run a case damages, the other one)."""
    paths = setup_crew(project)
    victim = create(paths, "the damaged one")
    healthy = create(paths, "the healthy one")
    RunStore(paths).save(RunStore(paths).load(victim))  # a first events line, as an engine writes
    run = RunStore(paths).load(victim)
    run.seq = 1
    run.outbox = [{"seq": 1, "at": 1.0, "run": victim, "type": "engine.started", "what": "x"}]
    RunStore(paths).save(run)
    return paths, victim, healthy


def assert_clean(result: subprocess.CompletedProcess[str], code: int, *needles: str) -> None:
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    for needle in needles:
        assert needle in result.stderr, (needle, result.stderr)


def check_damaged(paths: ProjectPaths, victim: str, healthy: str, *needles: str, resume: bool = True) -> None:
    listed = cli(paths.root, "runs")
    assert_clean(listed, 0, victim)
    rows = {line.split()[0]: line for line in listed.stdout.splitlines()[1:] if line.strip()}
    assert "damaged" in rows[victim], listed.stdout
    assert "planning" in rows[healthy] and "the healthy one" in rows[healthy], listed.stdout
    as_json = cli(paths.root, "runs", "--json")
    assert {r["id"]: r["status"] for r in json.loads(as_json.stdout)}[victim] == "damaged"
    assert_clean(cli(paths.root, "status", victim), 2, "damaged", *needles)
    if resume:
        assert_clean(cli(paths.root, "run", "--resume", victim, "--quiet"), 2, "damaged", *needles)
    assert_clean(cli(paths.root, "status", healthy), 0)


@pytest.mark.parametrize("case", sorted(RUN_JSON_CASES))
def test_a_damaged_run_json_is_located_and_the_other_runs_list_fine(case: str, two_runs: Any) -> None:
    paths, victim, healthy = two_runs
    RUN_JSON_CASES[case](RunStore(paths).dir(victim) / "run.json")
    check_damaged(paths, victim, healthy, "run.json")


RUN_FIELD_CASES: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "wrong-type": (lambda d: d.update(seq="many"), "seq"),
    "unknown-task-state": (lambda d: d["tasks"].update(t1=a_task("t1", "exploded")), "unknown task state"),
    "task-id-out-of-the-run": (lambda d: d["tasks"].update({"../../home/u/.ssh": a_task("../../home/u/.ssh")}),
                               "tasks"),
    "task-key-differs-from-id": (lambda d: d["tasks"].update(t1=a_task("t2")), "tasks.t1"),
    "session-id-glob": (lambda d: d["tasks"].update(t1={**a_task("t1"), "session_id": "*"}), "session_id"),
    "huge-run-seq": (lambda d: d.update(seq=10**30), "seq"),
    "pid-one": (lambda d: d["jobs"].update({"job-1": {"id": "job-1", "kind": "work", "role": "builder",
                                                      "started": 1.0, "pid": 1}}), "pid"),
    "other-run-id": (lambda d: d.update(id="run-other"), "run-other"),
}


@pytest.mark.parametrize("case", sorted(RUN_FIELD_CASES))
def test_an_invalid_run_state_names_the_field(case: str, two_runs: Any) -> None:
    paths, victim, healthy = two_runs
    change, needle = RUN_FIELD_CASES[case]
    edit_run(paths, victim, change)
    check_damaged(paths, victim, healthy, "run.json", needle)


LOG_CASES: dict[str, tuple[str, Callable[[Path], None], str]] = {
    "events-garbage": ("events.jsonl", append(b"\x00garbage\n"), "events.jsonl:2"),
    "events-invalid-utf8": ("events.jsonl", append(b'{"seq": 2, "type": "\xff"}\n'), "events.jsonl:2"),
    "events-wrong-shape": ("events.jsonl", append(b'[1, 2, 3]\n'), "events.jsonl:2"),
    "events-wrong-type": ("events.jsonl", append(b'{"seq": "2", "type": "x"}\n'), "events.jsonl:2"),
    "events-huge-seq": ("events.jsonl", append(b'{"seq": 1000000000000000, "type": "x", "what": ""}\n'),
                        "events.jsonl:2"),
    "events-directory": ("events.jsonl", replace_with("dir"), "events.jsonl"),
    "events-dev-zero": ("events.jsonl", replace_with("zero"), "events.jsonl"),
    "events-fifo": ("events.jsonl", replace_with("fifo"), "events.jsonl"),
    "inbox-wrong-shape": ("inbox.jsonl", append(b'{"id": "c1", "action": ["approve"], "task": {"t": 1}}\n'),
                          "inbox.jsonl:1"),
    "inbox-fifo": ("inbox.jsonl", replace_with("fifo"), "inbox.jsonl"),
    "manifest-wrong-shape": ("artifacts/manifest.jsonl", append(b'{"path": 5, "role": []}\n'), "manifest.jsonl:1"),
    "manifest-dev-zero": ("artifacts/manifest.jsonl", replace_with("zero"), "manifest.jsonl"),
}


@pytest.mark.parametrize("case", sorted(LOG_CASES))
def test_a_damaged_log_is_located(case: str, two_runs: Any) -> None:
    paths, victim, healthy = two_runs
    name, damage, needle = LOG_CASES[case]
    damage(RunStore(paths).dir(victim) / name)
    check_damaged(paths, victim, healthy, needle)


def test_a_job_naming_an_unknown_role_is_refused_on_resume(two_runs: Any) -> None:
    paths, victim, _ = two_runs
    edit_run(paths, victim, lambda d: d["jobs"].update({"job-1": {"id": "job-1", "kind": "work", "role": "ghost"}}))
    result = cli(paths.root, "run", "--resume", victim, "--quiet")
    assert_clean(result, 2, "run.json", "jobs.job-1.role", "ghost")


def test_run_ids_from_the_command_line_never_become_paths(two_runs: Any, tmp_path: Path) -> None:
    paths, _, _ = two_runs
    elsewhere = tmp_path / "x"
    elsewhere.mkdir()
    (elsewhere / "run.json").write_text("{}")
    for bad in ("../../x", "../runs/..", "/etc", "run-*", "a/b"):
        for args in (("status", bad), ("run", "--resume", bad, "--quiet"), ("answer", bad, "cp-1", "yes")):
            assert_clean(cli(paths.root, *args), 2, "invalid run id")
    with pytest.raises(UsageError, match="invalid run id"):
        RunStore(paths).dir("../x")


def test_task_ids_from_the_command_line_are_checked(two_runs: Any) -> None:
    paths, _, _ = two_runs
    assert_clean(cli(paths.root, "approve", "../../etc", "--note", "ok"), 2, "invalid task id")


def test_a_huge_seq_never_makes_the_engine_drop_later_events(two_runs: Any) -> None:
    """Before: the last seq of the log was trusted, and every later event was skipped as already written."""
    paths, victim, _ = two_runs
    store = RunStore(paths)
    append(b'{"seq": 1000000000000000, "type": "x", "what": ""}\n')(store.events_path(victim))
    run = store.load(victim)
    run.seq = 2
    run.outbox = [{"seq": 2, "at": 1.0, "run": victim, "type": "later", "what": "must not be lost"}]
    with pytest.raises(DamagedRunError, match="beyond the run's seq"):
        store.save(run)


def test_the_run_model_rejects_path_like_ids() -> None:
    base = {"id": "run-1", "contract": {"goal": "g", "mode": "sequential"}}
    Run.model_validate(base)
    for bad in ({**base, "id": "../x"}, {**base, "tasks": {"..": a_task("..")}},
                {**base, "jobs": {"j": {"id": "j", "kind": "work", "role": "r", "task": "../t"}}}):
        with pytest.raises(ValueError):
            Run.model_validate(bad)
