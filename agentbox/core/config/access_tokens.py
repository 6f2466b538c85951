"""Secret tokens for agentbox's own control surfaces (`agentbox serve`, `agentbox mcp --http`).

Anything on the machine can connect to a loopback port; a token is what tells the person's
browser or client apart. Each token is made on first use (`secrets.token_urlsafe`, 256
bits), kept in `$AGENT_BOX_HOME/<name>` (mode 0600, written atomically under its final name,
never followed through a symlink), and compared in constant time. A token file that others
can read, or that holds something agentbox did not write, is an error, never used.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import re
import secrets
import stat
from pathlib import Path

from agentbox.core import store
from agentbox.core.errors import StateError
from agentbox.core.paths import agent_box_home
from agentbox.core.safe_io import read_bounded, write_new

_TOKEN = re.compile(r"^[A-Za-z0-9_-]{32,256}$")


def token_path(name: str) -> Path:
    """`$AGENT_BOX_HOME/<name>`."""
    return agent_box_home() / name


def token(name: str, *, rotate: bool = False) -> str:
    """The token stored under `name`; made (0600) when there is none yet, or anew with `rotate`."""
    path = token_path(name)
    if not rotate:
        found = _read(path)
        if found is not None:
            return found
    with store.locked(path):  # two first uses at once agree on one token
        found = None if rotate else _read(path)
        if found is None:
            found = secrets.token_urlsafe(32)
            _write(path, found)
    return found


def same(given: str | None, expected: str) -> bool:
    """Whether `given` is the token, taking the same time whatever was sent."""
    return given is not None and hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode())


def _read(path: Path) -> str | None:
    try:
        data = read_bounded(path, max_bytes=4096)
        mode = os.stat(path, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StateError(f"{path}: {exc.strerror or exc}", "delete it: a new token is made on next use") from None
    if stat.S_IMODE(mode) & 0o077:
        raise StateError(f"{path} can be read by other users (mode {stat.S_IMODE(mode):03o}): the token may be known",
                         "delete it: a new token is made on next use")
    found = data.decode("ascii", "replace").strip()
    if not _TOKEN.match(found):
        raise StateError(f"{path} does not hold a token agentbox made", "delete it: a new token is made on next use")
    return found


def _write(path: Path, value: str) -> None:
    """The token file: made 0600 under a temp name, renamed over the old one once complete."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    try:
        with store.disk_full_is_typed(path):
            write_new(temp, (value + "\n").encode())
            os.replace(temp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
