"""The Ray runner against the local one, on a real Ray cluster on this machine (127.0.0.1).

R1  one no-op scripted turn through the Ray runner ÷ the same turn through the local runner,
    interleaved, medians -- goal <= 1.3.
R1w one work turn (a repository of 200 files; the turn writes one file, which is committed)
    through the Ray runner (the branch to the node as a bundle, the commit back) ÷ the same
    turn through the local runner, interleaved, medians -- reported (the issue's goal is R1's).
R2  N short turns (each sleeps --turn-s) on one worker node, then on three: throughput of
    three ÷ one -- goal >= 2.5 (each node offers one CPU, each turn asks for one).
R3  the head's memory (this process's RSS) with 50 turns in flight ÷ before they were sent.
R4  one real claude turn (the pinned CLI in .tools, against the project's fake model server,
    a new session, its network through the egress proxy) through the Ray runner ÷ the same
    turn through the local runner, interleaved, medians -- goal <= 1.1.

The cluster (`ray.cluster_utils.Cluster`, its own temp dir, no dashboard) is started here and
stopped at the end, its processes killed. Everything happens in a temporary AGENT_BOX_HOME.

    .venv/bin/python bench/bench_runners.py [--runs 15] [--work-runs 9] [--turns 200] [--turn-s 0.5] [--claude-runs 9]

`--claude-runs 0 --turns 0 --work-runs 0` measures R1 alone.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # read when ray is imported: every node on 127.0.0.1

import subprocess  # noqa: E402
import sys  # noqa: E402

import psutil  # noqa: E402
from _support import result, stop_cluster, write_scripted_profile  # noqa: E402  (bench/ is sys.path[0] when a script runs)

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from tests.fakes.model_server import FakeModelServer  # noqa: E402  (the project's fake model server)

R1_GOAL = 1.3
R2_GOAL = 2.5
R4_GOAL = 1.1


def claude_profile(name: str, base_url: str) -> None:
    """A claude profile from the bundled template, pointed at the fake server (as tests/realcli does)."""
    from agentbox.core.yaml_io import load_yaml, write_yaml

    script = Path(sys.executable).parent / "agentbox"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "agentbox"]
    subprocess.run([*command, "profile", "add", name, "--from", "claude"], check=True, capture_output=True)
    path = Path(os.environ["AGENT_BOX_HOME"]) / "profiles" / name / "profile.yaml"
    document = load_yaml(path)
    document["runtime"]["env"] = {"ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": "fake-key"}
    write_yaml(path, document)


def turn_for(agent: object, prompt: str, workspace: object = None) -> object:
    from agentbox.core.agents.invoke import new_session_id
    from agentbox.core.engine.runners.base import Turn

    return Turn(job_id=new_session_id(), run_id="bench", task_id=None, agent=agent, prompt=prompt,  # type: ignore[arg-type]
                session_id=new_session_id(), resume=False, timeout_s=120, workspace=workspace)  # type: ignore[arg-type]


def work_repo(root: Path) -> object:
    """A repository of 200 small files in ten dirs, and the workspace a turn commits in it."""
    from agentbox.core.engine.runners.base import TurnWorkspace
    from agentbox.core.workspace import commit_turn

    for i in range(200):
        (root / f"d{i % 10}").mkdir(parents=True, exist_ok=True)
        (root / f"d{i % 10}" / f"f{i}.py").write_text(f"x = {i}\n" * 40)
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["-c", "user.name=b", "-c", "user.email=b@b.invalid",
                                                                "commit", "-qm", "base"]):
        subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)
    return TurnWorkspace("bench", root, "main", None, lambda summary: commit_turn(  # type: ignore[arg-type,return-value]
        root, author_name="bench", author_email="b@b.invalid", message=summary or "a turn\n"))


async def timed(runner: object, agent: object, prompt: str, workspace: object = None) -> float:
    start = time.perf_counter()
    done = await runner.run(turn_for(agent, prompt, workspace))  # type: ignore[attr-defined]
    assert done.result.ok, done.result
    return time.perf_counter() - start


async def main(args: argparse.Namespace) -> None:
    from ray.cluster_utils import Cluster

    from agentbox.core.agents import resolve as services
    from agentbox.core.engine.runners.admission import Room
    from agentbox.core.engine.runners.local import LocalRunner
    from agentbox.core.engine.runners.ray_runner import RayRunner, tool_resource

    work = Path(tempfile.mkdtemp(prefix="abbench-"))
    home = work / "home"
    os.environ["RAY_TMPDIR"] = str(work)  # Ray's address file here, not in a /tmp/ray other clusters share
    (work / "ray").mkdir()
    os.environ["PATH"] = f"{REPO / '.tools' / 'bin'}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"
    for var in ("CLAUDE_CONFIG_DIR", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        os.environ.pop(var, None)
    server = FakeModelServer(work / "requests.jsonl")
    server.__enter__()
    write_scripted_profile(home, "noop", {"rules": [
        {"id": "short", "when": {"prompt_contains": "short"}, "do": {"delay_s": args.turn_s, "reply": "ok"}},
        {"id": "long", "when": {"prompt_contains": "long"}, "do": {"delay_s": 3.0, "reply": "ok"}},
        {"id": "write", "when": {"prompt_regex": r"write (?P<n>\w+)"}, "do": {"write": {"made.txt": "{n}\n"},
                                                                                "reply": "ok"}}],
        "fallback": {"reply": "ok"}})
    os.environ["AGENT_BOX_HOME"] = str(home)
    project = work / "project"
    project.mkdir()
    agent = services.profile_agent("noop", project, None)
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "include_dashboard": False, "temp_dir": str(work / "ray"), "node_ip_address": "127.0.0.1"})
    tool = {tool_resource("scripted"): 64, tool_resource("claude"): 64}
    try:
        cluster.add_node(num_cpus=1, resources=tool)
        cluster.wait_for_nodes()
        local = LocalRunner(reading=lambda: Room(1e9, 1e9, 0.0, 1))
        remote = RayRunner(cluster.address)
        await timed(remote, agent, "noop")  # connect, warm a worker
        local_s, ray_s = [], []
        for _ in range(args.runs):
            local_s.append(await timed(local, agent, "noop"))
            ray_s.append(await timed(remote, agent, "noop"))
        r1 = statistics.median(ray_s) / statistics.median(local_s)
        print(f"R1 no-op turn: local {statistics.median(local_s) * 1000:.0f} ms, "
              f"ray {statistics.median(ray_s) * 1000:.0f} ms, ratio {r1:.2f} (goal <= {R1_GOAL}) "
              f"{'ok' if r1 <= R1_GOAL else 'MISSED'}")
        result("runners_r1", ratio=r1, local_ms=statistics.median(local_s) * 1000,
               ray_ms=statistics.median(ray_s) * 1000)

        if args.work_runs:
            repo = work / "repo"
            space = work_repo(repo)
            writer = services.profile_agent("noop", repo, None)
            await timed(local, writer, "write w0", space)
            await timed(remote, writer, "write w1", space)
            local_w, ray_w = [], []
            for i in range(args.work_runs):
                local_w.append(await timed(local, writer, f"write l{i}", space))
                ray_w.append(await timed(remote, writer, f"write r{i}", space))
            r1w = statistics.median(ray_w) / statistics.median(local_w)
            print(f"R1w work turn: local {statistics.median(local_w) * 1000:.0f} ms, "
                  f"ray {statistics.median(ray_w) * 1000:.0f} ms, ratio {r1w:.2f} (reported)")
            result("runners_r1w", ratio=r1w, local_ms=statistics.median(local_w) * 1000,
                   ray_ms=statistics.median(ray_w) * 1000)

        if args.claude_runs:
            claude_profile("bench-claude", str(server.base_url))
            claude = services.profile_agent("bench-claude", project, None)
            await timed(local, claude, "hello")  # the CLI's files in the page cache, for both
            await timed(remote, claude, "hello")
            local_c, ray_c = [], []
            for _ in range(args.claude_runs):
                local_c.append(await timed(local, claude, "hello"))
                ray_c.append(await timed(remote, claude, "hello"))
            r4 = statistics.median(ray_c) / statistics.median(local_c)
            print(f"R4 real claude turn: local {statistics.median(local_c) * 1000:.0f} ms, "
                  f"ray {statistics.median(ray_c) * 1000:.0f} ms, ratio {r4:.2f} (goal <= {R4_GOAL}) "
                  f"{'ok' if r4 <= R4_GOAL else 'MISSED'}")
            result("runners_r4", ratio=r4, local_s=statistics.median(local_c), ray_s=statistics.median(ray_c))

        if not args.turns:
            return

        async def batch() -> float:
            start = time.perf_counter()
            await asyncio.gather(*(timed(remote, agent, "short") for _ in range(args.turns)))
            return args.turns / (time.perf_counter() - start)

        one = await batch()
        cluster.add_node(num_cpus=1, resources=tool)
        cluster.add_node(num_cpus=1, resources=tool)
        cluster.wait_for_nodes()
        await asyncio.gather(*(timed(remote, agent, "noop") for _ in range(6)))  # warm the new nodes' workers
        three = await batch()
        r2 = three / one
        print(f"R2 {args.turns} turns of {args.turn_s:g} s: one node {one:.2f} turns/s, three nodes {three:.2f} "
              f"turns/s, ratio {r2:.2f} (goal >= {R2_GOAL}) {'ok' if r2 >= R2_GOAL else 'MISSED'}")
        result("runners_r2", ratio=r2, one_tps=one, three_tps=three)

        me = psutil.Process()
        before = me.memory_info().rss
        peak = before
        flights = [asyncio.ensure_future(timed(remote, agent, "long")) for _ in range(50)]
        while not all(f.done() for f in flights):
            peak = max(peak, me.memory_info().rss)
            await asyncio.sleep(0.1)
        await asyncio.gather(*flights)
        print(f"R3 head RSS: {before / 2**20:.0f} MB before, {peak / 2**20:.0f} MB with 50 turns in flight, "
              f"ratio {peak / before:.2f} (+{(peak - before) / 2**20 / 50:.2f} MB per turn)")
        result("runners_r3", ratio=peak / before, before_mb=before / 2**20, inflight_mb=peak / 2**20)
    finally:
        server.__exit__(None, None, None)
        stop_cluster(cluster, work)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--turns", type=int, default=200, help="R2's turns each way (0: skip R2 and R3)")
    parser.add_argument("--turn-s", type=float, default=0.5)
    parser.add_argument("--work-runs", type=int, default=9, help="R1w's turns each way (0: skip R1w)")
    parser.add_argument("--claude-runs", type=int, default=9, help="R4's turns each way (0: skip R4)")
    asyncio.run(main(parser.parse_args()))
