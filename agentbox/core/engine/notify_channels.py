"""The ways a notification reaches the person: desktop, hooks, webhook.

Each channel takes one notification and returns `None` when it was delivered, or a
sentence saying what went wrong (the notifier logs it in the run's events). None of them
raises for a failure of the outside world, and each is bounded in time: a hook runs under
a timeout and its whole process group is killed after it; a webhook attempt has a timeout
and a bounded number of retries; a desktop notification that cannot be shown is silently
absent (a headless machine is not a problem).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from agentbox import __version__
from agentbox.core.config.secrets import MissingVariable, expand
from agentbox.core.config.user_config import HookCommand, Webhook
from agentbox.core.process import kill_tree
from agentbox.core.termtext import for_line, for_markup

DESKTOP_TIMEOUT_S = 5.0
"""Longest wait for `notify-send` (it talks to the session bus)."""
ERROR_TAIL_CHARS = 1000
"""How much of a failing hook's stderr, or a webhook's error body, goes into the run's log."""
WEBHOOK_BACKOFF_S = 0.5
"""The wait before the first webhook retry; it doubles for each further one."""
RETRIED_HTTP = frozenset({408, 429})
"""Client errors worth another attempt (server errors always are)."""


# ----------------------------------------------------------------------------- desktop


def desktop_command(environ: Mapping[str, str]) -> str | None:
    """`notify-send`'s path when the desktop offers notifications here, else None.

    A graphical session (a display, or a session bus) is needed: on a headless machine or
    over plain SSH there is nobody to show it to, and that is not an error.
    """
    if not any(environ.get(name) for name in ("DISPLAY", "WAYLAND_DISPLAY", "DBUS_SESSION_BUS_ADDRESS")):
        return None
    return shutil.which("notify-send", path=environ.get("PATH"))


def show_desktop(command: str, title: str, text: str, *, urgent: bool, environ: Mapping[str, str]) -> None:
    """Show a freedesktop notification; whatever goes wrong is ignored (the desktop is best effort).

    The body is markup to most notification servers: `text` is shown as it is, never as tags.
    """
    argv = [command, "--app-name=agentbox", f"--urgency={'critical' if urgent else 'normal'}", "--",
            for_line(title), for_markup(text)]
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env=dict(environ), start_new_session=True)
        try:
            proc.wait(timeout=DESKTOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)
            proc.wait(timeout=DESKTOP_TIMEOUT_S)


# ----------------------------------------------------------------------------- hooks


def hook_argv(command: HookCommand) -> list[str]:
    """A hook's argv: a string runs through /bin/sh -c, a list as it is (`~` expanded in its program)."""
    if isinstance(command, str):
        return ["/bin/sh", "-c", command]
    return [os.path.expanduser(command[0]), *command[1:]]


def run_hook(name: str, command: HookCommand, payload: dict[str, Any], env: Mapping[str, str], *,
             timeout_s: float, cwd: Path) -> str | None:
    """Run one hook with `payload` as JSON on its stdin; None when it exited 0, else what went wrong.

    The hook runs in its own session (process group); when it outlives `timeout_s` the
    group and every descendant that left it are killed.
    """
    data = json.dumps(payload, ensure_ascii=False, default=str).encode("utf-8")
    with tempfile.TemporaryFile() as errors:
        try:
            proc = subprocess.Popen(hook_argv(command), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                    stderr=errors, cwd=cwd if cwd.is_dir() else None, env=dict(env),
                                    start_new_session=True)
        except OSError as exc:
            return f"hook {name} could not start: {exc.strerror or exc}"
        try:
            proc.communicate(data, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.communicate(timeout=DESKTOP_TIMEOUT_S)
            return f"hook {name} did not finish in {timeout_s:g} s: its process group was killed"
        if proc.returncode != 0:
            errors.seek(0, os.SEEK_END)
            errors.seek(max(0, errors.tell() - ERROR_TAIL_CHARS))
            tail = errors.read().decode("utf-8", "replace").strip()
            ended = f"was killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exited with {proc.returncode}"
            return f"hook {name} {ended}" + (f": {tail}" if tail else "")
    return None


# ----------------------------------------------------------------------------- webhook


def post_webhook(webhook: Webhook, payload: dict[str, Any], environ: Mapping[str, str], *,
                 sleep: Callable[[float], None] = time.sleep) -> str | None:
    """POST `payload` as JSON; retried on network errors, timeouts, 5xx, 408 and 429.

    None when an attempt got a 2xx answer, else what went wrong (the URL is named by its
    host only: its path or query may hold a secret).
    """
    try:
        url = expand(webhook.url, environ)
        headers = {key: expand(value, environ) for key, value in webhook.headers.items()}
    except MissingVariable as exc:
        return f"webhook not sent: ${{{exc.name}}} is not set in agentbox's environment"
    import urllib.error  # with http.client and email: loaded only by an engine that has a webhook to call
    import urllib.request

    host = urlsplit(url).hostname or "?"
    body = json.dumps(payload, ensure_ascii=False, default=str).encode("utf-8")
    headers = {"Content-Type": "application/json", "User-Agent": f"agentbox/{__version__}", **headers}
    attempts = webhook.retries + 1
    last = ""
    for attempt in range(1, attempts + 1):
        retry = True
        try:
            request = urllib.request.Request(url, data=body, headers=headers, method="POST")
            with urllib.request.urlopen(request, timeout=webhook.timeout_s) as response:
                response.read(1 << 16)
            return None
        except urllib.error.HTTPError as exc:
            detail = exc.read(ERROR_TAIL_CHARS).decode("utf-8", "replace").strip() if exc.fp else ""
            last = f"HTTP {exc.code}" + (f": {detail}" if detail else "")
            retry = exc.code >= 500 or exc.code in RETRIED_HTTP
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            last = str(reason) or type(exc).__name__
            retry = not isinstance(exc, ValueError)  # an unusable URL does not get better
        if not retry or attempt == attempts:
            break
        sleep(WEBHOOK_BACKOFF_S * 2 ** (attempt - 1))
    return f"webhook to {host} failed after {attempt} attempt(s): {last}"
