"""P7: what `agentbox invoke` adds to a real agent CLI's turn, and hermes's template before/after.

P7  for each real CLI (claude, codex, opencode, hermes) against the project's fake model
    server (tests/fakes/model_server.py), one new-session turn through the whole
    `agentbox invoke` CLI call, divided by the same CLI run by hand under the same bwrap
    argv, environment and config (taken from `agentbox.core.agents.invoke.prepare`, handed to
    bwrap the same way: memory fds, seccomp filter, prompt on stdin) -- goal <= 1.05 each.
    Also the library's `invoke()` in-process (one event loop) over the same by-hand turn,
    which leaves out the CLI's start-up; and the floor of any CLI written in Python: the same
    by-hand turn started from a fresh interpreter of the CLI's own (`python -c` that spawns the
    argv and waits), so `agentbox invoke` minus the floor is what agentbox itself adds.
H   hermes's turn with the bundled template's config.yaml (plus the model block its
    comment shows, pointed at the fake server) divided by the same turn with that model
    block alone (provider, model, base_url, context_length: what the guide's endpoint
    recipe wrote before the template had a config), both by hand; and the requests each
    makes to the model server per turn.

The fake server answers without Nagle's delay (TCP_NODELAY), as real model servers do:
with it, each small write of a streamed answer or of a 404 can wait 40 ms for a delayed
ACK, which makes every turn slower and hides what agentbox adds.

Medians over --runs rounds (three times as many for a CLI whose turn takes under 2 s); in
every round the variants run back to back, their order alternating, so drift hits them
alike. Everything happens in a temporary
AGENT_BOX_HOME, HOME and project; the user's real home is not touched. A CLI missing from
.tools/bin is skipped; a turn that fails is a failure (non-zero exit).

    .venv/bin/python bench/bench_realcli.py [--runs N] [--tools claude,codex,opencode,hermes]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TOOLS_BIN = REPO / ".tools" / "bin"
sys.path.insert(0, str(REPO))

import tests.fakes.model_server as fake_server  # noqa: E402 - the project's fake, found from the repo
from tests.fakes.model_server import FakeModelServer  # noqa: E402

fake_server._Handler.disable_nagle_algorithm = True  # see the module docstring

TOOLS = ("claude", "codex", "opencode", "hermes")
FLOOR = ("import os, sys; pid = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ); "
         "sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))")
"""A fresh interpreter that spawns the argv it is given and waits: the least a Python CLI costs."""
P7_GOAL = 1.05
TURN_TIMEOUT_S = 180


def agentbox_command() -> list[str]:
    """The console script next to this interpreter (what users run), else `python -m agentbox`."""
    script = Path(sys.executable).parent / "agentbox"
    return [str(script)] if script.exists() else [sys.executable, "-m", "agentbox"]


def hermes_model(base_url: str) -> dict[str, object]:
    """A hermes `model:` block for the fake server: one provider, the context length given."""
    return {"provider": "custom", "default": "fake-model", "base_url": f"{base_url}/v1", "context_length": 128000}


def configure(tool: str, profile_dir: Path, base_url: str, hermes_config: str = "template") -> None:
    """Point a profile made from the bundled template at the fake server, as tests/realcli does."""
    config = profile_dir / f"dot-{tool}"
    config.mkdir(exist_ok=True)
    env: dict[str, str] = {}
    if tool == "claude":
        env = {"ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": "fake-key"}
    elif tool == "codex":
        (config / "config.toml").write_text(
            'model = "fake-model"\nmodel_provider = "fake"\n\n[model_providers.fake]\nname = "Fake local server"\n'
            f'base_url = "{base_url}/v1"\nenv_key = "FAKE_API_KEY"\nwire_api = "responses"\n')
        env = {"FAKE_API_KEY": "fake-key"}
    elif tool == "opencode":
        (config / "opencode.json").write_text(json.dumps({
            "provider": {"fake": {"npm": "@ai-sdk/openai-compatible", "name": "Fake",
                                  "options": {"baseURL": f"{base_url}/v1", "apiKey": "fake-key"},
                                  "models": {"fake-model": {"name": "Fake Model"}}}},
            "model": "fake/fake-model", "autoupdate": False, "share": "disabled"}))
        env = {"npm_config_registry": f"{base_url}/npm/"}  # its plugin lookup stays on loopback
    elif tool == "hermes":
        from agentbox.core.yaml_io import load_yaml, new_map, write_yaml

        path = config / "config.yaml"
        if hermes_config == "template":  # the shipped file, plus the model block its comment shows
            document = load_yaml(path)
            document["model"] = new_map({**hermes_model(base_url), "supports_vision": False})
        else:  # the model block alone
            document = new_map({"model": new_map(hermes_model(base_url))})
        write_yaml(path, document)
    if env:
        from agentbox.core.yaml_io import load_yaml, write_yaml

        profile = profile_dir / "profile.yaml"
        document = load_yaml(profile)
        document["runtime"]["env"] = env
        write_yaml(profile, document)


class Bench:
    """One temp AGENT_BOX_HOME, HOME and project; one fake model server."""

    def __init__(self, workdir: Path, server: FakeModelServer) -> None:
        self.server = server
        self.loop = asyncio.new_event_loop()
        self.home = workdir / "agent-box-home"
        self.project = workdir / "project"
        self.project.mkdir()
        host_home = workdir / "home"
        host_home.mkdir()
        os.environ.update(AGENT_BOX_HOME=str(self.home), HOME=str(host_home),
                          PATH=f"{TOOLS_BIN}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}")
        for var in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "HERMES_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME",
                    "XDG_STATE_HOME", "XDG_CACHE_HOME", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
            os.environ.pop(var, None)

    def profile(self, tool: str, name: str, hermes_config: str = "template") -> str:
        proc = subprocess.run([*agentbox_command(), "profile", "add", name, "--from", tool],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"profile add {name}: {proc.stderr}")
        configure(tool, self.home / "profiles" / name, str(self.server.base_url), hermes_config)
        return name

    def by_hand(self, name: str, prompt: str, through_python: bool = False) -> Callable[[], None]:
        """The turn of a new session of profile `name`, by hand: the argv agentbox would run, run directly
        (`through_python`: started by a fresh interpreter, the floor of a Python CLI)."""
        from agentbox.core.agents import egress_turn
        from agentbox.core.agents import resolve as services
        from agentbox.core.agents.invoke import (
            finish_turn,
            prepare,
            prepare_session,
            remove_scratch,
        )
        from agentbox.core.sandbox import bwrap as sandbox

        agent = services.profile_agent(name, self.project, None)

        def run() -> None:
            prepared = prepare(agent, prompt, prepare_session(agent, None))
            try:
                with egress_turn.serving(prepared.egress), \
                        sandbox.launch(prepared.argv, before_exec=egress_turn.join(prepared.egress)) as launched:
                    argv = [sys.executable, "-c", FLOOR, *launched.argv] if through_python else launched.argv
                    proc = subprocess.run(argv, env=prepared.env, cwd=self.project,
                                          input=prepared.stdin or b"", capture_output=True, check=False,
                                          pass_fds=launched.pass_fds, timeout=TURN_TIMEOUT_S,
                                          start_new_session=True)
            finally:
                finish_turn(prepared, 1)
                remove_scratch(prepared)
            if proc.returncode != 0 or b"echo: " not in proc.stdout:
                raise RuntimeError(f"{name} by hand: exit {proc.returncode}\n{proc.stdout[-2000:]!r}\n"
                                   f"{proc.stderr[-2000:]!r}")

        return run

    def library(self, name: str, prompt: str) -> Callable[[], None]:
        """The library's `invoke()` in this process, on one event loop (no CLI start-up)."""
        from agentbox.core.agents import resolve as services
        from agentbox.core.agents.invoke import invoke

        agent = services.profile_agent(name, self.project, None)

        def run() -> None:
            result = self.loop.run_until_complete(invoke(agent, prompt, timeout_s=TURN_TIMEOUT_S))
            if not result.ok:
                raise RuntimeError(f"{name} through invoke(): {result.error_kind}: {result.error}")

        return run

    def cli(self, name: str, prompt: str) -> Callable[[], None]:
        """The whole `agentbox invoke profile:NAME PROMPT --json` call."""
        argv = [*agentbox_command(), "invoke", f"profile:{name}", prompt, "--json", "--timeout", str(TURN_TIMEOUT_S)]

        def run() -> None:
            proc = subprocess.run(argv, cwd=self.project, stdin=subprocess.DEVNULL, capture_output=True,
                                  text=True, check=False, timeout=TURN_TIMEOUT_S + 30)
            result = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
            if proc.returncode != 0 or result.get("status") != "ok":
                raise RuntimeError(f"{name} through agentbox: exit {proc.returncode}\n{proc.stdout[-2000:]}\n"
                                   f"{proc.stderr[-2000:]}")

        return run

    def requests_of(self, action: Callable[[], None]) -> tuple[float, int]:
        """Run `action`; (seconds, model-server requests it made)."""
        before = len(self.server.requests())
        started = time.perf_counter()
        action()
        return time.perf_counter() - started, len(self.server.requests()) - before


QUICK_TURN_S = 2.0
"""Turns shorter than this (in the first, dropped round) are measured over three times the rounds."""


def compare(bench: Bench, variants: dict[str, Callable[[str], Callable[[], None]]],
            runs: int) -> tuple[int, dict[str, tuple[float, float]]]:
    """(rounds measured, median seconds and median requests per turn of each variant), interleaved;
    the first round warms up and is dropped."""
    seconds: dict[str, list[float]] = {key: [] for key in variants}
    requests: dict[str, list[int]] = {key: [] for key in variants}
    index = 0
    while index <= runs:
        order = list(variants) if index % 2 == 0 else list(reversed(variants))
        warm_up: list[float] = []
        for key in order:
            took, made = bench.requests_of(variants[key](f"hi {index}"))
            if index:
                seconds[key].append(took)
                requests[key].append(made)
            else:
                warm_up.append(took)
        if warm_up and max(warm_up) < QUICK_TURN_S:
            runs *= 3
        index += 1
    return runs, {key: (statistics.median(seconds[key]), statistics.median(requests[key])) for key in variants}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=8, help="measured rounds per CLI (default 8)")
    parser.add_argument("--tools", default=",".join(TOOLS), help="comma-separated CLIs (default: all four)")
    args = parser.parse_args()
    tools = [t for t in args.tools.split(",") if t]
    workdir = Path(tempfile.mkdtemp(prefix="agentbox-bench-realcli-"))
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
                    name = bench.profile(tool, f"bench-{tool}")
                    rounds, found = compare(bench, {"by_hand": lambda p, n=name: bench.by_hand(n, p),
                                                    "cli": lambda p, n=name: bench.cli(n, p),
                                                    "library": lambda p, n=name: bench.library(n, p),
                                                    "floor": lambda p, n=name: bench.by_hand(n, p, True)}, args.runs)
                    (hand_s, hand_n), (cli_s, _), (lib_s, _) = found["by_hand"], found["cli"], found["library"]
                    floor_s = found["floor"][0]
                    ratio = cli_s / hand_s
                    print(f"RESULT realcli tool={tool} ratio={ratio:.4g} library_ratio={lib_s / hand_s:.4g} "
                          f"by_hand_s={hand_s:.4g}", flush=True)
                    lines.append(f"  {tool:<9} ({rounds:2} rounds) by hand {hand_s:6.2f} s   agentbox invoke {cli_s:6.2f} s   "
                                 f"ratio {ratio:5.3f}  (goal <= {P7_GOAL})  {'ok' if ratio <= P7_GOAL else 'MISSED'}"
                                 f"   library invoke() {lib_s:6.2f} s  ratio {lib_s / hand_s:5.3f}"
                                 f"   {hand_n:g} requests per turn")
                    lines.append(f"  {'':<9} floor of a Python CLI (by hand from a fresh interpreter) {floor_s:6.2f} s  "
                                 f"ratio {floor_s / hand_s:5.3f};  agentbox invoke over that floor "
                                 f"{(cli_s - floor_s) * 1000:+6.0f} ms ({cli_s / floor_s:5.3f})")
                    if tool == "hermes":
                        bare = bench.profile(tool, "bench-hermes-model-only", hermes_config="model-only")
                        rounds, found = compare(bench, {"model_only": lambda p, n=bare: bench.by_hand(n, p),
                                                        "template": lambda p, n=name: bench.by_hand(n, p)}, args.runs)
                        (bare_s, bare_n), (template_s, template_n) = found["model_only"], found["template"]
                        lines.append(f"  hermes    ({rounds:2} rounds) by hand, the model block alone {bare_s:6.2f} s "
                                     f"({bare_n:g} requests), "
                                     f"the template's config {template_s:6.2f} s ({template_n:g} requests)   "
                                     f"ratio {template_s / bare_s:5.3f}")
                except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError) as exc:
                    failures.append(f"{tool}: {exc}")
                    lines.append(f"  {tool:<9} FAILED")
            bench.loop.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print("bench_realcli: medians, new sessions, against the fake model server")
    print("\n".join(lines))
    for failure in failures:
        print(f"FAIL: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
