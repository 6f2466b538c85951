"""Running git: one runner with a fixed configuration; nothing a tree or a config file names runs.

Everything an agent wrote into a worktree, and the repository itself, is untrusted: a
`.gitattributes` may name a filter, textconv, diff or merge driver, a tracked `.githooks/`
may be named by `core.hooksPath`, a nested repository's own config may define anything.
Every git agentbox starts goes through `git()` here, which makes all of that inert:

- system and global config are not read (`GIT_CONFIG_NOSYSTEM`, `GIT_CONFIG_GLOBAL=/dev/null`),
  nor the system and global attributes files; of the person's own config only their global
  ignore file is kept (patterns, no command);
- hooks, fsmonitor, signing and signature checks, background gc, colour and submodule
  recursion are switched off through `GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_n` (command-line
  scope: it outranks every config file and reaches the git processes git itself starts;
  unlike `-c`, a key is taken whole, so a driver named `a=b` is overridden too);
- every filter, textconv and merge driver the repository's own config defines is overridden
  (`driver_overrides`: no filter, `cat`, git's own text merge), and diffs never use an
  external diff, so whatever attribute a tree holds, git runs nothing it names: files go in
  and out of git byte for byte;
- the caller's `GIT_*` variables are dropped, so the repository a call works on is the one it
  names. Nested repositories in a worktree are never entered (see `worktrees.flatten_nested`).

The person's identity for commits made in their name is read with their config
(`person_ident`), which reads and runs nothing else. Output is captured, never paged, never
coloured; a failing git becomes a `GitError` naming the command and git's own message.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import tempfile
import threading
import time
from collections.abc import Collection, Generator, Mapping
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
    "core.attributesFile=/dev/null",
    "log.showSignature=false",
    "gpg.program=false",
    "gpg.ssh.program=false",
    "gpg.x509.program=false",
)
"""Config forced on every call: no hook, fsmonitor, signing or signature check (no gpg
program a repository names ever runs), background gc, colour or global attributes. Passed
as `GIT_CONFIG_KEY_n`/`GIT_CONFIG_VALUE_n`, never `-c`: `-c` splits at the first `=`, so a
driver a repository names `a=b` could not be overridden with it."""

FIXED_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_ATTR_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_EDITOR": "true",
    "GIT_SEQUENCE_EDITOR": "true",
    "GIT_PAGER": "cat",
    "PAGER": "cat",
    "GIT_OPTIONAL_LOCKS": "0",
    "LC_ALL": "C",
    "LANGUAGE": "C",
}
"""Environment of every call: no system or global config or attributes, never interactive."""

DRIVER_KEYS = r"^(filter\..+\.(clean|smudge|process)|diff\..+\.textconv|merge\..+\.driver)$"
"""Config keys that name a command git runs on file contents, found in the repository's own
config and overridden on every call: a filter by no command (contents go in and out as
they are), a textconv by `cat`, a merge driver by git's own text merge (`git merge-file`).
External diff commands (`diff.external`, `diff.<driver>.command`) cannot be emptied: every
`diff`, `log` and `show` gets `--no-ext-diff --no-textconv` instead (`_hardened`)."""
_NEUTRAL = {"textconv": "cat", "driver": "git merge-file %A %O %B"}
_DIFFING = frozenset({"diff", "log", "show"})

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


def clean_env(extra: Mapping[str, str] | None = None, *, person_config: bool = False) -> dict[str, str]:
    """The process environment without any `GIT_*` variable, plus `FIXED_ENV` and `extra`
    (identities, a private index file). `person_config`: the person's system and global
    config are read (only for `person_ident` and `safe.directory`)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    env.update(FIXED_ENV)
    if person_config:
        del env["GIT_CONFIG_NOSYSTEM"], env["GIT_CONFIG_GLOBAL"]
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
    status is in `ok`. `retry_on_lock`: try twice more when another git held a lock file
    (for commands that are safe to repeat, such as `worktree add`). A repository owned by
    someone else is opened when the person's own config trusts it (`safe.directory`)."""
    argv = _argv(cwd, args)
    base_env = clean_env(env)
    full_env = {**base_env, **_config_env(cwd)}
    trusted_asked = False
    for attempt in (1, 2, 3, 4):
        result = _run(argv, full_env, stdin, timeout, args, hint)
        if not trusted_asked and b"dubious ownership" in result.stderr:
            trusted_asked = True
            trusted = _person_safe_directories()
            if trusted:  # the person told their git to trust this repository: so does agentbox
                full_env = {**base_env, **_config_env(cwd, tuple(f"safe.directory={d}" for d in trusted))}
                continue
        if result.returncode in ok:
            return result
        if attempt < 4 and retry_on_lock and _is_lock_contention(result.stderr):
            time.sleep(_LOCK_RETRY_S * attempt)
            continue
        break
    raise GitError(tuple(args), result.returncode, result.error_text, hint)


def _run(argv: list[str], env: Mapping[str, str], stdin: bytes | None, timeout: float,
         args: tuple[str, ...], hint: str | None) -> GitOutput:
    try:
        proc = subprocess.run(argv, input=stdin, capture_output=True, env=env, timeout=timeout,
                              stdin=None if stdin is not None else subprocess.DEVNULL)
    except FileNotFoundError:
        raise StateError("git is not installed (or not on PATH)", "install git, then try again") from None
    except subprocess.TimeoutExpired:
        raise GitError(tuple(args), -1, f"timed out after {timeout:g} s", hint) from None
    return GitOutput(proc.returncode, proc.stdout, proc.stderr)


def _argv(cwd: Path, args: tuple[str, ...]) -> list[str]:
    return ["git", "-C", str(cwd), *_hardened(args)]


def _config_env(cwd: Path, extra: tuple[str, ...] = ()) -> dict[str, str]:
    """Every forced setting as `GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_n`/`GIT_CONFIG_VALUE_n`: a key
    taken whole, so a driver whose name holds `=` is overridden too."""
    pairs = [setting.partition("=")[::2] for setting in (*SAFE_CONFIG, *_person_excludes())]
    pairs += [*driver_pairs(cwd), *(setting.partition("=")[::2] for setting in extra)]
    env = {"GIT_CONFIG_COUNT": str(len(pairs))}
    for index, (key, value) in enumerate(pairs):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    return env


def _hardened(args: tuple[str, ...]) -> list[str]:
    """`args` with external diff and textconv switched off for the commands that show diffs."""
    if args and args[0] in _DIFFING:
        return [args[0], "--no-ext-diff", "--no-textconv", *args[1:]]
    return list(args)


@dataclass(frozen=True)
class _Drivers:
    overrides: tuple[tuple[str, str], ...]
    files: tuple[Path, ...]
    signature: tuple[tuple[int, int, int] | None, ...]


_drivers: dict[str, _Drivers] = {}
_drivers_lock = threading.Lock()
_ORIGIN_KEYS = r"^(core\.repositoryformatversion|include(if\..+)?\.path)$"


def driver_overrides(cwd: Path) -> tuple[str, ...]:
    """`driver_pairs` as `KEY=VALUE` text (for people and tests; git gets the pairs)."""
    return tuple(f"{key}={value}" for key, value in driver_pairs(cwd))


def driver_pairs(cwd: Path) -> tuple[tuple[str, str], ...]:
    """(key, value) settings emptying every filter, textconv, diff and merge driver command the
    repository's own config (and what it includes) defines for git run in `cwd`.

    Asked of git once per directory, then again only when one of the config files it
    read changed (agents cannot write any of them: they are the person's). A linked worktree
    with no config of its own reads exactly its repository's config, so one answer serves
    every such worktree of it, unless that config includes files on a condition (`includeIf`,
    which may hold for one worktree and not another)."""
    key = str(cwd)
    linked = _linked_key(cwd)
    with _drivers_lock:
        known = _drivers.get(key) or (_drivers.get(linked) if linked else None)
    if known is not None and _signature(known.files) == known.signature:
        return known.overrides
    query = ("config", "-z", "--show-origin", "--get-regexp", f"{_ORIGIN_KEYS}|{DRIVER_KEYS}")
    proc = _run(["git", "-C", key, *query], clean_env(), None, GIT_TIMEOUT_S, query, None)
    if b"dubious ownership" in proc.stderr and _person_safe_directories():
        trusted = [x for d in _person_safe_directories() for x in ("-c", f"safe.directory={d}")]
        proc = _run(["git", "-C", key, *trusted, *query], clean_env(), None, GIT_TIMEOUT_S, query, None)
    if proc.returncode not in (0, 1) and b"not a git repository" not in proc.stderr:
        raise GitError(query, proc.returncode, proc.error_text, "git cannot read this repository's config")
    fields = proc.stdout.split(b"\0")
    overrides: list[tuple[str, str]] = []
    files: list[Path] = []
    conditional = False
    for origin, entry in zip(fields[0::2], fields[1::2], strict=False):
        name, _, value = os.fsdecode(entry).partition("\n")
        conditional = conditional or name.startswith("includeif.")
        if origin.startswith(b"file:"):
            source = cwd / os.fsdecode(origin[len(b"file:"):])
            files.append(source)
            if name.startswith("include") and name.endswith(".path"):
                files.append(source.parent / Path(value).expanduser())
        if re.match(DRIVER_KEYS, name):
            overrides.append((name, _NEUTRAL.get(name.rsplit(".", 1)[1], "")))
            if name.startswith("filter."):
                overrides.append((f"{name.rsplit('.', 1)[0]}.required", "false"))
    found = _Drivers(tuple(dict.fromkeys(overrides)), tuple(dict.fromkeys(files)), ())
    if found.files:  # outside a repository nothing is read, and nothing worth keeping
        found = _Drivers(found.overrides, found.files, _signature(found.files))
        with _drivers_lock:
            _drivers[key] = found
            if linked and not conditional:
                _drivers[linked] = found
    return found.overrides


def _linked_key(cwd: Path) -> str | None:
    """For the top of a linked worktree (its `.git` a file naming an admin dir in its common
    dir's `worktrees/`, holding no `config.worktree`): a key every such worktree of the
    repository shares; else None. File reads only."""
    try:
        text = (cwd / ".git").read_text("utf-8") if (cwd / ".git").is_file() else ""
        if not text.startswith("gitdir: "):
            return None
        admin = (cwd / text[len("gitdir: "):].strip()).resolve()
        common = (admin / (admin / "commondir").read_text("utf-8").strip()).resolve()
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if admin.parent != common / "worktrees" or os.path.lexists(admin / "config.worktree"):
        return None
    return f"linked:{common}"


def _signature(files: tuple[Path, ...]) -> tuple[tuple[int, int, int] | None, ...]:
    marks: list[tuple[int, int, int] | None] = []
    for path in files:
        try:
            st = path.stat()
        except OSError:
            marks.append(None)
            continue
        marks.append((st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(marks)


@functools.cache
def _person_excludes() -> tuple[str, ...]:
    """The person's global ignore file (`core.excludesFile` of their own config), which
    only lists patterns: what they ignore everywhere stays out of the run's commits."""
    proc = _run(["git", "config", "--path", "--get", "core.excludesFile"], clean_env(person_config=True), None,
                GIT_TIMEOUT_S, ("config",), None)
    found = proc.stdout.decode("utf-8", "surrogateescape").strip()
    return (f"core.excludesFile={found}",) if proc.returncode == 0 and found else ()


@functools.cache
def _person_safe_directories() -> tuple[str, ...]:
    """The `safe.directory` entries of the person's system and global config."""
    proc = _run(["git", "config", "--get-all", "safe.directory"], clean_env(person_config=True), None,
                GIT_TIMEOUT_S, ("config",), None)
    return tuple(line for line in proc.stdout.decode("utf-8", "replace").splitlines() if line)


def person_ident(root: Path) -> dict[str, str] | None:
    """The person's own identity (their `user.name`/`user.email`, from any config of theirs)
    as author and committer environment, or None when their git has none."""
    argv = ["git", "-C", str(root), *(x for s in SAFE_CONFIG for x in ("-c", s)), "var", "GIT_COMMITTER_IDENT"]
    found = _run(argv, clean_env(person_config=True), None, GIT_TIMEOUT_S, ("var",), None)
    text = found.stdout.decode("utf-8", "replace").strip()
    if found.returncode != 0 or "<" not in text:
        return None
    name, _, rest = text.partition(" <")
    email = rest.split(">", 1)[0]
    return ident_env(name, email, committer=(name, email))


def git_bounded(cwd: Path, *args: str, max_bytes: int, timeout: float = GIT_TIMEOUT_S) -> tuple[bytes, bool]:
    """The first `max_bytes` of what `git ARGS` prints, and whether there was more (the
    process is stopped then): for diffs of any size."""
    with tempfile.TemporaryFile() as errors:
        try:
            proc = subprocess.Popen(_argv(cwd, args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=errors, env={**clean_env(), **_config_env(cwd)})
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


def git_fields(cwd: Path, *args: str, timeout: float = GIT_TIMEOUT_S) -> Generator[bytes, None, None]:
    """The NUL-separated fields `git ARGS` prints (with `-z`), read as they come: output of any
    size costs a chunk of memory. Stopping early stops git; a failing git is a GitError."""
    with tempfile.TemporaryFile() as errors:
        try:
            proc = subprocess.Popen(_argv(cwd, args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=errors, env=clean_env())
        except FileNotFoundError:
            raise StateError("git is not installed (or not on PATH)", "install git, then try again") from None
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        finished = False
        try:
            assert proc.stdout is not None
            pending = b""
            while chunk := proc.stdout.read(_FIELD_CHUNK):
                *fields, pending = (pending + chunk).split(b"\0")
                yield from fields
            if pending:
                yield pending
            finished = True
        finally:
            timer.cancel()
            if not finished:
                proc.kill()
            proc.stdout.close() if proc.stdout else None
            code = proc.wait()
        if code != 0:
            errors.seek(0)
            raise GitError(tuple(args), code, errors.read(64 * 1024).decode("utf-8", "replace"))


_FIELD_CHUNK = 64 * 1024


def rev(cwd: Path, name: str) -> str | None:
    """The commit `name` points at, or None when there is no such commit."""
    out = git(cwd, "rev-parse", "-q", "--verify", "--end-of-options", f"{name}^{{commit}}", ok=(0, 1))
    return out.text or None if out.returncode == 0 else None


def ref_commits(cwd: Path, refs: list[str]) -> list[str | None]:
    """The commit each full ref name points at (None where there is no such ref), in one call."""
    out = git(cwd, "for-each-ref", "--format=%(refname)%00%(objectname)", *refs)
    found = dict(line.split("\0", 1) for line in out.text.splitlines() if "\0" in line)
    return [found.get(ref) for ref in refs]


def objects(cwd: Path, names: list[str], *, contents: Collection[str] = ()) -> list[tuple[str, bytes] | None]:
    """Each of `names` (refs or commits) looked up in one `cat-file --batch-command`: its object
    id and, for the names in `contents`, its raw content (else b""); None where there is none."""
    script = "".join(f"{'contents' if name in contents else 'info'} {name}\n" for name in names)
    out = git(cwd, "cat-file", "--batch-command", stdin=script.encode("utf-8")).stdout
    found: list[tuple[str, bytes] | None] = []
    at = 0
    for name in names:
        end = out.index(b"\n", at)
        header = out[at:end].decode("utf-8", "surrogateescape").split(" ")
        at = end + 1
        if len(header) != 3 or header[1] in ("missing", "ambiguous"):
            found.append(None)
            continue
        if name in contents:
            size = int(header[2])
            found.append((header[0], out[at:at + size]))
            at += size + 1
        else:
            found.append((header[0], b""))
    return found


def commit_tree_id(commit: bytes) -> str | None:
    """The tree a raw commit object (as `objects` gives it) names."""
    first = commit.split(b"\n", 1)[0]
    return first[len(b"tree "):].decode("ascii", "replace") if first.startswith(b"tree ") else None


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
