"""The user's own settings: `$AGENT_BOX_HOME/config.yaml` (`agentbox schema config`).

Unlike crew.yaml, which comes with a repository and is untrusted, this file is written by
the person running agentbox, so it is the only place that may name commands to run on
the host (hooks) and where to send notifications (a webhook, whose URL and headers may
name environment variables as `${VAR}`, resolved when a notification is sent). It is
checked like crew.yaml: unknown keys and wrong types are errors naming the file, line and
field (exit 2). A missing or empty file means the defaults. Later user-level settings
(editor, theme) belong here too.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, Field, model_validator

from agentbox.core import paths
from agentbox.core.config.models import MIN_SECONDS, Strict, validate_document
from agentbox.core.config.secrets import reference_problem
from agentbox.core.sandbox.scopes import has_control_character

CONFIG_FILE = "config.yaml"
SCHEMA_HINT = "`agentbox schema config` prints the full schema; docs/notifications.md explains it"
MAX_HOOK_S = 3600.0
"""Longest time a hook may be given (an hour): beyond it a number is a mistake."""


def config_path() -> Path:
    """Where the user's settings live: `$AGENT_BOX_HOME/config.yaml`."""
    return paths.agent_box_home() / CONFIG_FILE


def _referencing(value: str) -> str:
    problem = reference_problem(value)
    if problem:
        raise ValueError(problem)
    if has_control_character(value):
        raise ValueError("contains a control character")
    return value


Referencing = Annotated[str, AfterValidator(_referencing)]
"""Text that may name environment variables: `${VAR}`, `${VAR:-default}`, `$$` for `$`."""


def _url(value: str) -> str:
    _referencing(value)
    if not value.startswith(("http://", "https://", "${")):
        raise ValueError(f"{value[:60]!r} is not an http:// or https:// URL")
    return value


def _command(value: str | list[str]) -> str | list[str]:
    parts = [value] if isinstance(value, str) else value
    if not parts or not parts[0].strip():
        raise ValueError("the command is empty")
    if any("\0" in part for part in parts):
        raise ValueError("the command contains a NUL character")
    return value


def _endpoint(value: str) -> str:
    if has_control_character(value) or not value.startswith(("http://", "https://")) or value[-3:] == "://":
        raise ValueError(f"{value[:60]!r} is not an http:// or https:// URL")
    return value


HookCommand = Annotated[str | list[str], AfterValidator(_command)]
"""A shell command line (run with /bin/sh -c), or an argv list run as it is."""


class Webhook(Strict):
    """Where to POST each notification as JSON, and how hard to try."""

    url: Annotated[str, AfterValidator(_url), Field(max_length=2048)]
    """The http(s) URL to POST to; may name variables (`https://hooks.slack.com/services/${SLACK_HOOK}`)."""
    headers: dict[str, Referencing] = Field(default_factory=dict)
    """Extra request headers (`Authorization: Bearer ${NTFY_TOKEN}`); values may name variables."""
    timeout_s: float = Field(default=10.0, ge=MIN_SECONDS, le=300)
    """How long one attempt may take, in seconds (1 to 300)."""
    retries: int = Field(default=3, ge=0, le=10)
    """How many more attempts after a failed one (a network error, a timeout, HTTP 5xx, 408 or 429)."""


def _url_alone(value: object) -> object:
    return {"url": value} if isinstance(value, str) else value


class Notify(Strict):
    """How agentbox tells the person that a run needs them, ended or failed."""

    bell: bool = True
    """Ring the terminal bell with the banner of a foreground `agentbox run`."""
    desktop: bool = True
    """Show a desktop notification (freedesktop, through `notify-send`) where the desktop offers one."""
    webhook: Annotated[Webhook | None, BeforeValidator(_url_alone, json_schema_input_type=str | Webhook | None)] = None
    """POST each notification as JSON to this URL (ntfy, Slack incoming webhooks, ...): a URL, or a
    mapping with `url`, `headers`, `timeout_s` and `retries`."""


class Hooks(Strict):
    """Commands run on the host when a run needs the person; the notification is their stdin (JSON)."""

    on_checkpoint: HookCommand | None = None
    """Run when a checkpoint opens: a question, a plan or task waiting for approval, a budget pause."""
    on_run_end: HookCommand | None = None
    """Run when a run ends: done, failed or cancelled."""
    on_failure: HookCommand | None = None
    """Run when a run fails, is circuit-broken (budget spent), blocked, or paused by a full disk."""
    timeout_s: float = Field(default=30.0, ge=MIN_SECONDS, le=MAX_HOOK_S)
    """How long a hook may run, in seconds (1 to 3600); then its whole process group is killed (and that is logged)."""


PerMillion = Annotated[float, Field(ge=0, le=100_000)]
"""US dollars per million tokens."""


class ModelPrice(Strict):
    """What one model costs, in US dollars per million tokens (corrects or adds to the shipped price table)."""

    input: PerMillion
    """Input tokens not served from the prompt cache."""
    output: PerMillion
    """Output tokens."""
    cached_input: PerMillion | None = None
    """Input tokens read from the prompt cache (default: the `input` price)."""
    cache_write: PerMillion | None = None
    """Input tokens written to the prompt cache (default: the `input` price)."""
    reasoning: PerMillion | None = None
    """Reasoning tokens, when the tool reports them apart (default: the `output` price)."""


ModelName = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@-]*$")]


class Telemetry(Strict):
    """Where agentbox sends OpenTelemetry traces of runs and turns (the standard OTEL_* variables win)."""

    endpoint: Annotated[str, AfterValidator(_endpoint), Field(max_length=2048)] | None = None
    """The OTLP/HTTP collector's base URL (`http://127.0.0.1:4318`); spans go to its `/v1/traces`. None: off."""
    headers: dict[str, Referencing] = Field(default_factory=dict)
    """Request headers for agentbox's own exports (`Authorization: Bearer ${OTLP_TOKEN}`); never given to agents."""
    service_name: str = Field(default="agentbox", min_length=1, max_length=200)
    """The `service.name` of agentbox's spans."""
    tool_telemetry: bool = True
    """Let Claude Code and Codex export their own telemetry under each turn's span (through the sandbox's
    allowlist, to the collector only)."""

def _host_port(value: str) -> str:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536 or has_control_character(value):
        raise ValueError("must be HOST:PORT, such as 10.0.0.5:6379")
    return value


def _readable_file(value: str) -> str:
    path = Path(value).expanduser()
    if not path.is_absolute():
        raise ValueError(f"{value[:200]!r} is not an absolute path")
    if not path.is_file() or not os.access(path, os.R_OK):
        raise ValueError(f"{str(path)[:200]!r} is not a readable file")
    return str(path)


ReadableFile = Annotated[str, AfterValidator(_readable_file)]
"""An absolute path (`~` expanded) to a file that exists and can be read."""


class RayTls(Strict):
    """The certificates of a Ray cluster whose processes talk over TLS (RAY_USE_TLS, `docs/scale.md`)."""

    ca_cert: ReadableFile
    """The CA that signed every node's certificate (RAY_TLS_CA_CERT)."""
    server_cert: ReadableFile
    """This machine's certificate, signed by `ca_cert` (RAY_TLS_SERVER_CERT)."""
    server_key: ReadableFile
    """Its private key (RAY_TLS_SERVER_KEY); keep it readable by you only."""

    def env(self) -> dict[str, str]:
        """The variables Ray reads to speak TLS."""
        return {"RAY_USE_TLS": "1", "RAY_TLS_CA_CERT": self.ca_cert, "RAY_TLS_SERVER_CERT": self.server_cert,
                "RAY_TLS_SERVER_KEY": self.server_key}


class Runner(Strict):
    """Where turns run and when this machine has room for one more (`docs/scale.md`)."""

    kind: Literal["local", "ray"] = "local"
    """`local`: every turn runs on this machine; `ray`: each turn runs on a node of the Ray cluster at `address`."""
    address: Annotated[str, AfterValidator(_host_port)] | None = None
    """`ray`: the cluster's GCS address, `HOST:PORT` (the head's `ray start --head --port`)."""
    cpus_per_turn: float = Field(default=1.0, gt=0, le=1024)
    """`ray`: the CPUs each turn asks the cluster for."""
    reserve_mb: float = Field(default=512, ge=0, le=1 << 22)
    """Memory (MB) kept free for the machine itself: a turn starts only when its need fits beside it."""
    max_load_per_cpu: float | None = Field(default=8.0, gt=0, le=1024)
    """No turn starts while the 1-minute load average per core is above this; null: the load never holds one back."""
    tls: RayTls | None = None
    """`ray`: the cluster speaks TLS; agentbox talks to it with these certificates."""

    @model_validator(mode="after")
    def _ray_has_an_address(self) -> Runner:
        if self.kind == "ray" and self.address is None:
            raise ValueError("kind: ray needs address: HOST:PORT (the cluster's head)")
        if self.kind != "ray" and self.tls is not None:
            raise ValueError("tls: is for kind: ray (the certificates of the Ray cluster)")
        return self

class UserConfig(Strict):
    """$AGENT_BOX_HOME/config.yaml: the person's own settings (never read from a project)."""

    prices: dict[ModelName, dict[ModelName, ModelPrice]] = Field(default_factory=dict)
    """Vendor (anthropic, openai, or any name) → model id → its price per million tokens, over the price
    table shipped with agentbox (a dated snapshot): `anthropic: {claude-sonnet-4-5: {input: 3, output: 15}}`."""

    notify: Notify = Field(default_factory=Notify)
    """Notifications: terminal bell, desktop, webhook."""
    hooks: Hooks = Field(default_factory=Hooks)
    """Commands run on the host when a run needs the person, ends or fails."""
    telemetry: Telemetry | None = None
    """OpenTelemetry traces (off unless an endpoint is set here or in OTEL_EXPORTER_OTLP_ENDPOINT)."""
    runner: Runner = Field(default_factory=Runner)
    """Where turns run, and the room this machine keeps (memory, load)."""


def load_user_config(path: Path | None = None) -> UserConfig:
    """Read and validate the user's config.yaml; the defaults when it is missing or empty.

    Errors are ConfigErrors with the file, line and field (exit 2).
    """
    path = path or config_path()
    if not os.path.lexists(path):
        return UserConfig()
    from agentbox.core.yaml_io import load_yaml  # ruamel only when there is a config.yaml to read

    document = load_yaml(path)
    if document is None:
        return UserConfig()
    return validate_document(UserConfig, document, path, document, schema_hint=SCHEMA_HINT)
