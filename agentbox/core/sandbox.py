"""The bubblewrap sandbox: a pure function from a policy to the bwrap argv.

Layout inside the sandbox, mounted in this order (later mounts cover earlier ones):

1. the host filesystem read-only (`--ro-bind / /`), fresh `/dev`, `/proc`, private `/tmp`;
2. the user's home, `AGENT_BOX_HOME` and other hidden roots replaced by empty tmpfs —
   other profiles, `~/.ssh`, the real `~/.claude` are gone;
3. install dirs of the tool (and the Python running the scripted agent) bound back
   read-only when they lived under a hidden root;
4. the project at its own path, read-only;
5. the role's write scopes read-write (the whole project for a plain writer), then
   `.agent-box/` read-only again so no agent can edit crew or run state, hidden roots
   inside the project hidden again, then the run's artifact dir read-write;
6. the profile's tool config dirs read-write where the tool expects them.

pid/ipc/uts are unshared, the sandbox dies with its parent, the network is unshared
unless the profile allows it. `sandbox: none` bypasses all of this and must be asked
for explicitly by the profile.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from agentbox.core.errors import SandboxError, UsageError
from agentbox.core.runtimes.base import HomeBind

#: Host environment variables that pass into the sandbox (everything else is cleared).
PASSTHROUGH_ENV = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TERM", "COLORTERM", "TZ",
                   "NO_COLOR", "http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY",
                   "HTTPS_PROXY", "NO_PROXY", "SSL_CERT_FILE", "SSL_CERT_DIR",
                   "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE")


@dataclass(frozen=True)
class SandboxSpec:
    """Everything that decides what an agent can see and write."""

    project_root: Path
    """The project, bound at its own path."""
    writable: tuple[Path, ...]
    """Host dirs under the project the role may write (see `write_mounts`)."""
    protected: tuple[Path, ...]
    """Paths under writable ones that stay read-only (the project's `.agent-box/`)."""
    extra_rw: tuple[Path, ...]
    """Other writable dirs: the run's artifact dir, the turn's scratch dir."""
    homes: tuple[HomeBind, ...]
    """The profile's tool config, bound where the tool expects it."""
    hidden: tuple[Path, ...]
    """Directories replaced by an empty tmpfs: $HOME, AGENT_BOX_HOME."""
    ro_binds: tuple[Path, ...]
    """Dirs bound back read-only (tool install dirs, profile ro_binds)."""
    rw_binds: tuple[Path, ...] = ()
    """Extra writable host paths from the profile's sandbox policy."""
    sealed: tuple[Path, ...] = ()
    """Entries of writable dirs that stay read-only: the neighbours of a literal file scope."""
    network: bool = True
    """Share the host network namespace."""
    cwd: Path | None = None
    """Working directory inside the sandbox (default: the project root)."""
    env: Mapping[str, str] = field(default_factory=dict)
    """The complete environment inside the sandbox."""
    interactive: bool = False
    """Keep the controlling terminal (attach/launch); headless turns get a new session."""


def _under(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == root or path.is_relative_to(root) for root in roots)


def bwrap_argv(spec: SandboxSpec, command: list[str], bwrap: str = "bwrap") -> list[str]:
    """The full bwrap command line for `command` under `spec` (pure: no filesystem access)."""
    argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
            "--tmpfs", "/var/tmp", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--die-with-parent", "--clearenv"]
    if not spec.network:
        argv.append("--unshare-net")
    if not spec.interactive:
        argv.append("--new-session")
    for hidden in sorted(spec.hidden, key=lambda p: len(p.parts)):
        argv += ["--tmpfs", str(hidden)]
    for path in sorted(set(spec.ro_binds), key=lambda p: len(p.parts)):
        argv += ["--ro-bind", str(path), str(path)]
    argv += ["--ro-bind", str(spec.project_root), str(spec.project_root)]
    # shallower first; at the same depth a sealed entry after the writable dir it is in,
    # and a deeper write scope (src/** beside a literal README.md) after the seal on src
    mounts = [(p, "--bind") for p in set(spec.writable)] + [(p, "--ro-bind") for p in set(spec.sealed)]
    for path, flag in sorted(mounts, key=lambda m: (len(m[0].parts), m[1] == "--ro-bind")):
        argv += [flag, str(path), str(path)]
    for path in sorted(set(spec.protected), key=lambda p: len(p.parts)):
        if any(_under(path, [w]) for w in spec.writable):
            argv += ["--ro-bind", str(path), str(path)]
    # the project binds uncover hidden dirs inside the project (AGENT_BOX_HOME when the
    # project is the home dir): hide them again, with what had to be bound back in them
    inside = sorted((h for h in set(spec.hidden) if h != spec.project_root and h.is_relative_to(spec.project_root)),
                    key=lambda p: len(p.parts))
    for hidden in inside:
        argv += ["--tmpfs", str(hidden)]
    for path in sorted(set(spec.ro_binds), key=lambda p: len(p.parts)):
        if _under(path, inside):
            argv += ["--ro-bind", str(path), str(path)]
    for path in sorted(set(spec.extra_rw) | set(spec.rw_binds), key=lambda p: len(p.parts)):
        argv += ["--bind", str(path), str(path)]
    for bind in spec.homes:
        argv += ["--bind", str(bind.source), str(bind.target)]
    argv += ["--chdir", str(spec.cwd or spec.project_root)]
    for key, value in sorted(spec.env.items()):
        argv += ["--setenv", key, value]
    return [*argv, "--", *command]


# ----------------------------------------------------------------------------- helpers (impure)


@functools.lru_cache(maxsize=4096)
def glob_static_prefix(pattern: str) -> tuple[tuple[str, ...], bool]:
    """The literal leading path components of a write glob, and whether the whole pattern is literal."""
    parts = PurePosixPath(pattern.strip("/") or ".").parts
    static: list[str] = []
    for part in parts:
        if any(ch in part for ch in "*?["):
            return tuple(static), False
        static.append(part)
    return tuple(static), True


def resolve_write_scopes(project_root: Path, scopes: list[str] | None,
                         made: list[Path] | None = None) -> tuple[Path, ...]:
    """Host paths a role may write: the static prefix of each glob, or the literal path.

    `None` means the whole project; `[]` means read-only. A glob such as `src/**` or
    `docs/*.md` makes its directory (`src/`, `docs/`) writable, created if missing: the
    mount is as fine as the glob's literal prefix, so `docs/*.md` lets the role write any
    file under `docs/`. A literal path is returned as it is: an existing directory, a
    missing `name/` (created), or a file that may not exist yet (its directory is
    created); `write_mounts` turns these into mounts. Directories created are appended
    to `made` (`remove_made_dirs(made)` takes back those left empty after the turn).
    A scope that escapes the project is refused.
    """
    if scopes is None:
        return (project_root,)
    root = project_root.resolve()
    made = made if made is not None else []
    result: list[Path] = []
    for scope in scopes:
        static, literal = glob_static_prefix(scope)
        candidate = (project_root / Path(*static)) if static else project_root
        resolved = candidate.resolve()
        if not (resolved == root or resolved.is_relative_to(root)) or Path(scope).is_absolute():
            raise UsageError(f"write scope {scope!r} points outside the project {project_root}")
        if literal and not candidate.is_dir() and not scope.endswith("/"):
            _make_dirs(candidate.parent, made)  # a file, there or not yet
        else:
            _make_dirs(candidate, made)
        result.append(candidate)
    return tuple(result)


MAX_SEALED_ENTRIES = 500
"""Most entries sealed read-only beside a literal file scope (one bind mount each)."""


def write_mounts(writable: Iterable[Path]) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
    """The writable dirs and the sealed (read-only) entries in them, for resolved write scopes.

    A literal file scope needs its directory writable, since tools write files atomically
    (a temporary file beside it, then a rename): claude's Write and Edit do. So its
    directory is bound writable and every other existing entry in it is sealed read-only
    again: the role can write that file and create new files there, but change nothing
    that exists beside it. A file inside a writable directory scope needs nothing more.
    """
    scopes = list(dict.fromkeys(writable))
    dirs = [p for p in scopes if p.is_dir()]
    files = [p for p in scopes if not p.is_dir() and not _under(p.parent, dirs)]
    parents = list(dict.fromkeys(f.parent for f in files))
    keep = set(files) | set(dirs)
    sealed: list[Path] = []
    for parent in parents:
        try:
            entries = sorted(parent.iterdir())
        except OSError:
            continue
        if len(entries) > MAX_SEALED_ENTRIES:
            names = ", ".join(f.name for f in files if f.parent == parent)
            raise SandboxError(f"{parent} holds {len(entries)} entries: too many to seal around the write scope {names}",
                               f"give the role the directory instead (`{parent.name}/**`), or move the file")
        sealed += [e for e in entries if e not in keep and not e.is_symlink()]  # deeper scopes bind over the seal
    return tuple(dirs + parents), tuple(sealed)


def _make_dirs(directory: Path, made: list[Path]) -> None:
    """mkdir -p, noting each directory created (outermost first)."""
    missing = [d for d in (directory, *directory.parents) if not d.exists()]
    try:
        for d in reversed(missing):
            with contextlib.suppress(FileExistsError):
                d.mkdir()
                made.append(d)
    except FileNotFoundError:  # a parent vanished meanwhile (another turn tidied it)
        directory.mkdir(parents=True, exist_ok=True)


def remove_made_dirs(made: list[Path]) -> None:
    """Remove the directories made for write scopes that the turn left empty (innermost first)."""
    for path in reversed(made):
        with contextlib.suppress(OSError):
            path.rmdir()  # only when empty


@functools.lru_cache(maxsize=64)
def install_roots(executable: Path) -> frozenset[Path]:
    """Directories a tool needs to run: its install prefix, its interpreter's, symlink targets."""
    roots: set[Path] = set()
    seen: set[Path] = set()
    pending = [executable]
    while pending:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        for candidate in {path.absolute(), path.resolve()}:
            roots.add(_install_root(candidate))
        real = path.resolve()
        interpreter = _shebang_interpreter(real)
        if interpreter is not None:
            pending.append(interpreter)
        cfg = real.parent.parent / "pyvenv.cfg"
        if cfg.is_file():
            for line in cfg.read_text(errors="replace").splitlines():
                key, _, value = line.partition("=")
                if key.strip() == "home" and value.strip():
                    roots.add(_install_root(Path(value.strip()) / "python"))
    return frozenset(roots)


def _install_root(path: Path) -> Path:
    parts = path.parts
    if "node_modules" in parts:
        return Path(*parts[: parts.index("node_modules")])
    parent = path.parent
    if parent.name == "bin":
        return parent.parent
    return parent


def _shebang_interpreter(path: Path) -> Path | None:
    try:
        with path.open("rb") as handle:
            head = handle.read(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode(errors="replace").split()
    if not words:
        return None
    program = words[0]
    if program.endswith("/env"):
        # `env [-S] [-i] [NAME=value ...] program [args]`: the first plain word is the program
        names = [word for word in words[1:] if not word.startswith("-") and "=" not in word]
        found = shutil.which(names[0]) if names else None
        return Path(found) if found else None
    return Path(program)


@functools.lru_cache(maxsize=1)
def python_roots() -> frozenset[Path]:
    """What the running Python needs inside a sandbox (venv, base install, agentbox itself)."""
    roots = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), Path(sys.prefix).absolute()}
    roots |= install_roots(Path(sys.executable))
    roots.add(Path(__file__).resolve().parent.parent)
    return frozenset(roots)


def binds_needed(paths: Iterable[Path], hidden: Iterable[Path]) -> tuple[Path, ...]:
    """Of `paths`, those the hidden dirs and private /tmp would cover, minus nested ones."""
    covers = [*hidden, Path("/tmp"), Path("/var/tmp")]
    needed = sorted({p for p in paths if _under(p, covers) and p.exists()}, key=lambda p: len(p.parts))
    pruned: list[Path] = []
    for path in needed:
        if not any(path.is_relative_to(kept) for kept in pruned):
            pruned.append(path)
    return tuple(pruned)


def require_bwrap() -> str:
    """The bwrap executable, or a SandboxError with the install hint."""
    found = shutil.which("bwrap")
    if found is None:
        raise SandboxError(
            "bubblewrap (bwrap) is not installed; agentbox runs every agent inside it",
            "install it (`apt-get install bubblewrap`), or set `sandbox: none` in the profile "
            "to run without isolation (not recommended)",
        )
    return found


def sandbox_env(base: Mapping[str, str], home: Path, extra: Mapping[str, str]) -> dict[str, str]:
    """The environment inside the sandbox: a short allowlist of the host's plus `extra`."""
    env = {key: base[key] for key in PASSTHROUGH_ENV if key in base}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.setdefault("LANG", "C.UTF-8")
    env["HOME"] = str(home)
    env["USER"] = base.get("USER", "agent")
    env.update(extra)
    return env


def host_env() -> dict[str, str]:
    """The host environment (a seam for tests)."""
    return dict(os.environ)
