"""opencode: `opencode run --format json` with the prompt on stdin; resume `-s ID --dir CWD`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

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
    optional_int,
    plain_display,
)
from agentbox.core.runtimes.common import (
    input_summary,
    json_lines,
    json_object,
    sqlite_rows,
    with_instructions,
)

#: Config merged over the profile's own on every headless turn (`OPENCODE_CONFIG_CONTENT`):
#: the built-in `title` agent is removed, so a new session makes no extra title-generation
#: model request, which opencode would not count in the turn's usage; snapshots are off:
#: opencode keeps them in a git dir of its data dir and runs git on it with the project as
#: work tree, so a config planted there (an fsmonitor, a filter) would run in a later turn.
HEADLESS_CONFIG: dict[str, Any] = {"agent": {"title": {"disable": True}}, "snapshot": False}
#: Extra config for read-only roles (opencode's own permission rules, on top of the mount).
READ_ONLY_CONFIG = {"permission": {"edit": "deny", "bash": {"*": "allow"}}}


PRIVATE_DIR = ".agentbox"
"""Under opencode's config dir: its XDG data, state and cache (so sessions persist in the profile)."""
DATABASE = Path(PRIVATE_DIR) / "data" / "opencode" / "opencode.db"
"""opencode's session database, relative to its config dir."""
CACHE_DIR = "opencode-cache"
"""opencode's cache, in the turn's scratch dir (new every turn): it runs binaries from there
(ripgrep, language servers) and loads skills it downloaded there, so a cache kept in the
profile would be code one turn leaves for the next."""


def step_tokens(tokens: Any) -> dict[str, int]:
    """The counters a step's `tokens` reports (input, output, reasoning, cache_read, cache_write)."""
    if not isinstance(tokens, dict):
        return {}
    cache = tokens.get("cache") if isinstance(tokens.get("cache"), dict) else {}
    found = {}
    for key, value in (("input", tokens.get("input")), ("output", tokens.get("output")),
                       ("reasoning", tokens.get("reasoning")), ("cache_read", cache.get("read")),
                       ("cache_write", cache.get("write"))):
        number = optional_int(value)
        if number is not None:
            found[key] = number
    return found


class OpencodeAdapter(Adapter):
    """opencode. The profile's `dot-opencode/` is ~/.config/opencode; data, state and cache live in it too."""

    tool: ClassVar[str] = "opencode"
    executable_name: ClassVar[str] = "opencode"
    env_defaults: ClassVar[dict[str, str]] = {
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",  # its bin/ is read-only: nothing to download into
    }
    loaded_config: ClassVar[tuple[str, ...]] = (
        "opencode.json", "opencode.jsonc", "config.json", "tui.json", "AGENTS.md", "package.json",
        "agent/", "agents/", "command/", "commands/", "plugin/", "plugins/", "mode/", "modes/", "tool/", "tools/",
        "skill/", "skills/", "themes/", "node_modules/",
        f"{PRIVATE_DIR}/data/opencode/snapshot/")  # the git dirs of its snapshots (see HEADLESS_CONFIG)

    turn_home: ClassVar[TurnHome | None] = None

    def homes(self, config_dir: Path, home: Path) -> tuple[list[HomeBind], dict[str, str]]:
        """dot-opencode/ → ~/.config/opencode; XDG data/state/cache under it so sessions persist."""
        target = home / ".config" / "opencode"
        private = target / PRIVATE_DIR
        env = {
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_DATA_HOME": str(private / "data"),
            "XDG_STATE_HOME": str(private / "state"),
            "XDG_CACHE_HOME": str(private / "cache"),
        }
        return [HomeBind(config_dir, target)], env

    def build(self, request: TurnRequest) -> ToolCommand:
        """`opencode run --format json [-s ID --dir CWD]`, the prompt fed on stdin."""
        argv = [request.executable, "run", "--format", "json"]
        config = dict(HEADLESS_CONFIG)
        if request.read_only:
            config.update(READ_ONLY_CONFIG)
        else:
            argv.append("--auto")
        env = {"OPENCODE_CONFIG_CONTENT": json.dumps(config), "XDG_CACHE_HOME": str(request.scratch / CACHE_DIR)}
        if request.native_id is not None:
            argv += ["-s", request.native_id, "--dir", str(request.cwd)]
        if request.model:
            argv += ["-m", request.model]
        argv += list(request.extra_args)
        prompt = with_instructions(request.prompt, request.instructions, request.first_turn)
        return ToolCommand(argv, env=env, stdin=prompt.encode("utf-8"))

    def interactive(self, request: TurnRequest) -> ToolCommand:
        """The opencode TUI on the session."""
        argv = [request.executable, str(request.cwd)]
        if request.native_id is not None:
            argv += ["-s", request.native_id]
        if request.model:
            argv += ["-m", request.model]
        return ToolCommand([*argv, *request.extra_args], env={"XDG_CACHE_HOME": str(request.scratch / CACHE_DIR)})

    def read_transcript(self, config_dir: Path, native_id: str) -> list[TypedTurn]:
        """The turns a person typed in an attached session, from opencode's own session files (read as hostile)."""
        return _transcript_turns(config_dir / DATABASE, native_id)

    def parse(self, output: CapturedOutput, request: TurnRequest) -> ParsedTurn:
        """Text of the last step that did not end in tool calls; tokens summed over steps."""
        native = request.native_id
        step_texts: list[str] = []
        final: list[str] | None = None
        sums: dict[str, int] = {}
        known: set[str] = set()
        cost = 0.0
        errors: list[str] = []
        seen = False
        for event in json_lines(output.stdout):
            seen = True
            native = event.get("sessionID") or native
            kind = event.get("type")
            part: dict[str, Any] = event.get("part") or {}
            if kind == "step_start":
                step_texts = []
            elif kind == "text":
                step_texts.append(str(part.get("text") or ""))
            elif kind == "step_finish":
                for key, number in step_tokens(part.get("tokens")).items():
                    sums[key] = sums.get(key, 0) + number
                    known.add(key)
                if isinstance(part.get("cost"), int | float):
                    cost += float(part["cost"])
                if part.get("reason") != "tool-calls":
                    final = step_texts
            elif kind == "error":
                error = event.get("error") or {}
                errors.append(str((error.get("data") or {}).get("message") or error.get("name") or "error"))
        if not seen:
            raise ParseError("no JSON events in opencode's output")
        text = "".join(final if final is not None else step_texts).strip()
        usage = Usage(
            input_tokens=sums.get("input") if "input" in known else None,
            cached_input_tokens=sums.get("cache_read") if "cache_read" in known else None,
            cache_write_tokens=sums.get("cache_write") if "cache_write" in known else None,
            output_tokens=sums.get("output") if "output" in known else None,
            reasoning_tokens=sums.get("reasoning") if "reasoning" in known else None,
            # opencode reports 0 when the model has no cost table: that is unknown, not free
            cost_usd=cost if cost > 0 else None,
        )
        if errors:
            return ParsedTurn(text=text, native_id=native, usage=usage, is_error=True, error=errors[-1])
        return ParsedTurn(text=text, native_id=native, usage=usage)

    def display(self, line: str) -> list[DisplayEvent]:
        """`run --format json` events: text, reasoning, each tool call with its output, errors."""
        event = json_object(line)
        if event is None:
            return plain_display(line)
        kind = event.get("type")
        part = event.get("part") if isinstance(event.get("part"), dict) else {}
        if kind == "text":
            return [DisplayEvent("text", str(part.get("text") or ""))]
        if kind == "reasoning":
            return [DisplayEvent("note", str(part.get("text") or ""))]
        if kind == "tool_use":
            name = str(part.get("tool") or "tool")
            state = part.get("state") if isinstance(part.get("state"), dict) else {}
            events = [DisplayEvent("tool", input_summary(state.get("input")), name)]
            if state.get("status") == "error":
                events.append(DisplayEvent("error", str(state.get("error") or "failed"), name))
            elif "output" in state:
                events.append(DisplayEvent("result", str(state.get("output") or "").rstrip("\n"), name))
            return events
        if kind == "error":
            error = event.get("error") if isinstance(event.get("error"), dict) else {}
            data = error.get("data") if isinstance(error.get("data"), dict) else {}
            return [DisplayEvent("error", str(data.get("message") or error.get("name") or "error"))]
        return []


# ----------------------------------------------------------------------------- the transcript


def _transcript_turns(db: Path, native_id: str) -> list[TypedTurn]:
    """opencode's `message` and `part` rows: user text starts a turn; step-finish parts carry its tokens."""
    rows = sqlite_rows(db, ("message", "part"),
                       "SELECT m.data, p.data FROM part p JOIN message m ON m.id = p.message_id "
                       "WHERE p.session_id = ? ORDER BY m.time_created, m.id, p.time_created, p.id", (native_id,))
    turns: list[dict[str, Any]] = []
    for message_data, part_data in rows:
        try:
            message, part = json.loads(message_data), json.loads(part_data)
        except (TypeError, ValueError, RecursionError):
            continue
        if not isinstance(message, dict) or not isinstance(part, dict):
            continue
        if message.get("role") == "user" and part.get("type") == "text":
            turns.append({"prompt": str(part.get("text") or ""), "text": "", "tokens": {}})
        elif message.get("role") == "assistant" and turns:
            if part.get("type") == "text":
                turns[-1]["text"] = str(part.get("text") or "")
            elif part.get("type") == "step-finish":
                sums = turns[-1]["tokens"]
                for key, number in step_tokens(part.get("tokens")).items():
                    sums[key] = sums.get(key, 0) + number
    return [TypedTurn(t["prompt"], t["text"], Usage(
        input_tokens=t["tokens"].get("input"), cached_input_tokens=t["tokens"].get("cache_read"),
        cache_write_tokens=t["tokens"].get("cache_write"), output_tokens=t["tokens"].get("output"),
        reasoning_tokens=t["tokens"].get("reasoning"),
    )) for t in turns]
