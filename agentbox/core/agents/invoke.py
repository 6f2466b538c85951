"""The employee contract: `invoke(agent, prompt, session_id) -> InvokeResult`.

invoke is async (many run at once; `invoke_sync` runs the same turn without an event loop,
for a caller with one turn to run, such as the CLI) and never raises for agent failures: a missing
binary, a non-zero exit, a timeout, a hang, garbage or a flood of output all come back
as a result with a status and an error kind. The session record is written before the
process starts; the process runs in its own process group (inside bwrap unless the
profile explicitly says `sandbox: none`) and the whole group is killed on timeout.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from agentbox.core import safe_io
from agentbox.core.agents import pricing
from agentbox.core.agents.live import LiveWriter, live_dir_for
from agentbox.core.agents.sessions import SessionRecord, SessionStore, now
from agentbox.core.config import billing, secrets
from agentbox.core.config.profiles import ProfileInfo, ensure_state
from agentbox.core.errors import AgentboxError, SandboxError, UsageError
from agentbox.core.process import (
    KILL_GRACE_S,
    CappedStream,
    ErrorKind,
    classify_exit,
    drain,
    kill_group,
    kill_tree,
    wait_captured,
)
from agentbox.core.records import running_turn, turn_record
from agentbox.core.runtimes import adapter_for, find_executable
from agentbox.core.runtimes.base import (
    Adapter,
    CapturedOutput,
    ParseError,
    ToolCommand,
    TurnRequest,
    Usage,
)
from agentbox.core.sandbox import bwrap as sandbox
from agentbox.core.sandbox import scopes, tool_homes

if TYPE_CHECKING:  # a blocking turn (`invoke_sync`) runs without importing the event loop
    import asyncio

    from agentbox.core.agents import (
        egress_turn,  # a turn without `network: true` loads none of the proxy
    )

PID_NOTE_DELAY_S = 0.25
"""How long a turn runs before its pid is written to its session record (shorter turns skip that write)."""


@dataclass(frozen=True)
class Agent:
    """Who runs a turn: a profile, optionally as a role of a project."""

    profile: ProfileInfo
    label: str
    """The session owner: a role name, or `profile:NAME`."""
    cwd: Path
    """Working directory (the project root), at the same path inside the sandbox."""
    sessions: SessionStore
    role: str | None = None
    instructions: str | None = None
    """Role instructions and shared knowledge for a session's first turn."""
    model: str | None = None
    extra_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    writes: tuple[str, ...] | None = None
    """Write scopes (globs relative to cwd); None = all of cwd; () = read-only."""
    protected: tuple[Path, ...] = ()
    """Paths that stay read-only even inside write scopes (the project's .agent-box/)."""
    protected_paths: tuple[str, ...] = ()
    """crew.yaml's `protected:` patterns (relative to cwd): read-only in every turn, whatever the scope."""
    extra_rw: tuple[Path, ...] = ()
    """More writable dirs (the run's artifact dir)."""
    timeout_s: float | None = None
    worktree: Path | None = None
    """A task's git worktree, seen at `cwd` inside the sandbox (worktree runs); None: `cwd` itself."""
    views: tuple[tuple[Path, Path], ...] = ()
    """(source, dest) read-only binds after the project's: the worktree's git metadata."""
    view_hidden: tuple[Path, ...] = ()
    """Dirs inside `views` covered by an empty tmpfs (the other tasks' worktrees)."""
    base: Path | None = None
    """A sparse worktree's shared base, seen at `cwd` under `over` (`agentbox.core.workspace.bases`)."""
    over: tuple[Path, ...] = ()
    egress_allow: tuple[str, ...] = ()
    """`host:port` entries agentbox adds to the sandbox's allowlist for this turn (the trace collector)."""

    @property
    def read_only(self) -> bool:
        """The agent may not write its working directory."""
        return self.writes is not None and len(self.writes) == 0


@dataclass(frozen=True)
class InvokeResult:
    """The outcome of one turn, success or not."""

    status: Literal["ok", "error"]
    session_id: str
    text: str = ""
    error_kind: ErrorKind | None = None
    error: str | None = None
    native_id: str | None = None
    usage: Usage = field(default_factory=Usage)
    duration_s: float = 0.0
    exit_code: int | None = None
    log_path: str | None = None
    turn: int = 0
    role: str | None = None
    profile: str = ""
    tool: str = ""
    sandboxed: bool = True
    truncated: bool = False
    model: str | None = None
    """The model the tool reported it used for this turn (None when its output does not say)."""
    model_asked: str | None = None
    """The model the turn asked for (the role's or profile's `model`; None: the tool's default)."""
    network: dict[str, Any] | None = None
    """What the turn's network did through the egress proxy (connections, refused targets); None without one."""

    @property
    def ok(self) -> bool:
        """True when the agent answered without error."""
        return self.status == "ok"

    @property
    def cost_usd(self) -> float | None:
        """Cost reported by the tool (None when unknown)."""
        return self.usage.cost_usd

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready mapping (`agentbox invoke --json`)."""
        return {
            "status": self.status,
            "error_kind": self.error_kind,
            "error": self.error,
            "text": self.text,
            "session_id": self.session_id,
            "native_id": self.native_id,
            "usage": self.usage.as_dict(),
            "cost_usd": self.cost_usd,
            "duration_s": round(self.duration_s, 3),
            "exit_code": self.exit_code,
            "log_path": self.log_path,
            "turn": self.turn,
            "role": self.role,
            "profile": self.profile,
            "tool": self.tool,
            "sandboxed": self.sandboxed,
            "truncated": self.truncated,
            "model": self.model or self.model_asked,
            "network": self.network,
        }


@contextlib.contextmanager
def _session_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(f"session {path.stem} is busy with another turn",
                             "wait for it to finish, or start a new session") from None
        yield
    finally:
        os.close(fd)


def new_session_id() -> str:
    """A fresh agentbox session UUID (version 4, random; formatted here: the uuid module imports platform)."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # the RFC 4122 variant
    text = raw.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


class SessionTags(TypedDict, total=False):
    """What a new session belongs to: the run and the task whose turns it holds."""

    run_id: str | None
    task_id: str | None


def prepare_session(agent: Agent, session_id: str | None, new_id: str | None = None,
                     tags: SessionTags | None = None) -> SessionRecord:
    """The session a turn runs in: `session_id`'s record, or a new one (with `new_id` and `tags`)."""
    store = agent.sessions
    if session_id is not None:
        record = store.find(session_id)
        if record.owner != agent.label:
            raise UsageError(f"session {session_id} belongs to {record.owner}, not {agent.label}")
        return record
    created = now()
    return SessionRecord(
        id=new_id or new_session_id(), owner=agent.label, role=agent.role, profile=agent.profile.name,
        tool=agent.profile.tool, cwd=str(agent.cwd), created=created, updated=created,
        sandboxed=agent.profile.profile.sandbox != "none", **(tags or {}),
    )


@dataclass
class Prepared:
    """A turn ready to start: the record, the request, the final argv and environment."""

    record: SessionRecord
    request: TurnRequest
    argv: list[str]
    env: dict[str, str]
    stdin: bytes | None
    logs: Path
    scratch: Path
    scopes: scopes.ScopePlan = field(default_factory=scopes.ScopePlan)
    """The write scopes' mounts (`finish_turn` carries staged changes back after the turn)."""
    secrets: tuple[str, ...] = ()
    """Values the profile took from the environment: masked in everything the turn records."""
    egress: egress_turn.EgressPlan | None = None
    """The turn's network allowlist and proxy socket (a sandbox with `network: true`)."""
    home_plan: tool_homes.HomePlan = field(default_factory=tool_homes.HomePlan)
    """The tool's config home binds (`finish_turn` merges back what the tool may keep)."""
    pricing: TurnPricing | None = None
    """How the turn's cost is settled when it ends (None: the tool's own figure only)."""


@dataclass(frozen=True)
class TurnPricing:
    """What a turn's cost is computed with: the price table and the profile's kind of login."""

    table: pricing.PriceTable
    billing: billing.Billing | None
    model: str | None = None
    """The model the turn runs when the profile names none: the one the tool's own config names."""


def _turn_pricing(profile: ProfileInfo, runtime_env: dict[str, str], model: str | None) -> TurnPricing:
    """The price table (the user's config.yaml over the shipped one) and the login of `profile`."""
    return TurnPricing(pricing.price_table(),
                       billing.login_kind(profile.tool, profile.config_dir, runtime_env, model),
                       None if model else billing.configured_model(profile.tool, profile.config_dir))


def prepare(agent: Agent, prompt: str, record: SessionRecord, *, interactive: bool = False,
            command: ToolCommand | None = None) -> Prepared:
    """Build the sandboxed command of the next turn of `record` (raises SandboxError, UsageError).

    `command` runs instead of the tool (a shell in the role's sandbox, `agentbox shell`):
    the tool's loaded config stays read-only to it, as to a headless turn.
    """
    profile = agent.profile
    adapter = adapter_for(profile.tool)
    runtime_env = secrets.resolve_env(profile)  # an unset ${VAR} stops the turn before anything is made
    hidden_values = tuple(secrets.secret_values(profile))
    ensure_state(profile)
    turn_pricing = _turn_pricing(profile, runtime_env, agent.model or profile.profile.runtime.model)
    turn = record.turns + 1
    logs = agent.sessions.logs_dir(record)
    logs.mkdir(mode=0o700, parents=True, exist_ok=True)  # turn logs may echo a secret
    # a fresh dir every turn: nothing an agent left in an earlier one (a planted symlink) is reused
    scratch = Path(tempfile.mkdtemp(prefix=f"turn-{turn}.", suffix=".scratch", dir=logs))
    home = Path.home()
    runtime = profile.profile.runtime
    executable = find_executable(profile.tool, runtime.command)
    tool_homes.check_bind_source(profile.config_dir, profile.state_dir)  # before anything is written in it
    # a shell sees none of the tool's config and credentials: it needs none of them
    homes, home_env = ([], {}) if command is not None else adapter.homes(profile.config_dir, home)
    if record.native_id is None and (record.turns > 0 or record.running):
        record.native_id = adapter.created_session(TurnRequest(
            prompt="", session_id=record.id, native_id=None, first_turn=True, instructions=None,
            model=None, extra_args=(), read_only=True, cwd=agent.cwd, home=home, scratch=scratch,
            executable="", config_dir=profile.config_dir))
    request = TurnRequest(
        prompt=prompt, session_id=record.id, native_id=record.native_id,
        first_turn=record.native_id is None, instructions=agent.instructions,
        model=agent.model or runtime.model, extra_args=(*runtime.extra_args, *agent.extra_args),
        read_only=agent.read_only, cwd=agent.cwd, home=home, scratch=scratch,
        # a configured command that is missing must fail to spawn, not fall back to PATH
        executable=str(executable) if executable else (runtime.command or adapter.executable_name),
        config_dir=profile.config_dir, scenario=profile.scenario_path,
        adapter_state=dict(record.adapter_state),
    )
    shell = command
    tool_at_keyboard = interactive and shell is None
    tool_env = {**adapter.env_defaults, **home_env, **runtime_env, **agent.env} if command is None else {}
    if command is None:
        command = adapter.interactive(request) if interactive else adapter.build(request)
    agentbox_env = {"AGENTBOX_SESSION_ID": record.id, "AGENTBOX_PROFILE": profile.name,
                    "AGENTBOX_ROLE": agent.role or ""}
    env = sandbox.sandbox_env(sandbox.host_env(), home, {**tool_env, **command.env, **agentbox_env})
    home_turn_dir = scratch.with_suffix(".home")
    if profile.profile.sandbox == "none":
        home_plan = tool_homes.plan(adapter, homes, profile.state_dir, home_turn_dir, interactive=True)
        for bind in homes:  # without a sandbox the tool reads its config where the env points
            env.update({k: str(bind.source) if v == str(bind.target) else v for k, v in env.items()})
        return Prepared(record, request, command.argv, env, command.stdin, logs, scratch,
                        secrets=hidden_values, home_plan=home_plan, pricing=turn_pricing)
    policy = profile.profile.sandbox
    if home == agent.cwd or home.is_relative_to(agent.cwd):
        raise SandboxError(
            f"{agent.cwd} contains your home directory, which agentbox hides from agents "
            "(with ~/.ssh and other profiles); it cannot sandbox an agent working there",
            "run agentbox from a project directory inside your home (cd into a repository)",
        )
    hidden = sandbox.private_paths(home, _agent_box_home())
    needs: set[Path] = set()
    if executable is not None and shell is None:  # a shell runs none of the tool's files
        needs |= sandbox.install_roots(executable)
    if profile.tool == "scripted" and shell is None:
        needs |= sandbox.python_roots()
        if profile.scenario_path is not None:
            needs.add(profile.scenario_path.parent.resolve())
    needs |= {Path(p).expanduser() for p in policy.ro_binds}
    source = agent.worktree or agent.cwd  # what is seen at the project's path
    metadata = scopes.metadata_paths(source) if agent.worktree is None else scopes.worktree_metadata_paths(source)
    scope_plan = scopes.plan(source, list(agent.writes) if agent.writes is not None else None,
                             scratch.with_suffix(".stage"), agent.protected_paths)
    tool_argv, egress_plan = command.argv, None
    home_plan = tool_homes.HomePlan()
    try:
        home_plan = tool_homes.plan(adapter, homes, profile.state_dir, home_turn_dir, interactive=tool_at_keyboard)
        state_dirs = sandbox.run_state_dirs(agent.cwd)
        if policy.network is True:  # the proxy listens on the sandbox's loopback; its proxy env points there
            from agentbox.core.agents import egress_turn

            egress_plan = egress_turn.plan(profile, runtime_env, agent.egress_allow)
            env.update(egress_plan.env)
        spec = sandbox.SandboxSpec(
            project_root=source,
            mount_at=agent.cwd if agent.worktree is not None else None,
            views=agent.views,
            view_hidden=agent.view_hidden,
            base=agent.base if agent.worktree is not None else None,
            over=agent.over,
            writable=scope_plan.writable,
            staged=tuple((view.stage, view.real) for view in scope_plan.staged),
            sealed=scope_plan.sealed,
            links=scope_plan.links,
            pinned=scope_plan.pinned,
            protected=tuple(dict.fromkeys((*agent.protected, *metadata, *scope_plan.protected))),
            extra_rw=(*agent.extra_rw, scratch),
            homes=tuple(home_plan.binds),
            ro_homes=tuple(home_plan.read_only),
            hidden=(*hidden, *state_dirs),
            ro_binds=sandbox.binds_needed(needs, hidden) + tuple(Path(p).expanduser() for p in policy.ro_binds if Path(p).expanduser().exists()),
            rw_binds=tuple(Path(p).expanduser() for p in policy.rw_binds),
            network=policy.network == "host",
            cwd=agent.cwd,
            env=env,
            interactive=interactive,
            **sandbox.host_layout(),
        )
        argv = sandbox.bwrap_argv(spec, tool_argv, sandbox.require_bwrap())
    except BaseException:
        scopes.finish(scope_plan, logs / f"turn-{turn}.discarded")  # no turn: nothing made for it stays
        tool_homes.remove(home_plan)
        if egress_plan is not None:
            egress_plan.remove()
        raise
    return Prepared(record, request, argv, {"PATH": env.get("PATH", "/usr/bin:/bin")}, command.stdin, logs, scratch,
                    scope_plan, secrets=hidden_values, egress=egress_plan, home_plan=home_plan,
                    pricing=turn_pricing)


def finish_turn(prepared: Prepared, turn: int) -> list[str]:
    """After a turn's process: carry staged scope changes back; notes on what was kept aside."""
    notes = scopes.finish(prepared.scopes, prepared.logs / f"turn-{turn}.discarded")
    shutil.rmtree(prepared.scratch.with_suffix(".stage"), ignore_errors=True)
    tool_homes.finish(prepared.home_plan)  # what the tool may keep of its per-turn config copies
    return notes


def _mask_file(path: Path, values: tuple[str, ...]) -> None:
    """Rewrite a turn log with `values` masked, when it holds any of them (atomically, owner-only)."""
    try:
        data = safe_io.read_bounded(path, max_bytes=64 << 20)
    except OSError:
        return
    text = data.decode("utf-8", "surrogateescape")
    masked = secrets.mask(text, values)
    if masked != text:
        from agentbox.core.store import atomic_write_bytes

        atomic_write_bytes(path, masked.encode("utf-8", "surrogateescape"), durable=False)
        os.chmod(path, 0o600)


def remove_scratch(prepared: Prepared) -> None:
    """Remove the turn's scratch dir and per-turn config home (never reused: the next turn gets fresh ones)
    and its proxy socket's dir."""
    shutil.rmtree(prepared.scratch, ignore_errors=True)
    tool_homes.remove(prepared.home_plan)
    if prepared.egress is not None:
        prepared.egress.remove()


def _agent_box_home() -> Path:
    from agentbox.core.paths import agent_box_home

    return agent_box_home()


async def invoke(
    agent: Agent,
    prompt: str,
    session_id: str | None = None,
    *,
    timeout_s: float | None = None,
    on_spawn: Callable[[SessionRecord, int], None] | None = None,
    new_session_id: str | None = None,
    run_id: str | None = None,
    task_id: str | None = None,
) -> InvokeResult:
    """Run one turn of `agent` in a new session (or resume `session_id`); never raises for agent failures.

    `new_session_id` lets a caller choose the UUID of a new session up front (the engine
    records it before dispatching). Raises only for caller mistakes: an unknown or busy
    session, a session of another role, a sandbox that cannot be built (bwrap missing).
    """
    tags: SessionTags = {"run_id": run_id, "task_id": task_id}
    with _prepared_turn(agent, prompt, session_id, new_session_id, tags) as (record, prepared):
        return await _run_prepared(agent, prompt, record, prepared, timeout_s or agent.timeout_s, on_spawn)


def invoke_sync(
    agent: Agent,
    prompt: str,
    session_id: str | None = None,
    *,
    timeout_s: float | None = None,
    on_spawn: Callable[[SessionRecord, int], None] | None = None,
) -> InvokeResult:
    """`invoke` for a caller with one turn to run and no event loop (the CLI), without asyncio.

    The same turn: the same sandbox, records, timeout and results. Ctrl-C (or any exception
    while the agent runs) kills the process tree, records the turn as killed and propagates.
    """
    with _prepared_turn(agent, prompt, session_id) as (record, prepared):
        return _run_prepared_sync(agent, prompt, record, prepared, timeout_s or agent.timeout_s, on_spawn)


@contextlib.contextmanager
def _prepared_turn(agent: Agent, prompt: str, session_id: str | None, new_id: str | None = None,
                   tags: SessionTags | None = None) -> Iterator[tuple[SessionRecord, Prepared]]:
    """The session (locked for the turn) and its next turn prepared; the scratch dir goes afterwards."""
    record = prepare_session(agent, session_id, new_id, tags)
    store = agent.sessions
    with _session_lock(store.root / ".locks" / f"{record.id}.lock"):
        if session_id is not None:
            record = store.find(record.id)  # read again under the lock (`session_id` may be a prefix)
        prepared = prepare(agent, prompt, record)
        try:
            with _serving(prepared.egress):  # the proxy lives exactly as long as the turn
                yield record, prepared
        finally:
            remove_scratch(prepared)  # after the adapter has read what the tool left there


def _join(plan: egress_turn.EgressPlan | None) -> Callable[[int], None] | None:
    """What bwrap's held sandbox runs before the tool: the proxy's listeners made in it (none without a plan)."""
    return plan.join if plan is not None else None


def _serving(plan: egress_turn.EgressPlan | None) -> contextlib.AbstractContextManager[object]:
    """The turn's proxy serving for the block (nothing to load or start for a turn without one)."""
    if plan is None:
        return contextlib.nullcontext()
    from agentbox.core.agents import egress_turn

    return egress_turn.serving(plan)


@dataclass
class _Turn:
    """A turn whose process is about to start: its number, logs, output streams and result fields."""

    number: int
    started: float
    out_log: Path
    err_log: Path
    stdout: CappedStream
    stderr: CappedStream
    base: dict[str, Any]
    t0: float
    live: LiveWriter
    """The turn's live view, written as the output comes (`agentbox tail`, the dashboard)."""


def _open_turn(agent: Agent, record: SessionRecord, prepared: Prepared) -> _Turn:
    """Mark the session running on disk (before the process starts) and open the turn's logs."""
    store = agent.sessions
    turn = record.turns + 1
    started = now()
    out_log = prepared.logs / f"turn-{turn}.log"
    err_log = prepared.logs / f"turn-{turn}.stderr.log"
    keep_interrupted_attempt(store, record, turn, out_log, err_log, "an engine crash")
    live = LiveWriter(live_dir_for(out_log), adapter_for(agent.profile.tool).display, prepared.secrets)
    record.status = "running"
    record.running = running_turn(turn, started=started, log=str(out_log), live=str(live.directory))
    store.save(record)  # the session exists on disk before the process starts

    base = {"session_id": record.id, "turn": turn, "role": agent.role, "profile": agent.profile.name,
            "tool": agent.profile.tool, "sandboxed": record.sandboxed, "log_path": str(out_log)}
    t0 = time.monotonic()
    return _Turn(turn, started, out_log, err_log, CappedStream(out_log, tee=live.feed_stdout),
                 CappedStream(err_log, lazy=True, tee=live.feed_stderr), base, t0, live)


def _spawn_failed(agent: Agent, prompt: str, record: SessionRecord, prepared: Prepared, turn: _Turn,
                  exc: OSError) -> InvokeResult:
    result = InvokeResult(status="error", error_kind="spawn_failed",
                          error=f"cannot start {prepared.argv[0]}: {exc.strerror or exc}", **turn.base)
    return _finish(agent.sessions, record, prompt, result, turn.started, turn.live)


def _spawned(record: SessionRecord, pid: int, on_spawn: Callable[[SessionRecord, int], None] | None) -> None:
    """The process runs: its pid goes to the record, and to `on_spawn` with its start time."""
    assert record.running is not None
    record.running["pid"] = pid
    if on_spawn is not None:
        _note_start_time(record)
        on_spawn(record, pid)


def _note_start_time(record: SessionRecord) -> None:
    """The running process's start time (with its pid, it tells the process from a later one with the same pid)."""
    pid = record.running["pid"] if record.running is not None else None
    if record.running is None or pid is None or "create_time" in record.running:
        return
    from agentbox.core.process import start_time

    started = start_time(pid)  # /proc, not psutil: a CLI turn imports no psutil for it
    if started is not None:
        record.running["create_time"] = started


def _note_pid(store: SessionStore, record: SessionRecord) -> None:
    """Write the running turn's pid to its record (for the dashboard), once the turn has run a moment.

    A short turn is written once at its end instead; after a crash the process is found by
    its AGENTBOX_SESSION_ID either way. It runs as an event-loop callback, where an error would
    only print a traceback: a record that cannot be written now (a full disk) is written at the
    turn's end, which reports the problem as the error it is.
    """
    _note_start_time(record)
    with contextlib.suppress(AgentboxError, OSError):
        store.save(record)


def _killed(agent: Agent, prompt: str, record: SessionRecord, turn: _Turn, why: str) -> None:
    """Record a turn whose process group was killed because its caller gave up on it."""
    turn.stdout.close()
    turn.stderr.close()
    killed = InvokeResult(status="error", error_kind="killed", error=f"{why}; the process group was killed",
                          **{**turn.base, "duration_s": time.monotonic() - turn.t0})
    _finish(agent.sessions, record, prompt, killed, turn.started, turn.live)


def _close_turn(prepared: Prepared, turn: _Turn) -> None:
    """After the process: close the logs, carry staged scope changes back, note what was kept aside."""
    turn.stdout.close()
    turn.stderr.close()
    discarded = finish_turn(prepared, turn.number)  # staged scope changes carried back; empty made dirs removed
    if discarded:
        with contextlib.suppress(OSError), open(prepared.logs / f"turn-{turn.number}.discarded.txt", "a") as note:
            note.write("\n".join(discarded) + "\n")


async def _run_prepared(agent: Agent, prompt: str, record: SessionRecord, prepared: Prepared,
                        timeout_s: float | None, on_spawn: Callable[[SessionRecord, int], None] | None) -> InvokeResult:
    import asyncio

    turn = _open_turn(agent, record, prepared)
    stdout, stderr = turn.stdout, turn.stderr
    timed_out = False
    exit_code: int | None = None
    noting: asyncio.TimerHandle | None = None
    try:
        try:
            with sandbox.launch(prepared.argv, before_exec=_join(prepared.egress)) as launched:
                proc = await asyncio.create_subprocess_exec(
                    *launched.argv,
                    stdin=asyncio.subprocess.PIPE if prepared.stdin is not None else asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                    cwd=str(agent.cwd), env=prepared.env, start_new_session=True, pass_fds=launched.pass_fds,
                )
        except OSError as exc:
            return _spawn_failed(agent, prompt, record, prepared, turn, exc)
        noting = asyncio.get_running_loop().call_later(PID_NOTE_DELAY_S, _note_pid, agent.sessions, record)
        _spawned(record, proc.pid, on_spawn)
        assert proc.stdout is not None and proc.stderr is not None
        # feeding the prompt is part of the turn: under its timeout, killed when cancelled
        drains = asyncio.gather(_feed(proc, prepared.stdin), drain(proc.stdout, stdout), drain(proc.stderr, stderr),
                                proc.wait())
        drains.add_done_callback(_retrieved)  # cancelled with the loop (an engine stopping): never logged as lost
        try:
            await asyncio.wait_for(asyncio.shield(drains), timeout=timeout_s)
        except TimeoutError:
            timed_out = True
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(asyncio.shield(drains), timeout=KILL_GRACE_S)
            except TimeoutError:
                kill_tree(proc.pid)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(drains, timeout=10)
        except asyncio.CancelledError:
            kill_tree(proc.pid)
            _killed(agent, prompt, record, turn, "cancelled by the caller")
            raise
        exit_code = proc.returncode
        kill_group(proc.pid)  # nothing of the turn outlives it
    finally:
        if noting is not None:
            noting.cancel()
        _close_turn(prepared, turn)
    return _conclude(agent, prompt, record, prepared, turn, exit_code, timeout_s if timed_out else None)


def _retrieved(future: asyncio.Future[Any]) -> None:
    """Mark a finished future's outcome as seen (its exception, if any, is handled where it is awaited)."""
    if not future.cancelled():
        future.exception()


def _run_prepared_sync(agent: Agent, prompt: str, record: SessionRecord, prepared: Prepared,
                       timeout_s: float | None, on_spawn: Callable[[SessionRecord, int], None] | None) -> InvokeResult:
    import subprocess

    turn = _open_turn(agent, record, prepared)
    timed_out = False
    exit_code: int | None = None
    try:
        try:
            with sandbox.launch(prepared.argv, before_exec=_join(prepared.egress)) as launched:
                proc = subprocess.Popen(
                    launched.argv, stdin=subprocess.PIPE if prepared.stdin is not None else subprocess.DEVNULL,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    cwd=str(agent.cwd), env=prepared.env, start_new_session=True, pass_fds=launched.pass_fds,
                )
        except OSError as exc:
            return _spawn_failed(agent, prompt, record, prepared, turn, exc)
        if prepared.egress is not None:  # its proxy starts serving now that it delays no spawn
            prepared.egress.spawned()
        try:
            _spawned(record, proc.pid, on_spawn)
            timed_out = wait_captured(proc, prepared.stdin, turn.stdout, turn.stderr, timeout_s,
                                      note=(PID_NOTE_DELAY_S, lambda: _note_pid(agent.sessions, record)))
        except BaseException as exc:  # Ctrl-C (or on_spawn failed): no process outlives the turn
            kill_tree(proc.pid)
            _killed(agent, prompt, record, turn, "interrupted" if isinstance(exc, KeyboardInterrupt) else
                    f"stopped by {type(exc).__name__}")
            raise
        exit_code = proc.returncode
        kill_group(proc.pid)  # nothing of the turn outlives it
    finally:
        _close_turn(prepared, turn)
    return _conclude(agent, prompt, record, prepared, turn, exit_code, timeout_s if timed_out else None)


def _conclude(agent: Agent, prompt: str, record: SessionRecord, prepared: Prepared, turn: _Turn,
              exit_code: int | None, timed_out_after: float | None) -> InvokeResult:
    """The turn's result from its exit and output (masked, parsed, classified), recorded."""
    store = agent.sessions
    adapter = adapter_for(agent.profile.tool)
    base, started, stdout = turn.base, turn.started, turn.stdout
    duration = time.monotonic() - turn.t0
    out_text, err_text = stdout.text(), turn.stderr.text()
    if prepared.secrets:  # a tool that prints a key it was given leaves it in no record or log
        out_text, err_text = secrets.mask(out_text, prepared.secrets), secrets.mask(err_text, prepared.secrets)
        for log in (turn.out_log, turn.err_log):
            _mask_file(log, prepared.secrets)
    base.update(duration_s=duration, exit_code=exit_code, truncated=stdout.truncated,
                network=prepared.egress.summary() if prepared.egress is not None else None)
    if timed_out_after is not None:
        result = InvokeResult(status="error", error_kind="timeout",
                              error=f"no answer within {timed_out_after:g} s; the process group was killed",
                              text=_tail(out_text), **base)
        return _finish(store, record, prompt, result, started, turn.live)
    if record.sandboxed and exit_code == 1 and err_text.startswith("bwrap:") and not out_text.strip():
        result = InvokeResult(status="error", error_kind="spawn_failed", error=err_text.strip(), **base)
        return _finish(store, record, prompt, result, started, turn.live)
    exit_kind = classify_exit(exit_code, record.sandboxed)
    captured = CapturedOutput(out_text, err_text, exit_code, stdout.truncated, prepared.scratch)
    try:
        parsed = adapter.parse(captured, prepared.request)
    except ParseError as exc:
        _adopt_created_session(adapter, prepared.request, record)
        if exit_kind is not None:
            missing = exit_code == 127 or "No such file" in err_text
            kind: ErrorKind = "spawn_failed" if missing and not out_text.strip() else exit_kind
            result = InvokeResult(status="error", error_kind=kind,
                                  error=_tail(err_text) or f"exit code {exit_code}", text=_tail(out_text), **base)
        else:
            result = InvokeResult(status="error", error_kind="parse_error",
                                  error=f"unreadable {agent.profile.tool} output: {exc}", text=_tail(out_text), **base)
        return _finish(store, record, prompt, result, started, turn.live)
    if parsed.native_id:
        record.native_id = parsed.native_id
    record.adapter_state = parsed.adapter_state or record.adapter_state
    usage, asked = parsed.usage, prepared.request.model
    if prepared.pricing is not None:
        asked = asked or prepared.pricing.model
        usage = pricing.priced(usage, tool=agent.profile.tool, model=parsed.model or asked,
                               table=prepared.pricing.table, billing=prepared.pricing.billing)
    common = dict(base, native_id=record.native_id, usage=usage, text=parsed.text, model=parsed.model,
                  model_asked=asked)
    if parsed.is_error:
        result = InvokeResult(status="error", error_kind="tool_error", error=parsed.error or parsed.text, **common)
    elif exit_kind is not None:
        result = InvokeResult(status="error", error_kind=exit_kind,
                              error=_tail(err_text) or f"exit code {exit_code}", **common)
    else:
        result = InvokeResult(status="ok", **common)
    return _finish(store, record, prompt, result, started, turn.live)


def _ending(result: InvokeResult) -> str:
    """How a turn ended, in one line, for its live view."""
    tokens = result.usage.total_tokens
    spent = "unknown tokens" if tokens is None else f"{tokens:,} tokens"
    if result.ok:
        return f"ok · {spent} · {result.duration_s:.1f}s"
    error = (result.error or "").strip().splitlines()
    return f"error ({result.error_kind}){': ' + error[0][:300] if error else ''} · {result.duration_s:.1f}s"


def keep_interrupted_attempt(store: SessionStore, record: SessionRecord, turn: int, out_log: Path, err_log: Path,
                             why: str) -> Path | None:
    """Before turn `turn` of `record` runs: an earlier attempt's logs of it, if any, moved aside and
    said so in a turn line (`why` it never finished); the kept stdout log."""
    kept = _keep_interrupted_logs(out_log, err_log)
    if kept is not None:  # an earlier attempt was cut short: the turn is run again, its first log stays
        store.append_turn(record, turn_record(
            turn, started=record.running["started"] if record.running else None, finished=None, prompt="",
            text="", status="interrupted", error_kind="interrupted",
            error=f"interrupted before it finished ({why}); turn {turn} was run again, "
                  f"this attempt's output is kept in {kept.name}",
            usage=Usage(), duration_s=0, exit_code=None, native_id=record.native_id, log_path=str(kept),
            with_model=False))
    return kept


def _keep_interrupted_logs(out_log: Path, err_log: Path) -> Path | None:
    """Move an earlier attempt's logs of this turn aside (`turn-N.interrupted-K.log`); the kept stdout log.

    A turn is only run again under the same number when an earlier attempt never
    finished (the engine was killed mid-turn), so its logs are evidence worth keeping.
    """
    if not os.path.lexists(out_log) and not os.path.lexists(err_log):
        return None
    stem = out_log.name.removesuffix(".log")
    attempt = 1
    while os.path.lexists(out_log.with_name(f"{stem}.interrupted-{attempt}.log")):
        attempt += 1
    kept = out_log.with_name(f"{stem}.interrupted-{attempt}.log")
    for source, target in ((out_log, kept), (err_log, out_log.with_name(f"{stem}.interrupted-{attempt}.stderr.log"))):
        with contextlib.suppress(FileNotFoundError):
            os.rename(source, target)  # a rename moves a planted symlink itself, never its target
    return kept


def _adopt_created_session(adapter: Adapter, request: TurnRequest, record: SessionRecord) -> None:
    """After a failed first turn, keep the native session if the tool created it anyway.

    Tools with caller-chosen ids (claude, scripted) refuse the same id twice, so a retry
    must resume the half-made session rather than create it again.
    """
    if record.native_id is None:
        record.native_id = adapter.created_session(request)


def _tail(text: str, limit: int = 4000) -> str:
    text = text.strip()
    return text if len(text) <= limit else "…" + text[-limit:]


async def _feed(proc: asyncio.subprocess.Process, data: bytes | None) -> None:
    """Write the prompt to the process's stdin (if it takes it there) and close it."""
    if data is None or proc.stdin is None:
        return
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        proc.stdin.write(data)
        await proc.stdin.drain()
    proc.stdin.close()


def _finish(store: SessionStore, record: SessionRecord, prompt: str, result: InvokeResult,
            started: float, live: LiveWriter | None = None) -> InvokeResult:
    """Record the turn and the session's new state (and end its live view); returns the result."""
    if live is not None:
        live.end(_ending(result))
    record.turns = result.turn
    record.status = "idle"
    record.running = None
    record.last_status = result.status
    record.last_error_kind = result.error_kind
    record.totals.add(result.usage)
    store.append_turn(record, turn_record(
        result.turn, started=started, finished=now(), prompt=prompt, text=result.text, status=result.status,
        error_kind=result.error_kind, error=result.error, usage=result.usage,
        duration_s=round(result.duration_s, 3), exit_code=result.exit_code, native_id=result.native_id,
        log_path=result.log_path, model=result.model or result.model_asked, network=result.network))
    store.save(record)
    if result.native_id is None and record.native_id:
        result = InvokeResult(**{**result.__dict__, "native_id": record.native_id})
    return result
