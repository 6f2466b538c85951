"""Claude Code: `claude -p --output-format stream-json`, caller-chosen `--session-id`, resume `-r`.

stream-json prints each message as it happens (the assistant's text and tool calls, the
tool results) and ends with the same `result` object as `--output-format json`, so a
turn can be watched live and is parsed from that last object as before.

The prompt goes on stdin and the role's instructions in a file of the turn's scratch dir
(`--append-system-prompt-file`): neither is ever on the command line.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
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
    block_text,
    input_summary,
    json_lines,
    json_object,
    read_transcript_file,
    scratch_file,
)

#: Tools a read-only role may not use (the read-only mount enforces it anyway). claude
#: 2.1.197 has no MultiEdit ("Permission deny rule … matches no known tool" on stderr).
WRITE_TOOLS = "Edit,Write,NotebookEdit"
#: `--disallowedTools <tools...>` is variadic: as two argv items it swallows the prompt
#: that follows ("Input must be provided …"), so it is passed as one `--opt=value` item.
DENY_WRITE_TOOLS = f"--disallowedTools={WRITE_TOOLS}"
#: The role's instructions, in the turn's scratch dir.
SYSTEM_PROMPT_FILE = "claude-system-prompt.md"

#: `$CLAUDE_CONFIG_DIR/.claude.json` is claude's global config: claude rewrites it on every run
#: (start counts, per-project entries) and also loads from it `mcpServers` (commands it starts),
#: per-project `mcpServers`, `allowedTools` and MCP approvals, `awsAuthRefresh`,
#: `awsCredentialExport` and `gcpAuthRefresh` (commands it runs), custom API key approvals.
#: Of what a turn wrote there, only these bookkeeping scalars go back into the profile; the
#: rest of the file stays as the person (or an attached session) left it.
KEPT_GLOBAL_KEYS: dict[str, type | tuple[type, ...]] = {
    "numStartups": int, "firstStartTime": str, "userID": str, "anonymousId": str, "installMethod": str,
    "hasCompletedOnboarding": bool, "lastOnboardingVersion": str, "lastReleaseNotesSeen": str,
    "changelogLastFetched": (int, float), "claudeCodeFirstTokenDate": str,
}
#: `.credentials.json` holds a claude.ai login: claude refreshes its tokens during a turn, and a
#: refresh token may work only once, so the refreshed login goes back when the profile had one.
CREDENTIALS_KEY = "claudeAiOauth"


def _json_object(raw: bytes | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _kept_value(value: Any, kind: type | tuple[type, ...]) -> bool:
    return isinstance(value, kind) and (kind is bool or not isinstance(value, bool))


def kept_state(name: str, profile: bytes | None, turn: bytes | None) -> bytes | None:
    """What goes back into the profile's `name` after a turn (None: the profile's file stays).

    `.claude.json`: the profile's file plus the `KEPT_GLOBAL_KEYS` the turn's copy has with the
    right type; a profile file that is not a JSON object is left alone. `.credentials.json`:
    the turn's refreshed `claudeAiOauth` login, when the profile had one.
    """
    before = _json_object(profile)
    after = _json_object(turn)
    if profile is not None and before is None:
        return None
    if name == ".claude.json":
        merged = dict(before or {})
        for key, kind in KEPT_GLOBAL_KEYS.items():
            if after is not None and key in after and _kept_value(after[key], kind):
                merged[key] = after[key]
        if merged == before or (before is None and not merged):
            return None
        return (json.dumps(merged, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    if name == ".credentials.json":
        login = (after or {}).get(CREDENTIALS_KEY)
        if before is None or CREDENTIALS_KEY not in before or not isinstance(login, dict):
            return None
        if login == before[CREDENTIALS_KEY]:
            return None
        return (json.dumps({**before, CREDENTIALS_KEY: login}, indent=2) + "\n").encode("utf-8")
    return None


TURN_HOME = TurnHome(
    # sessions (resume reads projects/<cwd>/<id>.jsonl), plans and file checkpoints; what else a
    # turn makes in its home (session-env/, shell-snapshots/, cache/, backups/…) is dropped with it
    state=("projects", "sessions", "plans", "tasks", "file-history"),
    copies=(".claude.json", ".credentials.json"),
    keep=kept_state,
)


class ClaudeAdapter(Adapter):
    """Claude Code. The profile's `dot-claude/` is `CLAUDE_CONFIG_DIR` inside the sandbox."""

    tool: ClassVar[str] = "claude"
    executable_name: ClassVar[str] = "claude"
    env_defaults: ClassVar[dict[str, str]] = {
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        # bubblewrap is the boundary: lets bypassPermissions work when agentbox runs as root
        "IS_SANDBOX": "1",
        # auto-memory lives in projects/<cwd>/memory/, which every turn writes and later turns
        # would load as instructions: a reviewer could plant them for a writer
        "CLAUDE_CODE_DISABLE_AUTO_MEMORY": "1",
    }
    loaded_config: ClassVar[tuple[str, ...]] = (
        "settings.json", "settings.local.json", "CLAUDE.md", "keybindings.json", "loop.md",
        "commands/", "agents/", "hooks/", "plugins/", "skills/", "output-styles/", "rules/", "themes/",
        "workflows/")
    takes_session_id: ClassVar[bool] = True
    turn_home: ClassVar[TurnHome | None] = TURN_HOME

    def homes(self, config_dir: Path, home: Path) -> tuple[list[HomeBind], dict[str, str]]:
        """dot-claude/ → ~/.claude; a v1 `dot-claude.json` is copied into it on first use."""
        legacy = config_dir.with_name(config_dir.name + ".json")
        inside = config_dir / ".claude.json"
        if legacy.is_file() and legacy.stat().st_size > 3 and not inside.exists():
            config_dir.mkdir(parents=True, exist_ok=True)
            shutil.copy2(legacy, inside)
        target = home / ".claude"
        return [HomeBind(config_dir, target)], {"CLAUDE_CONFIG_DIR": str(target)}

    def _common(self, request: TurnRequest) -> list[str]:
        argv: list[str] = []
        if request.native_id is None:
            argv += ["--session-id", request.session_id]
        else:
            argv += ["-r", request.native_id]
        if request.model:
            argv += ["--model", request.model]
        if request.first_turn and request.instructions:
            path = scratch_file(request, SYSTEM_PROMPT_FILE, request.instructions)
            argv += ["--append-system-prompt-file", str(path)]
        return argv

    def build(self, request: TurnRequest) -> ToolCommand:
        """Headless turn, the prompt on stdin, messages streamed (stream-json needs --verbose with -p);
        permissions relaxed inside the sandbox, write tools denied to readers."""
        argv = [request.executable, "-p", "--output-format", "stream-json", "--verbose", *self._common(request),
                "--permission-mode", "bypassPermissions"]
        if request.read_only:
            argv.append(DENY_WRITE_TOOLS)
        return ToolCommand([*argv, *request.extra_args], stdin=request.prompt.encode("utf-8"))

    def interactive(self, request: TurnRequest) -> ToolCommand:
        """The claude TUI resuming the session (the person approves tools)."""
        argv = [request.executable, *self._common(request)]
        if request.read_only:
            argv.append(DENY_WRITE_TOOLS)
        return ToolCommand([*argv, *request.extra_args])

    def created_session(self, request: TurnRequest) -> str | None:
        """The session id if claude stored the session before a turn failed."""
        projects = request.config_dir / "projects"
        found = any(projects.glob(f"*/{request.session_id}.jsonl")) if projects.is_dir() else False
        return request.session_id if found else None

    def read_transcript(self, config_dir: Path, native_id: str) -> list[TypedTurn]:
        """The turns a person typed in an attached session, from claude's own session files (read as hostile)."""
        return _transcript_turns(config_dir / "projects", native_id)

    def parse(self, output: CapturedOutput, request: TurnRequest) -> ParsedTurn:
        """The `result` object; `is_error` marks a failure even when subtype says success."""
        result = None
        for obj in json_lines(output.stdout):
            if obj.get("type") == "result":
                result = obj
        if result is None:
            raise ParseError("no result object in claude's output")
        usage = result.get("usage") or {}
        cost = result.get("total_cost_usd")
        parsed_usage = Usage(
            input_tokens=optional_int(usage.get("input_tokens")),
            cached_input_tokens=optional_int(usage.get("cache_read_input_tokens")),
            cache_write_tokens=optional_int(usage.get("cache_creation_input_tokens")),
            output_tokens=optional_int(usage.get("output_tokens")),
            cost_usd=float(cost) if isinstance(cost, int | float) else None,
        )
        text = str(result.get("result") or "")
        is_error = bool(result.get("is_error"))
        return ParsedTurn(text=text, native_id=result.get("session_id") or request.session_id, usage=parsed_usage,
                          is_error=is_error, error=(text or str(result.get("subtype"))) if is_error else None,
                          model=_reported_model(result, output))

    def display(self, line: str) -> list[DisplayEvent]:
        """stream-json: assistant text and tool calls, tool results, the final result's status."""
        obj = json_object(line)
        if obj is None:
            return plain_display(line)
        kind = obj.get("type")
        message = obj.get("message") if isinstance(obj.get("message"), dict) else {}
        blocks = [b for b in (message.get("content") or []) if isinstance(b, dict)] if isinstance(
            message.get("content"), list) else []
        events: list[DisplayEvent] = []
        if kind == "system" and obj.get("subtype") == "init":
            events.append(DisplayEvent("note", f"claude started (model {obj.get('model') or 'default'})"))
        elif kind == "assistant":
            for block in blocks:
                if block.get("type") == "text" and str(block.get("text") or "").strip():
                    events.append(DisplayEvent("text", str(block["text"])))
                elif block.get("type") == "thinking" and str(block.get("thinking") or "").strip():
                    events.append(DisplayEvent("note", str(block["thinking"])))
                elif block.get("type") == "tool_use":
                    events.append(DisplayEvent("tool", input_summary(block.get("input")), str(block.get("name") or "tool")))
        elif kind == "user":
            for block in blocks:
                if block.get("type") == "tool_result":
                    events.append(DisplayEvent("error" if block.get("is_error") else "result",
                                               block_text(block.get("content"))))
        elif kind == "result":
            if obj.get("is_error"):
                events.append(DisplayEvent("error", str(obj.get("result") or obj.get("subtype") or "error")))
            else:
                events.append(DisplayEvent("note", f"finished after {obj.get('num_turns', '?')} model turn(s)"))
        return events


def _reported_model(result: dict[str, Any], output: CapturedOutput) -> str | None:
    """The model claude says it used: the result's `modelUsage` keys, else the stream's `system` init."""
    usage = result.get("modelUsage")
    if isinstance(usage, dict) and usage:
        return ", ".join(sorted(str(name) for name in usage))
    for obj in json_lines(output.stdout):
        if obj.get("type") == "system" and isinstance(obj.get("model"), str):
            return str(obj["model"])
    return None


# ----------------------------------------------------------------------------- the transcript


def _transcript_turns(projects: Path, native_id: str) -> list[TypedTurn]:
    """claude's JSON lines: a person's prompt starts a turn; the assistant's text and usage follow."""
    try:
        if not stat.S_ISDIR(os.lstat(projects).st_mode):
            return []
        dirs = sorted((entry for entry in os.scandir(projects) if entry.is_dir(follow_symlinks=False)),
                      key=lambda entry: entry.name)
    except OSError:
        return []
    raw = next((data for d in dirs if (data := read_transcript_file(Path(d.path) / f"{native_id}.jsonl")) is not None), None)
    if raw is None:
        return []
    turns: list[dict[str, Any]] = []
    counted: set[str] = set()
    for line in raw.decode("utf-8", "replace").splitlines():
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):
            continue
        message = event.get("message") if isinstance(event, dict) else None
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if event.get("type") == "user" and not event.get("isMeta"):
            prompt = _text(content, user=True)
            if prompt is not None:
                turns.append({"prompt": prompt, "text": "", "usage": {}})
        elif event.get("type") == "assistant" and turns:
            text = _text(content, user=False)
            if text:
                turns[-1]["text"] = text
            usage, message_id = message.get("usage"), str(message.get("id") or id(message))
            if isinstance(usage, dict) and message_id not in counted:  # one message may span several lines
                counted.add(message_id)
                for key in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens", "output_tokens"):
                    value = optional_int(usage.get(key))
                    if value is not None:
                        turns[-1]["usage"][key] = turns[-1]["usage"].get(key, 0) + value
    return [TypedTurn(t["prompt"], t["text"], Usage(
        input_tokens=t["usage"].get("input_tokens"), cached_input_tokens=t["usage"].get("cache_read_input_tokens"),
        cache_write_tokens=t["usage"].get("cache_creation_input_tokens"), output_tokens=t["usage"].get("output_tokens"),
    )) for t in turns]


def _text(content: Any, *, user: bool) -> str | None:
    """The text of a message; None for a user message that only carries tool results."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    texts = [str(b.get("text") or "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
    if user and not texts:
        return None
    return "\n".join(texts)
