"""Health checks behind `agentbox doctor`: sandbox, agent CLIs, home, project."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from agentbox.core import paths
from agentbox.core.tools import AGENT_CLIS, TOOL_TABLE

Status = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class Check:
    """One line of the doctor's report."""

    name: str
    status: Status
    detail: str
    required: bool = True
    hint: str | None = None

    def as_dict(self) -> dict[str, object]:
        """The check as JSON-ready data."""
        return asdict(self)


def check_bwrap() -> Check:
    """bwrap is installed and can create a sandbox with the namespaces agentbox uses."""
    binary = shutil.which("bwrap")
    if binary is None:
        return Check("bwrap", "fail", "bubblewrap is not installed",
                     hint="install it: `apt-get install bubblewrap` (or dnf/pacman install bubblewrap)")
    argv = [binary, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
            "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent", "true"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("bwrap", "fail", f"{binary} could not run: {exc}")
    if proc.returncode != 0:
        return Check("bwrap", "fail", f"{binary} cannot create a sandbox here: {proc.stderr.strip()}",
                     hint="user namespaces may be disabled (sysctl kernel.unprivileged_userns_clone=1)")
    version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()
    return Check("bwrap", "ok", f"{version} at {binary}: sandbox created")


_PROBE = ("grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status; echo run=$(ls -A /run | wc -l); "
          "touch /dev/x 2>/dev/null && echo dev=rw || echo dev=ro; "
          "df -k /tmp | tail -1 | tr -s ' ' | cut -d' ' -f2 | sed 's/^/tmp_kb=/'; "
          "unshare -U true 2>/dev/null && echo userns=open || echo userns=blocked; "
          "cat /proc/net/dev 2>/dev/null | grep -c : | sed 's/^/ifaces=/'")


def check_sandbox() -> Check:
    """What agentbox's own sandbox enforces on this machine, as seen from inside one."""
    from agentbox.core.sandbox import bwrap as sandbox
    from agentbox.core.sandbox import seccomp

    binary = shutil.which("bwrap")
    if binary is None:
        return Check("sandbox", "fail", "no bwrap: nothing is enforced", hint="install bubblewrap")
    if not seccomp.supported():
        return Check("sandbox", "fail", f"no seccomp syscall table for this architecture ({os.uname().machine})")
    with tempfile.TemporaryDirectory(prefix="agentbox-doctor-") as scratch:
        root = Path(scratch)
        spec = sandbox.SandboxSpec(project_root=root, writable=(), protected=(), extra_rw=(), homes=(),
                                   hidden=(Path.home(), paths.agent_box_home()), ro_binds=(), network=False,
                                   env={"PATH": "/usr/local/bin:/usr/bin:/bin"},
                                   **sandbox.host_layout())
        argv = sandbox.bwrap_argv(spec, ["/bin/sh", "-c", _PROBE], binary)
        try:
            with sandbox.launch(argv) as launched:
                proc = subprocess.run(launched.argv, capture_output=True, text=True, timeout=20,
                                      pass_fds=launched.pass_fds, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return Check("sandbox", "fail", f"agentbox's sandbox could not start: {exc}")
    if proc.returncode != 0:
        return Check("sandbox", "fail", f"agentbox's sandbox could not start: {proc.stderr.strip()[:300]}",
                     hint="user namespaces may be disabled (sysctl kernel.unprivileged_userns_clone=1)")
    facts = dict(line.replace(":\t", "=").split("=", 1) for line in proc.stdout.splitlines() if "=" in line
                 or ":\t" in line)
    enforced = {
        "no capabilities": facts.get("CapEff", "").strip("0") == "",
        "no_new_privs": facts.get("NoNewPrivs") == "1",
        f"seccomp filter ({len(seccomp.BLOCKED_SYSCALLS)} rules)": facts.get("Seccomp") == "2",
        "no new namespaces": facts.get("userns") == "blocked",
        "host sockets hidden (/run empty)": facts.get("run") == "0",
        "/dev read-only": facts.get("dev") == "ro",
        f"/tmp bounded ({int(facts.get('tmp_kb', '0') or 0) // 1024} MiB)": 0 < int(facts.get("tmp_kb", "0") or 0)
        <= sandbox.TMPFS_SIZES["/tmp"] // 1024,
        "network off unless allowed": facts.get("ifaces") in ("1", "0"),
    }
    missing = [name for name, held in enforced.items() if not held]
    who = "root" if os.geteuid() == 0 else "an unprivileged user"
    if missing:
        return Check("sandbox", "fail", f"as {who}, NOT enforced: {', '.join(missing)}",
                     hint="report this machine's kernel and bwrap version; agents would not be contained")
    return Check("sandbox", "ok", f"as {who}: {', '.join(enforced)}; metadata (.git, .agent-box) read-only, "
                 "write scopes exact")


def _tool_version(tool: str) -> Check:
    from agentbox.core.runtimes import find_executable

    binary = find_executable(tool)
    if binary is None:
        return Check(tool, "warn", "not on PATH", required=False,
                     hint="profiles using this tool cannot run; scripts/install-clis.sh installs pinned versions")
    try:
        proc = subprocess.run([str(binary), *TOOL_TABLE[tool].version_args], capture_output=True, text=True,
                              timeout=30, stdin=subprocess.DEVNULL)
        version = (proc.stdout.strip() or proc.stderr.strip()).splitlines()[0] if proc.returncode == 0 else f"exit {proc.returncode}"
    except (OSError, subprocess.TimeoutExpired, IndexError) as exc:
        version = f"version unknown ({exc.__class__.__name__})"
    return Check(tool, "ok", f"{version} at {binary}", required=False)


def check_home() -> Check:
    """AGENT_BOX_HOME exists (or can be created) and is writable."""
    home = paths.agent_box_home()
    try:
        home.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=home, prefix=".doctor-"):
            pass
    except OSError as exc:
        return Check("home", "fail", f"{home} is not writable: {exc}",
                     hint="set AGENT_BOX_HOME to a writable directory")
    return Check("home", "ok", f"{home} is writable")


def check_profiles() -> Check:
    """Every profile in AGENT_BOX_HOME loads."""
    from agentbox.core.config import profiles
    from agentbox.core.errors import ConfigError

    errors: list[ConfigError] = []
    infos = profiles.all_profiles(errors)
    if errors:
        return Check("profiles", "warn", "; ".join(str(e) for e in errors), required=False)
    return Check("profiles", "ok", f"{len(infos)} usable: {', '.join(i.name for i in infos)}", required=False)


def check_network() -> Check:
    """No user profile shares the host's network (`network: host`) without being told what that opens."""
    from agentbox.core.config import profiles

    shared = [info.name for info in profiles.user_profiles(errors=[])
              if info.profile.sandbox != "none" and info.profile.sandbox.network == "host"]
    if shared:
        return Check("network", "warn", "sharing the host's network (`network: host`): " + ", ".join(shared)
                     + " — their agents reach every service on this machine's loopback (databases, dev servers, "
                     "`agentbox mcp --http`) and any host", required=False,
                     hint="use `network: true` (the tool's model endpoint only, through agentbox's egress proxy) "
                     "and list what else the agent needs under `sandbox.allow`")
    return Check("network", "ok", "no profile shares the host's network; sandboxes reach only their allowlist",
                 required=False)


#: Tool config files (relative to the profile's config dir) that may hold a key.
_KEY_FILES = ("config.toml", "opencode.json", ".env", "auth.json", ".credentials.json")


def check_secret_files() -> Check:
    """No user profile keeps a literal key in a file others can read."""
    from agentbox.core.config import profiles, secrets

    exposed: list[str] = []
    for info in profiles.user_profiles(errors=[]):
        candidates = [(info.directory / paths.PROFILE_FILE,
                       any(secrets.looks_like_key(k, v) for k, v in info.profile.runtime.env.items()))]
        for name in _KEY_FILES:
            file = info.config_dir / name
            if file.is_file() and not file.is_symlink():
                try:
                    holds = bool(secrets.keys_in_text(file.read_text(errors="replace")[:200_000]))
                except OSError:
                    holds = False
                candidates.append((file, holds or name in ("auth.json", ".credentials.json")))
        for file, holds_key in candidates:
            try:
                mode = file.stat().st_mode & 0o777
            except OSError:
                continue
            if holds_key and mode & 0o077:
                exposed.append(f"{file} (mode {mode:o})")
    if exposed:
        return Check("secrets", "warn", "a literal key in a file others can read: " + ", ".join(exposed),
                     required=False, hint="chmod 600 the file, or better keep the key in your environment and write "
                     "`KEY: ${KEY}` in runtime.env (docs/real-agents.md)")
    return Check("secrets", "ok", "no literal key in a file others can read", required=False)


def crew_profile_names(start: Path | None) -> list[str]:
    """The profiles the project's crew uses (every user profile when there is no project)."""
    from agentbox.core.config import profiles, project
    from agentbox.core.errors import AgentboxError

    try:
        found = paths.project_at(start) if start else paths.find_project()
        crew = project.load_crew(found).crew
    except AgentboxError:
        return [info.name for info in profiles.user_profiles(errors=[])]
    return list(dict.fromkeys(role.profile for role in crew.roles.values()))


def check_profile_turns(start: Path | None) -> list[Check]:
    """One `profile test` turn through every profile the crew uses (one at a time: they are real turns)."""
    from agentbox.core.admin.profile_check import check_profile
    from agentbox.core.errors import AgentboxError

    checks = []
    for name in crew_profile_names(start):
        try:
            report = check_profile(name)
        except AgentboxError as exc:
            checks.append(Check(f"profile {name}", "fail", exc.message, hint=exc.hint))
            continue
        checks.append(Check(f"profile {name}", "ok" if report.ok else "fail", report.diagnosis))
    return checks


def check_project(start: Path | None) -> Check:
    """The active project and whether its crew is valid."""
    from agentbox.core.config import project
    from agentbox.core.errors import AgentboxError, ProjectNotFoundError

    try:
        found = paths.project_at(start) if start else paths.find_project()
    except ProjectNotFoundError as exc:
        if start:
            return Check("project", "fail", exc.message, hint=exc.hint)
        return Check("project", "warn", "no project here", required=False, hint="`agentbox init` creates one")
    try:
        loaded = project.load_crew(found)
    except AgentboxError as exc:
        return Check("project", "fail", f"{found.root}: {exc.message}", hint=exc.hint)
    problems = project.check_references(found, loaded)
    if problems:
        return Check("project", "fail", f"{found.root}: " + "; ".join(p.message for p in problems),
                     hint=problems[0].hint)
    crew = loaded.crew
    return Check("project", "ok", f"{found.root}: crew of {len(crew.roles)} ({', '.join(crew.roles)}), mode {crew.mode}")


def check_worktrees(start: Path | None) -> Check | None:
    """Worktrees and branches runs left behind (None outside a git project)."""
    from agentbox.core import workspace
    from agentbox.core.engine.models import TERMINAL_RUN_STATES, Run
    from agentbox.core.engine.run_store import RunStore
    from agentbox.core.errors import AgentboxError

    try:
        found = paths.project_at(start) if start else paths.find_project()
        if workspace.repo_info(found.root) is None:
            return None
        runs = RunStore(found).scan()
        live = [r.id for r in runs if isinstance(r, Run) and r.status not in TERMINAL_RUN_STATES]
        left = workspace.orphans(found.root, live, known_run_ids=[r.id for r in runs])
    except AgentboxError:
        return None
    if not left:
        return Check("worktrees", "ok", "no worktree or branch left behind by a finished run", required=False)
    listed = "; ".join(f"{o.kind} {o.name} (run {o.run_id})" for o in left[:8])
    return Check("worktrees", "warn", f"{len(left)} left behind: {listed}", required=False,
                 hint="`agentbox clean --dry-run` shows what can go; `agentbox clean` removes it")


def check_traces() -> Check:
    """Whether runs are sent as OpenTelemetry traces, where, and whether the SDK for it is installed."""
    import importlib.util

    from agentbox.core.errors import AgentboxError
    from agentbox.core.telemetry import tracing as telemetry

    try:
        trace = telemetry.settings()
    except AgentboxError as exc:
        return Check("traces", "warn", exc.message, required=False, hint=exc.hint)
    if trace is None:
        return Check("traces", "ok", "off", required=False,
                     hint="OTEL_EXPORTER_OTLP_ENDPOINT or config.yaml `telemetry.endpoint` sends runs as traces")
    try:
        found = all(importlib.util.find_spec(name) is not None
                    for name in ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http"))
    except (ImportError, ValueError):
        found = False
    if not found:
        return Check("traces", "warn", f"on ({trace.source}) but the OpenTelemetry SDK is not installed",
                     required=False, hint="pip install 'agentbox[otel]'")
    return Check("traces", "ok", f"on ({trace.source}): spans go to {trace.traces_url}", required=False)


def probe_bwrap_here() -> tuple[str | None, str | None]:
    """bwrap's version once it has made a sandbox on this machine, or why it could not (run on each node)."""
    check = check_bwrap()
    return (check.detail.split(" at ")[0], None) if check.status == "ok" else (None, check.detail)


def check_runner() -> list[Check]:
    """The runner config.yaml names: nothing to check for `local`; for `ray` every node of the
    cluster (alive, the tools it offers, bubblewrap making a sandbox on it)."""
    from agentbox.core.config.user_config import load_user_config
    from agentbox.core.errors import AgentboxError

    try:
        config = load_user_config().runner
    except AgentboxError as exc:
        return [Check("runner", "fail", exc.message, hint=exc.hint)]
    if config.kind != "ray" or config.address is None:
        return []
    try:
        from agentbox.core.engine.runners.ray_runner import probe_cluster

        nodes = probe_cluster(config.address, probe_bwrap_here,
                              tls_env=config.tls.env() if config.tls is not None else None)
    except ImportError:
        return [Check("runner", "fail", "config.yaml names a Ray cluster, but ray is not installed",
                      hint="pip install 'agentbox[ray]'")]
    except AgentboxError as exc:  # the cluster cannot be reached, said so by the runner
        return [Check("runner", "fail", exc.message, hint=exc.hint)]
    except Exception as exc:  # anything else Ray raises: said too, never a traceback
        return [Check("runner", "fail", f"the Ray cluster at {config.address} cannot be reached: {exc}"[:400])]
    checks = [Check("runner", "ok", f"Ray cluster at {config.address}: {sum(n.alive for n in nodes)} node(s) alive")]
    if not any(node.alive and node.tools for node in nodes):
        checks.append(Check("runner tools", "warn", "no node of the cluster offers a tool: every turn would wait",
                            hint="join nodes with their tools, e.g. `ray start --address "
                                 f"{config.address} --resources '{{\"agentbox-tool:claude\": 4}}'`"))
    for node in nodes:
        name = f"node {node.node_id[:12]} ({node.host})"
        if node.problem == "the head: no turn runs there":
            checks.append(Check(name, "ok", "the head", required=False))
        elif node.bwrap is None:
            checks.append(Check(name, "fail", f"no turn can run there: {node.problem}",
                                hint="install bubblewrap on the node (and let it make user namespaces)"))
        else:
            tools = ", ".join(node.tools) or "none (no turn lands there)"
            checks.append(Check(name, "ok" if node.tools else "warn", f"{node.bwrap}; tools: {tools}",
                                required=False))
    return checks


def run_checks(project_dir: Path | None = None) -> list[Check]:
    """All checks; the slow ones (bwrap, tool versions) run in parallel threads."""
    # import what the threads use first: two threads importing one module graph at once can
    # trip the import system's deadlock detection
    from agentbox.core import runtimes  # noqa: F401
    from agentbox.core.sandbox import bwrap as sandbox  # noqa: F401
    from agentbox.core.sandbox import seccomp  # noqa: F401

    with ThreadPoolExecutor(max_workers=6) as pool:
        bwrap = pool.submit(check_bwrap)
        enforced = pool.submit(check_sandbox)
        tools = [pool.submit(_tool_version, tool) for tool in AGENT_CLIS]
        home = check_home()
        profiles_check = check_profiles()
        project_check = check_project(project_dir)
        secret_files = check_secret_files()
        network = check_network()
        traces = check_traces()
        worktrees = check_worktrees(project_dir) if project_check.status == "ok" else None
        runner = check_runner()
        return [bwrap.result(), enforced.result(), home, profiles_check, secret_files, network, traces, project_check,
                *([worktrees] if worktrees is not None else []), *(t.result() for t in tools), *runner]


def healthy(checks: list[Check]) -> bool:
    """False when a required check failed."""
    return not any(c.status == "fail" and c.required for c in checks)


def environment_summary() -> dict[str, str]:
    """Facts printed with the report."""
    return {"AGENT_BOX_HOME": str(paths.agent_box_home()), "uid": str(os.getuid())}
