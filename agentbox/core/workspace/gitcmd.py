"""Running git: one helper, a clean environment, nothing the repository configures is run.

The repository and everything an agent wrote into a worktree are untrusted. A tracked
`.githooks/` named by `core.hooksPath`, an fsmonitor command, an external diff or textconv
driver would run on the host with the person's rights, so every call overrides them on the
command line (which outranks every config file, and reaches the git processes git itself
starts through `GIT_CONFIG_PARAMETERS`). The caller's `GIT_*` variables (`GIT_DIR`,
`GIT_INDEX_FILE`, `GIT_CONFIG_*`…) are dropped, so the repository a call works on is the
one it names. Output is captured, never paged, never coloured; a failing git becomes a
`GitError` naming the command and the end of its stderr.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from agentbox.core.errors import StateError

GIT_TIMEOUT_S = 120.0
"""Longest a git call may take; checkouts of large trees pass more."""

SAFE_CONFIG = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "gc.auto=0",
    "maintenance.auto=false",
    "core.quotePath=false",
    "color.ui=false",
    "submodule.recurse=false",
)
"""Config forced on every call: no hook, fsmonitor, signing, background gc or colour."""

AGENTBOX_IDENT = ("agentbox", "agentbox@localhost")
"""Author and committer of the commits agentbox makes on its own behalf (merges)."""

_LOCK_RETRY_S = 0.2
_STDERR_TAIL = 600


class GitError(StateError):
    """A git command failed; names the command, its exit status and the end of its stderr."""

    def __init__(self, args: tuple[str, ...], returncode: int, stderr: str, hint: str | None = None) -> None:
        self.args_run = args
        self.returncode = returncode
        self.stderr = stderr
        tail = stderr.strip()[-_STDERR_TAIL:] or "no message"
        super().__init__(f"git {' '.join(args)} failed (exit {returncode}): {tail}", hint)


@dataclass(frozen=True)
class GitOutput:
    """What one git call printed and how it ended."""

    returncode: int
    stdout: bytes
    stderr: bytes

    @property
    def text(self) -> str:
        """stdout as text without its final newline (object ids, ref names, paths)."""
        return os.fsdecode(self.stdout).rstrip("\n")

    @property
    def error_text(self) -> str:
        """stderr as text."""
        return self.stderr.decode("utf-8", "replace")


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The process environment without any `GIT_*` variable, non-interactive, C locale,
    plus `extra` (identities, a private index file)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    env.update(
        LC_ALL="C",
        LANGUAGE="C",
        GIT_TERMINAL_PROMPT="0",
        GIT_EDITOR="true",
        GIT_SEQUENCE_EDITOR="true",
        GIT_PAGER="cat",
        PAGER="cat",
        GIT_OPTIONAL_LOCKS="0",
    )
    if extra:
        env.update(extra)
    return env


def ident_env(name: str, email: str, *, committer: tuple[str, str] = AGENTBOX_IDENT) -> dict[str, str]:
    """Author `name <email>` (cleaned of what git refuses) and a committer, as environment."""
    author_name, author_email = _clean_ident(name), _clean_ident(email)
    return {
        "GIT_AUTHOR_NAME": author_name or AGENTBOX_IDENT[0],
        "GIT_AUTHOR_EMAIL": author_email or AGENTBOX_IDENT[1],
        "GIT_COMMITTER_NAME": _clean_ident(committer[0]) or AGENTBOX_IDENT[0],
        "GIT_COMMITTER_EMAIL": _clean_ident(committer[1]) or AGENTBOX_IDENT[1],
    }


def _clean_ident(value: str) -> str:
    return " ".join(value.replace("<", " ").replace(">", " ").split())


def _is_lock_contention(stderr: bytes) -> bool:
    return b".lock" in stderr and (b"File exists" in stderr or b"Unable to create" in stderr)


def git(
    cwd: Path,
    *args: str,
    ok: Collection[int] = (0,),
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    timeout: float = GIT_TIMEOUT_S,
    retry_on_lock: bool = False,
    hint: str | None = None,
) -> GitOutput:
    """Run `git -C cwd ARGS` safely (see the module docstring); a GitError unless its exit
    status is in `ok`. `retry_on_lock`: try once more when another git held a lock file
    (for commands that are safe to repeat, such as `worktree add`)."""
    argv = _argv(cwd, args)
    full_env = clean_env(env)
    for attempt in (1, 2):
        try:
            proc = subprocess.run(argv, input=stdin, capture_output=True, env=full_env, timeout=timeout,
                                  stdin=None if stdin is not None else subprocess.DEVNULL)
        except FileNotFoundError:
            raise StateError("git is not installed (or not on PATH)", "install git, then try again") from None
        except subprocess.TimeoutExpired:
            raise GitError(tuple(args), -1, f"timed out after {timeout:g} s", hint) from None
        result = GitOutput(proc.returncode, proc.stdout, proc.stderr)
        if result.returncode in ok:
            return result
        if retry_on_lock and attempt == 1 and _is_lock_contention(proc.stderr):
            time.sleep(_LOCK_RETRY_S)
            continue
        raise GitError(tuple(args), result.returncode, result.error_text, hint)
    raise AssertionError("unreachable")


def _argv(cwd: Path, args: tuple[str, ...]) -> list[str]:
    argv = ["git", "-C", str(cwd)]
    for setting in SAFE_CONFIG:
        argv += ["-c", setting]
    return argv + list(args)


def git_bounded(cwd: Path, *args: str, max_bytes: int, timeout: float = GIT_TIMEOUT_S) -> tuple[bytes, bool]:
    """The first `max_bytes` of what `git ARGS` prints, and whether there was more (the
    process is stopped then): for diffs of any size."""
    with tempfile.TemporaryFile() as errors:
        try:
            proc = subprocess.Popen(_argv(cwd, args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=errors, env=clean_env())
        except FileNotFoundError:
            raise StateError("git is not installed (or not on PATH)", "install git, then try again") from None
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            assert proc.stdout is not None
            data = proc.stdout.read(max_bytes + 1)
            more = len(data) > max_bytes
            if more:
                proc.kill()
            proc.stdout.close()
            code = proc.wait()
        finally:
            timer.cancel()
        if not more and code != 0:
            errors.seek(0)
            raise GitError(tuple(args), code, errors.read(64 * 1024).decode("utf-8", "replace"))
    return data[:max_bytes], more


def rev(cwd: Path, name: str) -> str | None:
    """The commit `name` points at, or None when there is no such commit."""
    out = git(cwd, "rev-parse", "-q", "--verify", "--end-of-options", f"{name}^{{commit}}", ok=(0, 1))
    return out.text or None if out.returncode == 0 else None


def ref_commits(cwd: Path, refs: list[str]) -> list[str | None]:
    """The commit each full ref name points at (None where there is no such ref), in one call."""
    out = git(cwd, "for-each-ref", "--format=%(refname)%00%(objectname)", *refs)
    found = dict(line.split("\0", 1) for line in out.text.splitlines() if "\0" in line)
    return [found.get(ref) for ref in refs]


def is_ancestor(cwd: Path, older: str, newer: str) -> bool:
    """True when commit `older` is `newer` or one of its ancestors."""
    return git(cwd, "merge-base", "--is-ancestor", older, newer, ok=(0, 1)).returncode == 0


def tree_of(cwd: Path, commit: str) -> str:
    """The tree id of `commit`."""
    return git(cwd, "rev-parse", "--verify", "--end-of-options", f"{commit}^{{tree}}").text


def commit_tree(cwd: Path, tree: str, parents: list[str], message: str, env: Mapping[str, str]) -> str:
    """A new commit object (no ref moves): `tree` with `parents`, `message`, identity from `env`."""
    args = ["commit-tree", tree]
    for parent in parents:
        args += ["-p", parent]
    return git(cwd, *args, env=env, stdin=message.encode("utf-8")).text


def update_refs(cwd: Path, commands: list[str], *, message: str = "agentbox") -> None:
    """Apply `update-ref --stdin` commands (`update REF NEW OLD`, `create REF NEW`, `delete
    REF OLD`) as one transaction: all of them or none, each checked against its old value
    (so one that met another git's lock is simply tried again)."""
    if not commands:
        return
    script = "start\n" + "".join(f"{line}\n" for line in commands) + "prepare\ncommit\n"
    git(cwd, "update-ref", "-m", message, "--stdin", stdin=script.encode("utf-8"), retry_on_lock=True)


def merge_tree(cwd: Path, ours: str, theirs: str) -> tuple[str, list[str]]:
    """The tree merging `theirs` into `ours` (no working tree, index or ref touched), and the
    paths that conflict (empty when the merge is clean). The tree holds conflict markers
    for those paths."""
    out = git(cwd, "merge-tree", "--write-tree", "--name-only", "-z", "--no-messages", ours, theirs, ok=(0, 1))
    fields = [os.fsdecode(f) for f in out.stdout.split(b"\0") if f]
    if not fields:
        raise GitError(("merge-tree", ours, theirs), out.returncode, "no tree in the output")
    conflicts = sorted(dict.fromkeys(fields[1:])) if out.returncode == 1 else []
    return fields[0], conflicts
