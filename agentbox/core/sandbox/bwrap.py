"""The bubblewrap sandbox: a pure function from a policy to the bwrap argv.

Layout inside the sandbox, mounted in this order (later mounts cover earlier ones):

1. the host filesystem read-only (`--ro-bind / /`); a fresh `/dev` (itself read-only, with
   a small private `/dev/shm`), a fresh `/proc`; private, size-bounded `/tmp` and
   `/var/tmp`; `/run` (and a real `/var/run`) replaced by an empty tmpfs, so no host UNIX
   socket (Docker, D-Bus, gpg/ssh agents, `/run/user/<uid>`) can be reached, with only
   the name-resolution file bound back;
2. well-known host secrets readable by root (shadow files, host SSH keys, private TLS
   keys) masked; the user's home, `AGENT_BOX_HOME` and other hidden roots replaced by empty
   size-bounded tmpfs — other profiles, `~/.ssh`, the real `~/.claude` are gone;
3. install dirs of the tool (and the Python running the scripted agent) bound back
   read-only when they lived under a hidden root;
4. the project at its own path, read-only (a sparse worktree: its base, then its own dirs over it);
5. the role's write scopes (see `agentbox.core.sandbox.scopes`): directories read-write, file and
   one-level pattern scopes as a staged private view with every other entry bound back
   read-only and symlinks recreated, the parents of protected paths bound onto themselves;
   then version-control and agentbox metadata (`.git`, a worktree's admin dir,
   `.agent-box/`, `.hg`, …) and crew.yaml's protected paths read-only over everything, the
   run and session state under `.agent-box/` hidden (so no agent can read other sessions or
   hold the engine's locks), hidden roots inside the project hidden again, then the run's
   artifact dir and the turn's scratch dir read-write;
6. the profile's tool config dirs where the tool expects them (`agentbox.core.sandbox.tool_homes`):
   read-write with what the tool loads from them as settings or code (hooks, plugins, MCP
   servers, instructions, its bytecode) bound read-only again for headless turns, or a
   per-turn home with the profile's state dirs bound into it, so no turn plants what a
   later one runs.

Every capability is dropped (`--cap-drop ALL`, whoever runs agentbox, root included),
`no_new_privs` is set, and a seccomp filter (`agentbox.core.sandbox.seccomp`) refuses the syscalls
that could undo the sandbox. pid/ipc/uts are unshared, the sandbox dies with its parent,
the network is unshared unless the profile asks for the host's (`network: host`), which
also makes abstract UNIX sockets and the host's loopback unreachable; a sandbox with
network reaches the outside only through the egress proxy, whose listeners on the
sandbox's loopback are made there and held by the host (`launch`'s `before_exec`,
`agentbox.core.agents.egress_turn`). The argv goes to bwrap through a file descriptor
(`launch`), so the environment, which may hold keys, is never on a command line. `sandbox: none` bypasses all
of this and must be asked for explicitly by the profile.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from agentbox.core.errors import SandboxError
from agentbox.core.runtimes.base import HomeBind
from agentbox.core.safe_io import write_all

#: Host environment variables that pass into the sandbox (everything else is cleared).
PASSTHROUGH_ENV = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TERM", "COLORTERM", "TZ",
                   "NO_COLOR", "http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY",
                   "HTTPS_PROXY", "NO_PROXY", "SSL_CERT_FILE", "SSL_CERT_DIR",
                   "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE")

MiB = 1 << 20
TMPFS_SIZES = {"/tmp": 1024 * MiB, "/var/tmp": 256 * MiB, "/dev/shm": 64 * MiB, "/run": 1 * MiB}
"""Size bounds of the sandbox's private RAM-backed dirs (a full one is ENOSPC inside, nothing more)."""
HIDDEN_TMPFS_SIZE = 256 * MiB
"""Size bound of each tmpfs that hides a host dir (the home, AGENT_BOX_HOME)."""

HOST_SECRETS = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/ssh/ssh_host_*key",
                "/etc/ssl/private",
                "/var/lib/private", "/var/cache/private", "/var/log/private", "/var/lib/docker",
                "/var/lib/containers", "/var/lib/sss", "/etc/security/opasswd")
"""Host paths masked in every sandbox: readable by a root-run agent otherwise (files get /dev/null, dirs a tmpfs)."""


@dataclass(frozen=True)
class SandboxSpec:
    """Everything that decides what an agent can see and write."""

    project_root: Path
    """The project (or a task's worktree of it) as found on the host."""
    writable: tuple[Path, ...]
    """Host dirs under the project the role may write, bound read-write."""
    protected: tuple[Path, ...]
    """Paths bound read-only over every write scope: `.agent-box/`, VCS metadata, crew.yaml's protected paths."""
    extra_rw: tuple[Path, ...]
    """Other writable dirs: the run's artifact dir, the turn's scratch dir."""
    homes: tuple[HomeBind, ...]
    """The profile's tool config, bound where the tool expects it."""
    hidden: tuple[Path, ...]
    """Directories replaced by an empty tmpfs: $HOME, AGENT_BOX_HOME, the project's run and session state."""
    ro_binds: tuple[Path, ...]
    """Dirs bound back read-only (tool install dirs, profile ro_binds)."""
    rw_binds: tuple[Path, ...] = ()
    """Extra writable host paths from the profile's sandbox policy."""
    sealed: tuple[Path, ...] = ()
    """Entries of staged views bound back read-only (the neighbours of a file scope)."""
    staged: tuple[tuple[Path, Path], ...] = ()
    """(private copy, real dir): a file or pattern scope's view, bound at the real dir's path."""
    links: tuple[tuple[str, Path], ...] = ()
    """(target, path): symlinks recreated inside staged views."""
    pinned: tuple[Path, ...] = ()
    """Dirs on the way to a protected path, bound onto themselves with the access they have anyway:
    a mount point cannot be renamed, so no turn can move a protected path's parent away."""
    ro_homes: tuple[tuple[Path, Path], ...] = ()
    """(source, target): what the tool loads from its config dir, bound read-only over the config bind."""
    masked: tuple[Path, ...] = ()
    """Host secrets covered up: files by /dev/null, directories by an empty tmpfs."""
    masked_dirs: frozenset[Path] = frozenset()
    """Which of `masked` are directories."""
    resolv_conf: Path | None = None
    """Where /etc/resolv.conf really lives when that is under /run (bound back for name resolution)."""
    var_run_dir: bool = False
    """/var/run is a real directory (not the usual symlink to /run): hide it too."""
    network: bool = True
    """Share the host network namespace (False: a namespace of its own, loopback only)."""
    cwd: Path | None = None
    """Working directory inside the sandbox (default: the project root)."""
    env: Mapping[str, str] = field(default_factory=dict)
    """The complete environment inside the sandbox."""
    interactive: bool = False
    """Keep the controlling terminal (attach/launch); headless turns get a new session."""
    mount_at: Path | None = None
    """Where `project_root` is seen inside the sandbox: a task's worktree is seen at the project's own
    path (None: at its own path). Paths under `project_root` in the fields above are mapped there."""
    views: tuple[tuple[Path, Path], ...] = ()
    """(source, dest): read-only binds made after the project's, such as a worktree's git metadata."""
    view_hidden: tuple[Path, ...] = ()
    """Dirs inside `views` replaced by an empty tmpfs (the other tasks' worktrees)."""
    base: Path | None = None
    """A full read-only tree bound at the project's path in `project_root`'s place, with `over`
    bound over it: a sparse worktree seen whole (`agentbox.core.workspace.bases`). Protected
    and metadata paths outside `over` are the base's own, read-only already."""
    over: tuple[Path, ...] = ()
    """Dirs of `project_root` bound read-only over `base` (before the write scopes)."""


def _under(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == root or path.is_relative_to(root) for root in roots)


def _shown(spec: SandboxSpec, path: Path) -> bool:
    """False for a path of a sparse worktree outside its own dirs: the base shows it, read-only."""
    return (spec.base is None or not path.is_relative_to(spec.project_root)
            or _under(path, (*spec.over, *spec.writable)))


def _depth(path: Path) -> int:
    return len(path.parts)


def _sized_tmpfs(path: str | Path, size: int) -> list[str]:
    return ["--size", str(size), "--tmpfs", str(path)]


def bwrap_argv(spec: SandboxSpec, command: list[str], bwrap: str = "bwrap") -> list[str]:
    """The full bwrap command line for `command` under `spec` (pure: no filesystem access)."""
    root = spec.mount_at or spec.project_root  # the project's path inside the sandbox

    def seen(path: Path) -> str:
        """Where a host path is seen inside the sandbox."""
        if spec.mount_at is not None and path.is_relative_to(spec.project_root):
            return str(spec.mount_at / path.relative_to(spec.project_root))
        return str(path)

    argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", *_sized_tmpfs("/dev/shm", TMPFS_SIZES["/dev/shm"]),
            "--remount-ro", "/dev", "--proc", "/proc",
            *_sized_tmpfs("/tmp", TMPFS_SIZES["/tmp"]), *_sized_tmpfs("/var/tmp", TMPFS_SIZES["/var/tmp"]),
            *_sized_tmpfs("/run", TMPFS_SIZES["/run"])]
    if spec.var_run_dir:
        argv += _sized_tmpfs("/var/run", TMPFS_SIZES["/run"])
    if spec.resolv_conf is not None:
        argv += ["--ro-bind", str(spec.resolv_conf), str(spec.resolv_conf)]
    argv += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent",
             "--cap-drop", "ALL", "--clearenv"]
    if not spec.network:
        argv.append("--unshare-net")
    if not spec.interactive:
        argv.append("--new-session")
    for path in sorted(set(spec.masked), key=_depth):
        if path in spec.masked_dirs:
            argv += _sized_tmpfs(path, MiB)
        else:
            argv += ["--ro-bind", "/dev/null", str(path)]
    for hidden in sorted(spec.hidden, key=_depth):
        if hidden == root or not hidden.is_relative_to(root):
            argv += _sized_tmpfs(hidden, HIDDEN_TMPFS_SIZE)
    for path in sorted(set(spec.ro_binds), key=_depth):
        argv += ["--ro-bind", str(path), str(path)]
    if spec.base is None:
        argv += ["--ro-bind", str(spec.project_root), str(root)]
    else:
        argv += ["--ro-bind", str(spec.base), str(root)]
        argv += [flag for d in sorted(set(spec.over), key=_depth) for flag in ("--ro-bind", str(d), seen(d))]
    # shallower first; at one depth a staged view or writable dir before what is bound inside it
    mounts: list[tuple[Path, int, list[str]]] = []
    mounts += [(p, 0, ["--bind", str(p), seen(p)]) for p in set(spec.writable)]
    mounts += [(real, 0, ["--bind", str(stage), seen(real)]) for stage, real in set(spec.staged)]
    mounts += [(p, 1, ["--ro-bind", str(p), seen(p)]) for p in set(spec.sealed)]
    mounts += [(p, 1, ["--symlink", target, seen(p)]) for target, p in set(spec.links)]
    mounted = set(spec.writable) | {real for _, real in spec.staged} | set(spec.sealed)
    for pin in {p for p in spec.pinned if _shown(spec, p)} - mounted:
        over = max((m for m in set(spec.writable) | set(spec.sealed) if pin.is_relative_to(m)), key=_depth, default=None)
        flag = "--bind" if over is not None and over in spec.writable else "--ro-bind"
        mounts.append((pin, 2, [flag, str(pin), seen(pin)]))
    for _path, _rank, flags in sorted(mounts, key=lambda m: (_depth(m[0]), m[1], str(m[0]))):
        argv += flags
    for path in sorted({p for p in spec.protected if _shown(spec, p)}, key=lambda p: (_depth(Path(seen(p))), str(p))):
        argv += ["--ro-bind", str(path), seen(path)]
    for source, dest in spec.views:
        argv += ["--ro-bind", str(source), str(dest)]
    for hidden in sorted(set(spec.view_hidden), key=_depth):
        argv += _sized_tmpfs(hidden, HIDDEN_TMPFS_SIZE)
    argv += ["--remount-ro", "/run"]  # after the views: their mount points may be made in /run
    # the project binds uncover hidden dirs inside the project (AGENT_BOX_HOME when the
    # project is the home dir, the run and session state): hide them again, with what had
    # to be bound back in them
    inside = sorted((h for h in set(spec.hidden) if h != root and h.is_relative_to(root)), key=_depth)
    for hidden in inside:
        argv += _sized_tmpfs(hidden, HIDDEN_TMPFS_SIZE)
    for path in sorted(set(spec.ro_binds), key=_depth):
        if _under(path, inside):
            argv += ["--ro-bind", str(path), str(path)]
    for path in sorted(set(spec.extra_rw) | set(spec.rw_binds), key=_depth):  # one inside the worktree, at its path there
        argv += ["--bind", str(path), seen(path) if path in spec.extra_rw else str(path)]
    for bind in spec.homes:
        argv += ["--bind", str(bind.source), str(bind.target)]
    for source, target in spec.ro_homes:
        argv += ["--ro-bind", str(source), str(target)]
    argv += ["--chdir", str(spec.cwd or root)]
    for key, value in sorted(spec.env.items()):
        argv += ["--setenv", key, value]
    return [*argv, "--", *command]


@dataclass(frozen=True)
class Launch:
    """A sandbox ready to exec: a short argv (`bwrap --args FD`) and the descriptors it reads."""

    argv: list[str]
    pass_fds: tuple[int, ...]


@contextlib.contextmanager
def launch(argv: list[str], *, seccomp_filter: bool = True,
           before_exec: Callable[[int], None] | None = None) -> Iterator[Launch]:
    """Hand `argv` (from `bwrap_argv`) to bwrap through memory files instead of its command line.

    The full argv, with the environment (keys included) and the seccomp filter, is written
    to anonymous memory files; the command line is only `bwrap --args N -- COMMAND`, so `ps`
    shows no secret (the adapters keep prompts off the tool's own command line). Spawn the process inside the block with `pass_fds`; the files close after it.
    A non-bwrap argv (`sandbox: none`) passes through unchanged.

    With `before_exec`, bwrap holds the sandbox before it execs the command (`--block-fd`)
    while a thread calls `before_exec(pid)` with the pid of the sandbox's first process,
    which bwrap reports once its namespaces exist (`--info-fd`); the command runs after it
    returns. When it raises, the sandbox is killed before the command runs.
    """
    if not argv or Path(argv[0]).name != "bwrap":
        yield Launch(list(argv), ())
        return
    fds: list[int] = []
    split = argv.index("--") if "--" in argv else len(argv)
    command = argv[split:]  # bwrap reads only options from --args; the command stays on the line
    try:
        args = list(argv[1:split])
        if seccomp_filter:
            from agentbox.core.sandbox import seccomp

            fds.append(_memfd("agentbox-seccomp", seccomp.program()))
            args = ["--seccomp", str(fds[-1]), *args]
        if before_exec is not None:
            info_r, info_w = os.pipe()
            block_r, block_w = os.pipe()
            fds += [info_w, block_r]
            args = ["--info-fd", str(info_w), "--block-fd", str(block_r), *args]
            threading.Thread(target=_hold, args=(info_r, block_w, before_exec), name="agentbox-sandbox-hold",
                             daemon=True).start()
        fds.append(_memfd("agentbox-bwrap-args", b"".join(a.encode("utf-8", "surrogateescape") + b"\0"
                                                            for a in args)))
        yield Launch([argv[0], "--args", str(fds[-1]), *command], tuple(fds))
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def _hold(info_r: int, block_w: int, before_exec: Callable[[int], None]) -> None:
    """Wait for bwrap's info (EOF: it never started), run `before_exec`, then release the command."""
    import json

    pid: int | None = None
    try:
        data = b""
        while len(data) < 65536 and (chunk := os.read(info_r, 4096)):
            data += chunk
            try:
                info = json.loads(data)
            except ValueError:
                continue
            if isinstance(info, dict) and isinstance(info.get("child-pid"), int) and info["child-pid"] > 1:
                pid = info["child-pid"]
            break
        if pid is None:
            return
        try:
            before_exec(pid)
        except BaseException:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)  # the command never runs without what it was held for
            return
        with contextlib.suppress(OSError):
            write_all(block_w, b"1")
    finally:
        os.close(info_r)
        os.close(block_w)


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, 0)  # inheritable only through pass_fds
    try:
        write_all(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


# ----------------------------------------------------------------------------- helpers (impure)


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
    package = sys.modules[__name__.partition(".")[0]].__file__  # agentbox itself, wherever this module sits in it
    assert package is not None
    roots.add(Path(package).resolve().parent)
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


def private_paths(home: Path, box_home: Path) -> tuple[Path, ...]:
    """What no sandbox sees of the person's: their home and AGENT_BOX_HOME (never `/` itself)."""
    return tuple(sorted(p for p in {home, box_home} if p != Path("/")))


def run_state_dirs(project_root: Path) -> tuple[Path, ...]:
    """The project's run and session state, hidden from every sandbox (no agent may read or forge it)."""
    box = project_root / ".agent-box"
    return tuple(d for d in (box / "runs", box / "sessions") if d.is_dir() and not d.is_symlink())


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


CLUSTER_KEY_ENV = ("RAY_TLS_SERVER_KEY",)
"""Variables naming a private key of the Ray cluster this process belongs to (a node's, or the head's)."""


def cluster_keys() -> tuple[str, ...]:
    """The cluster's private key files named in this process's environment: masked in every sandbox
    (a turn on a node would otherwise read the node's TLS key through the root's read-only view)."""
    return tuple(os.path.abspath(os.environ[name]) for name in CLUSTER_KEY_ENV if os.environ.get(name))


class HostLayout(TypedDict):
    """The host facts of a `SandboxSpec` (its fields of the same names)."""

    masked: tuple[Path, ...]
    masked_dirs: frozenset[Path]
    resolv_conf: Path | None
    var_run_dir: bool


@functools.cache
def host_layout() -> HostLayout:
    """Facts about this host the sandbox adapts to (impure; see `SandboxSpec`), read once per process."""
    import glob

    masked = tuple(Path(p) for pattern in HOST_SECRETS for p in sorted(glob.glob(pattern))
                   if os.path.lexists(p) and not os.path.islink(p))
    masked += tuple(Path(p) for p in cluster_keys() if os.path.isfile(p) and not os.path.islink(p))
    resolv = Path("/etc/resolv.conf").resolve()
    return {
        "masked": masked,
        "masked_dirs": frozenset(p for p in masked if p.is_dir()),
        "resolv_conf": resolv if resolv.is_relative_to("/run") and resolv.is_file() else None,
        "var_run_dir": Path("/var/run").is_dir() and not Path("/var/run").is_symlink(),
    }
