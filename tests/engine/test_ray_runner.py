"""The Ray runner on a real cluster on this machine: a head and three worker nodes on 127.0.0.1.

Two worker nodes offer the scripted tool and claude (`agentbox-tool:scripted`,
`agentbox-tool:claude`), one offers nothing.
The cluster is started once for this module (`ray.cluster_utils.Cluster`, its own temp
dir, no dashboard) and every Ray process is gone after it. The agents are real scripted
processes under bwrap on the nodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from agentbox.core.engine.engine import Engine
from agentbox.core.engine.runners.local import LocalRunner
from agentbox.core.engine.runners.ray_runner import RayRunner, tool_resource
from agentbox.tui.model import member_rows
from agentbox.tui.widgets.members import member_columns
from tests.conftest import run_cli
from tests.engine.support import create, events, of_type, setup_crew, task, until, work_rule
from tests.engine.test_runners import GB, room
from tests.engine.test_worktree_runs import make_repo
from tests.realcli.conftest import (  # noqa: F401  (fixtures of the real-CLI turn)
    FakeView,
    body_text,
    fake,
    host_home,
    make_profile,
    model_server,
    profile_config,
    realcli_env,
)

pytestmark = pytest.mark.bwrap

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # read when ray is imported: every node on 127.0.0.1
import ray  # noqa: E402  (the test extra installs it: missing, the tests fail)


class RayCluster:
    """The module's cluster: its address, its worker nodes and the temp dir all its processes name."""

    def __init__(self, temp_dir: Path) -> None:
        from ray.cluster_utils import Cluster

        self.temp_dir = temp_dir
        self.cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 0, "include_dashboard": False, "temp_dir": str(temp_dir), "node_ip_address": "127.0.0.1"})
        tool = {tool_resource("scripted"): 8, tool_resource("claude"): 8}
        self.workers = [self.cluster.add_node(num_cpus=1, resources=tool), self.cluster.add_node(num_cpus=1, resources=tool)]
        self.bare = self.cluster.add_node(num_cpus=1)
        self.cluster.wait_for_nodes()
        self.address = self.cluster.address

    def node_ids(self, nodes: list[Any]) -> set[str]:
        return {node.node_id for node in nodes}

    def processes(self) -> list[psutil.Process]:
        found = []
        for proc in psutil.process_iter(["cmdline"]):
            with contextlib.suppress(psutil.Error):
                if str(self.temp_dir) in " ".join(proc.info["cmdline"] or []):
                    found.append(proc)
        return found

    def shutdown(self) -> None:
        with contextlib.suppress(Exception):
            ray.shutdown()
        with contextlib.suppress(Exception):
            self.cluster.shutdown()
        for proc in self.processes():  # nothing of the cluster outlives the tests
            with contextlib.suppress(psutil.Error):
                proc.kill()


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    """The one cluster of these tests, in a short temp dir (Ray's socket paths must stay under 107 bytes)."""
    temp_dir = Path(tempfile.mkdtemp(prefix="abray-"))
    before = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = str(temp_dir)  # Ray's address file there, not in a /tmp/ray other clusters share
    (temp_dir / "ray").mkdir()
    made = RayCluster(temp_dir)
    try:
        yield made
    finally:
        made.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
        if before is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = before
    assert all(p.status() == psutil.STATUS_ZOMBIE for p in made.processes())


class PinnedRayRunner(RayRunner):
    """The Ray runner with each task pinned to `node` (the test chooses where a turn runs)."""

    node: str | None = None

    def task_options(self, turn: Any) -> dict[str, Any]:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return {"scheduling_strategy": NodeAffinitySchedulingStrategy(self.node, soft=False)} if self.node else {}


def ray_ports(cluster: RayCluster) -> set[int]:
    """The TCP ports the cluster's processes listen on."""
    ports = set()
    for proc in cluster.processes():
        with contextlib.suppress(psutil.Error):
            for conn in proc.net_connections(kind="tcp"):
                if conn.status == psutil.CONN_LISTEN:
                    ports.add(conn.laddr.port)
    return ports


async def drive_with(paths: Any, run_id: str, runner: LocalRunner | RayRunner, timeout: float = 180) -> Any:
    engine = Engine.open(paths, run_id, runner=runner)
    return await asyncio.wait_for(engine.execute(), timeout)


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout


def crew(project: Path, delay: float = 1.5, *, stream: bool = False) -> Any:
    """Two work turns of `delay` s (`stream`: each says so at its start, then again at its end)."""
    make_repo(project)
    said = {"stream": [{"text": "working on {task}"}, {"text": "done with {task}", "delay_s": delay}]}
    worker = [work_rule(0 if stream else delay, write={"src/{task}/made.txt": "made by {task}\n"},
                        **(said if stream else {}))]
    return setup_crew(project, worker=worker, tasks=[task("t1", "builder"), task("t2", "tester")],
                      limits={"max_workers": 2})


def test_every_ray_port_listens_on_loopback_only(cluster: RayCluster) -> None:
    bound = {}
    for proc in cluster.processes():
        with contextlib.suppress(psutil.Error):
            for conn in proc.net_connections(kind="tcp"):
                if conn.status == psutil.CONN_LISTEN:
                    bound[f"{conn.laddr.ip}:{conn.laddr.port}"] = " ".join(proc.cmdline())[:200]
    assert bound
    beyond = {where: who for where, who in bound.items()
              if where.rpartition(":")[0] not in ("127.0.0.1", "::ffff:127.0.0.1", "::1")}
    assert beyond == {}


async def test_turns_land_on_the_tool_s_nodes_and_commit_what_a_local_run_commits(
        cluster: RayCluster, tmp_path: Path) -> None:
    trees = {}
    placements: list[dict[str, Any]] = []
    kinds: list[str] = []
    shown: dict[str, Any] = {}
    for name, runner in (("local", LocalRunner(reading=lambda: room(16 * GB))), ("ray", RayRunner(cluster.address))):
        root = tmp_path / name
        root.mkdir()
        shutil.copytree(Path(__file__).resolve().parents[2] / ".agent-box.example", root / ".agent-box")
        paths = crew(root)
        run_id = create(paths)
        run = await drive_with(paths, run_id, runner)
        assert run.status == "done", run.status_reason
        rows = member_rows(None, run, {}, {})
        shown[name] = (member_columns(rows, narrow=False), {r.role: r.node for r in rows})
        trees[name] = {t.id: git(root, "rev-parse", f"{t.head}^{{tree}}").strip() for t in run.tasks.values()}
        if name == "ray":
            placements = of_type(events(paths, run_id), "placement")
            kinds = [e["type"] for e in events(paths, run_id)]
            status = await asyncio.to_thread(run_cli, "status", run_id, cwd=root)
            for t in run.tasks.values():  # each task shows the node its last turn ran on
                assert t.ran_on is not None and t.ran_on.partition("@")[0] in cluster.node_ids(cluster.workers)
                assert f"{t.ran_on[:12]}@{socket.gethostname()}" in status.out, status.out
    assert trees["ray"] == trees["local"]  # the same work, to the byte
    nodes = {e["node"] for e in placements}
    assert nodes <= cluster.node_ids(cluster.workers) and len(nodes) == 2  # both tool nodes, never the bare one
    assert all(e["host"] == socket.gethostname() for e in placements)
    assert kinds.count("turn") == len(placements)
    columns, nodes_of = shown["ray"]  # the members table shows each worker's node
    assert columns[-1] == "node" and {nodes_of["builder"][:12], nodes_of["tester"][:12]} <= {
        n[:12] for n in cluster.node_ids(cluster.workers)}
    assert "node" not in shown["local"][0] and set(shown["local"][1].values()) == {""}


async def test_a_tool_no_node_offers_waits_for_a_node(cluster: RayCluster, project: Path) -> None:
    from agentbox.core.config import profiles

    setup_crew(project, tasks=[task("t1")])
    runner = RayRunner(cluster.address)
    assert runner.room("j1", profiles.resolve("t-lead")) is None  # scripted: two nodes offer it
    held = runner.room("j2", profiles.resolve("codex"))
    assert held == f"waiting for a node: no node of the cluster offers {tool_resource('codex')}"


async def test_a_sandboxed_turn_on_a_node_cannot_reach_the_cluster_s_ports(
        cluster: RayCluster, agent_box_home: Path, project: Path) -> None:
    ports = sorted(ray_ports(cluster))
    assert ports
    probe = ("python3 -c 'import socket,sys\nfor p in sys.argv[1:]:\n  s=socket.socket()\n  s.settimeout(2)\n"
             "  print(p, s.connect_ex((\"127.0.0.1\", int(p))))' " + " ".join(map(str, ports)))
    runner = RayRunner(cluster.address)
    from agentbox.core.agents import resolve as services
    from agentbox.core.agents.invoke import new_session_id
    from agentbox.core.engine.runners.base import Turn
    from tests.engine.support import write_profile

    write_profile("t-probe", [{"id": "probe", "when": {"prompt_contains": "probe"},
                               "do": {"run": probe, "reply": "{run_output}"}}])
    profile = agent_box_home / "profiles" / "t-probe" / "profile.yaml"
    profile.write_text(profile.read_text().replace('"network": false', '"network": true'))
    agent = services.profile_agent("t-probe", project, None)
    done = await runner.run(Turn(job_id="probe", run_id="r", task_id=None, agent=agent, prompt="probe",
                                 session_id=new_session_id(), resume=False, timeout_s=60))
    assert done.result.ok, done.result
    assert done.node_id in cluster.node_ids(cluster.workers)
    answers = dict(line.split() for line in done.result.text.strip().splitlines())
    assert set(answers) == {str(p) for p in ports}
    assert all(code != "0" for code in answers.values()), answers  # no port of the cluster answers


async def test_a_turn_whose_result_is_too_big_to_come_inline_is_fetched_whole(
        cluster: RayCluster, agent_box_home: Path, project: Path) -> None:
    """Over Ray's inline limit (100 KB) the result waits in the node's object store: it comes whole."""
    from agentbox.core.agents import resolve as services
    from agentbox.core.agents.invoke import new_session_id
    from agentbox.core.engine.runners.base import Turn
    from tests.engine.support import write_profile

    write_profile("t-big", [{"id": "big", "when": {"prompt_contains": "big"},
                             "do": {"run": "head -c 300000 /dev/urandom | base64 -w 0", "reply": "{run_output}"}}])
    agent = services.profile_agent("t-big", project, None)
    done = await RayRunner(cluster.address).run(Turn(
        job_id="big", run_id="r", task_id=None, agent=agent, prompt="big", session_id=new_session_id(),
        resume=False, timeout_s=60))
    assert done.result.ok, done.result
    assert len(done.result.text.strip()) == 400000, len(done.result.text)
    assert done.result.log_path and done.result.text.strip() in Path(done.result.log_path).read_text()


async def test_a_secret_reaches_the_node_in_memory_only(cluster: RayCluster, agent_box_home: Path, project: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from agentbox.core.agents import resolve as services
    from agentbox.core.agents.invoke import new_session_id
    from agentbox.core.engine.runners.base import Turn
    from tests.engine.support import write_profile

    secret = "node-secret-" + os.urandom(8).hex()
    monkeypatch.setenv("AB_NODE_SECRET", secret)  # the head has it; the nodes were started without it
    write_profile("t-secret", [{"id": "show", "when": {"prompt_contains": "show"},
                                "do": {"stream": [{"text": "measuring"}],  # held a while: it streams
                                       "run": 'printf "%s" "$AB_TOKEN" | wc -c; sleep 1.5',
                                       "reply": "length {run_output}"}}])
    profile = agent_box_home / "profiles" / "t-secret" / "profile.yaml"
    profile.write_text(profile.read_text().replace('"runtime": {', '"runtime": {"env": {"AB_TOKEN": "${AB_NODE_SECRET}"}, '))
    agent = services.profile_agent("t-secret", project, None)
    done = await RayRunner(cluster.address).run(Turn(
        job_id="secret", run_id="r", task_id=None, agent=agent, prompt="show", session_id=new_session_id(),
        resume=False, timeout_s=60))
    assert done.result.ok and done.result.text.split() == ["length", str(len(secret))], done.result
    assert done.node_id in cluster.node_ids(cluster.workers)
    found = []
    for root in (cluster.temp_dir, agent_box_home, project, Path("/dev/shm")):  # /dev/shm: the nodes' turn homes
        for path in root.rglob("*"):
            with contextlib.suppress(OSError):
                if path.is_file() and not path.is_symlink() and secret.encode() in path.read_bytes():
                    found.append(path)
    assert found == []  # not in Ray's session dir (logs, spilled objects), nor any record of the turn
    for proc in cluster.processes():  # and not left in any Ray process's environment
        with contextlib.suppress(psutil.Error):
            assert proc.environ().get("AB_NODE_SECRET") is None and proc.environ().get("AB_TOKEN") != secret


async def test_a_node_keeps_no_peak_of_its_own_the_turn_s_peak_comes_back_in_its_result(
        cluster: RayCluster, agent_box_home: Path, project: Path) -> None:
    """A node's disk is written by nothing but the turn's own dirs: the local runner there keeps no
    peaks file in the node's agentbox home (it wrote one each turn, under a lock)."""
    from agentbox.core.agents import resolve as services
    from agentbox.core.agents.invoke import new_session_id
    from agentbox.core.engine.runners.admission import PEAKS_FILE
    from agentbox.core.engine.runners.base import Turn
    from tests.engine.support import write_profile

    homes = set()
    for proc in cluster.processes():  # the agentbox home each Ray process of the cluster would name
        with contextlib.suppress(psutil.Error):
            env = proc.environ()
            homes.add(Path(env.get("AGENT_BOX_HOME") or Path(env.get("HOME", "/nonexistent")) / ".agent-box"))
    assert homes
    def peaks() -> dict[Path, int | None]:
        return {home: (home / PEAKS_FILE).stat().st_mtime_ns if (home / PEAKS_FILE).exists() else None
                for home in homes}

    before = peaks()
    write_profile("t-peak", [{"id": "hold", "when": {"prompt_contains": "hold"}, "do": {"delay_s": 0.3, "reply": "ok"}}])
    agent = services.profile_agent("t-peak", project, None)
    done = await RayRunner(cluster.address).run(Turn(
        job_id="peak", run_id="r", task_id=None, agent=agent, prompt="hold", session_id=new_session_id(),
        resume=False, timeout_s=60))
    assert done.result.ok and done.node_id in cluster.node_ids(cluster.workers), done.result
    assert done.peak_rss_mb is not None and done.peak_rss_mb > 0  # measured on the node, back with the result
    assert peaks() == before


@pytest.mark.realcli
async def test_a_claude_session_resumed_on_another_node_sees_its_first_turn(
        cluster: RayCluster, make_profile: Any, fake: FakeView, tmp_path: Path,  # noqa: F811
        agent_box_home: Path) -> None:
    from agentbox.core.agents import resolve as services
    from agentbox.core.agents.invoke import new_session_id
    from agentbox.core.engine.runners.base import Turn

    name = make_profile("claude")
    workdir = tmp_path / "work"
    workdir.mkdir()
    agent = services.profile_agent(name, workdir, None)
    tag = os.urandom(4).hex()
    first, second = f"alpha one {tag}", f"beta two {tag}"
    session_id = new_session_id()
    runner = PinnedRayRunner(cluster.address)
    one, other = (node.node_id for node in cluster.workers)

    def turn(prompt: str, resume: bool) -> Turn:
        return Turn(job_id=prompt, run_id="r", task_id=None, agent=agent, prompt=prompt, session_id=session_id,
                    resume=resume, timeout_s=120)

    runner.node = one
    done = await runner.run(turn(first, resume=False))
    assert done.result.ok and f"echo: {first}" in done.result.text, done.result
    assert done.node_id == one
    native = done.result.native_id
    assert native and list((profile_config(name, "claude") / "projects").glob(f"*/{native}.jsonl"))
    assert agent.sessions.find(session_id).native_id == native  # the record came back to the head's store

    runner.node = other  # the resumed turn shows which files its claude home is bound from
    fake.enqueue({"tool_use": {"name": "Bash", "input": {"command": "grep claude /proc/self/mountinfo",
                                                         "description": "mounts"}},
                  "match": {"protocol": "anthropic", "contains": second, "not_contains": "tool_result"}})
    resumed = await runner.run(turn(second, resume=True))
    assert resumed.result.ok, resumed.result
    assert resumed.node_id == other and resumed.result.native_id == native
    mounts = [line for line in resumed.result.text.splitlines() if "/.claude/projects " in line]
    assert mounts and all("/agentbox-node-home." in line and str(agent_box_home) not in line for line in mounts), \
        resumed.result.text  # the node's own copy of the session, not the head's profile
    asked = [r for r in fake.model_requests("anthropic") if second in body_text(r)]
    assert asked, "no request carried the second prompt"
    body = body_text(asked[-1])  # the second node's claude read the first node's conversation
    assert body.index(first) < body.index(f"echo: {first}") < body.rindex(second), body[-2000:]
    record = agent.sessions.find(session_id)
    assert record.turns == 2 and [t["status"] for t in agent.sessions.turns(record)] == ["ok", "ok"]
    assert resumed.result.log_path and Path(resumed.result.log_path).is_relative_to(agent.sessions.root)
    assert Path(resumed.result.log_path).is_file()
    named = re.search(r"agentbox-node-home\.[^/ ]+", mounts[0])
    assert named
    for _ in range(100):  # the node's turn home goes once the result is on its way back
        if not (Path("/dev/shm") / named.group()).exists():
            break
        await asyncio.sleep(0.05)
    assert not (Path("/dev/shm") / named.group()).exists()  # the node's turn home is gone


PROBE = """
import json, os, pathlib, sys, time
mine = sys.argv[1]
pathlib.Path(f"secret-{mine}.txt").write_text(mine)
time.sleep(2.5)  # the other turn on this node has written its file by now, and still runs
files = []
for root, dirs, names in os.walk("/"):
    if root in ("/proc", "/sys", "/dev", "/usr"):
        dirs[:] = []
        continue
    files += [os.path.join(root, n) for n in names if n.startswith("secret-")]
procs = []
for pid in (p for p in os.listdir("/proc") if p.isdigit()):
    try:
        procs.append(open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\\0", b" ").decode())
    except OSError:
        pass
print(json.dumps({"files": files, "procs": procs, "tmp": os.listdir("/tmp"), "shm": os.listdir("/dev/shm")}))
time.sleep(1.5)
"""


async def test_two_turns_on_one_node_see_neither_each_other_nor_the_node_s_ray_processes(
        cluster: RayCluster, agent_box_home: Path, tmp_path: Path) -> None:
    import json

    from agentbox.core.agents import resolve as services
    from agentbox.core.agents.invoke import new_session_id
    from agentbox.core.engine.runners.base import Turn, TurnWorkspace
    from tests.engine.support import session_processes, write_profile

    write_profile("t-iso", [{"id": "iso", "when": {"prompt_regex": r"iso (?P<mine>\w+)"},
                             "do": {"run": "python3 probe.py {mine}", "reply": "{run_output}"}}])
    runner = PinnedRayRunner(cluster.address, cpus_per_turn=0.5)
    runner.node = cluster.workers[0].node_id  # both turns on one node, at once
    turns, markers = [], ["m" + os.urandom(4).hex() for _ in range(2)]
    for marker in markers:
        repo = tmp_path / marker
        repo.mkdir()
        make_repo(repo)
        (repo / "probe.py").write_text(PROBE)
        git(repo, "add", "probe.py")
        git(repo, "-c", "user.name=P", "-c", "user.email=p@example.invalid", "commit", "-qm", "probe")
        agent = services.profile_agent("t-iso", repo, None)
        turns.append(Turn(job_id=marker, run_id="r", task_id=None, agent=agent, prompt=f"iso {marker}",
                          session_id=new_session_id(), resume=False, timeout_s=60,
                          workspace=TurnWorkspace(marker, repo, "main", None, lambda summary: None)))  # type: ignore[arg-type,return-value]
    flight = asyncio.ensure_future(asyncio.gather(*(runner.run(t) for t in turns)))
    together, files_on_node = 0, set()
    while not flight.done():  # from the host: both turns run at once, and both files are on the node
        running = set()
        for proc in session_processes([t.session_id for t in turns]):
            with contextlib.suppress(psutil.Error):
                running.add(proc.environ().get("AGENTBOX_SESSION_ID"))
        together = max(together, len(running))
        files_on_node |= {p.name for root in (Path(tempfile.gettempdir()), Path("/dev/shm"))
                          for p in root.glob("agentbox-node-turn.*/work/secret-*")}
        await asyncio.sleep(0.1)
    done = flight.result()
    assert together == 2 and {f"secret-{m}.txt" for m in markers} <= files_on_node
    homes: list[list[str]] = []
    for marker, turn_done in zip(markers, done, strict=True):
        assert turn_done.result.ok and turn_done.node_id == cluster.workers[0].node_id, turn_done.result
        seen = json.loads(turn_done.result.text)
        assert [Path(f).name for f in seen["files"]] == [f"secret-{marker}.txt"], seen["files"]  # its own only
        shown = " ".join(seen["procs"])
        assert not any(m in shown for m in markers if m != marker), seen["procs"]  # no other turn's process
        assert not any(word in shown for word in ("raylet", "gcs_server", "default_worker", "ray::")), seen["procs"]
        assert not any(n.startswith("agentbox-node") for n in seen["tmp"]), seen["tmp"]
        homes.append([n for n in seen["shm"] if n.startswith("agentbox-node")])
    assert all(len(names) == 1 for names in homes) and homes[0] != homes[1], homes  # its own home's mount point only


def test_doctor_checks_every_node_of_the_cluster(cluster: RayCluster, agent_box_home: Path) -> None:
    from agentbox.core.admin import doctor

    (agent_box_home / "config.yaml").write_text(f"runner:\n  kind: ray\n  address: {cluster.address}\n")
    checks = {c.name: c for c in doctor.check_runner()}
    assert checks["runner"].status == "ok" and checks["runner"].detail.endswith("node(s) alive")
    by_node = {c.name.split()[1]: c for c in checks.values() if c.name.startswith("node ")}
    for node in cluster.workers:
        check = by_node[node.node_id[:12]]
        assert check.status == "ok" and check.detail.startswith("bubblewrap") and "tools: claude, scripted" in check.detail
    bare = by_node[cluster.bare.node_id[:12]]
    assert bare.status == "warn" and "tools: none" in bare.detail
    assert "runner tools" not in checks  # two nodes offer tools
    assert doctor.healthy(list(checks.values()))


def test_a_turn_waits_for_a_cluster_that_is_not_there_and_says_why(agent_box_home: Path) -> None:
    """The engine asks the runner for room: a cluster that does not answer holds the turn, said in the queue."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code = ("import sys, time\n"
            "from agentbox.core.config import profiles\n"
            "from agentbox.core.engine.runners.ray_runner import RayRunner\n"
            "runner = RayRunner(sys.argv[1])\n"
            "started = time.monotonic()\n"
            "first = runner.room('j1', profiles.resolve('scripted'))\n"
            "again = runner.room('j2', profiles.resolve('scripted'))\n"
            "print(first); print(again == first); print(time.monotonic() - started)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_ADDRESS")}
    done = subprocess.run([sys.executable, "-c", code, f"127.0.0.1:{port}"], env=env, capture_output=True,
                          text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    said, same, took = done.stdout.splitlines()[-3:]
    assert said == f"waiting for the cluster: the Ray cluster at 127.0.0.1:{port} cannot be reached: Connection refused"
    assert same == "True" and float(took) < 30  # asked once, then said again without asking


def test_doctor_says_at_once_when_the_cluster_is_not_there_and_warns_of_one_that_offers_no_tool(
        agent_box_home: Path, tmp_path: Path) -> None:
    """A cluster on loopback only, as one machine's should be: Ray would swap 127.0.0.1 for this machine's
    network address and retry for minutes; agentbox keeps loopback and asks the port first."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_ADDRESS")}
    temp = Path(tempfile.mkdtemp(prefix="abhead-"))
    env["RAY_TMPDIR"] = str(temp)
    config = agent_box_home / "config.yaml"
    config.write_text(f"runner:\n  kind: ray\n  address: 127.0.0.1:{port}\n")

    def doctor() -> tuple[subprocess.CompletedProcess[str], float]:
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "agentbox", "doctor"], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=90)
        return done, time.monotonic() - started

    done, took = doctor()  # nothing listens there
    assert done.returncode != 0 and "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
    assert done.stdout.count(f"the Ray cluster at 127.0.0.1:{port} cannot be reached: Connection refused") == 1, \
        done.stdout
    assert "hint: start it (`ray start --head --port PORT`)" in done.stdout, done.stdout
    assert took < 60, took
    ray_bin = Path(sys.executable).parent / "ray"
    head = subprocess.run([str(ray_bin), "start", "--head", "--port", str(port), "--node-ip-address", "127.0.0.1",
                           "--num-cpus", "0", "--include-dashboard=false", "--temp-dir", str(temp / "ray"),
                           "--disable-usage-stats"], env={**env, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"},
                          capture_output=True, text=True, timeout=120)  # this machine's alone: loopback only
    try:
        assert head.returncode == 0, head.stdout + head.stderr
        done, took = doctor()  # a head and no node: reached on loopback, and said that no turn could run
        assert "node(s) alive" in done.stdout and took < 60, (took, done.stdout + done.stderr)
        assert "no node of the cluster offers a tool: every turn would wait" in done.stdout, done.stdout
    finally:
        for proc in psutil.process_iter(["cmdline"]):
            with contextlib.suppress(psutil.Error):
                if str(temp) in " ".join(proc.info["cmdline"] or []):
                    proc.kill()
        shutil.rmtree(temp, ignore_errors=True)


READ = "cat made.txt; git rev-parse HEAD; ls -a .agent-box; awk '{print $4}' /proc/self/mountinfo"


async def test_a_review_on_a_node_reads_the_reviewed_commit_from_its_bundle_not_the_head_s_path(
        cluster: RayCluster, agent_box_home: Path, tmp_path: Path) -> None:
    import dataclasses

    from agentbox.core.agents import resolve as services
    from agentbox.core.agents.invoke import new_session_id
    from agentbox.core.engine.runners.base import Turn
    from tests.engine.support import write_profile

    root = tmp_path / "project"
    root.mkdir()
    shutil.copytree(Path(__file__).resolve().parents[2] / ".agent-box.example", root / ".agent-box")
    paths = crew(root)  # .agent-box/ is in the commit, its runs/ and sessions/ are not
    (root / ".agent-box" / "runs").mkdir(exist_ok=True)
    (root / ".agent-box" / "sessions").mkdir(exist_ok=True)
    tree = tmp_path / "reviewed"  # the task's worktree on the head, as a review mounts it
    git(root, "worktree", "add", "-q", "-b", "agentbox/t1", str(tree))
    (tree / "made.txt").write_text("reviewed\n")
    git(tree, "add", "made.txt")
    git(tree, "-c", "user.name=P", "-c", "user.email=p@example.invalid", "commit", "-qm", "the work")
    reviewed = git(tree, "rev-parse", "HEAD").strip()
    (tree / "made.txt").write_text("changed on the head after the commit\n")  # not what is reviewed
    write_profile("t-read", [{"id": "read", "when": {"prompt_contains": "review"},
                              "do": {"run": READ, "reply": "{run_output}"}}])
    agent = dataclasses.replace(services.profile_agent("t-read", root, paths), worktree=tree, writes=())
    assert agent.protected == (paths.box,)  # a turn here sees the project's .agent-box from the head's path
    done = await RayRunner(cluster.address).run(Turn(
        job_id="review", run_id="r", task_id="t1", agent=agent, prompt="review t1", session_id=new_session_id(),
        resume=False, timeout_s=60))
    assert done.result.ok, done.result
    assert done.node_id in cluster.node_ids(cluster.workers) and done.git is None
    lines = done.result.text.strip().splitlines()
    assert lines[:2] == ["reviewed", reviewed]  # the reviewed commit's tree, at its commit
    assert "crew.yaml" in lines  # the commit's .agent-box/
    sources = [line for line in lines[2:] if line.startswith("/")]  # each mount's source path
    assert any("/agentbox-node-turn." in s for s in sources), sources  # the node's own checkout
    bound = [s for s in sources if s.startswith((str(root), str(tree)))]
    assert bound == []  # nothing of the head's project or its worktree is bound into the node's sandbox
    assert git(tree, "status", "--porcelain").strip() == "M made.txt"  # the head's worktree is as it was


async def test_a_work_turn_s_hand_off_folder_travels_with_it_and_nothing_of_the_head_s_project_is_bound(
        cluster: RayCluster, agent_box_home: Path, tmp_path: Path) -> None:
    import dataclasses

    from agentbox.core.agents import resolve as services
    from agentbox.core.agents.invoke import new_session_id
    from agentbox.core.engine.runners.base import Turn, TurnWorkspace
    from tests.engine.support import write_profile

    root = tmp_path / "project"
    root.mkdir()
    shutil.copytree(Path(__file__).resolve().parents[2] / ".agent-box.example", root / ".agent-box")
    paths = crew(root)
    handoff = root / ".agent-box" / "runs" / "r1" / "artifacts" / "t1"  # as `Turns.agent_for` gives a work turn
    handoff.mkdir(parents=True)
    (handoff / "brief.txt").write_text("from the lead\n")
    tree = tmp_path / "t1"
    git(root, "worktree", "add", "-q", "-b", "agentbox/t1", str(tree))
    work = (f"cat {handoff}/brief.txt; echo noted > {handoff}/notes.txt; echo work > work.txt; "
            "awk '{print $4}' /proc/self/mountinfo")
    write_profile("t-hand", [{"id": "hand", "when": {"prompt_contains": "hand"}, "do": {"run": work, "reply": "{run_output}"}}])
    agent = dataclasses.replace(services.profile_agent("t-hand", root, paths), worktree=tree, extra_rw=(handoff,))
    done = await RayRunner(cluster.address).run(Turn(
        job_id="hand", run_id="r1", task_id="t1", agent=agent, prompt="hand", session_id=new_session_id(),
        resume=False, timeout_s=60,
        workspace=TurnWorkspace("t1", tree, "agentbox/t1", None, lambda summary: None)))  # type: ignore[arg-type,return-value]
    assert done.result.ok and done.node_id in cluster.node_ids(cluster.workers), done.result
    lines = done.result.text.strip().splitlines()
    assert lines[0] == "from the lead"  # what the folder held on the head reached the node
    assert (handoff / "notes.txt").read_text() == "noted\n"  # and what the turn wrote there came back
    assert (tree / "work.txt").read_text() == "work\n"  # its work, through the bundle
    assert git(tree, "ls-files", ".agent-box/runs").strip() == ""  # the folder is not in the turn's commit
    sources = [line for line in lines[1:] if line.startswith("/")]
    assert [s for s in sources if s.startswith((str(root), str(tree)))] == []  # nothing bound from the head's project


async def test_a_session_s_record_on_the_head_shows_its_turn_running_on_its_node(
        cluster: RayCluster, project: Path) -> None:
    from agentbox.core.agents.sessions import SessionStore
    from agentbox.core.engine.run_store import RunStore

    paths = crew(project, delay=8)
    run_id = create(paths)
    engine = Engine.open(paths, run_id, runner=RayRunner(cluster.address))
    flight = asyncio.ensure_future(engine.execute())
    store = SessionStore(paths.sessions_dir)
    try:
        deadline = asyncio.get_running_loop().time() + 120
        seen, saved = None, None
        while saved is None:  # a work turn runs on a node: its record and the run's state on disk say where
            assert asyncio.get_running_loop().time() < deadline and not flight.done()
            seen = next((r for r in store.list() if r.status == "running" and r.running and "node" in r.running
                         and r.task_id), None)
            state = RunStore(paths).load(run_id)
            if seen is not None and state.tasks[seen.task_id or ""].ran_on:
                saved = state
            await asyncio.sleep(0.2)
        assert seen is not None and seen.running is not None
        node, host = seen.running["node"], seen.running["host"]
        assert node in cluster.node_ids(cluster.workers) and host == socket.gethostname()
        assert seen.running["pid"] is None and seen.running["node_pid"] > 0  # no pid of this machine's
        listed = await asyncio.to_thread(run_cli, "sessions", cwd=project)
        status = await asyncio.to_thread(run_cli, "status", run_id, cwd=project)
        rows = member_rows(None, saved, {}, {})
        assert store.find(seen.id).status == "running"  # still running when the faces were read
        assert saved.tasks[seen.task_id or ""].ran_on == f"{node}@{host}"
        assert f"running on {node[:12]}@{host}" in listed.out, listed.out
        assert f"{node[:12]}@{host}" in status.out, status.out
        assert {r.role: r.node for r in rows}[seen.role or ""] == f"{node[:12]}@{host}"
        run = await asyncio.wait_for(flight, 240)
    finally:
        if not flight.done():
            flight.cancel()
    assert run.status == "done", run.status_reason
    after = store.find(seen.id)
    assert after.status == "idle" and after.running is None and after.turns >= 1


def live_events(directory: Path) -> list[tuple[str, str]]:
    """The live view's events (kind, text) in `directory`, the turn's end line without its duration."""
    from agentbox.core.agents.live import LiveCursor

    cursor, found = LiveCursor(directory), []
    while (read := cursor.read()).events:
        found += [(e.kind, e.text.rpartition(" · ")[0] if e.kind == "end" else e.text) for e in read.events]
    return found


async def test_a_node_s_turn_shows_its_output_and_samples_on_the_head_while_it_runs(
        cluster: RayCluster, agent_box_home: Path, project: Path) -> None:
    from agentbox.core.agents import resolve as services
    from agentbox.core.agents.invoke import new_session_id
    from agentbox.core.engine.runners.base import Turn
    from tests.engine.support import write_profile

    gate = project / "gate.txt"
    write_profile("t-live", [], fallback={
        "stream": [{"text": "reading the tree"}, {"tool": "Bash", "input": {"command": "ls src"}},
                   {"tool_result": "main.py"}],
        "run": f"while [ ! -e {gate} ]; do sleep 0.05; done",  # held until the test has seen it on the head
        "stderr": "a word on stderr", "reply": "all done"})
    agent = services.profile_agent("t-live", project, None)
    runner = PinnedRayRunner(cluster.address)
    runner.node = cluster.workers[1].node_id
    on_node = new_session_id()
    flight = asyncio.ensure_future(runner.run(Turn(job_id="live", run_id="r", task_id=None, agent=agent,
                                                   prompt="look", session_id=on_node, resume=False, timeout_s=120)))
    try:
        deadline = asyncio.get_running_loop().time() + 120
        while True:
            assert asyncio.get_running_loop().time() < deadline and not flight.done()
            record = next((r for r in agent.sessions.list() if r.id == on_node), None)
            running = record.running if record is not None else None
            logs = agent.sessions.logs_dir(record) if record is not None else None
            if running and "sample" in running and logs is not None and len(live_events(logs / "turn-1.live")) >= 3:
                break
            await asyncio.sleep(0.1)
        assert running["node"] == runner.node and running["pid"] is None
        assert live_events(logs / "turn-1.live") == [("text", "reading the tree"), ("tool", "ls src"),
                                                     ("result", "main.py")]  # while the turn still runs
        assert running["sample"]["rss_bytes"] > 0 and running["sample"]["processes"] >= 1
        assert not flight.done()
    finally:
        gate.write_text("go")
    done = await asyncio.wait_for(flight, 120)
    assert done.result.ok and done.node_id == runner.node, done.result
    here = LocalRunner(reading=lambda: room(16 * GB))
    local = await here.run(Turn(job_id="here", run_id="r", task_id=None, agent=agent, prompt="look",
                                session_id=new_session_id(), resume=False, timeout_s=120))
    assert local.result.ok, local.result
    [node_record] = [r for r in agent.sessions.list() if r.id == on_node]
    [local_record] = [r for r in agent.sessions.list() if r.id == local.result.session_id]
    node_logs, local_logs = agent.sessions.logs_dir(node_record), agent.sessions.logs_dir(local_record)

    def names(root: Path) -> list[str]:
        return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())

    def raw(record: Any, name: str) -> str:
        text = (agent.sessions.logs_dir(record) / name).read_text()
        for ident in (record.id, record.native_id):
            text = text.replace(ident or "\0", "ID")
        return re.sub(r'"duration_ms": ?\d+', "", text)

    assert names(node_logs) == names(local_logs) == ["turn-1.live/000001.jsonl", "turn-1.log", "turn-1.stderr.log"]
    assert live_events(node_logs / "turn-1.live") == live_events(local_logs / "turn-1.live")  # no event twice
    assert live_events(node_logs / "turn-1.live")[-1] == ("end", "ok · 120 tokens")
    for name in ("turn-1.log", "turn-1.stderr.log"):
        assert raw(node_record, name) == raw(local_record, name)
    assert node_record.status == "idle" and node_record.running is None  # the sample went with the turn
    assert len(agent.sessions.turns(node_record)) == 1


async def test_a_node_prices_a_turn_with_the_head_s_config_yaml_prices(
        cluster: RayCluster, agent_box_home: Path, project: Path) -> None:
    from agentbox.core.agents import resolve as services
    from agentbox.core.agents.invoke import new_session_id
    from agentbox.core.engine.runners.base import Turn
    from tests.engine.support import write_profile

    write_profile("t-priced", [{"id": "p", "when": {"prompt_contains": "price"}, "do": {"reply": "priced"}}],
                  usage={"input_tokens": 1000, "output_tokens": 500})
    profile = agent_box_home / "profiles" / "t-priced" / "profile.yaml"
    profile.write_text(profile.read_text().replace('"runtime": {', '"runtime": {"model": "ab-priced-model", '))
    (agent_box_home / "config.yaml").write_text(
        "prices:\n  scripted:\n    ab-priced-model: {input: 3.0, output: 7.0}\n")  # on the head only
    agent = services.profile_agent("t-priced", project, None)
    done = await RayRunner(cluster.address).run(Turn(
        job_id="priced", run_id="r", task_id=None, agent=agent, prompt="price", session_id=new_session_id(),
        resume=False, timeout_s=60))
    assert done.result.ok and done.node_id in cluster.node_ids(cluster.workers), done.result
    usage = done.result.usage
    assert usage.cost_source == "price_table" and usage.cost_usd == pytest.approx((1000 * 3.0 + 500 * 7.0) / 1e6)
    record = agent.sessions.find(done.result.session_id)
    assert record.totals.cost_usd == pytest.approx(usage.cost_usd)  # the session's record priced it the same


async def test_a_killed_head_s_turns_end_with_it_and_resume_runs_them_once(
        cluster: RayCluster, agent_box_home: Path, project: Path) -> None:
    import signal

    from agentbox.core.engine.run_store import RunStore
    from tests.engine.support import session_processes, start_engine, stop, wait_gone

    (agent_box_home / "config.yaml").write_text(f"runner:\n  kind: ray\n  address: {cluster.address}\n")
    paths = crew(project, delay=20)
    run_id = create(paths)
    store = RunStore(paths)
    proc = start_engine(paths, run_id)
    try:
        deadline = time.monotonic() + 90
        running: list[Any] = []
        while not running:
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            sessions = [j.session_id for j in store.load(run_id).jobs.values() if j.kind == "work" and j.started]
            running = session_processes(sessions) if sessions and streamed(paths, sessions) else []
            time.sleep(0.2)
        os.kill(proc.pid, signal.SIGKILL)  # its turns run on the nodes and have streamed to the head
        proc.wait(timeout=10)
    finally:
        stop(proc)
    # the head's driver is gone: Ray stops its tasks, and bwrap dies with its worker
    assert wait_gone(lambda: session_processes(sessions), timeout=60) == []
    paths = crew_again(paths)
    run = await drive_with(paths, run_id, RayRunner(cluster.address), timeout=240)
    assert run.status == "done", run.status_reason
    log = events(paths, run_id)
    assert of_type(log, "recover")
    done_work = [e for e in of_type(log, "turn") if e["what"].startswith("work turn") and "ok" in e["what"]]
    assert sorted(e["task"] for e in done_work) == ["t1", "t2"]  # each work turn ended once
    assert left_behind() == []  # the killed turns' dirs on the nodes went with the next turns there
    assert_kept_whole(paths, run_id)


def streamed(paths: Any, sessions: list[str]) -> bool:
    """Every session's running turn has streamed its live view to the head (the first look came back)."""
    from agentbox.core.agents.sessions import SessionStore
    from agentbox.core.errors import NotFoundError

    store = SessionStore(paths.sessions_dir)
    try:
        records = [store.find(session) for session in sessions]
    except NotFoundError:
        return False
    return all(any(store.logs_dir(record).glob("turn-*.live/*")) for record in records)


def left_behind() -> list[Path]:
    """Turn dirs on this machine's nodes whose worker is dead."""
    found = []
    for parent in (Path(tempfile.gettempdir()), Path("/dev/shm")):
        for path in parent.glob("agentbox-node-*.*.*"):
            pid = path.name.split(".")[1]
            if pid.isdigit() and not psutil.pid_exists(int(pid)):
                found.append(path)
    return found


def crew_again(paths: Any) -> Any:
    """The same crew with short work turns (the resumed turns need not take 20 s again)."""
    worker = [work_rule(0.2, write={"src/{task}/made.txt": "made by {task}\n"})]
    return setup_crew(paths.root, worker=worker, tasks=[task("t1", "builder"), task("t2", "tester")],
                      limits={"max_workers": 2})


async def test_a_node_lost_mid_turn_is_retried_on_another(cluster: RayCluster, project: Path) -> None:
    paths = crew(project, delay=6, stream=True)
    run_id = create(paths)
    runner = RayRunner(cluster.address)
    engine = Engine.open(paths, run_id, runner=runner)
    flight = asyncio.ensure_future(engine.execute())
    try:
        await until(engine, lambda e: sum(j.kind == "work" for j in e.in_flight()) == 2, timeout=60)
        await asyncio.sleep(3)  # both work turns run, one on each tool node
        doomed = cluster.workers[0]
        cluster.cluster.remove_node(doomed, allow_graceful=False)
        cluster.workers.remove(doomed)
        run = await asyncio.wait_for(flight, 240)
    finally:
        if not flight.done():
            flight.cancel()
    assert run.status == "done", run.status_reason
    log = events(paths, run_id)
    lost = [e for e in of_type(log, "turn") if "the node running the turn was lost" in (e.get("why") or "")]
    assert lost, [e["what"] for e in of_type(log, "turn")]
    later = of_type(log, "placement")
    assert {e["node"] for e in later if e["seq"] > lost[0]["seq"]} <= cluster.node_ids(cluster.workers)
    assert_kept_whole(paths, run_id)


def assert_kept_whole(paths: Any, run_id: str) -> None:
    """Every finished turn of the run shows its live view once on the head, and the attempts that a
    lost node or a killed head cut short after they had streamed are kept aside, as a local turn's are."""
    from agentbox.core.agents.sessions import SessionStore

    store = SessionStore(paths.sessions_dir)
    interrupted = []
    for record in store.list():
        if record.run_id != run_id:
            continue
        lines = store.turns(record)
        interrupted += [line for line in lines if line["status"] == "interrupted"]
        for line in lines:
            if line["status"] == "interrupted":
                continue
            shown = live_events(store.logs_dir(record) / f"turn-{line['turn']}.live")
            assert [kind for kind, _ in shown].count("end") == 1 and shown[-1][0] == "end", shown
            assert len(shown) == len(set(shown)), shown  # no record of the streamed view twice
    # the cut-short attempts had streamed (their files at least): kept aside, as a local turn cut short is
    assert interrupted and all("interrupted-1.log" in (line["log_path"] or "") for line in interrupted), interrupted
    assert all(Path(line["log_path"]).is_file() for line in interrupted)


def test_a_bundle_s_one_commit_is_read_from_its_header_and_anything_else_refused(tmp_path: Path) -> None:
    from agentbox.core.engine.runners.ray_runner import bundle_parts
    from agentbox.core.errors import AgentboxError

    make_repo(tmp_path)
    made = subprocess.run(["git", "-C", str(tmp_path), "bundle", "create", "-q", "-", "HEAD"], check=True,
                          capture_output=True).stdout
    commit, pack = bundle_parts(made)
    assert commit == git(tmp_path, "rev-parse", "HEAD").strip()
    assert pack.startswith(b"PACK")
    two = subprocess.run(["git", "-C", str(tmp_path), "bundle", "create", "-q", "-", "HEAD", "--all"], check=True,
                         capture_output=True).stdout
    for bad in (b"", b"PACK....", made.replace(b"# v2", b"# v9", 1), two):
        with pytest.raises(AgentboxError):
            bundle_parts(bad)


def test_a_nodes_commit_taken_into_a_sparse_worktree_keeps_it_sparse(tmp_path: Path) -> None:
    """The head takes a node's commit into the task's worktree: a sparse one (git's sparse index over
    its own dirs) stays sparse, with the commit's files in its dirs and nothing checked out outside them."""
    from agentbox.core.engine.runners.ray_runner import _take_bundle
    from agentbox.core.workspace import (
        bases,
        ensure_integration_branch,
        ensure_task_worktree,
        snapshot_base,
    )

    root = tmp_path / "repo"
    for d in ("src", "lib", "docs"):
        (root / d).mkdir(parents=True)
        for i in range(3):
            (root / d / f"f{i}.txt").write_text(f"{d} {i}\n")
    git(tmp_path, "init", "-q", "-b", "main", str(root))
    git(root, "add", "-A")
    git(root, "-c", "user.name=P", "-c", "user.email=p@x.invalid", "commit", "-q", "-m", "start")
    ensure_integration_branch(root, "r1", snapshot_base(root))
    tree = ensure_task_worktree(root, "r1", "t1", reach=["src"], sparse=True)
    clone = tmp_path / "node"
    git(tmp_path, "clone", "-q", str(root), str(clone))
    git(clone, "checkout", "-q", tree.base_commit)
    (clone / "src" / "new.txt").write_text("from the node\n")
    git(clone, "add", "-A")
    git(clone, "-c", "user.name=N", "-c", "user.email=n@x.invalid", "commit", "-q", "-m", "turn")
    bundle = subprocess.run(["git", "-C", str(clone), "bundle", "create", "-q", "-", "HEAD", f"^{tree.base_commit}"],
                            check=True, capture_output=True).stdout
    _take_bundle(tree.path, bundle)
    assert (tree.path / "src" / "new.txt").read_text() == "from the node\n"
    assert not (tree.path / "lib").exists() and not (tree.path / "docs").exists()  # never checked out
    entries = git(tree.path, *bases.CONE, "ls-files", "--sparse").split()
    assert "lib/" in entries and "docs/" in entries and "src/new.txt" in entries
    index = Path(git(tree.path, "rev-parse", "--git-path", "index").strip())
    assert b"sdir" in (index if index.is_absolute() else tree.path / index).read_bytes()  # still a sparse index on disk
    commit = git(clone, "rev-parse", "HEAD").strip()
    assert git(tree.path, *bases.CONE, "diff", "--cached", "--name-only", commit) == ""  # the index is its tree
    assert git(tree.path, *bases.CONE, "status", "--porcelain") == "A  src/new.txt\n"  # for the turn's commit


def test_the_head_s_prices_are_read_once_per_version_of_config_yaml(
        agent_box_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Ray turn carries the head's prices; config.yaml (which names the runner) is parsed when it changed only."""
    from agentbox.core.config import user_config
    from agentbox.core.engine.runners.ray_runner import head_prices
    from agentbox.core.errors import AgentboxError

    reads: list[Path] = []
    real = user_config.load_user_config

    def counted(path: Path | None = None) -> Any:
        reads.append(Path(str(path)))
        return real(path)

    monkeypatch.setattr(user_config, "load_user_config", counted)
    config = agent_box_home / "config.yaml"
    assert head_prices() is None and reads == []  # no file
    config.write_text("runner:\n  kind: ray\n  address: 127.0.0.1:1\nprices:\n  anthropic:\n"
                      "    claude-x: {input: 3.0, output: 15.0}\n")
    first = head_prices()
    assert first == {"anthropic": {"claude-x": {"input": 3.0, "output": 15.0}}}
    first["anthropic"]["claude-x"]["input"] = 99.0  # what a caller does with its copy stays its own
    assert head_prices() == {"anthropic": {"claude-x": {"input": 3.0, "output": 15.0}}} and len(reads) == 1
    config.write_text(config.read_text().replace("3.0", "4.25"))  # in place: another size (the clock may not tick)
    assert head_prices() == {"anthropic": {"claude-x": {"input": 4.25, "output": 15.0}}} and len(reads) == 2
    config.write_text("runner: [broken\n")
    with pytest.raises(AgentboxError, match="config.yaml"):
        head_prices()


def history_repo(root: Path, commits: int) -> list[str]:
    """A repository of `commits` commits on main, each rewriting one of 10 files (2 KB that do not
    compress); their ids, oldest first."""
    git(root.parent, "init", "-q", "-b", "main", str(root))
    made = []
    for n in range(commits):
        (root / f"f{n % 10}.txt").write_text(os.urandom(1024).hex())
        git(root, "add", "-A")
        git(root, "-c", "user.name=P", "-c", "user.email=p@x.invalid", "commit", "-q", "-m", f"c{n}")
        made.append(git(root, "rev-parse", "HEAD").strip())
    return made


@pytest.mark.parametrize("since", ["task base", "none", "not an ancestor"])
def test_a_node_gets_the_commits_since_the_task_s_base_and_their_whole_tree_not_the_history(
        tmp_path: Path, since: str) -> None:
    """What a node checks out: HEAD's tree whole, the task's commits since its base, nothing older."""
    from agentbox.core.engine.runners.ray_runner import _check_out, commit_pack

    root = tmp_path / "repo"
    ids = history_repo(root, 120)
    base = {"task base": ids[116], "none": None, "not an ancestor": None}[since]
    if since == "not an ancestor":  # the task's base moved to a side branch: where HEAD meets it bounds the pack
        git(root, "checkout", "-q", "-b", "side", ids[110])
        (root / "side.txt").write_text("side\n")
        git(root, "add", "-A")
        git(root, "-c", "user.name=P", "-c", "user.email=p@x.invalid", "commit", "-q", "-m", "side")
        base = git(root, "rev-parse", "HEAD").strip()
        git(root, "checkout", "-q", "main")
    whole = len(subprocess.run(["git", "-C", str(root), "bundle", "create", "-q", "-", "HEAD"], check=True,
                               capture_output=True).stdout)
    sent = commit_pack(root, base)
    work = tmp_path / "node" / "work"
    work.parent.mkdir()
    _check_out(work, sent)
    assert sent.head == ids[-1] and git(work, "rev-parse", "HEAD").strip() == ids[-1]
    assert git(work, "status", "--porcelain") == ""  # the files are HEAD's tree
    assert {p.name for p in work.iterdir()} == {".git", *(f"f{n}.txt" for n in range(10))}
    subjects = git(work, "log", "--format=%s").split()
    expected = {"task base": ["c119", "c118", "c117", "c116"], "none": ["c119"],
                "not an ancestor": [f"c{n}" for n in range(119, 109, -1)]}[since]
    assert subjects == expected
    assert git(work, "fsck", "--no-progress", "--connectivity-only") == ""  # nothing missing below the boundary
    assert len(sent.pack) < whole / 4, (len(sent.pack), whole)  # ten files' last versions, not 120 versions
