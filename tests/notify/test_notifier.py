"""The notifier over a real run directory: each notification once, from the persisted log.

A small stand-in for the engine (`Saver`) saves the run the way `Engine.save` does and
hands each save to the notifier; hooks are real processes.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from agentbox.core import runs
from agentbox.core.config.user_config import load_user_config
from agentbox.core.engine import notify
from agentbox.core.engine.ledger import RunLedger
from agentbox.core.engine.models import EngineHolder
from agentbox.core.engine.notify import (
    CURSOR_FILE,
    FAILED_EVENT,
    Notifier,
    notice_kind,
    terminal_banner,
)
from agentbox.core.engine.run_store import RunStore
from agentbox.core.paths import ProjectPaths
from tests.engine.support import setup_crew
from tests.notify.support import calls, live, recorder, wait_for, write_config


class Saver:
    """Saves a run like the engine: state and log, then the notifier (again when it logged a problem)."""

    def __init__(self, project: ProjectPaths, run_id: str, *, engine: bool = True) -> None:
        self.store = RunStore(project)
        self.run = self.store.load(run_id)
        if engine:
            live(self.run)
        elif self.run.engine is not None:  # what it says is of another process (one killed, say)
            self.run.engine = EngineHolder(pid=os.getppid(), started=self.run.engine.started)
        self.ledger = RunLedger(self.run, clock=time.time)
        self.notifier = Notifier(project, run_id, log=self.ledger.event, environ={"PATH": os.environ["PATH"]})

    def save(self) -> None:
        self.store.save(self.run)
        if self.notifier.after_save(self.run):
            self.save()

    def log(self) -> list[dict[str, Any]]:
        return self.store.events(self.run.id)[0]


@pytest.fixture
def run_id(project: Path) -> str:
    return runs.create_run(setup_crew(project), "build the thing").id


def _hooks(tmp_path: Path, timeout_s: float = 10, **extra: str) -> Path:
    argv, log = recorder(tmp_path)
    lines = [f"  on_checkpoint: {json.dumps(argv)}", f"  on_run_end: {json.dumps(argv)}",
             f"  on_failure: {json.dumps(argv)}", f"  timeout_s: {timeout_s}"]
    lines += [f"  {key}: {json.dumps(value)}" for key, value in extra.items()]
    write_config("notify:\n  desktop: false\nhooks:\n" + "\n".join(lines) + "\n")
    return log


def _delivered(saver: Saver, log: Path, count: int) -> list[dict[str, Any]]:
    return wait_for(lambda: (c := calls(log)) and len(c) >= count and c, what=f"{count} hook call(s)")


def test_a_checkpoint_and_the_run_end_reach_their_hooks_once(project: Path, run_id: str, tmp_path: Path) -> None:
    log = _hooks(tmp_path)
    saver = Saver(ProjectPaths(project), run_id)
    saver.ledger.event("dispatch", "plan turn of lead", None)
    cp = saver.ledger.checkpoint("question", "English or French?", task=None, role="builder")
    saver.save()
    (first,) = _delivered(saver, log, 1)
    seq = saver.run.seq
    assert first["payload"]["id"] == f"{run_id}:{seq}" and first["payload"]["kind"] == "checkpoint"
    assert first["payload"]["checkpoint"]["question"] == "English or French?"
    assert first["payload"]["hook"] == "on_checkpoint"
    assert first["payload"]["command"] == f'agentbox answer {run_id} {cp.id} "..."'
    assert first["env"]["AGENTBOX_HOOK"] == "on_checkpoint" and first["env"]["AGENTBOX_CHECKPOINT"] == cp.id
    assert first["env"]["AGENTBOX_NOTIFICATION_ID"] == f"{run_id}:{seq}"
    assert first["env"]["AGENTBOX_PROJECT"] == str(project)
    saver.ledger.close_checkpoint(cp, "English")
    saver.ledger.event("checkpoint.answered", "cp-1 answered", "English")
    saver.save()
    saver.ledger.finish("done", "every step completed")
    saver.run.engine = None  # the engine lets go: what is left is delivered before save returns
    saver.save()
    assert [c["payload"]["kind"] for c in calls(log)] == ["checkpoint", "run_done"]
    assert calls(log)[1]["payload"]["hook"] == "on_run_end"
    cursor = json.loads((RunStore(ProjectPaths(project)).dir(run_id) / CURSOR_FILE).read_text())
    assert cursor["seq"] == saver.run.seq and cursor["unlogged"] == []
    again = Saver(ProjectPaths(project), run_id, engine=False)  # `agentbox cancel` of the ended run, say
    again.save()
    assert len(calls(log)) == 2


def test_a_failed_run_goes_to_the_run_end_and_the_failure_hooks(project: Path, run_id: str, tmp_path: Path) -> None:
    log = _hooks(tmp_path)
    saver = Saver(ProjectPaths(project), run_id, engine=False)
    saver.ledger.finish("failed", "the lead's plan turn failed")
    saver.save()
    assert sorted(c["payload"]["hook"] for c in calls(log)) == ["on_failure", "on_run_end"]
    assert {c["payload"]["id"] for c in calls(log)} == {f"{run_id}:{saver.run.seq}"}


def test_a_resumed_engine_sends_only_what_was_not_delivered(project: Path, run_id: str, tmp_path: Path) -> None:
    log = _hooks(tmp_path)
    paths = ProjectPaths(project)
    first = Saver(paths, run_id)
    first.ledger.checkpoint("question", "one?")
    first.save()
    _delivered(first, log, 1)
    second = Saver(paths, run_id, engine=False)  # no engine: the person answers, say; nothing is sent
    second.ledger.checkpoint("question", "two?")
    second.save()
    time.sleep(0.3)
    assert len(calls(log)) == 1
    resumed = Saver(paths, run_id)  # the next engine picks up from the cursor
    resumed.ledger.event("engine.started", "engine took the run", None)
    resumed.save()
    delivered = _delivered(resumed, log, 2)
    assert [c["payload"]["checkpoint"]["question"] for c in delivered] == ["one?", "two?"]


def test_an_engine_letting_go_does_not_wait_for_a_slow_hook(project: Path, run_id: str, tmp_path: Path) -> None:
    argv, log = recorder(tmp_path)
    slow = " ".join(argv) + " && sleep 4"
    write_config(f"notify:\n  desktop: false\nhooks:\n  on_checkpoint: {json.dumps(slow)}\n"
                 f"  on_run_end: {json.dumps(argv)}\n  timeout_s: 20\n")
    paths = ProjectPaths(project)
    first = Saver(paths, run_id)
    first.ledger.checkpoint("question", "one?")
    first.save()
    wait_for(lambda: calls(log), what="the hook to start")
    first.run.engine = None  # Ctrl-C: the engine saves and lets go of a run that goes on
    started = time.monotonic()
    first.save()
    assert time.monotonic() - started < notify.STOP_GRACE_S + 1
    resumed = Saver(paths, run_id)  # the next engine sends it again: it was not marked sent
    resumed.save()
    wait_for(lambda: len(calls(log)) == 2, what="the notification sent again")
    assert calls(log)[0]["payload"]["id"] == calls(log)[1]["payload"]["id"]
    resumed.ledger.finish("done", "ok")
    resumed.run.engine = None
    resumed.save()  # a finished run: waits for the slow hook and the run's end
    assert [c["payload"]["kind"] for c in calls(log)] == ["checkpoint", "checkpoint", "run_done"]


def test_nothing_configured_still_moves_the_cursor(project: Path, run_id: str) -> None:
    write_config("notify:\n  desktop: false\n")
    saver = Saver(ProjectPaths(project), run_id)
    assert not saver.notifier.has_channels
    saver.ledger.checkpoint("question", "one?")
    saver.save()
    cursor = json.loads((RunStore(ProjectPaths(project)).dir(run_id) / CURSOR_FILE).read_text())
    assert cursor["seq"] == saver.run.seq
    assert saver.notifier._worker is None


def test_a_desktop_session_gets_a_notification(project: Path, run_id: str, tmp_path: Path) -> None:
    write_config("notify:\n  desktop: true\n")
    fake = tmp_path / "notify-send"
    fake.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" >> {tmp_path / 'shown.txt'}\n")
    fake.chmod(0o755)
    saver = Saver(ProjectPaths(project), run_id, engine=False)
    saver.notifier = Notifier(ProjectPaths(project), run_id, log=saver.ledger.event,
                              environ={"PATH": str(tmp_path), "DISPLAY": ":0"})
    saver.ledger.finish("failed", "the lead's plan turn failed")
    saver.save()
    shown = (tmp_path / "shown.txt").read_text().splitlines()
    assert shown[:4] == ["--app-name=agentbox", "--urgency=critical", "--", "agentbox: run failed"]
    assert "the lead's plan turn failed" in shown[4]


def test_notify_send_absent_is_silent(project: Path, run_id: str) -> None:
    write_config("notify:\n  desktop: true\n")
    saver = Saver(ProjectPaths(project), run_id)  # PATH without notify-send, no display
    assert saver.notifier.desktop is None
    saver.ledger.finish("done", "ok")
    saver.save()
    assert [e for e in saver.log() if e["type"] == FAILED_EVENT] == []


def test_a_hanging_hook_never_stalls_the_saves_and_is_logged(project: Path, run_id: str, tmp_path: Path) -> None:
    write_config(f"notify:\n  desktop: false\nhooks:\n  on_checkpoint: sleep 60\n  timeout_s: 1\n"
                 f"  on_run_end: {json.dumps(recorder(tmp_path)[0])}\n")
    saver = Saver(ProjectPaths(project), run_id)
    saver.ledger.checkpoint("question", "one?")
    started = time.monotonic()
    saver.save()
    assert time.monotonic() - started < 0.5  # delivery is in the background

    def logged() -> list[dict[str, Any]]:
        saver.ledger.event("turn", "a turn ended", None)  # the engine goes on saving meanwhile
        saver.save()
        return [e for e in saver.log() if e["type"] == FAILED_EVENT]

    (failed,) = wait_for(logged, timeout=15, what="the hook's failure in the log")
    assert failed["what"] == "hook on_checkpoint did not finish in 1 s: its process group was killed"
    assert failed["notification"] == f"{run_id}:1" and failed["channel"] == "hook:on_checkpoint"
    cursor = json.loads((RunStore(ProjectPaths(project)).dir(run_id) / CURSOR_FILE).read_text())
    assert cursor["unlogged"] == []


def test_a_problem_not_yet_in_the_log_survives_a_crash(project: Path, run_id: str, tmp_path: Path) -> None:
    write_config("notify:\n  desktop: false\nhooks:\n  on_checkpoint: exit 7\n")
    paths = ProjectPaths(project)
    saver = Saver(paths, run_id)
    saver.ledger.checkpoint("question", "one?")
    saver.store.save(saver.run)
    saver.notifier.after_save(saver.run)
    wait_for(lambda: json.loads((RunStore(paths).dir(run_id) / CURSOR_FILE).read_text())["unlogged"]
             if (RunStore(paths).dir(run_id) / CURSOR_FILE).exists() else None, what="the problem on disk")
    # the engine dies before its next save: the problem waits in notified.json for the next engine
    resumed = Saver(paths, run_id)
    resumed.save()
    failed = [e for e in resumed.log() if e["type"] == FAILED_EVENT]
    assert [e["what"] for e in failed] == ["hook on_checkpoint exited with 7"]
    resumed.save()
    assert len([e for e in resumed.log() if e["type"] == FAILED_EVENT]) == 1


def test_the_backlog_is_bounded_and_read_on(project: Path, run_id: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(notify, "MAX_BACKLOG", 2)
    log = _hooks(tmp_path)
    saver = Saver(ProjectPaths(project), run_id)
    for n in range(5):
        saver.ledger.checkpoint("question", f"q{n}?")
    saver.save()
    assert len(saver.notifier._backlog) <= 2

    def all_sent() -> bool:
        saver.save() if saver.run.outbox else saver.notifier.after_save(saver.run)
        return len(calls(log)) >= 5

    wait_for(all_sent, what="five notifications")
    assert [c["payload"]["checkpoint"]["question"] for c in calls(log)] == [f"q{n}?" for n in range(5)]


@pytest.mark.parametrize(("event", "kind", "hooks"), [
    ({"type": "checkpoint", "what": "cp-1 (question) waits"}, "checkpoint", ("on_checkpoint",)),
    ({"type": "run.finished", "what": "run done"}, "run_done", ("on_run_end",)),
    ({"type": "run.finished", "what": "run cancelled"}, "run_cancelled", ("on_run_end",)),
    ({"type": "run.finished", "what": "run failed"}, "run_failed", ("on_run_end", "on_failure")),
    ({"type": "run.status", "what": "run is circuit_broken", "human_required": True}, "circuit_broken", ("on_failure",)),
    ({"type": "run.status", "what": "run is blocked", "human_required": True}, "blocked", ("on_failure",)),
    ({"type": "run.status", "what": "run is paused: the disk is full", "human_required": True}, "paused",
     ("on_failure",)),
])
def test_what_needs_a_person(event: dict[str, Any], kind: str, hooks: tuple[str, ...]) -> None:
    assert notice_kind(event) == (kind, hooks)


@pytest.mark.parametrize("event", [
    {"type": "run.status", "what": "run is waiting_user", "human_required": True},  # its checkpoint says it
    {"type": "run.status", "what": "run is running"},
    {"type": "escalation", "what": "escalated", "human_required": True},  # a checkpoint follows
    {"type": "dispatch", "what": "work turn"}, {"type": FAILED_EVENT, "what": "hook failed"},
])
def test_what_needs_nobody(event: dict[str, Any]) -> None:
    assert notice_kind(event) is None


def test_the_foreground_banner() -> None:
    assert terminal_banner({"type": "run.finished", "run": "run-1", "what": "run done", "why": "all approved"}) == (
        "⚑ run-1 ended: done — all approved")
    assert terminal_banner({"type": "checkpoint", "run": "run-1", "what": "cp-1 waits"}) is None


def test_the_config_is_the_users_own(project: Path, run_id: str) -> None:
    crew = project / ".agent-box" / "crew.yaml"
    assert "hooks" not in crew.read_text()
    assert Saver(ProjectPaths(project), run_id).notifier.config == load_user_config()
