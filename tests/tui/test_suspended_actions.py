"""Actions that hand the terminal to another program: attach (the member's tool, for real,
in its sandbox) and $EDITOR. The headless test driver cannot suspend, so `App.suspend` is
replaced by a no-op; everything else (the command, the sandbox, the tool) is real."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentbox.core.paths import ProjectPaths
from agentbox.tui import actions
from agentbox.tui.factory import make_app
from tests.tui.conftest import dashboard_loaded

pytestmark = pytest.mark.bwrap


def no_suspend(app: Any, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Make suspending a no-op and record each command run while "suspended"."""
    monkeypatch.setattr(app, "suspend", contextlib.nullcontext)
    calls: list[list[str]] = []
    real_call = subprocess.call

    def call(argv: list[str], **kwargs: Any) -> int:
        calls.append(_expanded(argv))
        if Path(argv[0]).name == "bwrap":  # the attached tool: a person types one prompt, then quits
            return subprocess.run(argv, input=b"hello from the dashboard\n/exit\n", stdout=subprocess.DEVNULL,
                                  check=False, **kwargs).returncode
        return real_call(argv, **kwargs)

    monkeypatch.setattr(actions.subprocess, "call", call)
    return calls


def _expanded(argv: list[str]) -> list[str]:
    """bwrap's whole argv: what `--args FD` hands it through a memory file, read back while the fd is open."""
    if "--args" not in argv:
        return list(argv)
    at = argv.index("--args")
    data = os.pread(int(argv[at + 1]), 1 << 22, 0)
    return [*argv[:at], *(a.decode() for a in data.split(b"\0")[:-1]), *argv[at + 2:]]


@contextlib.asynccontextmanager
async def suspending_dashboard(project: ProjectPaths, monkeypatch: pytest.MonkeyPatch
                               ) -> AsyncIterator[tuple[Any, Any, list[list[str]]]]:
    """The dashboard, loaded, with suspending made a no-op; yields the app, the pilot and the commands run."""
    app = make_app(project, sample_interval_s=None)
    async with app.run_test(size=(140, 40)) as pilot:
        calls = no_suspend(app, monkeypatch)
        await dashboard_loaded(pilot)
        yield app, pilot, calls


async def test_attach_runs_the_members_tool_in_its_sandbox_and_comes_back(
        project: ProjectPaths, agent_box_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with suspending_dashboard(project, monkeypatch) as (app, pilot, calls):
        board = app.dashboard
        assert board is not None
        board.action_attach("builder")
        await pilot.pause(0.1)
        [argv] = calls
        assert argv[0].endswith("bwrap") and "--new-session" not in argv  # interactive: keeps the terminal
        session = argv[argv.index("AGENTBOX_SESSION_ID") + 1]
        record = json.loads((project.sessions_dir / "builder" / f"{session}.json").read_text())
        assert record["owner"] == "builder"
        # the tool really ran: its own session file holds the prompt typed while attached
        native = next((agent_box_home / "bundled").glob(f"*/dot-scripted/sessions/{session}.json"))
        assert "hello from the dashboard" in native.read_text()
        assert app.screen is board  # back on the dashboard
        # and agentbox's own history of the session holds the typed turn, marked interactive
        turns_file = project.sessions_dir / "builder" / f"{session}.turns.jsonl"
        turns = [json.loads(line) for line in turns_file.read_text().splitlines()]
        assert [(t["prompt"], t["interactive"], t["status"]) for t in turns] == [
            ("hello from the dashboard", True, "ok")], turns
        assert turns[0]["text"]
        record = json.loads((project.sessions_dir / "builder" / f"{session}.json").read_text())
        assert record["turns"] == 1 and record["totals"]["unknown_usage_turns"] == 1


async def test_edit_opens_the_file_in_editor_and_comes_back(
        project: ProjectPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    editor = tmp_path / "fake-editor"
    editor.write_text('#!/bin/sh\necho "edited in the editor" >> "$1"\n')
    editor.chmod(0o755)
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.setenv("EDITOR", str(editor))
    notes = project.root / "notes.md"
    notes.write_text("first line\n")
    async with suspending_dashboard(project, monkeypatch) as (app, pilot, calls):
        board = app.dashboard
        assert board is not None
        board.action_edit_artifact(str(notes))
        await pilot.pause(0.1)
        assert calls == [[str(editor), str(notes)]]
        assert notes.read_text() == "first line\nedited in the editor\n"
        assert app.screen is board


async def test_shell_opens_in_the_tasks_place_in_its_sandbox_and_comes_back(
        project_at: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    project = project_at("executing")
    ran: list[subprocess.CompletedProcess[bytes]] = []

    def typed(argv: list[str], **kwargs: Any) -> int:  # the person types two commands, then leaves
        done = subprocess.run(argv, input=b"pwd\necho x > README.md; echo rc=$?\n", capture_output=True,
                              check=False, **kwargs)
        ran.append(done)
        return done.returncode

    async with suspending_dashboard(project, monkeypatch) as (app, pilot, calls):
        board = app.dashboard
        assert board is not None
        monkeypatch.setattr(actions.subprocess, "call", typed)
        board.action_shell("greet")
        await pilot.pause(0.1)
        [done] = ran
        assert Path(done.args[0]).name == "bwrap"
        lines = done.stdout.decode().splitlines()
        assert lines[0] == str(project.root) and lines[1] != "rc=0"  # README.md is outside greet's src/**
        assert "Read-only file system" in done.stderr.decode()
        assert not (project.root / "README.md").exists() or "x" not in (project.root / "README.md").read_text()
        assert app.screen is board
