"""Where one no-op Ray turn's wall time goes: phase timestamps on the head and on the node.

Not a benchmark (`run_all.py` runs `bench_*.py` only): a look inside R1 of bench_runners.py.
The head's and the node's steps are wrapped with wall-clock timers (the node is a process of
this machine, so one clock serves both); the node's task is `run_on_node` under the same
wrapper, sent by value. Prints the median of each phase over `--runs` turns, with and
without a worktree (a work turn carries its branch to the node and its commit back).

    .venv/bin/python bench/ray_phases.py [--runs 15]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

from _support import stop_cluster, write_scripted_profile  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _timer(log: list[tuple[str, float, float]], name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.time()
        try:
            return fn(*args, **kwargs)
        finally:
            what = f"{name} {args[1]}" if name.endswith(".git") and len(args) > 1 else name
            log.append((what, start, time.time()))
    return timed


def _async_timer(log: list[tuple[str, float, float]], name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.time()
        try:
            said = await fn(*args, **kwargs)
            return said
        finally:
            what = name
            if name.endswith("to_thread") and args:
                what = f"{name}({getattr(args[0], '__name__', '?')})"
            elif name.endswith("_next_of"):
                what = f"{name} -> {type(locals().get('said')).__name__}"
            log.append((what, start, time.time()))
    return timed


def _patch(log: list[tuple[str, float, float]], owner: Any, names: tuple[str, ...], prefix: str) -> None:
    for name in names:
        if hasattr(owner, name):
            setattr(owner, name, _timer(log, f"{prefix}{name}", getattr(owner, name)))


def node_task(out: str) -> Callable[..., Iterator[Any]]:
    """`run_on_node` with its steps timed; the times appended to the file `out` as JSON lines."""

    def timed_run_on_node(secrets: Any, turn: Any) -> Iterator[Any]:
        entered = time.time()
        import agentbox.core.workspace as workspace
        from agentbox.core.agents import invoke as invoke_mod
        from agentbox.core.engine.runners import local, ray_runner, travel
        from agentbox.core.workspace import gitcmd

        log: list[tuple[str, float, float]] = [("node.enter", entered, entered)]
        if not getattr(travel, "_timed", False):
            travel._timed = True  # type: ignore[attr-defined]
            _patch(log, travel, ("sweep_left_behind", "node_dir", "unpack", "collect", "collect_folder",
                                 "unpack_folder", "unpack_clone", "bundle_back"), "node.")
            _patch(log, gitcmd, ("git",), "node.")
            _patch(log, workspace, ("commit_turn",), "node.")
            _patch(log, invoke_mod, ("prepare_session", "prepare", "_open_turn", "_conclude", "_finish"),
                   "node.invoke.")
            _patch(log, ray_runner, ("_in_clone", "_check_out"), "node.")
            travel._log = log  # type: ignore[attr-defined]
        else:
            log = travel._log  # type: ignore[attr-defined]
            log.clear()
            log.append(("node.enter", entered, entered))
        run = local.LocalRunner.run

        async def timed_run(self: Any, t: Any) -> Any:
            start = time.time()
            try:
                return await run(self, t)
            finally:
                log.append(("node.LocalRunner.run", start, time.time()))

        local.LocalRunner.run = timed_run  # type: ignore[method-assign]
        try:
            generator = ray_runner.run_on_node(secrets, turn)
            while True:
                start = time.time()
                try:
                    said = next(generator)
                except StopIteration:
                    break
                log.append((f"node.yield.{type(said).__name__}", start, time.time()))
                yield said
        finally:
            local.LocalRunner.run = run  # type: ignore[method-assign]
            log.append(("node.exit", time.time(), time.time()))
            with open(out, "a") as file:
                file.write(json.dumps(log) + "\n")

    return timed_run_on_node


async def main(args: argparse.Namespace) -> None:
    import ray
    from ray.cluster_utils import Cluster

    from agentbox.core.agents import resolve as services
    from agentbox.core.agents.invoke import new_session_id
    from agentbox.core.engine.runners import ray_runner, travel
    from agentbox.core.engine.runners.base import Turn, TurnWorkspace
    from agentbox.core.engine.runners.ray_runner import RayRunner, tool_resource
    from agentbox.core.workspace.gitcmd import git

    work = Path(tempfile.mkdtemp(prefix="abphases-"))
    home = work / "home"
    os.environ["RAY_TMPDIR"] = str(work)  # Ray's address file here, not in a /tmp/ray others share
    write_scripted_profile(home, "noop", {"rules": [], "fallback": {"reply": "ok"}})
    os.environ["AGENT_BOX_HOME"] = str(home)
    project = work / "project"
    project.mkdir()
    for i in range(200):  # a small project: some files in a few dirs
        (project / f"d{i % 10}").mkdir(exist_ok=True)
        (project / f"d{i % 10}" / f"f{i}.py").write_text(f"x = {i}\n" * 40)
    subprocess.run(["git", "init", "-q", "-b", "main", str(project)], check=True)
    subprocess.run(["git", "-C", str(project), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(project), "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm",
                    "base"], check=True)
    agent = services.profile_agent("noop", project, None)
    head_log: list[tuple[str, float, float]] = []
    _patch(head_log, travel, ("pack", "pack_folders", "store_back", "store_folders_back"), "head.")
    _patch(head_log, ray_runner, ("head_prices", "commit_pack", "_take_bundle", "_show_running", "_for_node", "_taken_back",
                                  "bundle_for_node", "take_turn_bundle"), "head.")
    from agentbox.core import runtimes, store
    from agentbox.core.agents import invoke as invoke_mod
    from agentbox.core.sandbox import tool_homes
    _patch(head_log, store, ("atomic_write_bytes", "atomic_write_json", "append_jsonl"), "head.store.")
    _patch(head_log, runtimes, ("adapter_for",), "head.")
    ray_runner._next_of = _async_timer(head_log, "head._next_of", ray_runner._next_of)  # type: ignore[assignment]
    asyncio.to_thread = _async_timer(head_log, "head.to_thread", asyncio.to_thread)  # type: ignore[assignment]
    _patch(head_log, tool_homes, ("check_bind_source",), "head.")
    _patch(head_log, invoke_mod, ("prepare_session", "prepare", "_open_turn", "_conclude", "_finish"),
           "here.invoke.")
    out = work / "node.jsonl"
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "include_dashboard": False, "temp_dir": str(work / "ray"), "node_ip_address": "127.0.0.1"})
    try:
        cluster.add_node(num_cpus=1, resources={tool_resource("scripted"): 64})
        cluster.wait_for_nodes()
        remote = RayRunner(cluster.address)
        remote._connect()
        remote._remote = ray.remote(max_retries=0)(node_task(str(out)))

        class TimedRemote:
            def __init__(self, inner: Any) -> None:
                self.inner = inner

            def options(self, **kw: Any) -> Any:
                start = time.time()
                chosen = self.inner.options(**kw)
                head_log.append(("head.options()", start, time.time()))

                class Call:
                    def remote(self, *a: Any) -> Any:
                        start = time.time()
                        try:
                            return chosen.remote(*a)
                        finally:
                            head_log.append(("head.remote()", start, time.time()))
                return Call()

        remote._remote = TimedRemote(remote._remote)

        def committed(summary: str) -> Any:
            start = time.time()
            try:
                return git(project, "rev-parse", "HEAD").text.strip()
            finally:
                head_log.append(("head.workspace.commit(rev-parse only)", start, time.time()))

        async def one(with_tree: bool) -> tuple[float, float, list[tuple[str, float, float]]]:
            head_log.clear()
            space = TurnWorkspace("t", project, "main", None, committed) if with_tree else None
            turn = Turn(job_id=new_session_id(), run_id="bench", task_id=None, agent=agent, prompt="noop",
                        session_id=new_session_id(), resume=False, timeout_s=60, workspace=space)
            lines = len(out.read_text().splitlines()) if out.exists() else 0
            start = time.time()
            done = await remote.run(turn)
            end = time.time()
            assert done.result.ok, done.result
            for _ in range(200):  # the node writes its line after the turn's result is back
                if out.exists() and len(out.read_text().splitlines()) > lines:
                    break
                await asyncio.sleep(0.01)
            return start, end, list(head_log)

        def empty(secrets: Any, turn: Any) -> Iterator[str]:
            yield "started"
            yield "done"

        bare = ray.remote(max_retries=0)(empty)
        bare_s = []
        for _ in range(args.runs + 2):
            t = time.perf_counter()
            refs = bare.options(num_cpus=1, resources={tool_resource("scripted"): 1}).remote(1, 2)
            for ref in refs:
                ray.get(ref)
            bare_s.append(time.perf_counter() - t)
        print(f"Ray alone (a generator task yielding two strings): {statistics.median(bare_s[2:]) * 1000:.1f} ms")
        from agentbox.core.engine.runners.ray_runner import NodeSecrets, NodeTurn
        sent, _logins = travel.pack(agent, new_session_id(), False)
        node_turn = NodeTurn(agent=agent, prompt="noop", session_id="x", resume=False, timeout_s=1, run_id="r",
                             task_id=None, tree=None, session=sent)
        bare_s = []
        for _ in range(args.runs + 2):
            t = time.perf_counter()
            refs = bare.options(num_cpus=1, resources={tool_resource("scripted"): 1}).remote(
                NodeSecrets({}, {}), node_turn)
            for ref in refs:
                ray.get(ref)
            bare_s.append(time.perf_counter() - t)
        print(f"Ray alone, a turn's arguments: {statistics.median(bare_s[2:]) * 1000:.1f} ms")
        import pickle

        import ray.cloudpickle as cloudpickle

        from agentbox.core.engine.runners.ray_runner import NodeTurn
        sent, _logins = travel.pack(agent, new_session_id(), False)
        node_turn = NodeTurn(agent=agent, prompt="noop", session_id="x", resume=False, timeout_s=1, run_id="r",
                             task_id=None, tree=None, session=sent)
        t = time.perf_counter()
        for _ in range(100):
            data = cloudpickle.dumps(node_turn)
        t2 = time.perf_counter()
        for _ in range(100):
            pickle.loads(data)
        print(f"NodeTurn: {len(data)} bytes, dumps {(t2 - t) * 10:.2f} ms, loads {(time.perf_counter() - t2) * 10:.2f} ms")
        from agentbox.core.engine.runners.admission import Room
        from agentbox.core.engine.runners.local import LocalRunner

        here = LocalRunner(reading=lambda: Room(1e9, 1e9, 0.0, 1))
        local_s, ray_s = [], []
        for _ in range(args.runs):
            t = time.perf_counter()
            t0 = time.time()
            assert (await here.run(Turn(job_id=new_session_id(), run_id="bench", task_id=None, agent=agent,
                                        prompt="noop", session_id=new_session_id(), resume=False,
                                        timeout_s=60))).result.ok
            local_s.append(time.perf_counter() - t)
            if _ == args.runs - 1:
                for name, s, e in head_log:
                    print(f"   local at {(s - t0) * 1000:5.1f} ms {(e - s) * 1000:.1f} ms {name}")
            head_log.clear()
            start, end, _h = await one(False)
            ray_s.append(end - start)
        print(f"R1 interleaved: local {statistics.median(local_s) * 1000:.1f} ms, ray "
              f"{statistics.median(ray_s) * 1000:.1f} ms, ratio {statistics.median(ray_s) / statistics.median(local_s):.2f}"
              f", load {os.getloadavg()[0]:.1f}")
        if os.environ.get("PHASES_SHOW_BACK"):
            original = travel.store_back

            def show(agent: Any, back: Any) -> None:
                print("back.config", {k: len(v) for k, v in back.config.items()})
                print("back.logs", {k: len(v) for k, v in back.logs.items()})
                original(agent, back)

            travel.store_back = show
            await one(False)
            travel.store_back = original
        for with_tree in (False, True):
            await one(with_tree)
            await one(with_tree)
            out.write_text("")
            phases: dict[str, list[float]] = {}
            totals = []
            for _ in range(args.runs):
                start, end, heads = await one(with_tree)
                totals.append(end - start)
                node = json.loads(out.read_text().splitlines()[-1])
                events = sorted([*heads, *map(tuple, node)], key=lambda e: e[1])
                for name, s, e in events:
                    phases.setdefault(name, []).append(e - s)
                    phases.setdefault(f"@{name}", []).append(s - start)
            print(f"\n== {'work turn (worktree, commit back)' if with_tree else 'no-op turn (no worktree)'}: "
                  f"total median {statistics.median(totals) * 1000:.1f} ms, load {os.getloadavg()[0]:.1f}")
            order = sorted((k for k in phases if not k.startswith("@")),
                           key=lambda k: statistics.median(phases[f"@{k}"]))
            for name in order:
                print(f"  at {statistics.median(phases[f'@{name}']) * 1000:7.1f} ms  "
                      f"{statistics.median(phases[name]) * 1000:6.1f} ms x{len(phases[name]) // args.runs}  {name}")
    finally:
        stop_cluster(cluster, work)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    asyncio.run(main(parser.parse_args()))
