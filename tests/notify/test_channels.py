"""The delivery channels as real processes and a real HTTP server on loopback."""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from agentbox.core.config.user_config import Webhook
from agentbox.core.engine.notify_channels import (
    desktop_command,
    post_webhook,
    run_hook,
    show_desktop,
)
from tests.notify.support import Receiver, calls, receiver, recorder

PAYLOAD = {"id": "run-x:7", "kind": "checkpoint", "text": "cp-1 waits"}


@pytest.fixture
def webhook_server() -> Iterator[Receiver]:
    yield from receiver()


def test_a_hook_gets_the_payload_on_stdin_and_its_environment(tmp_path: Path) -> None:
    argv, log = recorder(tmp_path)
    env = {**os.environ, "AGENTBOX_RUN_ID": "run-x"}
    assert run_hook("on_checkpoint", argv, PAYLOAD, env, timeout_s=10, cwd=tmp_path) is None
    (call,) = calls(log)
    assert call["payload"] == PAYLOAD and call["env"]["AGENTBOX_RUN_ID"] == "run-x"


def test_a_string_hook_runs_through_the_shell_in_the_project(tmp_path: Path) -> None:
    problem = run_hook("on_run_end", "cat > got.json && pwd > where.txt", PAYLOAD, dict(os.environ),
                       timeout_s=10, cwd=tmp_path)
    assert problem is None
    assert json.loads((tmp_path / "got.json").read_text()) == PAYLOAD
    assert (tmp_path / "where.txt").read_text().strip() == str(tmp_path)


def test_a_failing_hook_says_how_with_its_stderr(tmp_path: Path) -> None:
    problem = run_hook("on_failure", "echo 'no route to pager' >&2; exit 3", PAYLOAD, dict(os.environ),
                       timeout_s=10, cwd=tmp_path)
    assert problem == "hook on_failure exited with 3: no route to pager"
    missing = run_hook("on_failure", [str(tmp_path / "nope")], PAYLOAD, dict(os.environ), timeout_s=10, cwd=tmp_path)
    assert missing is not None and missing.startswith("hook on_failure could not start: ")


def test_a_hanging_hook_is_killed_with_its_whole_process_group(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    command = f"sleep 300 & echo $! > {pids}; sleep 300"
    started = time.monotonic()
    problem = run_hook("on_checkpoint", command, PAYLOAD, dict(os.environ), timeout_s=1, cwd=tmp_path)
    assert problem == "hook on_checkpoint did not finish in 1 s: its process group was killed"
    assert time.monotonic() - started < 8
    child = int(pids.read_text())
    deadline = time.monotonic() + 5
    while psutil.pid_exists(child) and psutil.Process(child).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the hook's background child survived"
        time.sleep(0.05)


def test_a_hook_that_ignores_its_stdin_is_not_a_problem(tmp_path: Path) -> None:
    big = {**PAYLOAD, "text": "x" * 200_000}
    assert run_hook("on_run_end", "exit 0", big, dict(os.environ), timeout_s=10, cwd=tmp_path) is None


def test_the_webhook_posts_the_json(webhook_server: Receiver) -> None:
    hook = Webhook(url=webhook_server.url, headers={"Authorization": "Bearer ${NTFY_TOKEN}"})
    assert post_webhook(hook, PAYLOAD, {"NTFY_TOKEN": "s3cret"}) is None
    (post,) = webhook_server.posts
    assert post["body"] == PAYLOAD and post["path"] == "/hook"
    assert post["headers"]["Authorization"] == "Bearer s3cret"
    assert post["headers"]["Content-Type"] == "application/json"


def test_a_failing_webhook_is_retried_until_it_answers() -> None:
    waits: list[float] = []
    with Receiver([500, 503]) as flaky:
        assert post_webhook(Webhook(url=flaky.url, retries=3), PAYLOAD, {}, sleep=waits.append) is None
        assert len(flaky.posts) == 3 and all(p["body"] == PAYLOAD for p in flaky.posts)
    assert waits == [0.5, 1.0]


def test_a_webhook_that_keeps_failing_says_so_without_its_url() -> None:
    with Receiver([500, 500, 500]) as down:
        problem = post_webhook(Webhook(url=down.url + "?token=s3cret", retries=2), PAYLOAD, {}, sleep=lambda _s: None)
        assert len(down.posts) == 3
    assert problem is not None and problem.startswith("webhook to 127.0.0.1 failed after 3 attempt(s): HTTP 500")
    assert "s3cret" not in problem


def test_a_refused_webhook_is_not_retried() -> None:
    with Receiver([404]) as wrong:
        problem = post_webhook(Webhook(url=wrong.url, retries=3), PAYLOAD, {}, sleep=lambda _s: None)
        assert len(wrong.posts) == 1
    assert problem is not None and "after 1 attempt(s): HTTP 404" in problem


def test_an_unreachable_webhook_fails_after_its_retries() -> None:
    problem = post_webhook(Webhook(url="http://127.0.0.1:9/x", retries=1, timeout_s=1), PAYLOAD, {},
                           sleep=lambda _s: None)
    assert problem is not None and "failed after 2 attempt(s)" in problem


def test_a_webhook_naming_an_unset_variable_is_not_sent() -> None:
    problem = post_webhook(Webhook(url="https://hooks.example/${NOT_SET_HERE}"), PAYLOAD, {})
    assert problem == "webhook not sent: ${NOT_SET_HERE} is not set in agentbox's environment"


def _fake_notify_send(directory: Path) -> Path:
    script = directory / "notify-send"
    script.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {directory / 'shown.txt'}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_no_desktop_without_notify_send_or_a_session(tmp_path: Path) -> None:
    _fake_notify_send(tmp_path)
    assert desktop_command({"PATH": str(tmp_path)}) is None  # headless: nobody to show it to
    assert desktop_command({"PATH": str(tmp_path / "empty"), "DISPLAY": ":0"}) is None  # not installed
    assert desktop_command({"PATH": str(tmp_path), "DBUS_SESSION_BUS_ADDRESS": "unix:path=/x"}) == str(
        tmp_path / "notify-send")


def test_a_desktop_notification_goes_through_notify_send(tmp_path: Path) -> None:
    command = desktop_command({"PATH": str(tmp_path), "DISPLAY": ":0"}) if _fake_notify_send(tmp_path) else None
    assert command is not None
    show_desktop(command, "agentbox: run done", "-goal text", urgent=False, environ={"PATH": str(tmp_path)})
    assert (tmp_path / "shown.txt").read_text().splitlines() == [
        "--app-name=agentbox", "--urgency=normal", "--", "agentbox: run done", "-goal text"]


def test_a_desktop_notification_shows_markup_and_escapes_as_text(tmp_path: Path) -> None:
    command = desktop_command({"PATH": str(tmp_path), "DISPLAY": ":0"}) if _fake_notify_send(tmp_path) else None
    assert command is not None
    show_desktop(command, "cp-1\x1b[2J waits", "<b>yes</b> & <a href='x'>no</a>\x1b]52;c;eA==\x07", urgent=True,
                 environ={"PATH": str(tmp_path)})
    assert (tmp_path / "shown.txt").read_text().splitlines()[-2:] == [
        "cp-1␛[2J waits", "&lt;b&gt;yes&lt;/b&gt; &amp; &lt;a href='x'&gt;no&lt;/a&gt;␛]52;c;eA==␇"]


def test_a_broken_desktop_is_silent(tmp_path: Path) -> None:
    broken = tmp_path / "notify-send"
    broken.write_text("#!/bin/sh\necho 'cannot connect to the bus' >&2\nexit 1\n")
    broken.chmod(0o755)
    show_desktop(str(broken), "t", "x", urgent=True, environ={})  # returns, raises nothing
    show_desktop(str(tmp_path / "gone"), "t", "x", urgent=True, environ={})
