"""The Ray runner: each turn is a Ray task on a node of the person's cluster, git the hand-off.

The person's config.yaml names the cluster (`runner: {kind: ray, address: HOST:PORT}`);
agentbox connects to it as a driver and starts no Ray service of its own. A turn asks Ray
for its resources: CPUs (`cpus_per_turn`), memory (the profile's `resources.memory_mb`)
and one unit of the custom resource `agentbox-tool:<tool>` that a node advertises when it
has the tool, so a turn never lands on a node without it. On the node the turn runs
through the same `invoke` as here (bwrap, seccomp, scopes, egress allowlist).

Git is the hand-off. A work turn's branch goes to the node as a pack of the task's commits
since its base and that base's whole tree (`commit_pack`: no older history, so what a turn
carries grows with the tree, not with the repository's age); the node makes a shallow
repository of its own from it (its `.git` read-only to the agent), runs the turn, commits
what changed and sends the new commit back as a bundle. Here its pack is indexed
into the project's repository (checked as fsck checks what it fetches) and the task's
worktree's files are set to the node's tree, then committed by the same
code as a local turn (same message, same author, same idempotent turn id), so the
branch holds what it would hold had the turn run here.

A node lost mid-turn (its raylet or the worker killed) comes back as an environment
failure (`killed`), which the engine retries with back-off; Ray itself never re-runs a
turn (`max_retries=0`), so no turn runs twice without the engine knowing.
A head killed mid-turn takes its turns with it (Ray stops the tasks of a driver that died,
and bwrap dies with its worker), so `run --resume` resumes them as after a local crash.

A turn without a workspace of its own that reads a worktree (a review reads its task's
branch, a plan or a synthesis the run's approved work) gets that worktree's HEAD the same
way, checked out on the node read-only; nothing comes back but the
result. So no turn needs the project's path on the node, only the tool and agentbox.

The session travels with the turn (`travel`): the head sends the profile and this
session's files, the node runs the turn in a home of its own and sends back what the turn
changed, which the head keeps where a local turn leaves it; so a session's next turn may
run on any node. While the turn runs, the node says so once its process has started
(`NodeStarted`, the task's first yield): the session's record on the head shows it running
on that node (`running.node`, `running.host`, `running.node_pid`) until the node's record
comes back. The head's config.yaml `prices:` go with the turn, so the node prices it as
the head would.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import re
import shutil
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentbox.core.agents.invoke import Agent, InvokeResult
from agentbox.core.engine.runners import ray_stream, travel
from agentbox.core.engine.runners.base import Turn, TurnDone
from agentbox.core.errors import AgentboxError

if TYPE_CHECKING:
    from agentbox.core.agents.sessions import SessionRecord
    from agentbox.core.config.profiles import ProfileInfo

RETRY_UNREACHABLE_S = 10.0
"""A cluster that could not be reached is asked again after this long (the engine asks for room often)."""
TOOL_RESOURCE = "agentbox-tool:{tool}"
"""The custom resource a node advertises for each tool it has (`ray start --resources`)."""


def tool_resource(tool: str) -> str:
    """The name of the custom resource of `tool`."""
    return TOOL_RESOURCE.format(tool=tool)


class RayRunner:
    """Runs each turn as a Ray task on the cluster at `address` (connected at the first turn)."""

    kind = "ray"

    def __init__(self, address: str, *, cpus_per_turn: float = 1.0, tls_env: dict[str, str] | None = None) -> None:
        self.address = address
        self.cpus_per_turn = cpus_per_turn
        self.tls_env = tls_env
        """RAY_USE_TLS and its certificates (config.yaml's `runner.tls`), None: the cluster speaks plain gRPC."""
        self._remote: Any = None
        self._unreachable: tuple[float, str] | None = None
        """When the cluster last could not be reached, and what `room` says meanwhile."""

    def _connect(self) -> Any:
        ray = connect(self.address, self.tls_env)
        if self._remote is None:
            self._remote = ray.remote(max_retries=0)(run_on_node)
        return ray

    def task_options(self, turn: Turn) -> dict[str, Any]:
        """More Ray options for the task of `turn` (none: Ray places it; a subclass may pin a node)."""
        return {}

    def room(self, job_id: str, profile: ProfileInfo) -> str | None:
        """Ray queues a turn until a node has its resources; a tool no node has, or a cluster that cannot
        be reached (asked again after `RETRY_UNREACHABLE_S`), is said so."""
        if self._unreachable is not None and time.monotonic() - self._unreachable[0] < RETRY_UNREACHABLE_S:
            return self._unreachable[1]
        try:
            ray = self._connect()
        except AgentboxError as exc:
            self._unreachable = (time.monotonic(), f"waiting for the cluster: {exc.message}")
            return self._unreachable[1]
        self._unreachable = None
        wanted = tool_resource(profile.tool)
        if not any(node.get("Alive") and node.get("Resources", {}).get(wanted) for node in ray.nodes()):
            return f"waiting for a node: no node of the cluster offers {wanted}"
        return None

    async def run(self, turn: Turn) -> TurnDone:
        """The turn as a Ray task; its commit taken from the node's bundle and committed here.

        The session is locked here for the whole turn, as a local turn locks it: no other turn
        of the session (`agentbox invoke --session`, here or through another runner) runs meanwhile.
        """
        from agentbox.core import store
        from agentbox.core.agents.sessions import check_session_id
        from agentbox.core.errors import StateError

        lock = turn.agent.sessions.root / ".locks" / check_session_id(turn.session_id)  # the file invoke locks
        with contextlib.ExitStack() as held:
            try:
                held.enter_context(store.locked(lock, timeout=0))
            except StateError:
                return TurnDone(InvokeResult(status="error", session_id=turn.session_id, error_kind="spawn_failed",
                                             error=f"session {turn.session_id} is busy with another turn",
                                             role=turn.agent.role))
            return await self._run(turn)

    async def _run(self, turn: Turn) -> TurnDone:
        try:
            ray = self._connect()
        except AgentboxError as exc:
            return TurnDone(InvokeResult(status="error", session_id=turn.session_id, error_kind="spawn_failed",
                                         error=exc.message, role=turn.agent.role))
        agent = turn.agent
        memory_mb = agent.profile.profile.resources.memory_mb
        options: dict[str, Any] = {"num_cpus": self.cpus_per_turn, "resources": {tool_resource(agent.profile.tool): 1}}
        if memory_mb is not None:
            options["memory"] = memory_mb * 2**20
        options.update(self.task_options(turn))
        try:
            secrets, sending = await asyncio.to_thread(_for_node, turn)
        except AgentboxError as exc:
            return TurnDone(InvokeResult(status="error", session_id=turn.session_id, error_kind="spawn_failed",
                                         error=f"preparing the turn for a node failed: {exc.message}",
                                         role=agent.role))
        refs = self._remote.options(**options).remote(secrets, sending)
        shown: list[NodeStarted] = []
        mirror = ray_stream.LogMirror(agent)
        try:
            back: NodeDone | None = None
            while back is None:
                said = await _next_of(refs)
                if isinstance(said, NodeStarted):
                    shown.append(said)
                    mirror.record = await asyncio.to_thread(_show_running, agent, said, mirror)
                    if turn.on_placed is not None:
                        turn.on_placed(said.node_id, said.host)
                elif isinstance(said, ray_stream.NodeOutput):
                    await asyncio.to_thread(mirror.take, said)
                elif isinstance(said, ray_stream.NodeSample):
                    await asyncio.to_thread(mirror.sample, said)
                elif isinstance(said, NodeDone):
                    back = said
                else:
                    raise ray.exceptions.RayError("the node's task ended without the turn's result")
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                ray.cancel(refs, force=True)  # the worker dies; bwrap dies with its parent
            if shown:
                with contextlib.suppress(Exception):
                    _show_ended(agent, shown[0])
            raise
        except ray.exceptions.RayError as exc:  # the node or its worker was lost mid-turn
            if shown:
                await asyncio.to_thread(_show_ended, agent, shown[0])
            return TurnDone(InvokeResult(status="error", session_id=turn.session_id, error_kind="killed",
                                         error=f"the node running the turn was lost: {type(exc).__name__}: "
                                               f"{str(exc).splitlines()[0][:300] if str(exc) else ''}",
                                         role=agent.role))
        return await asyncio.to_thread(_taken_back, turn, back, shown[0] if shown else None, sending.folders, mirror)


def _for_node(turn: Turn) -> tuple[NodeSecrets, NodeTurn]:
    """What the task of `turn` carries to its node (made in one go, off the event loop)."""
    agent = turn.agent
    tree = turn.workspace.path if turn.workspace is not None else agent.worktree
    head = commit_pack(tree, turn.workspace.base if turn.workspace is not None else None) if tree is not None else None
    sent, logins = travel.pack(agent, turn.session_id, turn.resume)
    folders = travel.pack_folders(_handoff_folders(agent)) if tree is not None else {}
    return NodeSecrets(_secret_env(agent), logins), NodeTurn(
        agent=agent, prompt=turn.prompt, session_id=turn.session_id, resume=turn.resume, timeout_s=turn.timeout_s,
        run_id=turn.run_id, task_id=turn.task_id, tree=head, session=sent, commits=turn.workspace is not None,
        prices=head_prices(), folders=folders)


def _taken_back(turn: Turn, back: NodeDone, started: NodeStarted | None,
                folders: dict[str, dict[str, bytes]], mirror: ray_stream.LogMirror) -> TurnDone:
    """What the node sent back kept here (the session's files, its logs over what streamed, the hand-off
    folders, the turn's commit)."""
    agent = turn.agent
    try:
        mirror.store_back(back.session)
        travel.store_folders_back(back.folders, tuple(Path(f) for f in folders))
    except (AgentboxError, OSError) as exc:
        if started is not None:
            _show_ended(agent, started)
        return TurnDone(InvokeResult(status="error", session_id=turn.session_id, error_kind="spawn_failed",
                                     error=f"keeping the session's files from the node failed: {exc}",
                                     role=agent.role), node_id=back.node_id, host=back.host)
    result = dataclasses.replace(back.result, log_path=travel.local_path(back.session, agent, back.result.log_path))
    if turn.workspace is None or result.error_kind == "spawn_failed":
        return TurnDone(result, None, back.peak_rss_mb, node_id=back.node_id, host=back.host)
    try:
        if back.bundle is not None:
            _take_bundle(turn.workspace.path, back.bundle)
        from agentbox.core.engine.runners.local import reply_summary

        git = turn.workspace.commit(reply_summary(result.text))
    except AgentboxError as exc:
        return TurnDone(InvokeResult(status="error", session_id=turn.session_id, error_kind="spawn_failed",
                                     error=f"taking the node's commit failed: {exc.message}", role=agent.role),
                        node_id=back.node_id, host=back.host)
    return TurnDone(result, git, back.peak_rss_mb, node_id=back.node_id, host=back.host)


@dataclasses.dataclass(frozen=True)
class NodeTurn:
    """What a node gets for one turn (in memory, through Ray's object transfer)."""

    agent: Agent
    prompt: str
    session_id: str
    resume: bool
    timeout_s: float
    run_id: str
    task_id: str | None
    tree: CommitPack | None
    """The HEAD of the worktree the turn works in or reads (None: it has none)."""
    session: travel.SessionPack
    """The profile and the session's files (login files travel in `NodeSecrets`)."""
    commits: bool = True
    """False: the turn only reads the tree (a review, a plan); nothing of it comes back."""
    prices: dict[str, Any] | None = None
    """The head's config.yaml `prices:` (None: it has none), so the node prices the turn as the head would."""
    folders: dict[str, dict[str, bytes]] = dataclasses.field(default_factory=dict)
    """The turn's hand-off folders in the project (by their path on the head) and their files."""


@dataclasses.dataclass(frozen=True)
class NodeStarted:
    """What a node says once the turn's process runs there (the task's first yield)."""

    node_id: str
    host: str
    pid: int
    """The turn's process on the node (not a process of the head's)."""
    record: dict[str, Any]
    """The session's record on the node as the turn started (its store's paths are the node's)."""
    store_root: str


@dataclasses.dataclass(frozen=True)
class NodeSecrets:
    """What a node gets in memory only: small, so Ray sends it inline with the task."""

    env: dict[str, str]
    """The variables the profile takes from the head's environment."""
    logins: dict[str, bytes]
    """The profile's login files (relative to its state dir)."""


@dataclasses.dataclass(frozen=True)
class NodeDone:
    """What a node sends back: the turn's result, its commit as a bundle, and where it ran."""

    result: InvokeResult
    bundle: bytes | None
    node_id: str
    host: str
    peak_rss_mb: float | None
    session: travel.SessionBack
    folders: dict[str, dict[str, bytes]] = dataclasses.field(default_factory=dict)
    """What the turn made or changed in its hand-off folders (by their path on the head)."""


def run_on_node(secrets: NodeSecrets, turn: NodeTurn) -> Iterator[NodeStarted | ray_stream.Said | NodeDone]:
    """On a node: the turn in a home of its own, in its own worktree cloned from the bundle,
    through the local runner. A Ray generator task: it yields `NodeStarted` once the turn's
    process runs, then while it runs what its logs gained and samples of its processes
    (`ray_stream`), then the `NodeDone`.

    `secrets` holds the variables the profile takes from the head's environment and its
    login files: the variables are put in this worker's environment for the turn only
    (memory, never a file) and taken out after it; the login files are written into the
    turn's home, memory-backed when the node has `/dev/shm`, removed after the turn. It is
    an argument of its own, small, so Ray sends it inline with the task, never through its
    object store (which may spill to disk).
    """
    import ray

    from agentbox.core.agents.sessions import SessionStore
    from agentbox.core.engine.runners.admission import PeakStore
    from agentbox.core.engine.runners.local import LocalRunner

    node_id = ray.get_runtime_context().get_node_id()
    host = socket.gethostname()
    scratch = travel.node_dir(travel.NODE_TURN_DIR, travel.scratch_parent(len(turn.tree.pack) if turn.tree else 0))
    home_root = travel.node_dir(travel.NODE_HOME_DIR, travel.node_home_parent())
    loop = asyncio.Runner()
    try:
        home = travel.unpack(home_root, turn.agent.profile, turn.session, secrets.logins)
        if turn.prices:  # the head's price overrides, where the node's turn reads its config.yaml
            (home_root / "config.yaml").write_text(json.dumps({"prices": turn.prices}))
        agent = dataclasses.replace(turn.agent, profile=home.profile, sessions=SessionStore(home.store_root))
        work = None
        if turn.tree is not None:
            work = scratch / "work"
            _check_out(work, turn.tree)
            agent = _in_clone(agent, work, turn.folders)
        runner = LocalRunner(reading=_no_limit, peaks=PeakStore(None))  # the peak goes back in NodeDone
        with _environment({"AGENT_BOX_HOME": str(home_root), **secrets.env}):
            started: asyncio.Future[tuple[dict[str, Any], int]] = loop.get_loop().create_future()

            def spawned(record: Any, pid: int) -> None:
                if not started.done():
                    started.set_result((record.as_dict(), pid))

            running = loop.get_loop().create_task(runner.run(Turn(
                job_id=turn.session_id, run_id=turn.run_id, task_id=turn.task_id, agent=agent, prompt=turn.prompt,
                session_id=turn.session_id, resume=turn.resume, timeout_s=turn.timeout_s, on_spawn=spawned)))
            waits: list[asyncio.Future[Any]] = [running, started]
            loop.run(asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED))
            if started.done():
                record, pid = started.result()
                yield NodeStarted(node_id, host, pid, record, str(home.store_root))
                yield from ray_stream.follow_turn(loop, running, agent.sessions, record, pid)
            done = loop.run(_awaited(running))
        session = travel.collect(home, turn.session_id)
        folders = {}
        for name, files in turn.folders.items():
            if work is None:
                break
            local = _in_work(work, agent.cwd, Path(name))
            folders[name] = travel.collect_folder(local, files)
            shutil.rmtree(local, ignore_errors=True)  # it goes back as files, never in the turn's commit
        bundle = None
        if work is not None and turn.tree is not None and turn.commits and done.result.error_kind != "spawn_failed":
            bundle = _bundle_back(work, turn.tree.head, node_id)
        yield NodeDone(done.result, bundle, node_id, host, done.peak_rss_mb, session, folders)
    finally:  # after the result is on its way: the worker is not free for another turn before this ends
        loop.close()
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(home_root, ignore_errors=True)
        travel.sweep_left_behind()


async def _awaited(task: asyncio.Task[TurnDone]) -> TurnDone:
    return await task


def _handoff_folders(agent: Agent) -> tuple[Path, ...]:
    """The agent's writable folders inside the project (a work turn's hand-off folder under `.agent-box/runs/`)."""
    return tuple(p for p in agent.extra_rw if p.is_relative_to(agent.cwd))


def _in_work(work: Path, cwd: Path, folder: Path) -> Path:
    """Where the node's clone holds `folder`, a path of the head's project."""
    return work / folder.relative_to(cwd)


def _in_clone(agent: Agent, work: Path, folders: dict[str, dict[str, bytes]]) -> Agent:
    """`agent` seeing the node's clone `work` at the project's path, and nothing of the head's project.

    The clone is whole (the head's sparse layers name paths of the head's disk, which the node
    does not have); its `.git` is read-only, as is its `.agent-box/` (what the commit holds of
    it stands for the project's own, which is bound from the head's path in a turn here). The
    clone has the dirs a sandbox hides under `.agent-box/` (empty; git keeps no empty dir), so
    their mount points are there whichever project the node's own disk holds at that path.
    The hand-off folders (`folders`, with the files they hold on the head) are made in the
    clone and bound writable at their path in the project, as a turn here has them.
    """
    box = work / ".agent-box"
    for name in ("runs", "sessions"):
        (box / name).mkdir(parents=True, exist_ok=True)
    protected = (*(p for p in agent.protected if not p.is_relative_to(agent.cwd)), box)
    writable = []
    for path in agent.extra_rw:
        if str(path) in folders:
            local = _in_work(work, agent.cwd, path)
            travel.unpack_folder(local, folders[str(path)])
            path = local
        writable.append(path)
    return dataclasses.replace(agent, worktree=work, views=((work / ".git", agent.cwd / ".git"),),
                               view_hidden=(), base=None, over=(), protected=protected, extra_rw=tuple(writable))


async def _next_of(refs: Any) -> NodeStarted | ray_stream.Said | NodeDone | None:
    """What the node's task says next (None: it ended without a word more), awaited on the event loop."""
    import ray

    try:
        ref = await refs.__anext__()
    except StopAsyncIteration:
        return None
    try:  # the iterator gives a ref once its object is here: taken at once, not awaited through the loop again
        said: NodeStarted | ray_stream.Said | NodeDone = ray.get(ref, timeout=0)
    except ray.exceptions.GetTimeoutError:  # gone from this process's store meanwhile: fetched again
        said = await ref
    return said


def head_prices() -> dict[str, Any] | None:
    """The head's config.yaml `prices:` as JSON (None: no file, or no prices in it), read once per version of it."""
    from agentbox.core.agents.pricing import user_prices

    return user_prices()


def _show_running(agent: Agent, started: NodeStarted, mirror: ray_stream.LogMirror) -> SessionRecord:
    """The session's record on the head says the turn runs on the node (its pid there, none here), once
    `mirror` has moved an earlier attempt's logs of the turn aside; that record."""
    from agentbox.core.agents.sessions import SessionRecord

    mirror.start_of(started.record)

    here = str(agent.sessions.root)
    record = SessionRecord.from_dict(json.loads(json.dumps(started.record).replace(
        json.dumps(started.store_root)[1:-1], json.dumps(here)[1:-1])))
    if record.running is not None:
        record.running["pid"] = None  # the dashboard samples a pid here: the node's is not one of this machine's
        record.running.pop("create_time", None)
        record.running["node"] = started.node_id
        record.running["host"] = started.host
        record.running["node_pid"] = started.pid
    agent.sessions.save(record)
    return record


def _show_ended(agent: Agent, started: NodeStarted) -> None:
    """The node's turn ended without its record coming back (the node was lost): the head's says idle again."""
    from agentbox.core.errors import NotFoundError

    with contextlib.suppress(NotFoundError):
        record = agent.sessions.find(started.record["id"])
        if record.running is not None and record.running.get("node") == started.node_id:
            record.status, record.running = "idle", None
            agent.sessions.save(record)


def _secret_env(agent: Agent) -> dict[str, str]:
    """The head's values of the variables the agent's profile takes from the environment (resolved here)."""
    from agentbox.core.config import secrets

    runtime = agent.profile.profile.runtime
    names = {ref.name for value in runtime.env.values() for ref in secrets.references(value)} | set(runtime.pass_env)
    return {name: os.environ[name] for name in sorted(names) if name in os.environ}


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """This process's environment with `values` set, as it was afterwards."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _no_limit() -> Any:
    """On a node Ray has admitted the turn already: the local reading never holds it back."""
    from agentbox.core.engine.runners.admission import Room

    return Room(available_mb=float("inf"), total_mb=float("inf"), load=0.0, cpus=os.cpu_count() or 1)


@dataclasses.dataclass(frozen=True)
class CommitPack:
    """A worktree's HEAD for a node without the history before the task: a shallow repository's contents."""

    head: str
    """The commit the node checks out (detached, as a clone of a bundle has it)."""
    shallow: tuple[str, ...]
    """The commits whose parents the node does not get (its `.git/shallow`)."""
    pack: bytes
    """Every object from `head` down to `shallow`, each of those commits' whole tree included."""


def commit_pack(worktree: Path, base: str | None) -> CommitPack:
    """The worktree's HEAD for a node: the commits since `base` (the task's; None: HEAD alone) and the
    whole tree of the commit(s) where they start, not the branch's history before them.

    A bundle of HEAD carried the whole history, every turn: on a real repository, megabytes to
    hundreds of them through Ray and a full clone on the node for each turn.
    """
    from agentbox.core.workspace.gitcmd import git

    names = b""
    shallow = ["HEAD"]
    if base is not None:
        since = git(worktree, "rev-list", "--objects", "--boundary", "--no-object-names", "HEAD", f"^{base}").stdout
        lines = since.split()  # HEAD first, then the commits and objects since `base`, the edges marked "-"
        edges = [line[1:].decode() for line in lines if line.startswith(b"-")]
        if edges:  # `base` (or, were it no ancestor, where HEAD's history meets its) and what came after it
            shallow = edges
            names = b"\n".join(line for line in lines if not line.startswith(b"-")) + b"\n"
    trees = git(worktree, "rev-list", "--objects", "--no-object-names", "--no-walk", *shallow).stdout
    if shallow == ["HEAD"]:
        shallow = [trees.split(b"\n", 1)[0].decode()]  # the commit comes first
    names += trees
    head = names.split(b"\n", 1)[0].decode()
    pack = git(worktree, "pack-objects", "--stdout", "-q", stdin=names).stdout
    return CommitPack(head, tuple(shallow), pack)


def _check_out(work: Path, tree: CommitPack) -> None:
    """On a node: a repository at `work` holding `tree` (shallow), its HEAD detached there, its files checked out."""
    from agentbox.core.workspace.gitcmd import git

    work.mkdir()
    git(work, "init", "-q")
    git(work, "index-pack", "--stdin", stdin=tree.pack)  # from the head, which made it: not checked as --strict
    (work / ".git" / "shallow").write_text("".join(f"{commit}\n" for commit in tree.shallow))
    git(work, "update-ref", "--no-deref", "HEAD", tree.head)
    git(work, "read-tree", "-u", "--reset", tree.head)


def bundle_parts(bundle: bytes) -> tuple[str, bytes]:
    """The commit a bundle of one ref names, and its pack (read from the bundle's header, no git process).

    An AgentboxError when it is not a v2 bundle of exactly one ref.
    """
    header, sep, pack = bundle.partition(b"\n\n")
    lines = header.decode("ascii", "replace").split("\n")
    refs = [line.split(" ", 1)[0] for line in lines[1:] if line and not line.startswith("-")]
    if not sep or lines[0] != "# v2 git bundle" or len(refs) != 1 or not _OBJECT_ID.fullmatch(refs[0]):
        raise AgentboxError("a turn's git bundle is not a bundle of one commit", "report this as a bug")
    return refs[0], pack


_OBJECT_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def _bundle_back(work: Path, base: str, node_id: str) -> bytes | None:
    """On a node: what the turn changed in its clone `work` (HEAD at `base`) committed, and that
    commit as a bundle of it alone (None: the turn changed nothing)."""
    from agentbox.core.workspace import commit_turn
    from agentbox.core.workspace.gitcmd import git

    commit = commit_turn(work, author_name="agentbox node", author_email="node@agentbox.invalid",
                         message=f"turn on node {node_id[:12]}\n")
    if commit is None or commit == base:
        return None
    return git(work, "bundle", "create", "-q", "-", "HEAD", f"^{base}").stdout


def _take_bundle(worktree: Path, bundle: bytes) -> None:
    """The node's commit from its bundle into the repository, the worktree's files (and index) set to its tree.

    The pack goes straight to `index-pack` (checked as fsck would: it is what an agent wrote),
    and its commit's tree is read by id: no temporary file, ref or fetch.
    """
    from agentbox.core.workspace import bases
    from agentbox.core.workspace.gitcmd import git

    commit, pack = bundle_parts(bundle)
    git(worktree, "index-pack", "--stdin", "--fix-thin", "--strict", stdin=pack)
    seen = bases.read_base(worktree)  # a sparse worktree stays sparse: only its own dirs are written
    sparse = bases.checkout_flags(seen.over) if seen is not None else ()
    git(worktree, *sparse, "read-tree", "-u", "--reset", f"{commit}^{{commit}}")


@dataclasses.dataclass(frozen=True)
class NodeProbe:
    """What `agentbox doctor` learns of one node of the cluster."""

    node_id: str
    host: str
    alive: bool
    tools: tuple[str, ...]
    """The tools the node offers (its `agentbox-tool:<tool>` resources)."""
    bwrap: str | None
    """bubblewrap's version on the node after it made a sandbox there (None: it could not, see `problem`)."""
    problem: str | None = None


def connect(address: str, tls_env: dict[str, str] | None) -> Any:
    """Ray, connected as a driver to the cluster at `address` (once per process).

    With `tls_env` this process speaks TLS to the cluster: Ray reads RAY_USE_TLS and the
    certificate paths from the environment when it connects, so they are set first. The
    cluster's own processes (`ray start` on each node) need the same variables set by whoever
    starts them.
    """
    if tls_env:
        os.environ.update(tls_env)
        from agentbox.core.sandbox import bwrap as sandbox

        sandbox.host_layout.cache_clear()  # the key is masked in every sandbox this process makes from now on
    from agentbox.core.sandbox.egress import is_loopback

    host, _, port = address.rpartition(":")  # config.yaml's `runner.address` is HOST:PORT
    if "ray" not in sys.modules and is_loopback(host):
        # Ray swaps a loopback address for this machine's network one before it connects, where a
        # cluster that listens on loopback only (the safe way on one machine) is not: it then retries for
        # minutes. Told that the cluster is this machine's alone, it keeps 127.0.0.1.
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    import ray

    if not ray.is_initialized():
        try:  # ray.init waits minutes for a cluster that is not there: asked first, in seconds
            socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
        except OSError as exc:
            raise AgentboxError(f"the Ray cluster at {address} cannot be reached: {exc.strerror or exc}",
                                "start it (`ray start --head --port PORT`), or fix `runner.address` in "
                                "config.yaml") from None
        ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False,
                 namespace="agentbox")
    return ray


CONNECT_TIMEOUT_S = 3.0
"""How long the cluster's address is given to answer before agentbox says it cannot be reached."""


def probe_cluster(address: str, probe_bwrap: Callable[[], tuple[str | None, str | None]], *,
                  timeout_s: float = 60.0, tls_env: dict[str, str] | None = None) -> list[NodeProbe]:
    """Every node of the cluster at `address`: alive, the tools it offers, and what `probe_bwrap`
    (run on the node) says: bwrap's version once it made a sandbox there, else why it could not."""
    ray = connect(address, tls_env)  # first: it decides how Ray is imported
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    probe = ray.remote(num_cpus=0, max_retries=0)(probe_bwrap)
    nodes = ray.nodes()
    prefix = TOOL_RESOURCE.format(tool="")
    pending = {}
    for node in nodes:
        if node.get("Alive") and not node.get("Resources", {}).get("node:__internal_head__"):
            pending[node["NodeID"]] = probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
                node["NodeID"], soft=False)).remote()
    found = []
    for node in nodes:
        tools = tuple(sorted(name[len(prefix):] for name in node.get("Resources", {}) if name.startswith(prefix)))
        version, problem = None, None if node.get("Alive") else "the node is not alive"
        if node["NodeID"] in pending:
            try:
                version, problem = ray.get(pending[node["NodeID"]], timeout=timeout_s)
            except Exception as exc:  # a node that cannot run the probe is reported, never raised
                problem = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        elif node.get("Alive"):
            problem = "the head: no turn runs there"
        found.append(NodeProbe(node["NodeID"], node.get("NodeManagerHostname") or node.get("NodeManagerAddress", "?"),
                               bool(node.get("Alive")), tools, version, problem))
    return found
