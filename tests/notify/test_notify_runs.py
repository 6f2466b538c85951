"""Notifications of real runs: scripted agents under bwrap, the engine as a real process.

The hooks are real scripts that record what they receive; the webhook receiver is a
real HTTP server on 127.0.0.1. The crew's worker asks the person a question on its first
turn (a checkpoint), so every run has a checkpoint and an end to tell of.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
import pytest

from agentbox.core import runs
from agentbox.core.engine.notify import CURSOR_FILE, FAILED_EVENT
from agentbox.core.engine.run_store import RunStore
from agentbox.core.paths import ProjectPaths
from tests.conftest import run_cli
from tests.engine.support import create, events, setup_crew, start_engine, stop, task
from tests.notify.support import Receiver, calls, notifiable_ids, recorder, wait_for, write_config

pytestmark = pytest.mark.bwrap

ASK = [{"id": "ask", "when": {"prompt_contains": "[agentbox:work task=t1", "times": 1},
        "do": {"delay_s": 0.1, "reply_json": {"summary": "need a decision", "question": "English or French?"}}}]


def _crew(project: Path, *, ask: bool = True) -> ProjectPaths:
    return setup_crew(project, worker=ASK if ask else None, tasks=[task("t1")])


def _config(tmp_path: Path, *, on_checkpoint: list[str] | str | None = None, timeout_s: float = 10,
            webhook: str | None = None) -> Path:
    argv, log = recorder(tmp_path)
    lines = ["notify:", "  desktop: false"] + ([f"  webhook: {{url: '{webhook}', retries: 1}}"] if webhook else [])
    lines += ["hooks:", f"  on_checkpoint: {json.dumps(on_checkpoint or argv)}", f"  on_run_end: {json.dumps(argv)}",
              f"  timeout_s: {timeout_s}"]
    write_config("\n".join(lines) + "\n")
    return log


def _open_checkpoint(paths: ProjectPaths, run_id: str) -> str:
    cps = wait_for(lambda: runs.load(paths, run_id).open_checkpoints(), what="the question checkpoint")
    return cps[0].id


def _answer(project: Path, run_id: str, cp_id: str) -> None:
    result = run_cli("answer", run_id, cp_id, "English, please", cwd=project)
    assert result.code == 0, result.err


def _wait_end(paths: ProjectPaths, run_id: str, proc: subprocess.Popen[bytes] | None = None) -> None:
    wait_for(lambda: runs.load(paths, run_id).status in ("done", "failed", "cancelled"), timeout=60,
             what="the run's end")
    if proc is not None:
        proc.wait(timeout=30)


def _ids(log: Path) -> list[str]:
    return [call["payload"]["id"] for call in calls(log)]


def _kinds(log: Path) -> list[str]:
    return [call["payload"]["kind"] for call in calls(log)]


def test_a_detached_run_rings_the_hooks_for_its_checkpoint_and_its_end(project: Path, tmp_path: Path) -> None:
    log = _config(tmp_path)
    paths = _crew(project)
    started = run_cli("run", "build the thing", "--detach", cwd=project)
    assert started.code == 0, started.err
    run_id = started.out.strip()
    cp_id = _open_checkpoint(paths, run_id)
    (checkpoint,) = wait_for(lambda: calls(log), what="the checkpoint's hook")
    assert checkpoint["payload"]["kind"] == "checkpoint" and checkpoint["payload"]["run"] == run_id
    assert checkpoint["payload"]["checkpoint"]["id"] == cp_id
    assert checkpoint["payload"]["checkpoint"]["question"] == "English or French?"
    assert checkpoint["payload"]["task"] == "t1" and checkpoint["payload"]["goal"] == "build the thing"
    assert checkpoint["env"]["AGENTBOX_EVENT"] == "checkpoint" and checkpoint["env"]["AGENTBOX_RUN_ID"] == run_id
    _answer(project, run_id, cp_id)
    _wait_end(paths, run_id)
    wait_for(lambda: len(calls(log)) == 2, what="the run end's hook")
    assert _kinds(log) == ["checkpoint", "run_done"]
    assert _ids(log) == notifiable_ids(paths, run_id)
    assert calls(log)[1]["payload"]["run_status"] == "done"


def test_a_foreground_run_prints_a_banner_and_posts_the_webhook(project: Path, tmp_path: Path) -> None:
    with Receiver() as receiver:
        log = _config(tmp_path, webhook=receiver.url)
        _crew(project, ask=False)
        result = run_cli("run", "build the thing", cwd=project)
        assert result.code == 0, result.err + result.out
        run_id = json.loads(run_cli("runs", "--json", cwd=project).out)[0]["id"]
        assert f"⚑ {run_id} ended: done" in result.out
        (post,) = receiver.posts
    assert post["body"]["id"] == f"{run_id}:{post['body']['seq']}" and post["body"]["kind"] == "run_done"
    assert post["body"]["title"] == "agentbox: run ended: done" and post["body"]["project"] == str(project)
    assert post["headers"]["Content-Type"] == "application/json"
    assert _kinds(log) == ["run_done"]


def test_a_hanging_hook_is_killed_logged_and_never_holds_the_run(project: Path, tmp_path: Path) -> None:
    pid_file = tmp_path / "hook.pid"
    log = _config(tmp_path, on_checkpoint=f"echo $$ > {pid_file}; sleep 300", timeout_s=2)
    paths = _crew(project)
    run_id = create(paths)
    proc = start_engine(paths, run_id)
    try:
        cp_id = _open_checkpoint(paths, run_id)
        _answer(project, run_id, cp_id)  # at once: the hook still hangs, the run goes on
        wait_for(lambda: runs.load(paths, run_id).status in ("done", "failed"), timeout=60, what="the run's end")
        _wait_end(paths, run_id, proc)
    finally:
        stop(proc)
    failed = [e for e in events(paths, run_id) if e["type"] == FAILED_EVENT]
    assert [e["what"] for e in failed] == ["hook on_checkpoint did not finish in 2 s: its process group was killed"]
    assert failed[0]["channel"] == "hook:on_checkpoint" and failed[0]["notification"] == f"{run_id}:{_cp_seq(paths, run_id)}"
    hook_pid = int(pid_file.read_text())
    assert not psutil.pid_exists(hook_pid) or psutil.Process(hook_pid).status() == psutil.STATUS_ZOMBIE
    assert _kinds(log) == ["run_done"]
    assert runs.load(paths, run_id).status == "done"


def _cp_seq(paths: ProjectPaths, run_id: str) -> int:
    return next(e["seq"] for e in events(paths, run_id) if e["type"] == "checkpoint")


def _checkpoint_delivered(paths: ProjectPaths, run_id: str) -> bool:
    """The checkpoint's event is in the log (it lands there just after the state that holds it) and notified."""
    seqs = [e["seq"] for e in events(paths, run_id) if e["type"] == "checkpoint"]
    return bool(seqs) and _cursor(paths, run_id)["seq"] >= seqs[0]


def _cursor(paths: ProjectPaths, run_id: str) -> dict[str, Any]:
    path = RunStore(paths).dir(run_id) / CURSOR_FILE
    return json.loads(path.read_text()) if path.exists() else {"seq": 0}


def test_kill_9_and_resume_sends_each_notification_once(project: Path, tmp_path: Path) -> None:
    log = _config(tmp_path)
    paths = _crew(project)
    run_id = create(paths)
    proc = start_engine(paths, run_id)
    try:
        cp_id = _open_checkpoint(paths, run_id)
        wait_for(lambda: _checkpoint_delivered(paths, run_id), what="the checkpoint delivered")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        stop(proc)
    _answer(project, run_id, cp_id)  # no engine: applied directly; nothing is sent from here
    assert len(calls(log)) == 1
    proc = start_engine(paths, run_id)
    try:
        _wait_end(paths, run_id, proc)
    finally:
        stop(proc)
    assert _ids(log) == notifiable_ids(paths, run_id)
    assert _kinds(log) == ["checkpoint", "run_done"]


def test_kill_9_during_a_delivery_resends_it_with_the_same_id_and_loses_none(project: Path, tmp_path: Path) -> None:
    release = tmp_path / "release"
    argv, log = recorder(tmp_path)
    slow = f"{' '.join(argv)} < /dev/stdin; for i in $(seq 300); do [ -e {release} ] && exit 0; sleep 0.1; done"
    _config(tmp_path, on_checkpoint=slow, timeout_s=60)
    paths = _crew(project)
    run_id = create(paths)
    proc = start_engine(paths, run_id)
    try:
        cp_id = _open_checkpoint(paths, run_id)
        wait_for(lambda: calls(log), what="the checkpoint's hook to start")
        os.kill(proc.pid, signal.SIGKILL)  # its hook is still running: the notification is not marked sent
        proc.wait(timeout=10)
    finally:
        stop(proc)
    release.touch()
    assert _cursor(paths, run_id)["seq"] < _cp_seq(paths, run_id)
    _answer(project, run_id, cp_id)
    proc = start_engine(paths, run_id)
    try:
        _wait_end(paths, run_id, proc)
    finally:
        stop(proc)
    wanted = notifiable_ids(paths, run_id)
    sent = Counter(_ids(log))
    assert set(sent) == set(wanted)  # none lost
    assert sent[f"{run_id}:{_cp_seq(paths, run_id)}"] == 2  # the one being delivered at the kill, sent again
    assert all(count == 1 for notice_id, count in sent.items() if notice_id != f"{run_id}:{_cp_seq(paths, run_id)}")


@pytest.fixture(autouse=True)
def _no_stray_hooks(tmp_path: Path) -> Any:
    yield
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if str(tmp_path) in " ".join(proc.info["cmdline"] or []) and "record_hook" not in " ".join(
                    proc.info["cmdline"] or []):
                proc.kill()
