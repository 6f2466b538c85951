"""A foreground `agentbox run` talks to the person: it says how to answer what waits for them,
rings the bell and, on a terminal, asks inline; Ctrl-C says what became of the run.

The run is the real CLI in a subprocess, the crew the example project's scripted demo crew
(its builder asks whether docs/usage.md is English or French). The terminal is a pty.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentbox.core.admin.demo import DEMO_ANSWER, DEMO_GOAL
from tests.conftest import run_cli
from tests.engine.support import review_rule, setup_crew, task, write_profile

pytestmark = pytest.mark.bwrap

ANSWER_RE = re.compile(r'agentbox answer (run-[\w-]+) (cp-\d+) "YOUR ANSWER"')
PROMPT = "cp-1 — your answer (empty: later) > "


class Terminal:
    """`agentbox ARGS` on a pty: what it printed so far, and typing into it."""

    def __init__(self, cwd: Path, *args: str) -> None:
        pid, fd = pty.fork()
        if pid == 0:  # the child: a terminal 200 columns wide, then agentbox
            try:
                fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
                os.chdir(cwd)
                os.execv(sys.executable, [sys.executable, "-m", "agentbox", *args])
            finally:
                os._exit(127)
        self.pid, self.fd, self.text = pid, fd, ""
        self.code: int | None = None

    def read_until(self, pattern: str, timeout: float = 40) -> re.Match[str]:
        """Read until `pattern` (a regex) matches what the terminal shows."""
        deadline = time.monotonic() + timeout
        while (match := re.search(pattern, self.text)) is None:
            assert time.monotonic() < deadline, f"{pattern!r} never came; the terminal shows:\n{self.text[-3000:]}"
            if select.select([self.fd], [], [], 0.1)[0]:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:  # the child is gone
                    chunk = b""
                if not chunk:
                    raise AssertionError(f"{pattern!r} never came; it exited showing:\n{self.text[-3000:]}")
                self.text += chunk.decode("utf-8", "replace")
        return match

    def type(self, keys: str) -> None:
        os.write(self.fd, keys.encode())

    def wait(self, timeout: float = 30) -> int:
        """Read to the end; the exit code."""
        deadline = time.monotonic() + timeout
        with contextlib.suppress(AssertionError):
            self.read_until(r"\Z(?!x)x", timeout)  # drains until EOF (never matches)
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.code = os.waitstatus_to_exitcode(status)
                return self.code
            time.sleep(0.05)
        raise AssertionError("agentbox did not exit")

    def close(self) -> None:
        if self.code is None:
            with contextlib.suppress(ProcessLookupError, ChildProcessError):
                os.killpg(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
        os.close(self.fd)


@pytest.fixture
def terminal() -> Iterator[type[Terminal]]:
    opened: list[Terminal] = []

    class Opened(Terminal):
        def __init__(self, cwd: Path, *args: str) -> None:
            super().__init__(cwd, *args)
            opened.append(self)

    yield Opened
    for term in opened:
        term.close()


def plain(text: str) -> str:
    """The terminal's text without colour codes and carriage returns."""
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text).replace("\r", "")


# ----------------------------------------------------------------------------- on a terminal


def test_on_a_terminal_the_question_is_answered_inline(project: Path, terminal: type[Terminal]) -> None:
    term = terminal(project, "run", DEMO_GOAL)
    term.read_until(re.escape(PROMPT))
    shown = plain(term.text)
    assert "\a" in shown, "the bell rings"
    run_id, cp = ANSWER_RE.search(shown).groups()  # type: ignore[union-attr]
    assert cp == "cp-1"
    assert "cp-1 waits for you (task docs): Should docs/usage.md be written in English or in French?" in shown
    term.type(DEMO_ANSWER + "\r")
    term.read_until("cp-1: answer passed to builder")
    term.read_until(rf"run {run_id}: done")
    assert term.wait() == 0
    answered = run_cli("status", run_id, "--json", cwd=project)
    assert f'"answer": "{DEMO_ANSWER}"' in answered.out


def test_ctrl_c_on_a_terminal_says_what_became_of_the_run(project: Path, terminal: type[Terminal]) -> None:
    term = terminal(project, "run", DEMO_GOAL)
    term.read_until(re.escape(PROMPT))
    run_id = ANSWER_RE.search(plain(term.text)).group(1)  # type: ignore[union-attr]
    term.type("\x03")  # Ctrl-C: the terminal sends SIGINT to the foreground process group
    assert term.wait() == 130
    shown = plain(term.text)
    assert (f"interrupted: the engine of run {run_id} stopped and so did its running turns; nothing runs now "
            "(the run is saved as waiting_user, cp-1 still open; it is not cancelled)") in shown
    assert f"continue it: agentbox run --resume {run_id}" in shown
    assert f"or end it:   agentbox cancel {run_id}" in shown
    assert "Traceback" not in shown
    after = run_cli("status", run_id, cwd=project)
    assert "engine: not running" in after.out and f"agentbox run --resume {run_id}" in after.out

    resumed = terminal(project, "run", "--resume", run_id)  # the advice works: the question is asked again
    resumed.read_until(re.escape(PROMPT))
    resumed.type(DEMO_ANSWER + "\r")
    resumed.read_until(rf"run {run_id}: done")
    assert resumed.wait() == 0


def test_a_task_waiting_in_review_is_approved_inline(project: Path, terminal: type[Terminal]) -> None:
    """Two reviewers disagree (the critic raises a blocker the reviewer did not see): the task waits in
    review on a checkpoint, and the person approves it at the prompt."""
    blocker = {**review_rule("reject"), "id": "blocker"}
    blocker["do"]["reply_json"]["blocking_issues"][0]["severity"] = "blocker"
    write_profile("t-critic", [blocker])
    roles = {"lead": {"profile": "t-lead", "writes": []}, "builder": {"profile": "t-worker", "writes": ["src/**"]},
             "reviewer": {"profile": "t-reviewer", "writes": []}, "critic": {"profile": "t-critic", "writes": []}}
    setup_crew(project, tasks=[task("t1")], roles=roles, hierarchical={"reviewers": ["reviewer", "critic"]},
               sequential={"steps": ["builder"]})
    term = terminal(project, "run", "build the thing")
    match = term.read_until(r"(cp-\d+) — approve \[NOTE\], rework NOTE, or an answer \(empty: later\) > ")
    shown = plain(term.text)
    run_id = re.search(r"run (run-[\w-]+)", shown).group(1)  # type: ignore[union-attr]
    assert f"approve:    agentbox approve t1 --run {run_id}" in shown
    assert f'send back:  agentbox rework t1 --run {run_id} --note "WHAT TO FIX"' in shown
    assert f'answer:     agentbox answer {run_id} {match.group(1)} "YOUR ANSWER"' in shown
    assert "disagree" in shown, shown
    term.type("approve good enough for me\r")
    term.read_until("task t1 approved")
    term.read_until(rf"run {run_id}: done")
    assert term.wait() == 0
    state = run_cli("status", run_id, cwd=project).out
    assert re.search(r"t1\s+approved.*approve \(human\)", state), state


# ----------------------------------------------------------------------------- without a terminal


def test_without_a_terminal_the_commands_are_printed_and_stdin_is_never_read(project: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "agentbox", "run", DEMO_GOAL], cwd=project,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert proc.stdout is not None
        os.set_blocking(proc.stdout.fileno(), False)
        shown, deadline = "", time.monotonic() + 40
        while not ANSWER_RE.search(shown):
            assert time.monotonic() < deadline, shown
            time.sleep(0.1)
            shown += (proc.stdout.read() or b"").decode()
        command = ANSWER_RE.search(shown).group(0)  # type: ignore[union-attr]
        assert "your answer" not in shown and "\a" not in shown
        # the person copies the printed command into another terminal
        argv = [*command.split()[1:4], DEMO_ANSWER]
        answered = run_cli(*argv, cwd=project)
        assert answered.code == 0, answered.err
        assert proc.wait(timeout=40) == 0, "stdin stays open and unread: the run finishes anyway"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    shown += (proc.stdout.read() or b"").decode()
    assert re.search(r"run run-[\w-]+: done", shown), shown


def test_sigint_without_a_terminal_prints_how_to_resume(project: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "agentbox", "run", DEMO_GOAL], cwd=project,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            if ANSWER_RE.search(line):
                run_id = ANSWER_RE.search(line).group(1)  # type: ignore[union-attr]
                break
        else:
            raise AssertionError("no answer command was printed")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130
    assert f"interrupted: the engine of run {run_id} stopped" in err
    assert f"continue it: agentbox run --resume {run_id}" in err
    assert "Traceback" not in err
