"""crew.yaml's checks: a shell command run by the code layer, inside a sandbox, over the work it judges.

A crew.yaml comes with the repository, so a check is as untrusted as an agent and never
runs on the host. Its sandbox:

- the tree it judges (a task's worktree at the submitted commit, or the run's view of its
  branch) is seen at the project's own path, **read-only**, with git metadata and
  `.agent-box/` read-only and the run and session state hidden;
- the person's home and AGENT_BOX_HOME are replaced by empty private RAM disks, `/tmp` is
  private; both are writable, and the usual caches point there (`XDG_CACHE_HOME`, Python's
  bytecode); directories the check names in `scratch:` get an empty RAM disk of their own
  (a copy-on-write overlay of the tree would need bubblewrap 0.9);
- no network unless the check says `network: true`;
- bounded: `timeout_s` (then its process group is killed), `output_mb` (a flood is killed
  too), `memory_mb` of address space; its output goes to a log file, capped as an agent's.

`run_check` never raises for the check's own failure: it returns what happened. A check
that could not run (command not found, timeout, killed, output flood, the sandbox refused)
is told apart from a red one, because it says nothing about the work.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agentbox.core.agents import egress_turn
from agentbox.core.config.models import Check
from agentbox.core.errors import SandboxError
from agentbox.core.paths import agent_box_home
from agentbox.core.process import CappedStream, wait_captured
from agentbox.core.sandbox import bwrap as sandbox
from agentbox.core.sandbox import scopes

TAIL_CHARS = 4000
"""Characters of the end of a check's output kept for the worker's rework prompt and the log."""

CheckStatus = Literal["passed", "failed", "error"]
"""green, red, or could not run."""

CannotRun = Literal["not_found", "not_executable", "timeout", "killed", "output_limit", "sandbox"]
"""Why a check could not run (it says nothing about the work)."""


@dataclass(frozen=True)
class CheckOutcome:
    """How one run of a check ended."""

    status: CheckStatus
    exit_status: int | None
    """The command's exit status (None when it was killed or never started)."""
    duration_s: float
    log_path: Path
    tail: str
    """The end of its output (stdout and stderr together), control characters made visible."""
    cannot_run: CannotRun | None = None
    """Why it could not run (`status == "error"`)."""

    @property
    def detail(self) -> str:
        """One line saying how it ended."""
        if self.status == "passed":
            return f"passed in {self.duration_s:.1f} s"
        if self.status == "failed":
            return f"failed: exit status {self.exit_status}"
        return f"could not run ({self.cannot_run}" + (f", exit status {self.exit_status})"
                                                     if self.exit_status is not None else ")")


def safe_text(text: str) -> str:
    """`text` with control characters (but newlines and tabs) shown as `\\xNN`, so output cannot steer a terminal."""
    return re.sub(r"[\x00-\x08\x0b-\x1f\x7f\x80-\x9f]", lambda m: f"\\x{ord(m.group()):02x}", text)


def applies(check: Check, changed: list[str]) -> bool:
    """Whether `check` runs for work that changed `changed` (its `paths:` filter; no filter: always)."""
    if check.paths is None:
        return True
    return any(path_matches(path, pattern) for path in changed for pattern in check.paths)


def path_matches(path: str, pattern: str) -> bool:
    """Whether the project-relative `path` matches the glob `pattern` (`*` crosses `/`; `dir/` and
    `dir` also match what is inside the directory)."""
    pattern = pattern.rstrip("/") or pattern
    return fnmatch.fnmatchcase(path, pattern) or fnmatch.fnmatchcase(path, pattern + "/*")


class _Flood(CappedStream):
    """A capped stream that kills its process group once the output passes a limit."""

    def __init__(self, log_path: Path, limit: int) -> None:
        super().__init__(log_path)
        self.limit = limit
        self.pid: int | None = None
        self.flooded = False

    def feed(self, chunk: bytes) -> None:
        super().feed(chunk)
        if self.total > self.limit and not self.flooded and self.pid is not None:
            self.flooded = True
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)


def _scratch_dirs(tree: Path, patterns: list[str]) -> list[Path]:
    """The `scratch:` directories in `tree`, made when missing; a path through a symlink is skipped."""
    made: list[Path] = []
    for pattern in patterns:
        relative = pattern.rstrip("/")
        if any(c in relative for c in "*?["):
            continue  # a RAM disk needs a literal directory
        path = tree
        ok = True
        for part in Path(relative).parts:
            path = path / part
            if path.is_symlink() or (path.exists() and not path.is_dir()):
                ok = False
                break
            if not path.exists():
                with contextlib.suppress(OSError):
                    path.mkdir()
        if ok and path.is_dir() and path != tree:
            made.append(path)
    return made


def _limit_memory(limit: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def run_check(name: str, check: Check, *, root: Path, tree: Path, views: tuple[tuple[Path, Path], ...],
              view_hidden: tuple[Path, ...], log_path: Path,
              on_spawn: Callable[[int], None] | None = None, attempt: int = 1,
              base: Path | None = None, over: tuple[Path, ...] = (),
              git_env: Mapping[str, str] | None = None) -> CheckOutcome:
    """Run `check` over `tree` (seen at `root`) in its sandbox; blocking, never raises for the check's failure.

    `on_spawn` gets the pid of the sandbox's process group leader once it runs (a caller may kill the group).
    `base`, `over`: a sparse worktree's shared base and its own dirs (`agentbox.core.workspace.bases`).
    `git_env`: what git inside the sandbox needs to read the worktree's index (`SandboxGitView.env`).
    """
    home = Path.home()
    box = root / ".agent-box"
    metadata = scopes.worktree_metadata_paths(tree) if tree != root else scopes.metadata_paths(root)
    scratch = tuple(root / p.relative_to(tree) for p in _scratch_dirs(tree, check.scratch))
    if base is not None and tree != root:  # a RAM disk's mount point: made in the base too, as in a whole tree
        _scratch_dirs(base, check.scratch)
    env = sandbox.sandbox_env(sandbox.host_env(), home, {
        "AGENTBOX_CHECK": name, "AGENTBOX_CHECK_ATTEMPT": str(attempt), "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": "/tmp/.pycache",
        "XDG_CACHE_HOME": "/tmp/.cache", "CI": "1", **(git_env or {}),
    })
    # a check with network goes out through the egress proxy only: the registries and its `allow`
    network = egress_turn.plan_for(egress_turn.crew_rules(check.allow, f"checks.{name}.allow")) \
        if check.network else None
    spec = sandbox.SandboxSpec(
        project_root=tree, mount_at=root if tree != root else None, views=views,
        base=base if tree != root else None, over=over,
        view_hidden=(*view_hidden, *scratch), writable=(), protected=(box, *metadata), extra_rw=(), homes=(),
        hidden=(*sandbox.private_paths(home, agent_box_home()), *sandbox.run_state_dirs(root)),
        ro_binds=(),
        network=False, cwd=root, env={**env, **(network.env if network else {})},
        **sandbox.host_layout(),
    )
    log_path.parent.mkdir(parents=True, exist_ok=True)
    output = _Flood(log_path, check.output_mb << 20)
    started = time.monotonic()
    command = ["/bin/sh", "-c", check.run]
    try:
        argv = sandbox.bwrap_argv(spec, command, sandbox.require_bwrap())
        with egress_turn.serving(network), sandbox.launch(argv, before_exec=egress_turn.join(network)) as launched:
            proc = subprocess.Popen(launched.argv, pass_fds=launched.pass_fds, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                                    preexec_fn=lambda: _limit_memory(check.memory_mb << 20))
            output.pid = proc.pid
            if on_spawn is not None:
                on_spawn(proc.pid)
            with proc:
                timed_out = wait_captured(proc, None, output, output, check.timeout_s)
    except (OSError, SandboxError) as exc:
        output.close()
        message = getattr(exc, "message", None) or str(exc)
        return CheckOutcome("error", None, time.monotonic() - started, log_path, safe_text(message)[-TAIL_CHARS:],
                            "sandbox")
    finally:
        output.close()
        if network is not None:
            network.remove()
    duration = time.monotonic() - started
    tail = safe_text(output.text()[-TAIL_CHARS:])
    code = proc.returncode
    cannot: CannotRun | None = None
    if timed_out:
        cannot = "timeout"
    elif output.flooded:
        cannot = "output_limit"
    elif code < 0 or code - 128 in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        cannot = "killed"
    elif code == 127:
        cannot = "not_found"
    elif code == 126:
        cannot = "not_executable"
    elif code == 1 and tail.lstrip().startswith("bwrap:"):
        cannot = "sandbox"
    if cannot is not None:
        return CheckOutcome("error", code if code is not None and code >= 0 else None, duration, log_path, tail,
                            cannot)
    return CheckOutcome("passed" if code == 0 else "failed", code, duration, log_path, tail)
