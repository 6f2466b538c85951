"""Validated profiles kept as plain data, so a turn can start without pydantic or YAML.

Checking a profile.yaml takes its parser and its models (ruamel and pydantic, ~80 ms to
import), more than the rest of a one-turn command. Once a profile.yaml has passed that
check, what it said is written here as JSON, under `$AGENT_BOX_HOME/cache/profiles/`,
with the identity of the file it came from: its path, device, inode, size, mtime_ns and
ctime_ns and a BLAKE2b hash of its bytes, and a stamp of the agentbox code that checked it.
A later turn reads the file's bytes and identity again and uses the entry only when all
of them are equal; any edit changes the hash (an edit that keeps the size and puts the
mtime back with `touch -d` still changes the bytes, and the ctime, which no user can set),
so the file is checked again exactly as before, with the same messages.

An entry is a cache, never an authority: it is used only when it is a regular file (not
a symlink), owned by this user, readable and writable by nobody else, of a bounded size,
and its digest matches its content; anything else is ignored and replaced. Writing it
is atomic (a 0600 temp file renamed over it), and a failure to write is not an error.
What depends on other files (the scenario file, the bind targets) is checked on every
turn by the caller, not cached.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, NamedTuple

try:  # CPython's built-in BLAKE2, what hashlib.blake2b is, without hashlib's OpenSSL start-up (~3 ms)
    from _blake2 import blake2b
except ImportError:  # another interpreter
    from hashlib import blake2b

FORMAT = 1
"""The entry layout; an entry of another format is ignored."""
MAX_ENTRY_BYTES = 256 << 10
"""Largest entry read (a profile's data is a few hundred bytes)."""
MAX_SOURCE_BYTES = 1 << 20
"""Largest profile.yaml looked up here (what the YAML reader accepts; larger ones go to it and are refused)."""
_CHECKING_CODE = ("core/config/models.py", "core/validation.py", "core/config/secrets.py", "core/sandbox/egress.py", "core/sandbox/scopes.py",
                  "core/tools.py", "core/config/profiles.py", "core/config/profile_cache.py")
"""The modules whose code decides what a valid profile is: an entry made by other code is not used."""


class CachedRuntime(NamedTuple):
    """`runtime:` of a checked profile.yaml (the fields of `agentbox.core.config.models.Runtime`)."""

    tool: str
    model: str | None
    extra_args: tuple[str, ...]
    env: Mapping[str, str]
    pass_env: tuple[str, ...]
    command: str | None
    scenario: str | None


class CachedResources(NamedTuple):
    """`resources:` of a checked profile.yaml (the fields of `agentbox.core.config.models.Resources`)."""

    config_dir: str | None
    memory_mb: int | None = None


class CachedSandbox(NamedTuple):
    """`sandbox:` of a checked profile.yaml (the fields of `agentbox.core.config.models.SandboxPolicy`)."""

    network: bool | Literal["host"]
    allow: tuple[str, ...]
    ro_binds: tuple[str, ...]
    rw_binds: tuple[str, ...]


class CachedProfile(NamedTuple):
    """A checked profile.yaml as plain data, read the way `agentbox.core.config.models.Profile` is.

    Named tuples, not dataclasses: a one-turn command defines them at start-up, where a
    dataclass costs several times as much to make."""

    name: str
    display_name: str | None
    description: str | None
    runtime: CachedRuntime
    resources: CachedResources
    sandbox: CachedSandbox | Literal["none"]


class Source(NamedTuple):
    """What a profile.yaml was when it was read: its bytes and the identity of the file."""

    data: bytes
    identity: dict[str, Any]


def read_source(file: Path) -> Source | None:
    """The bytes and identity of `file` when it is a regular file (a symlink to one is followed,
    as the YAML reader does) of at most MAX_SOURCE_BYTES; None otherwise (the YAML reader
    then says what is wrong). Never blocks on a FIFO."""
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_SOURCE_BYTES:
            return None
        data = os.read(fd, MAX_SOURCE_BYTES + 1)
        while len(data) <= MAX_SOURCE_BYTES:
            more = os.read(fd, MAX_SOURCE_BYTES + 1 - len(data))
            if not more:
                break
            data += more
        if len(data) > MAX_SOURCE_BYTES:
            return None
    except OSError:
        return None
    finally:
        os.close(fd)
    identity = {"path": str(file), "dev": info.st_dev, "ino": info.st_ino, "size": info.st_size,
                "mtime_ns": info.st_mtime_ns, "ctime_ns": info.st_ctime_ns,
                "blake2b": _hash(data)}
    return Source(data, identity)


def _hash(data: bytes) -> str:
    return blake2b(data, digest_size=32).hexdigest()


def code_stamp(files: tuple[str, ...]) -> list[Any]:
    """Size and mtime of the checking code's `files` (under the package), and agentbox's version."""
    from agentbox import __version__
    from agentbox.core.paths import PACKAGE_DIR

    stamp: list[Any] = [__version__]
    for name in files:
        try:
            info = os.stat(PACKAGE_DIR / name)
            stamp.append([name, info.st_size, info.st_mtime_ns])
        except OSError:
            stamp.append([name, None, None])
    return stamp


def _code_stamp() -> list[Any]:
    return code_stamp(_CHECKING_CODE)


def write_entry(path: Path, body: Mapping[str, Any], *, sort_keys: bool = True) -> None:
    """Write `body` and its digest to `path` atomically, 0600 in a 0700 dir (errors are the caller's)."""
    data = json.dumps({"body": body, "digest": _digest(body)}, sort_keys=sort_keys).encode()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=".entry.", suffix=".tmp", dir=path.parent)  # mode 0600
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def _entry_path(cache_dir: Path, directory: Path, state_dir: Path) -> Path:
    key = _hash(f"{directory}\0{state_dir}".encode("utf-8", "surrogateescape"))[:32]
    return cache_dir / f"{key}.json"


def _digest(body: Mapping[str, Any]) -> str:
    return _hash(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())


def _read_entry(path: Path) -> dict[str, Any] | None:
    """The entry at `path` when it is safe to trust as a cache (see the module's docstring), else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if (not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077
                or info.st_size > MAX_ENTRY_BYTES):
            return None
        raw = os.read(fd, MAX_ENTRY_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        entry = json.loads(raw)
    except ValueError:
        return None
    body = entry.get("body") if isinstance(entry, dict) else None
    if not isinstance(body, dict) or entry.get("digest") != _digest(body):
        return None
    return body


read_entry = _read_entry
"""What `crew_cache` keeps its entries by: the same rules, one reader (and `write_entry`, one writer)."""
content_hash = _hash


def _as_profile(data: Mapping[str, Any]) -> CachedProfile:
    """The plain data of a checked profile (as `_plain` wrote it) as a CachedProfile."""
    runtime = data["runtime"]
    sandbox = data["sandbox"]
    return CachedProfile(
        name=str(data["name"]), display_name=data["display_name"], description=data["description"],
        runtime=CachedRuntime(
            tool=str(runtime["tool"]), model=runtime["model"], extra_args=tuple(runtime["extra_args"]),
            env=dict(runtime["env"]), pass_env=tuple(runtime["pass_env"]), command=runtime["command"],
            scenario=runtime["scenario"]),
        resources=CachedResources(config_dir=data["resources"]["config_dir"],
                                  memory_mb=data["resources"].get("memory_mb")),
        sandbox="none" if sandbox == "none" else CachedSandbox(
            network=sandbox["network"], allow=tuple(sandbox["allow"]), ro_binds=tuple(sandbox["ro_binds"]),
            rw_binds=tuple(sandbox["rw_binds"])),
    )


def lookup(cache_dir: Path, directory: Path, state_dir: Path, source: Source) -> CachedProfile | None:
    """The checked profile that `source` (directory/profile.yaml as read now) was found to be, or None."""
    body = _read_entry(_entry_path(cache_dir, directory, state_dir))
    if (body is None or body.get("format") != FORMAT or body.get("identity") != source.identity
            or body.get("directory") != str(directory) or body.get("state_dir") != str(state_dir)
            or body.get("code") != _code_stamp()):
        return None
    try:
        return _as_profile(body["profile"])
    except (KeyError, TypeError, ValueError):
        return None


def store(cache_dir: Path, directory: Path, state_dir: Path, source: Source, profile: Mapping[str, Any]) -> None:
    """Keep `profile` (the plain data of the checked model) as what `source` is; a failure is ignored."""
    body = {"format": FORMAT, "identity": source.identity, "directory": str(directory),
            "state_dir": str(state_dir), "code": _code_stamp(), "profile": dict(profile)}
    try:
        _as_profile(profile)  # what cannot be read back is not kept
        write_entry(_entry_path(cache_dir, directory, state_dir), body)
    except (OSError, TypeError, ValueError, KeyError):
        return


def drop(cache_dir: Path, directory: Path, state_dir: Path) -> None:
    """Forget what was kept for this profile (it failed a check that depends on other files)."""
    with contextlib.suppress(OSError):
        os.unlink(_entry_path(cache_dir, directory, state_dir))
