"""Where a sandboxed agent's network may go: allowlist entries, parsed and matched (pure).

A sandbox with network has its own network namespace with loopback only; everything it
sends leaves through agentbox's egress proxy on the host (`agentbox.core.sandbox.egress_proxy`),
which connects only to what this allowlist permits. An entry is `host`, `host:port`,
`*.domain[:port]` (any name under domain, not domain itself) or an IP literal (`[::1]:8080`
for IPv6 with a port). Without a port an entry allows 443 and 80. A loopback entry
(`localhost`, `127.x.x.x`, `::1`) must name its port: it opens that one port of the host's
loopback and nothing else; a non-loopback entry never reaches loopback, whatever its name
resolves to.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

DEFAULT_PORTS: tuple[int, ...] = (443, 80)
"""Ports an entry without a port allows."""

_LABEL = r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)"
_HOSTNAME = re.compile(rf"^(\*\.)?{_LABEL}(\.{_LABEL})*\.?$")
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})


def _ip_address(text: str):  # type: ignore[no-untyped-def]
    """`ipaddress.ip_address`, imported when a host is looked at (a turn without network needs none)."""
    import ipaddress

    return ipaddress.ip_address(text)


def is_loopback(host: str) -> bool:
    """The host names this machine's own loopback (`localhost`, 127.0.0.0/8, ::1)."""
    name = host.strip("[]").lower().rstrip(".")
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        return _ip_address(name).is_loopback
    except ValueError:
        return False


def never_reached(address: str) -> bool:
    """An address no non-loopback rule may connect to: loopback, unspecified or link-local (the cloud
    metadata service), IPv4-mapped IPv6 (`::ffff:127.0.0.1`) and NAT64/6to4 forms read as the IPv4
    address they carry."""
    import ipaddress

    ip = ipaddress.ip_address(address.strip("[]").split("%", 1)[0])
    carried: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = [ip]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            carried.append(ip.ipv4_mapped)
        if ip.sixtofour is not None:
            carried.append(ip.sixtofour)
        if ip in ipaddress.IPv6Network("64:ff9b::/96"):
            carried.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return any(a.is_loopback or a.is_unspecified or a.is_link_local for a in carried)


def is_ip(host: str) -> bool:
    """The host is an IP literal (v4, or v6 with or without brackets)."""
    try:
        _ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Rule:
    """One allowlist entry: a host (or `*.domain`) and the ports it opens."""

    host: str
    """Lower-case host name, IP literal without brackets, or `*.domain`."""
    ports: tuple[int, ...]
    source: str = ""
    """Where the entry comes from (`sandbox.allow`, `ANTHROPIC_BASE_URL`, …), for messages."""

    @property
    def loopback(self) -> bool:
        """The rule opens a port of the host's loopback."""
        return is_loopback(self.host)

    def matches(self, host: str, port: int) -> bool:
        """`host:port` is what this rule allows."""
        if port not in self.ports:
            return False
        name = _normal(host)
        if self.loopback:
            return is_loopback(name)
        if self.host.startswith("*."):
            return name.endswith(self.host[1:]) and name != self.host[2:]
        return name == self.host

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return ",".join(f"{host}:{port}" for port in self.ports)


def _normal(host: str) -> str:
    return host.strip("[]").lower().rstrip(".")


def parse_entry(entry: str, source: str = "sandbox.allow") -> Rule:
    """The rule an allowlist entry means; ValueError with the reason when it means nothing."""
    text = entry.strip()
    if not text or any(c.isspace() or ord(c) < 32 for c in text):
        raise ValueError(f"{entry!r} is not a host[:port]: it is empty or has spaces or control characters")
    if "/" in text or "@" in text or "://" in text:
        raise ValueError(f"{entry!r} is not a host[:port]: write the host alone (no scheme, path or user), "
                         "such as `api.example.com` or `127.0.0.1:8080`")
    host, port_text = _split(text)
    if port_text is None:
        ports = DEFAULT_PORTS
    elif port_text.isdigit() and 0 < int(port_text) < 65536:
        ports = (int(port_text),)
    else:
        raise ValueError(f"{entry!r} has no valid port: a port is a number from 1 to 65535")
    name = _normal(host)
    if not is_ip(name) and not _HOSTNAME.match(name):
        raise ValueError(f"{entry!r} is not a host name or IP address")
    if name in ("*", "0.0.0.0", "::") or (is_ip(name) and _ip_address(name).is_unspecified):
        raise ValueError(f"{entry!r} would allow everything; name the hosts the agent needs")
    if is_loopback(name) and port_text is None:
        raise ValueError(f"{entry!r} opens the host's loopback: name the one port the agent needs "
                         "(`127.0.0.1:8080`), so no other local service becomes reachable")
    return Rule(name, ports, source)


def _split(text: str) -> tuple[str, str | None]:
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if rest and not rest.startswith(":"):
            raise ValueError(f"{text!r} is not a host[:port]")
        return host, rest[1:] if rest else None
    if text.count(":") > 1:  # a bare IPv6 address
        return text, None
    host, colon, port = text.partition(":")
    return host, port if colon else None


def rule_for_url(url: str, source: str) -> Rule | None:
    """The rule that lets an agent reach a base URL (`http://127.0.0.1:8080/v1`); None when it is no URL."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    try:
        return parse_entry(f"{host}:{port or (443 if parts.scheme == 'https' else 80)}", source)
    except ValueError:
        return None


@dataclass(frozen=True)
class Allowlist:
    """The rules of one sandbox: the tool's model endpoint and the profile's `sandbox.allow`."""

    rules: tuple[Rule, ...] = field(default_factory=tuple)

    def permits(self, host: str, port: int) -> Rule | None:
        """The rule that allows `host:port`, or None."""
        return next((rule for rule in self.rules if rule.matches(host, port)), None)

    @property
    def loopback_ports(self) -> tuple[int, ...]:
        """Ports of the host's loopback the rules open (served at the same port inside the sandbox)."""
        return tuple(sorted({port for rule in self.rules if rule.loopback for port in rule.ports}))

    def describe(self) -> list[str]:
        """One `host:port (source)` per rule, for `profile show` and the turn record."""
        return [f"{rule} ({rule.source})" for rule in self.rules]


def allowlist(rules: Iterable[Rule]) -> Allowlist:
    """An allowlist of `rules`, duplicates dropped, in order."""
    return Allowlist(tuple(dict.fromkeys(rules)))
