"""Adapter of the scripted runtime: agentbox's own deterministic agent program.

Like claude's adapter, it passes the prompt on stdin (`-p -`) and the role's instructions
in a scratch file (`--append-system-prompt-file`), never on the command line.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import ClassVar

from agentbox.core import safe_io
from agentbox.core.runtimes.base import (
    Adapter,
    CapturedOutput,
    DisplayEvent,
    HomeBind,
    ParsedTurn,
    ParseError,
    ToolCommand,
    TurnHome,
    TurnRequest,
    TypedTurn,
    Usage,
    bound_home,
    optional_int,
    plain_display,
)
from agentbox.core.runtimes.common import (
    input_summary,
    json_object,
    read_transcript_file,
    scratch_file,
)

PROGRAM = Path(__file__).resolve().parent / "scripted_agent.py"
#: Imports the program instead of running it as a script, so its bytecode is cached: ~7 ms
#: less per turn. The cache is the program's own `__pycache__` in agentbox's package, which
#: agentbox compiles on the host (`_compile_program`) and every sandbox sees read-only, as
#: it sees the standard library's: no agent can plant bytecode that a later turn runs.
LAUNCHER = (
    f"import sys; sys.path.insert(0, {str(PROGRAM.parent)!r}); import scripted_agent; "
    "sys.exit(scripted_agent.main())"
)
_JSON_CACHE: dict[tuple[str, int, int], bytes] = {}
SCENARIO_JSON = "scenario.json"
SYSTEM_PROMPT_FILE = "system-prompt.md"


def _as_json(scenario: Path, scratch: Path) -> Path:
    """A YAML scenario converted once per version to JSON in the turn's scratch dir.

    The agent then starts without importing ruamel (about 25 ms per turn). A file that
    does not parse is passed on as it is, so the agent reports it with line and column.
    """
    if scenario.suffix not in (".yaml", ".yml"):
        return scenario
    try:
        stat = scenario.stat()
        key = (str(scenario), stat.st_mtime_ns, stat.st_size)
        if key not in _JSON_CACHE:
            from agentbox.core.yaml_io import load_yaml

            _JSON_CACHE[key] = json.dumps(load_yaml(scenario)).encode()
        target = scratch / SCENARIO_JSON
        # the scratch dir is writable inside the sandbox: never write through what is there
        safe_io.write_fresh(target, _JSON_CACHE[key])
    except Exception:  # noqa: BLE001 - any problem: let the agent read the YAML itself
        return scenario
    return target


def _compile_program() -> None:
    """Compile the agent program into its own `__pycache__` when stale (skipped where that is not writable)."""
    import importlib.util

    target = Path(importlib.util.cache_from_source(str(PROGRAM)))
    with contextlib.suppress(OSError):
        if target.stat().st_mtime_ns >= PROGRAM.stat().st_mtime_ns and not target.is_symlink():
            return
    import py_compile

    with contextlib.suppress(OSError, py_compile.PyCompileError):
        py_compile.compile(str(PROGRAM), cfile=str(target), doraise=True)


class ScriptedAdapter(Adapter):
    """Runs `scripted_agent.py` with the interpreter agentbox runs on, claude-style flags."""

    tool: ClassVar[str] = "scripted"
    executable_name: ClassVar[str] = "python3"
    env_defaults: ClassVar[dict[str, str]] = {}
    loaded_config: ClassVar[tuple[str, ...]] = ()
    takes_session_id: ClassVar[bool] = True
    turn_home: ClassVar[TurnHome | None] = None

    def homes(self, config_dir: Path, home: Path) -> tuple[list[HomeBind], dict[str, str]]:
        """The profile's dot-scripted/ becomes SCRIPTED_HOME (sessions, counters); the agent's bytecode is compiled."""
        _compile_program()
        return bound_home(config_dir, home / ".scripted", "SCRIPTED_HOME")

    def _base(self, request: TurnRequest) -> list[str]:
        if request.scenario is None:
            raise ValueError("a scripted profile needs runtime.scenario")
        scenario = _as_json(request.scenario, request.scratch)
        # a JSON scenario needs nothing from site-packages: -S skips the site import (~7 ms)
        flags = ["-I", "-S"] if scenario.suffix == ".json" else ["-I"]
        argv = [request.executable or sys.executable, *flags, "-c", LAUNCHER, "--scenario", str(scenario)]
        if request.native_id is None:
            argv += ["--session-id", request.session_id]
        else:
            argv += ["--resume", request.native_id]
        if request.first_turn and request.instructions:
            path = scratch_file(request, SYSTEM_PROMPT_FILE, request.instructions)
            argv += ["--append-system-prompt-file", str(path)]
        if request.model:
            argv += ["--model", request.model]
        return argv + list(request.extra_args)

    def build(self, request: TurnRequest) -> ToolCommand:
        """`scripted_agent.py --session-id UUID -p -` (or `--resume UUID`), the prompt on stdin."""
        return ToolCommand(self._base(request) + ["-p", "-"], stdin=request.prompt.encode("utf-8"))

    def interactive(self, request: TurnRequest) -> ToolCommand:
        """The same program reading prompts from the terminal."""
        return ToolCommand(self._base(request))

    def created_session(self, request: TurnRequest) -> str | None:
        """The session id if the program created the session before failing."""
        exists = (request.config_dir / "sessions" / f"{request.session_id}.json").is_file()
        return request.session_id if exists else None

    def read_transcript(self, config_dir: Path, native_id: str) -> list[TypedTurn]:
        """The turns a person typed in an attached session, from scripted's own session files (read as hostile)."""
        return _transcript_turns(config_dir / "sessions" / f"{native_id}.json")

    def parse(self, output: CapturedOutput, request: TurnRequest) -> ParsedTurn:
        """The last line of stdout is one JSON result object."""
        stdout = output.stdout.rstrip()
        if not stdout:
            raise ParseError("no output")
        last_line = stdout[stdout.rfind("\n") + 1 :]
        try:
            data = json.loads(last_line)
        except json.JSONDecodeError as exc:
            raise ParseError(f"last line is not JSON: {exc}") from None
        if not isinstance(data, dict) or data.get("type") != "result":
            raise ParseError("last line is not a result object")
        raw_usage = data.get("usage")
        usage = Usage(cost_usd=data.get("cost_usd"))
        if isinstance(raw_usage, dict):
            usage = Usage(
                input_tokens=optional_int(raw_usage.get("input_tokens")),
                cached_input_tokens=optional_int(raw_usage.get("cached_input_tokens")),
                cache_write_tokens=optional_int(raw_usage.get("cache_write_tokens")),
                output_tokens=optional_int(raw_usage.get("output_tokens")),
                reasoning_tokens=optional_int(raw_usage.get("reasoning_tokens")),
                cost_usd=data.get("cost_usd"),
            )
        is_error = bool(data.get("is_error"))
        text = str(data.get("result") or "")
        return ParsedTurn(
            text=text,
            native_id=str(data.get("session_id") or request.session_id),
            usage=usage,
            is_error=is_error,
            model=str(data["model"]) if isinstance(data.get("model"), str) and data.get("model") else None,
            error=text if is_error else None,
        )

    def display(self, line: str) -> list[DisplayEvent]:
        """The scenario's `stream` events, the result's status; any other line as text."""
        obj = json_object(line)
        kind = obj.get("type") if obj is not None else None
        if obj is None or kind not in ("text", "tool", "tool_result", "result"):
            return plain_display(line)
        text = str(obj.get("text") or "")
        if kind == "text":
            return [DisplayEvent("text", text)]
        if kind == "tool":
            return [DisplayEvent("tool", input_summary(obj.get("input")) if "input" in obj else "", text)]
        if kind == "tool_result":
            return [DisplayEvent("result", text)]
        if obj.get("is_error"):
            return [DisplayEvent("error", str(obj.get("result") or "error"))]
        return [DisplayEvent("note", "finished")]


# ----------------------------------------------------------------------------- the transcript


def _transcript_turns(path: Path) -> list[TypedTurn]:
    raw = read_transcript_file(path)
    try:
        data = json.loads(raw) if raw is not None else None
    except (ValueError, RecursionError):
        return []
    turns = data.get("turns") if isinstance(data, dict) else None
    return [TypedTurn(str(t.get("prompt") or ""), str(t.get("reply") or ""), Usage())
            for t in turns or [] if isinstance(t, dict)]
