"""Pydantic models of agentbox's user-written files: profile.yaml, crew.yaml, graphs.

Every field has a docstring: they become the descriptions of `agentbox schema`. Unknown
keys are errors, reported with the file, the line and the valid keys. Types are strict
(`"no"` is not a boolean, `true` is not a number, `.inf` is not a timeout): a crew.yaml
arrives with a cloned repository, so what it says is checked, not coerced. The paths a
crew.yaml names are checked here as text (relative, no `..`, no VCS or agentbox
metadata); where they lead on disk is checked by `agentbox.core.config.project`.
"""

from __future__ import annotations

import functools
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, ClassVar, Literal, TypeVar, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from agentbox.core.config.secrets import reference_problem
from agentbox.core.errors import ConfigError
from agentbox.core.sandbox.scopes import (
    enforceable_problem,
    has_control_character,
    protected_problem,
    scope_problem,
)
from agentbox.core.tools import Tool
from agentbox.core.validation import NAME_PATTERN, problems, short
from agentbox.core.validation import NAME_RULE as NAME_RULE

Mode = Literal["sequential", "hierarchical", "group_chat", "handoff", "graph"]
"""How a crew works (each mode's settings and state are keyed by these names)."""
MODES: tuple[Mode, ...] = get_args(Mode)
"""The mode names, in the order they are offered."""

RoleName = Annotated[str, Field(pattern=NAME_PATTERN)]

MAX_SECONDS = 7 * 24 * 3600.0
"""Longest duration a limit may name (a week): beyond it a number is a mistake."""
MIN_SECONDS = 1.0
"""Shortest timeout a limit may name (one second): no agent turn, back-off or setup command is
done sooner, so a smaller number (`0.000001`) is a mistake that would fail every turn."""


def box_path_problem(value: str, what: str) -> str | None:
    """Why `value` is refused as a file path relative to `.agent-box/`, or None (text only)."""
    if not value.strip():
        return f"the {what} path is empty"
    if has_control_character(value):
        return f"{what} {value!r} contains a control character"
    if value.startswith(("/", "~")):
        return f"{what} {value!r} must be a path relative to .agent-box/"
    if ".." in PurePosixPath(value).parts:
        return f"{what} {value!r} uses '..': it must stay inside .agent-box/"
    return None


def _scope(scope: str) -> str:
    problem = scope_problem(scope)
    if problem:
        raise ValueError(problem)
    unenforceable = enforceable_problem(scope)
    if unenforceable:
        raise ValueError(f"{unenforceable[0]}: {unenforceable[1]}")
    return scope


WriteScope = Annotated[str, AfterValidator(_scope)]
"""One write scope of a role, checked by `agentbox.core.sandbox.scopes.scope_problem`."""


def _protected(pattern: str) -> str:
    problem = protected_problem(pattern)
    if problem:
        raise ValueError(problem)
    return pattern


ProtectedPath = Annotated[str, AfterValidator(_protected)]
"""One protected path of a crew, checked by `agentbox.core.sandbox.scopes.protected_problem`."""


def _box_path(value: str | None, what: str) -> str | None:
    problem = None if value is None else box_path_problem(value, what)
    if problem:
        raise ValueError(problem)
    return value


@functools.cache
def _field_docstrings(module_name: str) -> dict[str, dict[str, str]]:
    """The attribute docstrings (`name: type` followed by a string) of every class of a module, by class name."""
    import ast
    import inspect
    import itertools
    import sys

    found: dict[str, dict[str, str]] = {}
    for node in ast.walk(ast.parse(inspect.getsource(sys.modules[module_name]))):
        if isinstance(node, ast.ClassDef):
            found[node.name] = {
                stmt.target.id: inspect.cleandoc(after.value.value)
                for stmt, after in itertools.pairwise(node.body)
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            }
    return found


def _describe_fields(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """Give each property of a model's JSON Schema its field's docstring as description.

    Read from the source only when a schema is made (pydantic's `use_attribute_docstrings`
    would parse every model's source at import, on every command).
    """
    import inspect

    properties = schema.get("properties", {})
    for klass in reversed(model.__mro__):
        if not issubclass(klass, BaseModel) or klass.__module__.startswith("pydantic"):
            continue
        for name, doc in _field_docstrings(klass.__module__).get(klass.__name__, {}).items():
            info = model.model_fields.get(name)
            if info is None or doc == inspect.cleandoc(getattr(info.annotation, "__doc__", None) or ""):
                continue  # a class var; or a model field that says what its model's docstring says
            for key in (info.alias or name, name):
                if isinstance(properties.get(key), dict):
                    properties[key].setdefault("description", doc)
                    break


class Strict(BaseModel):
    """Base of every config model: unknown keys are errors, types are not coerced, numbers
    are finite; field docstrings document (`agentbox schema`). A model's validator is built
    on its first use, not at import, so a command pays only for the models it validates."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, allow_inf_nan=False,
        defer_build=True, json_schema_extra=_describe_fields,
    )
    host_only_keys: ClassVar[tuple[str, ...]] = ()
    """Top-level keys that belong to the user's own $AGENT_BOX_HOME/config.yaml, refused here
    with a message saying so."""


# ----------------------------------------------------------------------------- profile


def _env_value(value: str) -> str:
    problem = reference_problem(value)
    if problem:
        raise ValueError(problem)
    return value


EnvValue = Annotated[str, AfterValidator(_env_value)]
"""A profile env value: text with optional `${VAR}` / `${VAR:-default}` references, `$$` for `$`."""


def _allow_entry(value: str) -> str:
    from agentbox.core.sandbox.egress import parse_entry

    parse_entry(value)  # a ValueError says what is wrong with it
    return value


AllowEntry = Annotated[str, AfterValidator(_allow_entry)]
"""One `sandbox.allow` entry, checked by `agentbox.core.sandbox.egress.parse_entry`."""


def _crew_allow_entry(value: str) -> str:
    from agentbox.core.sandbox.egress import parse_entry

    if parse_entry(value).loopback:
        raise ValueError(f"{value!r} is on this machine's loopback: crew.yaml comes with the repository, so "
                         "its commands never reach this machine's own services (a profile's sandbox.allow may)")
    return value


CrewAllowEntry = Annotated[str, AfterValidator(_crew_allow_entry)]
"""A host crew.yaml's setup command or a check may reach (never loopback: crew.yaml is the repository's)."""


class Runtime(Strict):
    """How the profile's agent runs."""

    tool: Tool
    """Which agent CLI runs this profile: claude, codex, opencode, hermes or scripted."""
    model: str | None = None
    """Model name passed to the tool (`--model`/`-m`); the tool's default when absent."""
    extra_args: list[str] = Field(default_factory=list)
    """Extra command-line arguments appended to every invocation of the tool."""
    env: dict[str, EnvValue] = Field(default_factory=dict)
    """Environment variables set for the tool inside the sandbox.

    A value may name variables of the environment agentbox runs in: `${ANTHROPIC_API_KEY}`,
    `${VAR:-default}` (the default when unset or empty); `$$` is a literal `$`. They are
    resolved at turn time and never written anywhere; an unset one stops the turn before
    any process starts. See docs/real-agents.md."""
    pass_env: list[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]] = Field(default_factory=list)
    """Variables of the environment agentbox runs in passed to the tool by name (resolved at
    turn time, never stored); an unset one stops the turn before any process starts."""
    command: str | None = None
    """Path or name of the tool's executable; defaults to the tool's usual name on PATH."""
    scenario: str | None = None
    """Scripted runtime only: the scenario file driving the agent (relative to the profile dir)."""


class Resources(Strict):
    """The tool's own configuration kept inside the profile."""

    config_dir: str | None = None
    """Directory in the profile bound over the tool's config home (default: the v1 `dot-<tool>/`)."""
    memory_mb: int | None = Field(default=None, ge=64, le=1 << 22)
    """Memory one turn of this profile may hold, in MB (64 to 4194304): a turn starts only when the
    machine has this much free, and a turn whose processes grow past it is stopped (an environment
    failure). None: the need is the most this tool's recent turns held, and no hard limit."""


class SandboxPolicy(Strict):
    """What the agent's bubblewrap sandbox may reach beyond the defaults."""

    network: bool | Literal["host"] = True
    """The agent's network. `true`: its own network namespace, where only the tool's model
    endpoint (from the profile's env and the tool's config, else the vendor's hosts) and
    `allow` are reachable, through agentbox's egress proxy; every other host, the host's
    loopback services (databases, dev servers, `agentbox mcp --http`) and abstract sockets
    are not. `false`: no network at all. `host`: this machine's own network, every host and
    every local service reachable, nothing enforced (`agentbox doctor` flags it)."""
    allow: list[AllowEntry] = Field(default_factory=list)
    """More hosts the agent may reach with `network: true`: `host`, `host:port`, `*.domain`
    or an IP (`[::1]:8080`); without a port, 443 and 80. A loopback entry (`127.0.0.1:8080`,
    `localhost:11434`) must name its port and opens that one local port, served at the same
    port on the sandbox's own loopback (a local model server)."""
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
    writes: list[WriteScope] | None = None
    """Paths or globs (relative to the project root) the role may write; `[]` = read-only; absent = whole project.

    A glob opens its literal directory (`docs/*.md` → `docs/`); a literal file opens that
    file alone, even before it exists; `dir/` names a directory."""
    model: str | None = None
    """Overrides the profile's model for this project."""
    extra_args: list[str] = Field(default_factory=list)
    """Arguments appended after the profile's extra_args."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables added to the profile's, for this project."""
    description: str | None = None
    """What this role does in the crew (shown to planners and in the TUI)."""

    @field_validator("instructions")
    @classmethod
    def _instructions_in_box(cls, instructions: str | None) -> str | None:
        return _box_path(instructions, "instructions file")

    @property
    def read_only(self) -> bool:
        """True when the role may not write the project at all."""
        return self.writes is not None and len(self.writes) == 0


class Budget(Strict):
    """Token and money budgets enforced by the engine."""

    tokens_per_task: int | None = Field(default=None, gt=0)
    """Tokens one task may use; over 120% the task is paused for a human."""
    tokens_total: int | None = Field(default=None, gt=0)
    """Tokens the whole run may use; when exhausted no new work is dispatched."""
    usd_per_task: float | None = Field(default=None, gt=0, le=1_000_000)
    """US dollars one task may cost; over 120% the task is paused for a human (turns of unknown cost not counted)."""
    usd_total: float | None = Field(default=None, gt=0, le=1_000_000)
    """US dollars the whole run may cost; when spent no new work is dispatched (turns of unknown cost not counted)."""


class Limits(Strict):
    """Hard limits the engine enforces in code."""

    max_workers: int = Field(default=2, ge=1, le=64)
    """How many tasks may be worked on at the same time (work turns; plans and reviews do not count)."""
    task_timeout_s: float = Field(default=900, ge=MIN_SECONDS, le=MAX_SECONDS)
    """Wall-clock limit of one agent turn, in seconds (1 to 604800); the process group is killed after it."""
    max_auto_retries: int = Field(default=2, ge=0, le=20)
    """How many times the same failure (same fingerprint) is retried before asking the human."""
    retry_max_s: float = Field(default=300, ge=MIN_SECONDS, le=MAX_SECONDS)
    """Longest total time spent backing off environment failures of one turn, in seconds (1 to 604800);
    on the failure ladder also of one task across all its turns and checks, until you answer retry."""
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
    reviewers: list[RoleName] = Field(default_factory=list, max_length=2)
    """Two roles that review every submission independently (`[reviewer, critic]`), their verdicts
    compared in code: agreement approves or sends back the union of their issues; a disagreement,
    a blocker only one of them raised, or an invalid verdict asks you. Empty: one reviewer (and a
    plan task with `review: double` is reviewed by `reviewer` and the lead)."""

    @field_validator("reviewers")
    @classmethod
    def _two_distinct(cls, reviewers: list[str]) -> list[str]:
        if reviewers and (len(reviewers) != 2 or reviewers[0] == reviewers[1]):
            raise ValueError("reviewers names two different roles (or none)")
        return reviewers


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

    @field_validator("file")
    @classmethod
    def _file_in_box(cls, file: str | None) -> str | None:
        return _box_path(file, "graph file")


class WorkspaceSetup(Strict):
    """How a new task worktree is made ready (worktree workspaces)."""

    model_config = ConfigDict(**Strict.model_config, validate_by_name=True, serialize_by_alias=True)

    copy_: list[Annotated[str, Field(min_length=1, max_length=400)]] = Field(default_factory=list, max_length=100,
                                                                             alias="copy")
    """Ignored files a fresh worktree lacks, as patterns relative to the project (`.env`,
    `node_modules`, `config/*.local`): copied in, as reflinks where the file system has them."""
    run: str | None = Field(default=None, min_length=1, max_length=4000)
    """A shell command run once in each new worktree, inside the sandbox (e.g. `npm ci`)."""
    timeout_s: float = Field(default=600, ge=MIN_SECONDS, le=MAX_SECONDS)
    """Longest the setup command may take, in seconds (1 to 604800)."""
    allow: list[CrewAllowEntry] = Field(default_factory=list, max_length=100)
    """Hosts the setup command may reach besides the package registries (`host`, `host:port`,
    `*.domain`), through the egress proxy; this machine's loopback and private networks never."""

    @field_validator("copy_")
    @classmethod
    def _relative(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            parts = pattern.split("/")
            if pattern.startswith("/") or ".." in parts or parts[0] in (".git", ".agent-box"):
                raise ValueError(f"{pattern!r} must be a path inside the project, not in .git or .agent-box")
        return patterns


CheckName = Annotated[str, Field(pattern=NAME_PATTERN)]
"""The name of a check (a key of crew.yaml's `checks:`)."""
GateStage = Literal["submission", "integration", "run_end"]
"""When a gate's checks run: on each writer submission, after each merge into the run's
branch, or on the run's final branch before it is delivered."""


def _project_glob(pattern: str) -> str:
    if not pattern.strip() or has_control_character(pattern):
        raise ValueError(f"{pattern!r} is not a glob")
    if pattern.startswith("/") or ".." in pattern.split("/"):
        raise ValueError(f"{pattern!r} must be a glob relative to the project")
    return pattern


ProjectGlob = Annotated[str, Field(max_length=400), AfterValidator(_project_glob)]
"""A glob relative to the project root (`src/**`, `*.py`)."""


class Check(Strict):
    """One check: a shell command the code layer runs inside a sandbox, read-only over the work it judges."""

    run: str = Field(min_length=1, max_length=4000)
    """The shell command (`sh -c`), run at the project's path over the commit it judges; exit 0 is green."""
    timeout_s: float = Field(default=600, gt=0, le=MAX_SECONDS)
    """Longest the check may take; past it its process group is killed and the check could not run."""
    paths: list[ProjectGlob] | None = Field(default=None, max_length=100)
    """Globs relative to the project: the check runs only when the work changed a file matching one
    (absent: always)."""
    network: bool = False
    """Let the check reach the package registries and the hosts in `allow`, through the egress proxy
    (off by default: a check judges the work, it fetches nothing). Never this machine's loopback."""
    allow: list[CrewAllowEntry] = Field(default_factory=list, max_length=100)
    """More hosts a `network: true` check may reach (`host`, `host:port`, `*.domain`)."""
    flaky: Literal["deny", "allow"] = "deny"
    """A red check runs once more; red then green is flaky. `allow` lets a flaky check pass (recorded
    as flaky); `deny` keeps it red."""
    memory_mb: int = Field(default=4096, ge=64, le=1 << 20)
    """Address space the check's processes may take, in MiB (an allocation beyond it fails)."""
    output_mb: int = Field(default=16, ge=1, le=1024)
    """Most output the check may print, in MiB; past it the check is killed (it could not run)."""
    scratch: list[ProjectGlob] = Field(default_factory=list, max_length=20)
    """Directories inside the project the check may write (`.pytest_cache`, `build`): each gets an
    empty private RAM disk, thrown away afterwards. Everything else of the project is read-only;
    `/tmp` and `$HOME` are private and writable."""


class Gates(Strict):
    """Which checks run when; each list runs in order and stops at the first red check."""

    submission: list[CheckName] = Field(default_factory=list, max_length=50)
    """On each writer submission, before any review: red goes back to the worker with the output."""
    integration: list[CheckName] = Field(default_factory=list, max_length=50)
    """On the run's branch after each merge of an approved task: red undoes the merge."""
    run_end: list[CheckName] = Field(default_factory=list, max_length=50)
    """On the run's final branch, before it is delivered (the delivery question shows the result)."""

    def of(self, stage: GateStage) -> list[str]:
        """The checks of `stage`, in order."""
        names: list[str] = getattr(self, stage)
        return names


class Crew(Strict):
    """crew.yaml: who is on the crew, how they work together, and the limits."""

    mode: Mode = "hierarchical"
    """How the crew collaborates."""
    roles: dict[RoleName, Role]
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
    workspace: Literal["worktree", "shared"] | None = None
    """Where writers work. `worktree`: each writer task in its own git worktree and branch,
    merged into the run's branch when approved, and into yours by `agentbox merge`.
    `shared`: everyone in the live tree. Default: `worktree` in a git repository with a
    commit, `shared` elsewhere (where `worktree` is an error)."""
    deliver: Literal["checkpoint", "manual", "merge"] = "checkpoint"
    """When a worktree run is done: `checkpoint` asks you whether to merge it into your branch
    (showing what changed), `manual` leaves it for `agentbox merge RUN`, `merge` merges it."""
    workspace_setup: WorkspaceSetup = Field(default_factory=WorkspaceSetup)
    """How a new task worktree is made ready."""
    liaison: RoleName | None = None
    """The role whose profile answers `agentbox ask` ("where are we?") from a digest of the run's
    state, read-only and in sessions of its own. Default: the lead's profile."""
    protected: list[ProtectedPath] = Field(default_factory=list, max_length=100)
    """Paths no role may write in any turn, whatever its scope (`contracts/**`, `tests/acceptance/**`):
    read-only in every sandbox, as `.git` is, so the work is judged by what its workers cannot edit.
    A directory (`dir/**`), a file, or a one-level pattern (`dir/*.snap`); a plan task whose
    `writes` reaches into one is refused."""
    checks: dict[CheckName, Check] = Field(default_factory=dict, max_length=100)
    """Check name → the command the code layer runs to judge work (tests, build, lint); see `gates`."""
    gates: Gates = Field(default_factory=Gates)
    """Which checks run on each submission, after each merge, and at the end of the run."""
    ladder: bool = True
    """Hierarchical runs: a task's counted failures (red checks, rejected reviews) climb the failure
    ladder: the first only registers its fingerprint (a rework), the same one again has the lead rewrite
    the brief, a different one reworks in compromise mode and then advisor mode, and past that the
    task's module becomes a high-rot zone whose four exits you choose from. `ladder: false` keeps the
    plain retry instead: the same failure retried `max_auto_retries` times, then handed to you."""
    no_compromise: list[ProtectedPath] = Field(default_factory=list, max_length=100)
    """Paths whose failures never get a compromise patch (`auth/**`, `payments/**`): a drifting
    failure there goes straight to advisor mode."""

    host_only_keys: ClassVar[tuple[str, ...]] = ("hooks", "notify")
    """Keys of the user's own $AGENT_BOX_HOME/config.yaml: a crew.yaml comes with a repository, so it
    may never name commands run on the host or where notifications go."""

    @field_validator("roles")
    @classmethod
    def _at_least_one_role(cls, roles: dict[str, Role]) -> dict[str, Role]:
        if not roles:
            raise ValueError("a crew needs at least one role")
        return roles

    @field_validator("liaison")
    @classmethod
    def _liaison_is_a_role(cls, liaison: str | None, info: ValidationInfo) -> str | None:
        roles = info.data.get("roles") or {}
        if liaison is not None and roles and liaison not in roles:
            raise ValueError(f"{liaison!r} is not a role of the crew (roles: {', '.join(roles)})")
        return liaison


# ----------------------------------------------------------------------------- loading

M = TypeVar("M", bound=BaseModel)


def validate_document(model: type[M], data: Any, file: Path, document: Any = None, *,
                      schema_hint: str | None = None) -> M:
    """Validate parsed data against `model`; errors become one ConfigError naming file/line/field
    (with `schema_hint`, else one naming `agentbox schema <model>`)."""
    from agentbox.core.yaml_io import plain, position  # ruamel: only where YAML is read

    schema_hint = schema_hint or f"`agentbox schema {model.__name__.lower()}` prints the full schema"
    if data is None:
        raise ConfigError("file is empty (no YAML content)", file=file, line=1, hint=schema_hint)
    if not isinstance(data, dict):
        raise ConfigError(
            f"expected a mapping at the top level, got {short(plain(data))}",
            file=file,
            line=1,
            hint=schema_hint,
        )
    odd_key = _non_string_key(data)
    if odd_key is not None:
        loc, key, parent = odd_key
        line, column = parent.lc.key(key) if hasattr(parent, "lc") else (None, None)
        raise ConfigError(
            f"a key must be a plain name, got {short(key)}",
            file=file,
            line=line + 1 if line is not None else None,
            column=column + 1 if column is not None else None,
            field=".".join(str(p) for p in loc) or None,
            hint="keys are plain names; quote it if it is meant as text",
        )
    for key in model.host_only_keys if issubclass(model, Strict) else ():
        if key in data:
            line, column = position(data, (key,))
            raise ConfigError(
                f"{key} cannot be set in a project's {file.name}: hooks and notifications run on your "
                "machine, so only your own $AGENT_BOX_HOME/config.yaml may declare them",
                file=file, line=line, column=column, field=key,
                hint="move it to ~/.agent-box/config.yaml (or $AGENT_BOX_HOME/config.yaml); "
                     "see docs/notifications.md",
            )
    try:
        return model.model_validate(plain(data))
    except ValidationError as exc:
        source = document if document is not None else data
        found = problems(model, exc.errors())
        first = found[0]
        message = first.message
        line, column = position(source, first.loc)
        field = ".".join(str(p) for p in first.loc) or None
        if len(found) > 1:
            others = []
            for other in found[1:4]:
                other_line = position(source, other.loc)[0]
                where = f" (line {other_line})" if other_line else ""
                others.append(f"{'.'.join(str(p) for p in other.loc)}{where}: {other.message}")
            more = "; …" if len(found) > 4 else ""
            message += f" (also: {'; '.join(others)}{more})"
        raise ConfigError(
            message, file=file, line=line, column=column, field=field, hint=schema_hint
        ) from None


def _non_string_key(node: Any, loc: tuple[str | int, ...] = ()) -> tuple[tuple[str | int, ...], Any, Any] | None:
    """The first key that is not a string (`1:`, `true:`, `[a, b]:`): (location, key, its mapping)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if not isinstance(key, str):
                return loc, key, node
            found = _non_string_key(value, (*loc, key))
            if found is not None:
                return found
    elif isinstance(node, list):
        for index, item in enumerate(node):
            found = _non_string_key(item, (*loc, index))
            if found is not None:
                return found
    return None


def load_model(model: type[M], path: Path) -> M:
    """Load a YAML file and validate it as `model`, with file/line/field errors."""
    from agentbox.core.yaml_io import load_yaml

    document = load_yaml(path)
    return validate_document(model, document, path, document)
