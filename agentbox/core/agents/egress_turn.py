"""One turn's network: the allowlist derived from its profile, the proxy's listeners and life.

A profile with `sandbox.network: true` gets a sandbox with its own network namespace. The
allowlist is the tool's model endpoint — every http(s) base URL the profile names (its
runtime env's `*_BASE_URL` variables, the base URLs in the tool's config files: codex
`config.toml`, opencode `opencode.json(c)` or `OPENCODE_CONFIG_CONTENT`, hermes
`config.yaml` and `.env`), else the vendor's own hosts (`agentbox.core.tools`) — plus the
profile's `sandbox.allow`. The proxy (`agentbox.core.sandbox.egress_proxy`) serves it for the
turn, on the host, from listeners made on the sandbox's own loopback before the tool starts
(`EgressPlan.join`, run by `agentbox.core.sandbox.bwrap.launch` while bwrap holds the tool):
no process of agentbox runs inside the sandbox.
"""

from __future__ import annotations

import contextlib
import re
import socket
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentbox.core.sandbox.egress import Allowlist, Rule, allowlist, parse_entry, rule_for_url

if TYPE_CHECKING:
    from agentbox.core.config.profiles import ProfileInfo
    from agentbox.core.sandbox.egress_proxy import EgressProxy

PROXY_PORT = 3128
"""The sandbox-side port of the proxy (the next free one when an allowlisted loopback port takes it)."""
NO_PROXY = "localhost,127.0.0.1,::1"
"""Loopback goes straight to the sandbox's own loopback, where the proxy listens on each allowlisted port."""
LOOPBACK = ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1"))

CONFIG_FILES: dict[str, tuple[str, ...]] = {
    "codex": ("config.toml",),
    "opencode": ("opencode.json", "opencode.jsonc", "config.json"),
    "hermes": ("config.yaml", ".env"),
}
"""Files in a tool's config dir that may name its model endpoint. Each is read-only to every
headless turn (the adapter's `loaded_config`), so no turn widens a later turn's allowlist."""
MAX_CONFIG_BYTES = 1 << 20
_BASE_URL = re.compile(r"""(?:base_url|baseURL|baseUrl|_BASE_URL)["']?\s*[:=]\s*["']?(https?://[^\s"'`,}\]]+)""")


@dataclass
class EgressPlan:
    """What a turn's sandbox needs for its network: the rules and the proxy's ports inside it."""

    rules: Allowlist
    proxy_port: int
    proxy: EgressProxy | None = field(default=None, repr=False)

    def spawned(self) -> None:
        """The turn's process has been spawned (see the module's `spawned`)."""
        spawned(self)

    @property
    def env(self) -> dict[str, str]:
        """The tool's proxy settings inside the sandbox."""
        url = f"http://127.0.0.1:{self.proxy_port}"
        env = {}
        for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"):
            env[name] = env[name.lower()] = url
        env["NO_PROXY"] = env["no_proxy"] = NO_PROXY
        return env

    def join(self, pid: int) -> None:
        """Make the proxy's listeners in the network namespace of the sandbox whose first process is
        `pid` and hand them to the proxy (bwrap holds the tool until this returns; it raises when
        they cannot be made, and the sandbox is killed)."""
        from agentbox.core.sandbox import netns

        if self.proxy is None:
            raise RuntimeError("the turn's proxy is not serving")
        ports = [(self.proxy_port, False), *((p, True) for p in self.rules.loopback_ports)]
        wanted = [(family, host, port, fixed) for port, fixed in ports for family, host in LOOPBACK]
        made = netns.listen_in(pid, [(family, host, port) for family, host, port, _fixed in wanted])
        self.proxy.adopt([(listener, (host, port) if fixed else None)
                          for listener, (_family, host, port, fixed) in zip(made, wanted, strict=True)
                          if listener is not None])

    def summary(self) -> dict[str, Any]:
        """The turn record's `network`: what went through, what was refused, the allowlist."""
        seen = self.proxy.snapshot() if self.proxy is not None else {"mode": "proxy", "connections": 0,
                                                                       "denied_total": 0, "denied": []}
        return {**seen, "allowed": [str(rule) for rule in self.rules.rules]}

    def remove(self) -> None:
        """Nothing is left on the host after the turn (kept for the callers' clean-up path)."""


def join(plan: EgressPlan | None) -> Callable[[int], None] | None:
    """`launch`'s `before_exec` for a turn with this plan (None without one)."""
    return plan.join if plan is not None else None


def model_rules(info: ProfileInfo, runtime_env: Mapping[str, str]) -> list[Rule]:
    """The tool's model endpoint as rules: the base URLs its profile names, else the vendor's hosts."""
    from agentbox.core.tools import TOOL_TABLE

    rules: list[Rule] = []
    for key, value in sorted(runtime_env.items()):
        if key.endswith("_BASE_URL"):
            rule = rule_for_url(value, f"runtime.env {key}")
            if rule is not None:
                rules.append(rule)
        elif key == "OPENCODE_CONFIG_CONTENT":
            rules += _urls_in(value, f"runtime.env {key}")
    for name in CONFIG_FILES.get(info.tool, ()):
        path = info.config_dir / name
        with contextlib.suppress(OSError):
            if path.is_file() and not path.is_symlink():
                with path.open("rb") as handle:
                    text = handle.read(MAX_CONFIG_BYTES).decode("utf-8", "replace")
                rules += _urls_in(text, f"{info.tool} {name}")
    if not rules:
        tool = TOOL_TABLE.get(info.tool)
        rules = [Rule(host, (443,), f"{info.tool}'s default") for host in (tool.model_hosts if tool else ())]
    return rules


def _urls_in(text: str, source: str) -> list[Rule]:
    """The base URLs named in a config text, commented-out lines (`#`, `//`) left out."""
    lines = (line for line in text.splitlines() if not line.lstrip().startswith(("#", "//")))
    return [rule for line in lines for match in _BASE_URL.finditer(line)
            if (rule := rule_for_url(match.group(1), source))]


def profile_rules(info: ProfileInfo, runtime_env: Mapping[str, str], granted: Sequence[str] = ()) -> Allowlist:
    """The whole allowlist of a profile's sandbox (its entries were checked when it loaded), with the
    entries agentbox itself grants the turn (`granted`: the trace collector)."""
    policy = info.profile.sandbox
    extra = [parse_entry(entry, "sandbox.allow") for entry in (policy.allow if policy != "none" else [])]
    extra += [parse_entry(entry, "telemetry") for entry in granted]
    return allowlist([*model_rules(info, runtime_env), *extra])


PACKAGE_REGISTRIES: tuple[str, ...] = (
    "pypi.org", "files.pythonhosted.org", "registry.npmjs.org", "registry.yarnpkg.com", "crates.io",
    "static.crates.io", "index.crates.io", "proxy.golang.org", "sum.golang.org", "rubygems.org",
    "repo.maven.apache.org", "github.com", "codeload.github.com", "objects.githubusercontent.com",
)
"""What crew.yaml's setup command and a `network: true` check reach without asking: the public
package registries (https), so `npm ci` or `pip install -e .` works; `allow:` adds more."""


def crew_rules(allow: list[str], source: str) -> Allowlist:
    """The allowlist of a command crew.yaml gives (setup, check): the registries and its `allow`.

    Its entries were checked when crew.yaml loaded (never loopback, which the proxy also
    refuses for any name that is not an explicit loopback entry)."""
    rules = [Rule(host, (443,), "package registry") for host in PACKAGE_REGISTRIES]
    return allowlist([*rules, *(parse_entry(entry, source) for entry in allow)])


def plan(info: ProfileInfo, runtime_env: Mapping[str, str], granted: Sequence[str] = ()) -> EgressPlan:
    """A turn's network plan."""
    return plan_for(profile_rules(info, runtime_env, granted))


def plan_for(rules: Allowlist) -> EgressPlan:
    """A network plan serving `rules`."""
    port = PROXY_PORT
    while port in rules.loopback_ports:
        port += 1
    return EgressPlan(rules, port)


@contextlib.contextmanager
def serving(plan: EgressPlan | None) -> Iterator[EgressPlan | None]:
    """The plan's proxy listening for the block (nothing for a turn without one)."""
    if plan is None:
        yield None
        return
    from agentbox.core.sandbox.egress_proxy import DEFER_S, EgressProxy

    proxy = EgressProxy(plan.rules)
    proxy.start(defer_s=0.0 if "asyncio" in sys.modules else DEFER_S)  # a blocking caller: see `spawned`
    plan.proxy = proxy
    try:
        yield plan
    finally:
        proxy.stop()


def spawned(plan: EgressPlan | None) -> None:
    """The turn's process has been spawned: its proxy may import what it serves with (asyncio)
    without delaying the spawn (a blocking caller's proxy waits for this, at most DEFER_S)."""
    if plan is not None and plan.proxy is not None:
        plan.proxy.begin()


def denied_line(network: object) -> str | None:
    """One line for a person about what a turn's network was refused; None when nothing was."""
    if not isinstance(network, Mapping) or not isinstance(network.get("denied_total"), int) \
            or not network["denied_total"]:
        return None
    denied = [d for d in network.get("denied") or [] if isinstance(d, Mapping)]
    shown = ", ".join(f"{d.get('target')} ({d.get('reason')}"
                      f"{', ×' + str(d.get('count')) if isinstance(d.get('count'), int) and d['count'] > 1 else ''})"
                      for d in denied[:5])
    more = len(denied) - 5
    return (f"network: {network['denied_total']} connection(s) refused by the sandbox's allowlist: {shown}"
            + (f" and {more} more" if more > 0 else "") + " (add a host to the profile's sandbox.allow to open it)")
