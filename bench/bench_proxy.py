"""P8: what the egress proxy adds to a real agent CLI's turn.

P8  for each real CLI (claude, codex, opencode, hermes) against the project's fake model
    server, one new-session turn of a profile with `network: true` (its own network
    namespace; the model calls reach agentbox's egress proxy, which listens on the
    sandbox's loopback from the host, and leave from there) divided by the same turn of
    the same profile with `network: host` (the host's network shared, nothing in
    between) -- goal <= 1.05 each. Both through the library's `invoke()` in this process,
    so the proxy's whole cost per turn is in the figure: the allowlist derived from the
    profile, the proxy's thread, its listeners made in the sandbox while bwrap holds the
    tool, every connection carried through it.
F   the fixed part of that cost: a no-op scripted turn (no connection at all) with
    `network: true` minus the same with `network: host`, in milliseconds; and, of that, the
    hold: bwrap with its own network running `/bin/true` while it is held for the proxy's
    listeners (`launch(before_exec=...)`: --info-fd, setns from a thread as root or a forked child, --block-fd)
    minus the same bwrap run plainly.
C   the cost of one connection: a client in bwrap opening a TCP connection to a toy server on
    the host's loopback, sending a line and reading the answer to its end, through the proxy
    (an allowlisted loopback port, a fixed-target listener) minus the same with the host's network.

Medians over --runs rounds (three times as many for a CLI whose turn takes under 2 s; the
first round warms up and is dropped); in every round the two variants run back to back,
their order alternating, so drift hits them alike. Everything happens in a temporary
AGENT_BOX_HOME, HOME and project (see bench_realcli.py, whose set-up this reuses). A CLI
missing from .tools/bin is skipped; a failed turn is a failure (non-zero exit).

    .venv/bin/python bench/bench_proxy.py [--runs N] [--tools claude,codex,opencode,hermes]
"""

from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._support import result  # noqa: E402
from bench.bench_realcli import TOOLS, TOOLS_BIN, Bench, compare  # noqa: E402
from tests.fakes.model_server import FakeModelServer  # noqa: E402

P8_GOAL = 1.05


def set_network(bench: Bench, name: str, network: object) -> None:
    """Set profile `name`'s `sandbox.network`."""
    from agentbox.core.yaml_io import load_yaml, new_map, write_yaml

    path = bench.home / "profiles" / name / "profile.yaml"
    document = load_yaml(path)
    if "sandbox" not in document:
        document["sandbox"] = new_map({})
    document["sandbox"]["network"] = network
    write_yaml(path, document)


def scripted(bench: Bench, name: str, network: object) -> str:
    """A scripted profile whose agent answers at once and opens no connection."""
    import json

    directory = bench.home / "profiles" / name
    directory.mkdir(parents=True)
    (directory / "scenario.json").write_text(json.dumps({"rules": [], "fallback": {"reply": "echo: ok"}}))
    (directory / "profile.yaml").write_text(json.dumps({"name": name, "runtime": {"tool": "scripted",
                                                        "scenario": "scenario.json"}, "sandbox": {"network": network}}))
    return name


CLIENT = """
import socket, sys, time
port, count = int(sys.argv[1]), int(sys.argv[2])
took = []
for _ in range(count):
    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.sendall(b"ping\\n")
        while conn.recv(64):
            pass
    took.append(time.perf_counter() - started)
print(sorted(took)[len(took) // 2])
"""
"""Opens `count` connections one after another; prints the median seconds of one."""


def toy_server() -> tuple[socket.socket, int]:
    """A loopback TCP server answering each connection with one line, then closing it."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(64)
                conn.sendall(b"pong\n")

    threading.Thread(target=serve, daemon=True).start()
    return listener, listener.getsockname()[1]


def hold_and_connections(runs: int, count: int = 50) -> tuple[float, float, float, float]:
    """(bwrap held while the proxy's listeners are made in it s, without it s, one connection through
    the proxy s, one direct s): medians."""
    from agentbox.core.agents.egress_turn import EgressPlan
    from agentbox.core.sandbox.bwrap import launch
    from agentbox.core.sandbox.egress import allowlist, parse_entry
    from agentbox.core.sandbox.egress_proxy import EgressProxy

    bwrap = shutil.which("bwrap") or "bwrap"
    base = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--die-with-parent"]
    own_net = [*base, "--unshare-net"]
    listener, port = toy_server()
    plan = EgressPlan(allowlist([parse_entry(f"127.0.0.1:{port}")]), 3128)
    samples: dict[str, list[float]] = {"held": [], "bare": [], "through": [], "direct": []}

    def run(argv: list[str], *, joined: bool) -> subprocess.CompletedProcess[str]:
        if not joined:
            return subprocess.run(argv, check=True, capture_output=True, text=True)
        with launch(argv, seccomp_filter=False, before_exec=plan.join) as launched:
            return subprocess.run(launched.argv, pass_fds=launched.pass_fds, check=True, capture_output=True, text=True)

    proxy = EgressProxy(plan.rules)  # one for every round (its start is in the `fixed` row, not here)
    proxy.start()
    plan.proxy = proxy
    try:
        client = [sys.executable, "-I", "-S", "-c", CLIENT, str(port), str(count)]
        for index in range(runs + 1):
            for key, joined in (("held", True), ("bare", False)):
                started = time.perf_counter()
                run([*own_net, "--", "/bin/true"], joined=joined)
                if index:
                    samples[key].append(time.perf_counter() - started)
            through = run([*own_net, "--", *client], joined=True)
            direct = run([*base, "--", *client], joined=False)
            if index:
                samples["through"].append(float(through.stdout))
                samples["direct"].append(float(direct.stdout))
    finally:
        proxy.stop()
        listener.close()
    return tuple(statistics.median(samples[key]) for key in ("held", "bare", "through", "direct"))  # type: ignore[return-value]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=6, help="measured rounds per CLI (default 6)")
    parser.add_argument("--tools", default=",".join(TOOLS), help="comma-separated CLIs (default: all four)")
    args = parser.parse_args()
    tools = [t for t in args.tools.split(",") if t]
    workdir = Path(tempfile.mkdtemp(prefix="agentbox-bench-proxy-"))
    failures: list[str] = []
    lines: list[str] = []
    try:
        with FakeModelServer(workdir / "requests.jsonl") as server:
            bench = Bench(workdir, server)
            for tool in tools:
                if not (TOOLS_BIN / tool).exists():
                    lines.append(f"  {tool:<9} skipped: not installed in {TOOLS_BIN} (scripts/install-clis.sh)")
                    continue
                try:
                    proxied = bench.profile(tool, f"proxy-{tool}")
                    shared = bench.profile(tool, f"host-{tool}")
                    set_network(bench, proxied, True)
                    set_network(bench, shared, "host")
                    rounds, found = compare(bench, {"host": lambda p, n=shared: bench.library(n, p),
                                                    "proxy": lambda p, n=proxied: bench.library(n, p)}, args.runs)
                    (host_s, _host_n), (proxy_s, proxy_n) = found["host"], found["proxy"]
                    ratio = proxy_s / host_s
                    lines.append(f"  {tool:<9} ({rounds:2} rounds) network: host {host_s:6.3f} s   "
                                 f"through the proxy {proxy_s:6.3f} s   ratio {ratio:5.3f}  (goal <= {P8_GOAL})  "
                                 f"{'ok' if ratio <= P8_GOAL else 'MISSED'}   {proxy_n:g} model-server requests per turn")
                    result("proxy", tool=tool, ratio=ratio, host_s=host_s, proxy_s=proxy_s, rounds=rounds)
                except RuntimeError as exc:
                    failures.append(f"{tool}: {exc}")
                    lines.append(f"  {tool:<9} FAILED")
            noop_host, noop_proxy = scripted(bench, "noop-host", "host"), scripted(bench, "noop-proxy", True)
            rounds, found = compare(bench, {"host": lambda p: bench.library(noop_host, p),
                                            "proxy": lambda p: bench.library(noop_proxy, p)}, args.runs * 3)
            (host_s, _), (proxy_s, _) = found["host"], found["proxy"]
            lines.append(f"  fixed     ({rounds:2} rounds) no-op scripted turn: network: host {host_s * 1000:6.1f} ms   "
                         f"through the proxy {proxy_s * 1000:6.1f} ms   +{(proxy_s - host_s) * 1000:.1f} ms per turn")
            result("proxy_fixed", host_ms=host_s * 1000, proxy_ms=proxy_s * 1000, rounds=rounds)
            rounds = args.runs * 3
            held_s, bare_s, through_s, direct_s = hold_and_connections(rounds)
            lines.append(f"  hold      ({rounds:2} rounds) bwrap with its own network, /bin/true {bare_s * 1000:6.1f} ms   "
                         f"held while the proxy listens in it {held_s * 1000:6.1f} ms   "
                         f"+{(held_s - bare_s) * 1000:.1f} ms per turn")
            lines.append(f"  connect   ({rounds:2} rounds) one connection, direct {direct_s * 1000:6.2f} ms   "
                         f"through the proxy {through_s * 1000:6.2f} ms   "
                         f"+{(through_s - direct_s) * 1000:.2f} ms per connection")
            bench.loop.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print("bench_proxy: medians, new sessions, against the fake model server")
    print("\n".join(lines))
    for failure in failures:
        print(f"FAIL: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
