"""The one small interface every agent CLI adapter implements.

An adapter knows three things about its tool: where the tool keeps its config and
sessions (so the profile's copy can be bound there inside the sandbox), how to build the
command of a new or resumed turn, and how to read the tool's output back into a
`ParsedTurn`. Everything else (sandbox, spawning, timeouts, capture, history) is shared.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol


@dataclass(frozen=True)
class Usage:
    """Normalised token usage of one turn; None means the tool did not say (unknown, not 0)."""

    input_tokens: int | None = None
    """Input tokens *not* served from cache."""
    cached_input_tokens: int | None = None
    """Input tokens read from the prompt cache."""
    cache_write_tokens: int | None = None
    """Input tokens written to the prompt cache."""
    output_tokens: int | None = None
    """Output tokens, reasoning excluded when the tool reports it separately."""
    reasoning_tokens: int | None = None
    """Reasoning tokens, when the tool reports them."""
    cost_usd: float | None = None
    """What the turn cost in US dollars: the tool's figure, else priced from its tokens
    (`core.pricing`); None when neither is known (unknown, never 0)."""
    cost_source: str | None = None
    """Where `cost_usd` came from: `tool` (the tool reported it) or `price_table` (tokens × price)."""
    billing: str | None = None
    """How the profile is logged in: `subscription` (a plan, not billed per token: the cost is what
    the tokens would cost), `api_key`, or None when it cannot be told."""

    @property
    def known(self) -> bool:
        """True when the tool reported any token count for this turn."""
        return any(v is not None for v in (self.input_tokens, self.cached_input_tokens,
                                           self.cache_write_tokens, self.output_tokens,
                                           self.reasoning_tokens))

    @property
    def total_tokens(self) -> int | None:
        """All tokens of the turn (None when unknown)."""
        if not self.known:
            return None
        return sum(v or 0 for v in (self.input_tokens, self.cached_input_tokens,
                                     self.cache_write_tokens, self.output_tokens,
                                     self.reasoning_tokens))

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready mapping (None kept as null)."""
        return {
            "input_tokens": self.input_tokens,
            "cached_input_tokens": self.cached_input_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "output_tokens": self.output_tokens,
            "reasoning_tokens": self.reasoning_tokens,
            "cost_usd": self.cost_usd,
            "cost_source": self.cost_source,
            "billing": self.billing,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Usage:
        """Inverse of `as_dict` (missing keys stay unknown)."""
        data = data or {}
        return cls(**{k: data.get(k) for k in cls.__dataclass_fields__})


TOKEN_FIELDS = ("input_tokens", "cached_input_tokens", "cache_write_tokens", "output_tokens", "reasoning_tokens")
"""The token counters of a Usage, in display order."""


def optional_int(value: Any) -> int | None:
    """An int from JSON, or None when absent or not a number (unknown stays unknown)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    return None


@dataclass(frozen=True)
class HomeBind:
    """A directory of the profile bound where the tool expects its config inside the sandbox."""

    source: Path
    """Host path inside the profile (created if missing)."""
    target: Path
    """Path inside the sandbox (usually under the hidden $HOME)."""
    is_file: bool = False
    """Bind a single file rather than a directory."""


@dataclass(frozen=True)
class TurnHome:
    """A config home rebuilt for every headless turn, for a tool that writes files it also loads.

    Inside the sandbox the tool's home is a fresh per-turn directory. Only the `state` dirs
    of the profile's config dir are bound into it read-write (made if missing); what the
    tool loads (`Adapter.loaded_config`) and every other entry already in the profile are
    bound read-only; each of `copies` is a private copy of the profile's file, and after
    the turn `keep` decides what of the turn's copy goes back. Whatever else the turn made
    in its home is dropped with it, so nothing a turn writes becomes settings or code of a
    later one.
    """

    state: tuple[str, ...]
    """Dirs the tool keeps its sessions in (nothing in them is loaded as settings or code)."""
    copies: tuple[str, ...] = ()
    """Files the tool both rewrites and loads, given to each turn as a copy."""
    keep: Callable[[str, bytes | None, bytes | None], bytes | None] | None = None
    """`keep(name, profile_bytes, turn_bytes)`: the new content of the profile's file after a
    turn (None: leave it as it is). Sees the profile's current file and the turn's copy."""


def bound_home(config_dir: Path, target: Path, variable: str) -> tuple[list[HomeBind], dict[str, str]]:
    """The common case of `Adapter.homes`: one config dir bound at `target`, named by `variable`."""
    return [HomeBind(config_dir, target)], {variable: str(target)}


@dataclass(frozen=True)
class TurnRequest:
    """Everything an adapter needs to build one turn's command."""

    prompt: str
    """The user prompt of this turn."""
    session_id: str
    """agentbox's session UUID."""
    native_id: str | None
    """The tool's own session id to resume; None on a session's first turn."""
    first_turn: bool
    """True on the first turn of the session (instructions are sent then)."""
    instructions: str | None
    """Role instructions + shared knowledge, for the first turn."""
    model: str | None
    """Model name (profile, overridden by the role)."""
    extra_args: tuple[str, ...]
    """Profile + role extra arguments."""
    read_only: bool
    """The role may not write the project: the tool's own permissions are narrowed too."""
    cwd: Path
    """Working directory (the project root; same path inside the sandbox)."""
    home: Path
    """$HOME inside the sandbox."""
    scratch: Path
    """A private per-turn directory visible inside the sandbox (e.g. hermes' usage file)."""
    executable: str
    """The tool's executable (absolute path)."""
    config_dir: Path
    """The profile's tool config dir on the host."""
    scenario: Path | None = None
    """Scripted runtime only: the scenario file."""
    adapter_state: dict[str, Any] = field(default_factory=dict)
    """What the adapter stored in the session after the previous turn (e.g. codex totals)."""


@dataclass(frozen=True)
class ToolCommand:
    """The process to start for one turn (before sandbox wrapping)."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    stdin: bytes | None = None
    """Bytes written to stdin, then closed; None = stdin is /dev/null."""


@dataclass(frozen=True)
class CapturedOutput:
    """What the process left behind."""

    stdout: str
    stderr: str
    exit_code: int | None
    truncated: bool
    scratch: Path
    """The turn's scratch dir (host path), where the tool may have written files."""


@dataclass(frozen=True)
class ParsedTurn:
    """The tool's answer in agentbox's terms."""

    text: str
    native_id: str | None
    usage: Usage
    is_error: bool = False
    """The tool reported a failure even if it exited 0."""
    error: str | None = None
    adapter_state: dict[str, Any] = field(default_factory=dict)
    model: str | None = None
    """The model the tool says it used (None: it did not say)."""


DisplayKind = Literal["text", "tool", "result", "error", "note"]
"""What a display event is: the agent's text, a tool call, a tool's result, an error, a remark."""


@dataclass(frozen=True)
class DisplayEvent:
    """One thing a running turn showed, for a person watching it (`agentbox tail`, the dashboard)."""

    kind: DisplayKind
    text: str
    name: str | None = None
    """The tool's name (tool calls and results)."""


class LineDisplay:
    """The default way to show a tool's output live: each non-empty line is text.

    For tools that print plain text (hermes), and for lines an adapter does not recognise.
    """

    def display(self, line: str) -> list[DisplayEvent]:
        """The display events of one line of the tool's stdout."""
        return plain_display(line)


def plain_display(line: str) -> list[DisplayEvent]:
    """A non-empty line as one text event."""
    return [DisplayEvent("text", line)] if line.strip() else []


class ParseError(Exception):
    """The output does not have the tool's expected shape."""


@dataclass(frozen=True)
class TypedTurn:
    """One exchange of an attached session, read back from the tool's own session files."""

    prompt: str
    text: str
    usage: Usage


class Adapter(Protocol):
    """One agent CLI.

    An adapter subclasses this protocol, so the optional capabilities below come with
    their defaults (a tool that has one overrides it); nothing asks whether an adapter has
    an attribute.
    """

    tool: ClassVar[str]
    """Tool name as used in profile.yaml."""
    executable_name: ClassVar[str]
    """Default executable looked up on PATH."""
    env_defaults: ClassVar[dict[str, str]]
    """Environment set for every run of the tool (quieting telemetry etc.)."""
    loaded_config: ClassVar[tuple[str, ...]]
    """Paths in the config dir the tool loads as settings or code (hooks, plugins, MCP servers,
    instructions); `name/` is a directory. Headless turns get them read-only, created empty
    when missing, so no agent can plant something every later turn of the profile runs."""

    def homes(self, config_dir: Path, home: Path) -> tuple[list[HomeBind], dict[str, str]]:
        """Binds of the profile's config dir and the env vars pointing the tool at them."""
        ...

    def build(self, request: TurnRequest) -> ToolCommand:
        """The command of one headless turn (new session or resume)."""
        ...

    def parse(self, output: CapturedOutput, request: TurnRequest) -> ParsedTurn:
        """Read the tool's output; raise ParseError when it has no recognisable answer."""
        ...

    def interactive(self, request: TurnRequest) -> ToolCommand:
        """The command of an interactive session resuming `request.native_id` (or a new one)."""
        ...

    def display(self, line: str) -> list[DisplayEvent]:
        """What one line of a running turn's stdout shows a person watching (`LineDisplay` is the default).

        Asked about each line that looks like a JSON object; other lines are shown as text
        without asking (a flood of them costs no call per line)."""
        ...

    # ------------------------------------------------------------------ optional, with defaults
    turn_home: ClassVar[TurnHome | None] = None
    """Set for a tool that writes files it also loads: its home is rebuilt for every headless turn."""
    takes_session_id: ClassVar[bool] = False
    """True when the tool makes a new session under the id agentbox gives it (its native id is agentbox's)."""

    def created_session(self, request: TurnRequest) -> str | None:
        """The native id of the session the tool stored although its first turn failed (None: none, or it
        cannot be told), so a retry resumes the session instead of making it again under the same id."""
        return None

    def read_transcript(self, config_dir: Path, native_id: str) -> list[TypedTurn]:
        """Every turn the tool's own session files hold for `native_id`, oldest first: the turns a person
        typed in an attached session (none when the tool keeps no files agentbox can read). The agent
        wrote those files, so they are read as hostile: regular files only, bounded, SQLite read-only."""
        return []
