"""Pydantic models of agentbox's user-written files: profile.yaml, crew.yaml, graphs.

Every field has a docstring: they become the descriptions of `agentbox schema`. Unknown
keys are errors, reported with the file, the line and the valid keys.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agentbox.core.errors import ConfigError
from agentbox.core.yaml_io import load_yaml, position

Tool = Literal["claude", "codex", "opencode", "hermes", "scripted"]
TOOLS: tuple[str, ...] = ("claude", "codex", "opencode", "hermes", "scripted")
Mode = Literal["sequential", "hierarchical", "group_chat", "handoff", "graph"]
MODES: tuple[str, ...] = ("sequential", "hierarchical", "group_chat", "handoff", "graph")

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


class Strict(BaseModel):
    """Base of every config model: unknown keys are errors; field docstrings document."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, frozen=True)


# ----------------------------------------------------------------------------- profile


class Runtime(Strict):
    """How the profile's agent runs."""

    tool: Tool
    """Which agent CLI runs this profile: claude, codex, opencode, hermes or scripted."""
    model: str | None = None
    """Model name passed to the tool (`--model`/`-m`); the tool's default when absent."""
    extra_args: list[str] = Field(default_factory=list)
    """Extra command-line arguments appended to every invocation of the tool."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables set for the tool inside the sandbox."""
    command: str | None = None
    """Path or name of the tool's executable; defaults to the tool's usual name on PATH."""
    scenario: str | None = None
    """Scripted runtime only: the scenario file driving the agent (relative to the profile dir)."""


class Resources(Strict):
    """The tool's own configuration kept inside the profile."""

    config_dir: str | None = None
    """Directory in the profile bound over the tool's config home (default: the v1 `dot-<tool>/`)."""


class SandboxPolicy(Strict):
    """What the agent's bubblewrap sandbox may reach beyond the defaults."""

    network: bool = True
    """Share the host network (needed to reach a model API, even on loopback)."""
    ro_binds: list[str] = Field(default_factory=list)
    """Extra host paths made visible read-only inside the sandbox."""
    rw_binds: list[str] = Field(default_factory=list)
    """Extra host paths made writable inside the sandbox (use sparingly)."""


class Profile(Strict):
    """profile.yaml: one employee's config pack (identity, runtime, resources, sandbox)."""

    name: str = Field(pattern=NAME_PATTERN)
    """The profile's name (its directory name under profiles/)."""
    display_name: str | None = None
    """A human-friendly name shown in lists and the TUI."""
    description: str | None = None
    """What this profile is for."""
    runtime: Runtime
    """The tool, model, arguments and environment."""
    resources: Resources = Field(default_factory=Resources)
    """Where the tool's config (credentials, settings, MCP servers, skills) lives in the profile."""
    sandbox: SandboxPolicy | Literal["none"] = Field(default_factory=SandboxPolicy)
    """Sandbox policy, or the explicit string `none` to run without bubblewrap (not recommended)."""


# ----------------------------------------------------------------------------- crew


class Role(Strict):
    """One member of the crew: a profile plus project-level overrides."""

    profile: str = Field(pattern=NAME_PATTERN)
    """Name of the system-level profile this role uses (user profile or bundled template)."""
    instructions: str | None = None
    """Markdown file (relative to .agent-box/) given to the agent on a session's first turn."""
    writes: list[str] | None = None
    """Glob patterns (relative to the project root) the role may write; `[]` = read-only; absent = whole project."""
    model: str | None = None
    """Overrides the profile's model for this project."""
    extra_args: list[str] = Field(default_factory=list)
    """Arguments appended after the profile's extra_args."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables added to the profile's, for this project."""
    description: str | None = None
    """What this role does in the crew (shown to planners and in the TUI)."""

    @property
    def read_only(self) -> bool:
        """True when the role may not write the project at all."""
        return self.writes is not None and len(self.writes) == 0


class Budget(Strict):
    """Token budgets enforced by the engine."""

    tokens_per_task: int | None = Field(default=None, gt=0)
    """Tokens one task may use; over 120% the task is paused for a human."""
    tokens_total: int | None = Field(default=None, gt=0)
    """Tokens the whole run may use; when exhausted no new work is dispatched."""


class Limits(Strict):
    """Hard limits the engine enforces in code."""

    max_workers: int = Field(default=2, ge=1, le=64)
    """How many agent turns may run at the same time."""
    task_timeout_s: float = Field(default=900, gt=0)
    """Wall-clock limit of one agent turn, in seconds; the process group is killed after it."""
    max_auto_retries: int = Field(default=2, ge=0, le=20)
    """How many times the same failure (same fingerprint) is retried before asking the human."""
    retry_max_s: float = Field(default=300, gt=0)
    """Longest total time spent backing off environment failures of one turn."""
    budget: Budget = Field(default_factory=Budget)
    """Token budgets."""


class SequentialSettings(Strict):
    """Settings of sequential mode."""

    steps: list[str] = Field(default_factory=list)
    """Roles in pipeline order; default: the roles in crew.yaml order."""


class HierarchicalSettings(Strict):
    """Settings of hierarchical mode."""

    lead: str = "lead"
    """Role that plans the tasks and writes the synthesis."""
    reviewer: str | None = None
    """Role that reviews submissions; default: the lead."""
    plan_approval: bool = False
    """Ask the human to approve the plan before dispatching it."""
    max_rounds: int = Field(default=3, ge=1)
    """How many plan/execute/review rounds the lead may run."""


class GroupChatSettings(Strict):
    """Settings of group chat mode."""

    speakers: list[str] = Field(default_factory=list)
    """Roles taking part; default: all roles."""
    selection: Literal["round_robin", "lead_selects"] = "round_robin"
    """How the next speaker is chosen."""
    lead: str | None = None
    """Role that selects the next speaker (lead_selects)."""
    max_rounds: int = Field(default=6, ge=1)
    """Stop after this many rounds of speeches."""
    done_role: str | None = None
    """Role whose explicit done signal ends the chat."""


class HandoffSettings(Strict):
    """Settings of handoff mode."""

    start: str | None = None
    """Role that answers first; default: the first role."""
    max_handoffs: int = Field(default=8, ge=1)
    """Most handoffs in one run."""
    max_ping_pong: int = Field(default=3, ge=1)
    """Most back-and-forth handoffs between the same two roles before asking the human."""


class GraphSettings(Strict):
    """Settings of graph mode."""

    file: str | None = None
    """The work graph (relative to .agent-box/), e.g. graphs/build.yaml."""


class Crew(Strict):
    """crew.yaml: who is on the crew, how they work together, and the limits."""

    mode: Mode = "hierarchical"
    """How the crew collaborates."""
    roles: dict[str, Role]
    """Role name → role. Names are used in plans, CLI commands and the TUI."""
    limits: Limits = Field(default_factory=Limits)
    """Hard limits."""
    sequential: SequentialSettings = Field(default_factory=SequentialSettings)
    """Settings of sequential mode."""
    hierarchical: HierarchicalSettings = Field(default_factory=HierarchicalSettings)
    """Settings of hierarchical mode."""
    group_chat: GroupChatSettings = Field(default_factory=GroupChatSettings)
    """Settings of group chat mode."""
    handoff: HandoffSettings = Field(default_factory=HandoffSettings)
    """Settings of handoff mode."""
    graph: GraphSettings = Field(default_factory=GraphSettings)
    """Settings of graph mode."""

    @field_validator("roles")
    @classmethod
    def _role_names(cls, roles: dict[str, Role]) -> dict[str, Role]:
        import re

        if not roles:
            raise ValueError("a crew needs at least one role")
        for name in roles:
            if not re.match(NAME_PATTERN, name):
                raise ValueError(f"role name {name!r} must match {NAME_PATTERN}")
        return roles


# ----------------------------------------------------------------------------- loading

M = TypeVar("M", bound=BaseModel)


def _allowed_values(model: type[BaseModel], loc: tuple[str | int, ...]) -> list[str] | None:
    """The field names valid at `loc` (for unknown-key errors)."""
    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int) or current is None:
            continue
        fields = getattr(current, "model_fields", None)
        if not fields or part not in fields:
            # dict values (roles.<name>) keep the same model type of the dict's values
            if isinstance(current, type) and issubclass(current, BaseModel):
                continue
            return None
        annotation = fields[part].annotation
        current = _model_in(annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return None


def _model_in(annotation: Any) -> Any:
    """The BaseModel class inside an annotation such as `Role`, `dict[str, Role]`, `X | None`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _describe(error: dict[str, Any], model: type[BaseModel]) -> str:
    """One human sentence for one pydantic error, with the allowed values or keys."""
    kind = error["type"]
    ctx = error.get("ctx") or {}
    if kind == "extra_forbidden":
        valid = _allowed_values(model, tuple(error["loc"]))
        keys = f"; valid keys: {', '.join(valid)}" if valid else ""
        return f"unknown key{keys}"
    if kind == "literal_error":
        return f"invalid value {error.get('input')!r}; allowed: {ctx.get('expected', '')}"
    if kind == "missing":
        return "required field is missing"
    return str(error["msg"])


def validate_document(model: type[M], data: Any, file: Path, document: Any = None) -> M:
    """Validate parsed data against `model`; errors become one ConfigError naming file/line/field."""
    if data is None:
        raise ConfigError("file is empty", file=file, hint=f"see `agentbox schema` for {model.__name__}")
    if not isinstance(data, dict):
        raise ConfigError(
            f"expected a mapping at the top level, got {type(data).__name__}", file=file, line=1
        )
    try:
        return model.model_validate(_plain(data))
    except ValidationError as exc:
        errors = exc.errors()
        first = errors[0]
        loc = tuple(first["loc"])
        # literal/union errors carry a type tag at the end of loc; drop non-field parts
        field_loc = tuple(p for p in loc if not (isinstance(p, str) and ("[" in p or p.startswith("function-"))))
        line, column = position(document if document is not None else data, field_loc)
        field = ".".join(str(p) for p in field_loc) or None
        message = _describe(first, model)
        if len(errors) > 1:
            others = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {_describe(e, model)}" for e in errors[1:4]
            )
            message += f" (also: {others}{'; …' if len(errors) > 4 else ''})"
        raise ConfigError(
            message,
            file=file,
            line=line,
            column=column,
            field=field,
            hint=f"`agentbox schema {model.__name__.lower()}` prints the full schema",
        ) from None


def _plain(data: Any) -> Any:
    """Round-trip YAML containers → plain dicts/lists (pydantic wants built-ins)."""
    if isinstance(data, dict):
        return {str(k) if not isinstance(k, str) else k: _plain(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_plain(v) for v in data]
    return data


def load_model(model: type[M], path: Path) -> M:
    """Load a YAML file and validate it as `model`, with file/line/field errors."""
    document = load_yaml(path)
    return validate_document(model, document, path, document)


def json_schema(kind: Literal["profile", "crew", "graph"]) -> dict[str, Any]:
    """The JSON Schema of one of agentbox's files, for editors."""
    if kind == "graph":
        from agentbox.core.graph_model import Graph

        return Graph.model_json_schema()
    model: type[BaseModel] = Profile if kind == "profile" else Crew
    return model.model_json_schema()
