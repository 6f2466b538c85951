"""`agentbox profile test`: one real turn through a profile, and a one-line diagnosis.

Before the turn, what can be known without the tool is checked and reported at once: a
variable the profile references but the shell does not set, a missing CLI, and the
model endpoint the profile names (a short TCP connect, so a server that is down is
reported in seconds, not after the tool's own retries). Then one turn ("Reply with OK.")
runs in the sandbox like any other; its failure text is sorted into the common causes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import socket
import stat
import tempfile
import time
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from agentbox.core import paths
from agentbox.core.config import secrets
from agentbox.core.config.profiles import ProfileInfo, resolve
from agentbox.core.errors import AgentboxError, ConfigError

PROMPT = "Reply with OK."
CONNECT_TIMEOUT_S = 3.0
"""How long the endpoint probe waits for a TCP connection."""
DEFAULT_TURN_TIMEOUT_S = 90.0

Problem = Literal["no_network", "key_missing", "cli_missing", "endpoint_unreachable", "not_logged_in", "auth_failed",
                  "unknown_model", "vendor_host", "network_refused", "timeout", "sandbox", "error"]

GUIDE = "docs/real-agents.md"

#: Failure text → cause, first match wins (lower-cased text of the tool's error and output).
_CAUSES: list[tuple[Problem, re.Pattern[str]]] = [
    ("key_missing", re.compile(r"missing environment variable|api key is missing|no api key|api_key.*not set")),
    ("not_logged_in", re.compile(r"not logged in|please run /login|/login|not authenticated|login required|codex login")),
    ("auth_failed", re.compile(r"invalid api key|invalid x-api-key|authentication_error|unauthori[sz]ed|\b401\b|\b403\b"
                               r"|forbidden|incorrect api key|invalid_api_key")),
    ("unknown_model", re.compile(r"model.{0,40}(not found|does not exist|not exist|unknown|not available|not supported)"
                                 r"|unknown model|model_not_found|providermodelnotfound|invalid model")),
    ("endpoint_unreachable", re.compile(r"connection refused|econnrefused|unable to connect|failed to connect"
                                        r"|connect error|connection error|error sending request|connection reset")),
    ("vendor_host", re.compile(r"getaddrinfo|enotfound|eai_again|could not resolve|name resolution|dns error"
                               r"|onboarding|network is unreachable|enetunreach")),
]

_ADVICE: dict[Problem, str] = {
    "no_network": "set `sandbox.network: true` in the profile (its tool must reach the model), then test again",
    "key_missing": "export the variable in the shell that runs agentbox",
    "cli_missing": "install the CLI (scripts/install-clis.sh) or set runtime.command",
    "endpoint_unreachable": "start the server, or fix the base URL in the profile",
    "not_logged_in": "log in once with `agentbox launch {name}`, or give the profile an API key",
    "auth_failed": "the endpoint refused the credentials: check the key the profile passes",
    "unknown_model": "pick a model the endpoint serves (runtime.model or the tool's config)",
    "vendor_host": "the CLI wants its vendor's servers (login, onboarding, model list): log in with "
                   "`agentbox launch {name}` or point it at your endpoint",
    "network_refused": "add the host the tool needs to `sandbox.allow` in the profile (or name the endpoint "
                       "in its env or config, which allows it)",
    "timeout": "no answer in time: is the endpoint slow or waiting on a login?",
    "sandbox": "run `agentbox doctor`",
    "error": "see the turn log",
}


@dataclass
class ProfileTestReport:
    """What one test turn showed about a profile."""

    profile: str
    tool: str
    ok: bool
    diagnosis: str
    """One line: what happened, or the cause of the failure and what to do."""
    problem: Problem | None = None
    endpoint: str | None = None
    """The model endpoint the profile names (None: the tool's default)."""
    reachable: bool | None = None
    """A TCP connection to the endpoint succeeded (None: not probed)."""
    authenticated: bool | None = None
    """The tool got an answer from the model (None: not known)."""
    model: str | None = None
    """The model the profile asks for, as configured (None: the tool's default)."""
    model_used: str | None = None
    """The model the tool said it used in the test turn (None: its output does not say)."""
    session_id: str | None = None
    native_id: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    latency_s: float | None = None
    text: str = ""
    log_path: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready data (`profile test --json`)."""
        return asdict(self)


# ----------------------------------------------------------------------------- what the profile names


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _codex(info: ProfileInfo) -> tuple[str | None, str | None]:
    try:
        config = tomllib.loads((info.config_dir / "config.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return None, None
    provider = config.get("model_provider")
    providers = config.get("model_providers") or {}
    url = providers.get(provider, {}).get("base_url") if isinstance(providers, dict) and provider else None
    return (str(url) if url else None), (str(config["model"]) if config.get("model") else None)


def _read_jsonc(path: Path) -> dict[str, Any]:
    """A JSON-with-comments file (opencode.jsonc): // and /* */ comments outside strings removed."""
    try:
        text = path.read_text()
    except OSError:
        return {}
    text = re.sub(r'("(?:\\.|[^"\\])*")|//[^\n]*|/\*.*?\*/', lambda m: m.group(1) or "", text, flags=re.S)
    text = re.sub(r",(\s*[}\]])", r"\1", text)  # trailing commas
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _opencode(info: ProfileInfo, env: dict[str, str]) -> tuple[str | None, str | None]:
    config = _read_json(info.config_dir / "opencode.json") or _read_jsonc(info.config_dir / "opencode.jsonc")
    if "OPENCODE_CONFIG_CONTENT" in env:
        with contextlib.suppress(ValueError):
            config = {**config, **json.loads(env["OPENCODE_CONFIG_CONTENT"])}
    model = config.get("model") if isinstance(config.get("model"), str) else None
    providers = config.get("provider") if isinstance(config.get("provider"), dict) else {}
    chosen = providers.get(model.split("/", 1)[0]) if model and "/" in model else None
    candidates = [chosen] if isinstance(chosen, dict) else [p for p in providers.values() if isinstance(p, dict)]
    for provider in candidates:
        url = (provider.get("options") or {}).get("baseURL")
        if url:
            return str(url), model
    return None, model


def _hermes(info: ProfileInfo, env: dict[str, str]) -> tuple[str | None, str | None]:
    from agentbox.core.yaml_io import load_yaml

    try:
        config = load_yaml(info.config_dir / "config.yaml")
    except (ConfigError, OSError):
        config = None
    model = config.get("model") if isinstance(config, dict) else None
    if isinstance(model, dict):
        url = model.get("base_url") or env.get("CUSTOM_BASE_URL")
        return (str(url) if url else None), (str(model["default"]) if model.get("default") else None)
    return env.get("CUSTOM_BASE_URL"), (str(model) if isinstance(model, str) else None)


def endpoint_and_model(info: ProfileInfo, env: dict[str, str]) -> tuple[str | None, str | None]:
    """The base URL and model the profile's tool is configured with (None: the tool's defaults)."""
    url: str | None = None
    model: str | None = None
    if info.tool == "claude":
        url = env.get("ANTHROPIC_BASE_URL")
    elif info.tool == "codex":
        url, model = _codex(info)
    elif info.tool == "opencode":
        url, model = _opencode(info, env)
    elif info.tool == "hermes":
        url, model = _hermes(info, env)
    if url is None:
        url = next((v for k, v in env.items() if k.endswith("_BASE_URL") and v), None)
    return url, info.profile.runtime.model or model


def probe(url: str, timeout_s: float = CONNECT_TIMEOUT_S) -> str | None:
    """Why a TCP connection to the URL's host:port fails, or None when it connects."""
    parts = urlsplit(url)
    if not parts.hostname:
        return f"{url!r} is not a URL"
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return f"{url!r} has a bad port"
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout_s):
            return None
    except TimeoutError:
        return f"no answer from {parts.hostname}:{port} within {timeout_s:g} s"
    except OSError as exc:
        return f"{exc.strerror or exc} ({parts.hostname}:{port})"


def _one_account(*parts: str | None) -> str:
    """The failure's texts joined, each said once (tools often repeat their error in the result text)."""
    said: list[str] = []
    for part in (p.strip() for p in parts if p and p.strip()):
        if any(part in earlier for earlier in said):
            continue
        said = [earlier for earlier in said if earlier not in part] + [part]
    return " ".join(said)


def classify(text: str) -> Problem | None:
    """The common cause a tool's failure text names, or None."""
    lowered = text.lower()
    return next((problem for problem, pattern in _CAUSES if pattern.search(lowered)), None)


# ----------------------------------------------------------------------------- the test


def _failed(report: ProfileTestReport, problem: Problem, what: str) -> ProfileTestReport:
    advice = _ADVICE[problem].format(name=report.profile)
    report.ok, report.problem = False, problem
    report.diagnosis = f"{problem.replace('_', ' ')}: {what}; {advice} (see {GUIDE})"
    return report


def check_profile(name: str, *, timeout_s: float = DEFAULT_TURN_TIMEOUT_S) -> ProfileTestReport:
    """Check profile `name` and run one turn through it; never raises for the profile's faults."""
    from agentbox.core.runtimes import find_executable

    info = resolve(name)
    report = ProfileTestReport(profile=info.name, tool=info.tool, ok=False, diagnosis="")
    try:
        env = secrets.resolve_env(info)
    except ConfigError as exc:
        return _failed(report, "key_missing", exc.message)
    hide = secrets.secret_values(info)
    report.endpoint, report.model = endpoint_and_model(info, env)
    if info.tool != "scripted" and info.profile.sandbox.network is False:
        report.reachable = False
        return _failed(report, "no_network", "the profile has no network (sandbox.network: false), so its tool "
                                             "cannot reach any model")
    if find_executable(info.tool, info.profile.runtime.command) is None:
        return _failed(report, "cli_missing", f"{info.profile.runtime.command or info.tool} is not on PATH")
    if report.endpoint:
        problem = probe(report.endpoint)
        report.reachable = problem is None
        if problem:
            return _failed(report, "endpoint_unreachable", f"{report.endpoint}: {problem}")
    return _turn(info, report, timeout_s, hide)


def _remove_tool_traces(info: ProfileInfo, workdir: Path) -> None:
    """Take back what the tool kept about the test's throwaway directory in the profile's config.

    claude keeps one folder per working directory (`projects/<the path, every other
    character than a letter or digit made a dash>`); the test's would pile up, one per test.
    """
    if info.tool != "claude":
        return
    folder = info.config_dir / "projects" / re.sub(r"[^A-Za-z0-9]", "-", str(workdir))
    with contextlib.suppress(OSError):
        if stat.S_ISDIR(os.lstat(folder).st_mode):  # a real folder, never a link the tool left there
            shutil.rmtree(folder)


def _turn(info: ProfileInfo, report: ProfileTestReport, timeout_s: float, hide: list[str]) -> ProfileTestReport:
    from agentbox.core.agents.invoke import Agent, invoke
    from agentbox.core.agents.sessions import SessionStore

    workdir = Path(tempfile.mkdtemp(prefix=f"agentbox-test-{info.name}-"))
    agent = Agent(profile=info, label=f"profile:{info.name}", cwd=workdir,
                  sessions=SessionStore(paths.global_sessions_dir()))
    started = time.monotonic()
    try:
        result = asyncio.run(invoke(agent, PROMPT, timeout_s=timeout_s))
    except AgentboxError as exc:
        return _failed(report, "sandbox", secrets.mask(exc.message, hide))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        _remove_tool_traces(info, workdir)
    report.latency_s = round(time.monotonic() - started, 2)
    report.session_id, report.native_id = result.session_id, result.native_id
    report.usage, report.log_path = result.usage.as_dict(), result.log_path
    report.text = secrets.mask(result.text.strip()[:400], hide)
    report.model_used = result.model
    if result.ok:
        report.ok, report.authenticated = True, True
        report.reachable = True if report.endpoint else report.reachable
        model = result.model or report.model or "the tool's default model"
        report.diagnosis = (f"ok: {info.tool} answered {report.text[:60]!r} with {model} in {report.latency_s:g} s "
                            f"(tokens in {result.usage.input_tokens}, out {result.usage.output_tokens})")
        return report
    failure = secrets.mask(_one_account(result.error, result.text), hide)
    if result.error_kind == "timeout":
        return _failed(report, "timeout", failure[:200])
    if result.error_kind == "spawn_failed":
        return _failed(report, "sandbox", failure[:200])
    problem = classify(failure) or "error"
    refused = [d.get("target") for d in (result.network or {}).get("denied") or [] if isinstance(d, dict)]
    if refused and problem in ("error", "vendor_host"):  # no cause of its own, and the sandbox refused a host
        return _failed(report, "network_refused", "the sandbox's allowlist refused " + ", ".join(map(str, refused[:5])))
    if problem in ("not_logged_in", "auth_failed", "key_missing"):
        report.authenticated = False
    first_line = next((line.strip() for line in failure.splitlines() if line.strip()), f"{result.error_kind}")
    return _failed(report, problem, first_line[:200])
