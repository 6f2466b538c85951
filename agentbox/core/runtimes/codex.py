"""Codex CLI: `codex exec --json` (JSONL), native thread ids, `exec resume`, cumulative usage.

The prompt (with the role's instructions in front on a session's first turn) is read from
stdin (`-` as the prompt argument), never put on the command line.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Iterator, Mapping
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
    bound_home,
    optional_int,
    plain_display,
)
from agentbox.core.runtimes.common import (
    input_summary,
    json_lines,
    json_object,
    read_transcript_file,
    sub_list,
    sub_object,
    with_instructions,
)

QUIET_SWITCHES: tuple[tuple[str, str], ...] = (
    ("analytics.enabled", "false"),
    ("features.plugins", "false"),
)
"""codex's own switches for its side traffic, off in every headless turn unless the profile sets them.

`analytics.enabled`: the usage events codex posts to ab.chatgpt.com at the end of every turn.
`features.plugins`: the plugin system, whose start-up work is the curated marketplace's sync
(`git ls-remote https://github.com/openai/plugins.git`, then api.github.com and chatgpt.com as
fall-backs) and the remote plugin catalog's prefetch, in every new process, so every turn. It
is turned off only for a profile that configures no plugin (no `[plugins]` or `[marketplaces]`
table): such a profile loses nothing by it, and the request to the model is the same. With a
sandbox's allowlist none of that could succeed, and with `network: host` it is traffic to
OpenAI and GitHub that a crew's turn never asked for. A profile turns either back on in its
`config.toml` (a key it sets is never overridden) or its `extra_args` (they come later and win).
"""
MAX_CONFIG_BYTES = 1 << 20
_USES_PLUGINS = ("plugins", "marketplaces")
"""config.toml tables that mean the profile uses plugins (installed ones, its own marketplaces)."""

_COUNTERS = ("input_tokens", "cached_input_tokens", "cache_write_input_tokens", "output_tokens", "reasoning_output_tokens")


class CodexAdapter(Adapter):
    """Codex CLI. The profile's `dot-codex/` is `CODEX_HOME` inside the sandbox."""

    tool: ClassVar[str] = "codex"
    executable_name: ClassVar[str] = "codex"
    env_defaults: ClassVar[dict[str, str]] = {}
    loaded_config: ClassVar[tuple[str, ...]] = (
        "config.toml", "requirements.toml", "hooks.json", "AGENTS.md", "AGENTS.override.md", "instructions.md",
        "prompts/", "rules/", "skills/", "agents/", "hooks/", "plugins/", "memories/", "themes/",
        "shell_snapshots/")  # shell state it sources before the commands it runs
    turn_home: ClassVar[TurnHome | None] = None

    def homes(self, config_dir: Path, home: Path) -> tuple[list[HomeBind], dict[str, str]]:
        """dot-codex/ → ~/.codex."""
        return bound_home(config_dir, home / ".codex", "CODEX_HOME")

    def _permissions(self, request: TurnRequest) -> list[str]:
        """codex's own sandbox is skipped for every role: agentbox's bubblewrap is the boundary.

        A read-only role gets the project mounted read-only. codex's nested sandbox
        (`-s read-only`) cannot start at all when codex is installed under /tmp or its
        helpers cannot be created ("execvp codex-linux-sandbox: No such file"), and then
        a reviewer could not even run `cat`; the mount enforces the same rule everywhere.
        Inside agentbox's bwrap it never starts ("bwrap: No permissions to create new
        namespace", codex-cli 0.171.0). codex 0.171.0 offers no file-writing tool to drop
        (no `apply_patch`; it edits through `exec_command`, its only way to read too), so
        a read-only role keeps the shell, and the read-only mount is what stops its writes.
        """
        return ["--dangerously-bypass-approvals-and-sandbox"]

    def build(self, request: TurnRequest) -> ToolCommand:
        """`codex exec [resume ID] --json ... -` (options after `resume`), the prompt on stdin."""
        argv = [request.executable, "exec"]
        if request.native_id is not None:
            argv.append("resume")
        argv += ["--json", "--skip-git-repo-check", *self._permissions(request)]
        argv += [arg for key, value in quiet_switches(request.config_dir, request.extra_args)
                 for arg in ("-c", f"{key}={value}")]
        if request.model:
            argv += ["-m", request.model]
        argv += list(request.extra_args)
        if request.native_id is not None:
            argv.append(request.native_id)
        prompt = with_instructions(request.prompt, request.instructions, request.first_turn)
        # `-` reads the prompt from stdin; with a prompt argument codex would append stdin to it
        return ToolCommand([*argv, "-"], stdin=prompt.encode("utf-8"))

    def interactive(self, request: TurnRequest) -> ToolCommand:
        """The codex TUI, resuming the thread when there is one."""
        argv = [request.executable]
        if request.native_id is not None:
            argv += ["resume", request.native_id]
        if request.model:
            argv += ["-m", request.model]
        return ToolCommand([*argv, *request.extra_args])

    def read_transcript(self, config_dir: Path, native_id: str) -> list[TypedTurn]:
        """The turns a person typed in an attached session, from codex's own session files (read as hostile)."""
        return _transcript_turns(config_dir / "sessions", native_id)

    def parse(self, output: CapturedOutput, request: TurnRequest) -> ParsedTurn:
        """Thread id, last agent message, usage as a delta of the thread's cumulative counts."""
        native = request.native_id
        texts: list[str] = []
        totals: dict[str, Any] | None = None
        errors: list[str] = []
        seen = False
        for event in json_lines(output.stdout):
            seen = True
            kind = event.get("type")
            if kind == "thread.started":
                native = event.get("thread_id") or native
            elif kind == "item.completed":
                item = event.get("item") or {}
                if item.get("type") == "agent_message":
                    texts.append(str(item.get("text") or ""))
            elif kind == "turn.completed":
                totals = event.get("usage") or {}
            elif kind == "turn.failed":
                errors.append(str((event.get("error") or {}).get("message") or "turn failed"))
            elif kind == "error":
                errors.append(str(event.get("message") or "error"))
        if not seen:
            raise ParseError("no JSON events in codex's output")
        state = dict(request.adapter_state)
        usage = Usage()
        if totals is not None:
            previous = state.get("cumulative") or {}
            delta = {k: _delta(totals.get(k), previous.get(k)) for k in _COUNTERS}
            state["cumulative"] = {k: totals.get(k) for k in _COUNTERS}
            usage = _normalise(delta)
        if errors and totals is None:
            return ParsedTurn(text=texts[-1] if texts else "", native_id=native, usage=usage, is_error=True,
                              error=errors[-1], adapter_state=state)
        if not texts and totals is None:
            raise ParseError("codex produced no agent message")
        return ParsedTurn(text=texts[-1] if texts else "", native_id=native, usage=usage, adapter_state=state)


    def display(self, line: str) -> list[DisplayEvent]:
        """`exec --json` events: messages, reasoning, commands and their output, file changes, failures."""
        event = json_object(line)
        if event is None:
            return plain_display(line)
        kind = event.get("type")
        item = sub_object(event, "item")
        item_type = item.get("type")
        if kind == "item.started":
            if item_type == "command_execution":
                return [DisplayEvent("tool", str(item.get("command") or ""), "shell")]
            if item_type == "mcp_tool_call":
                name = f"{item.get('server') or 'mcp'}.{item.get('tool') or 'tool'}"
                return [DisplayEvent("tool", input_summary(item.get("arguments")), name)]
            if item_type == "web_search":
                return [DisplayEvent("tool", str(item.get("query") or ""), "web_search")]
            return []
        if kind == "item.completed":
            if item_type == "agent_message":
                return [DisplayEvent("text", str(item.get("text") or ""))]
            if item_type == "reasoning":
                return [DisplayEvent("note", str(item.get("text") or ""))]
            if item_type == "command_execution":
                code = item.get("exit_code")
                output = str(item.get("aggregated_output") or "").rstrip("\n")
                return [DisplayEvent("result" if code in (0, None) else "error",
                                     output + (f"\n(exit code {code})" if code not in (0, None) else ""), "shell")]
            if item_type == "file_change":
                changes = sub_list(item, "changes")
                paths = ", ".join(f"{c.get('kind', '')} {c.get('path', '')}".strip() for c in changes if isinstance(c, dict))
                return [DisplayEvent("tool", paths, "edit")]
            if item_type == "mcp_tool_call":
                return [DisplayEvent("error" if item.get("error") else "result", input_summary(item.get("result")))]
            if item_type == "error":  # codex's warnings (e.g. model metadata not found)
                return [DisplayEvent("note", str(item.get("message") or ""))]
            return []
        if kind == "thread.started":
            return [DisplayEvent("note", f"codex thread {event.get('thread_id') or ''}")]
        if kind == "turn.completed":
            return [DisplayEvent("note", "turn finished")]
        if kind == "turn.failed":
            return [DisplayEvent("error", str((event.get("error") or {}).get("message") or "turn failed"))]
        if kind == "error":
            return [DisplayEvent("error", str(event.get("message") or "error"))]
        return []


def quiet_switches(config_dir: Path, extra_args: tuple[str, ...]) -> list[tuple[str, str]]:
    """The QUIET_SWITCHES this profile leaves to agentbox: those its config.toml (top level or any
    `[profiles.*]` table, or a `-p NAME` file) and its extra arguments do not set."""
    documents = [_config(config_dir / "config.toml")]
    for flag, value in zip(extra_args, extra_args[1:], strict=False):
        if flag in ("-p", "--profile"):
            documents.append(_config(config_dir / f"{value}.config.toml"))
    layers = [d for document in documents for d in (document, *_tables(document.get("profiles")).values())]
    wanted = []
    for key, value in QUIET_SWITCHES:
        if any(_sets(layer, key) for layer in layers) or _names(extra_args, key):
            continue
        if key == "features.plugins" and any(table in layer for layer in layers for table in _USES_PLUGINS):
            continue
        wanted.append((key, value))
    return wanted


def _config(path: Path) -> dict[str, Any]:
    """A codex config file's tables ({} when it is missing, not a regular file, too large or not TOML:
    codex itself then reports the file, and agentbox's switches change nothing it would use)."""
    try:
        if path.is_symlink() or not path.is_file():
            return {}
        with path.open("rb") as handle:
            text = handle.read(MAX_CONFIG_BYTES + 1)
        if len(text) > MAX_CONFIG_BYTES:
            return {}
        return tomllib.loads(text.decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError):
        return {}


def _tables(value: object) -> dict[str, Mapping[str, Any]]:
    return {k: v for k, v in value.items() if isinstance(v, Mapping)} if isinstance(value, Mapping) else {}


def _sets(layer: Mapping[str, Any], dotted: str) -> bool:
    """Whether a config layer sets `dotted` (`a.b`: `[a] b = …`, or `a = { b = … }`)."""
    *parents, leaf = dotted.split(".")
    node: object = layer
    for part in parents:
        node = node.get(part) if isinstance(node, Mapping) else None
    return isinstance(node, Mapping) and leaf in node


def _names(extra_args: tuple[str, ...], dotted: str) -> bool:
    """Whether the extra arguments set `dotted` or a table holding it (`-c key=…`, `--config key=…`,
    `-ckey=…`, `--config=key=…`), or enable or disable it as a feature (`--enable NAME`)."""
    feature = dotted.removeprefix("features.") if dotted.startswith("features.") else None
    for flag, value in zip(("", *extra_args), extra_args, strict=False):
        if flag in ("-c", "--config"):
            setting: str | None = value
        elif value.startswith("--config="):
            setting = value.removeprefix("--config=")
        elif value.startswith("-c") and len(value) > 2:
            setting = value[2:]
        else:
            setting = None
        if setting is not None and "=" in setting:
            key = setting.split("=", 1)[0].strip()
            if key == dotted or dotted.startswith(f"{key}."):
                return True
        if feature is not None and (flag in ("--enable", "--disable") and value == feature
                                    or value in (f"--enable={feature}", f"--disable={feature}")):
            return True
    return False


def _delta(now: Any, before: Any) -> int | None:
    now_i = optional_int(now)
    if now_i is None:
        return None
    before_i = optional_int(before) or 0
    return now_i - before_i if now_i >= before_i else now_i


def _normalise(delta: dict[str, int | None]) -> Usage:
    """Codex counts cached input inside input and reasoning inside output; split them out."""
    raw_input, cached = delta["input_tokens"], delta["cached_input_tokens"]
    raw_output, reasoning = delta["output_tokens"], delta["reasoning_output_tokens"]
    return Usage(
        input_tokens=None if raw_input is None else raw_input - (cached or 0),
        cached_input_tokens=cached,
        cache_write_tokens=delta["cache_write_input_tokens"],
        output_tokens=None if raw_output is None else raw_output - (reasoning or 0),
        reasoning_tokens=reasoning,
    )


# ----------------------------------------------------------------------------- the transcript


def _transcript_turns(sessions: Path, native_id: str) -> list[TypedTurn]:
    """codex's rollout JSON lines: a user message starts a turn; `token_count` gives its usage."""
    path = _find_rollout(sessions, native_id)
    raw = read_transcript_file(path) if path is not None else None
    if raw is None:
        return []
    turns: list[dict[str, Any]] = []
    for line in raw.decode("utf-8", "replace").splitlines():
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):
            continue
        payload = event.get("payload") if isinstance(event, dict) else None
        if not isinstance(payload, dict):
            continue
        if event.get("type") == "response_item" and payload.get("type") == "message":
            texts = [str(b.get("text") or "") for b in payload.get("content") or []
                     if isinstance(b, dict) and b.get("type") in ("input_text", "output_text")]
            text = "\n".join(texts)
            if payload.get("role") == "user" and not text.lstrip().startswith("<"):  # context blocks are <tagged>
                turns.append({"prompt": text, "text": "", "usage": None})
            elif payload.get("role") == "assistant" and turns:
                turns[-1]["text"] = text
        elif event.get("type") == "event_msg" and payload.get("type") == "token_count" and turns:
            info = payload.get("info")
            last = info.get("last_token_usage") if isinstance(info, dict) else None
            if isinstance(last, dict):
                turns[-1]["usage"] = last
    return [TypedTurn(t["prompt"], t["text"], _codex_usage(t["usage"])) for t in turns]


def _codex_usage(last: dict[str, Any] | None) -> Usage:
    """codex counts cached input inside input and reasoning inside output: split them out."""
    if last is None:
        return Usage()
    raw_input, cached = optional_int(last.get("input_tokens")), optional_int(last.get("cached_input_tokens"))
    raw_output, reasoning = optional_int(last.get("output_tokens")), optional_int(last.get("reasoning_output_tokens"))
    return Usage(input_tokens=None if raw_input is None else raw_input - (cached or 0), cached_input_tokens=cached,
                 output_tokens=None if raw_output is None else raw_output - (reasoning or 0),
                 reasoning_tokens=reasoning)


def _find_rollout(sessions: Path, native_id: str) -> Path | None:
    """`sessions/YYYY/MM/DD/rollout-…-<id>.jsonl`, walking real directories only."""
    suffix = f"-{native_id}.jsonl"

    def walk(directory: Path, depth: int) -> Iterator[Path]:
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name, reverse=True)
        except OSError:
            return
        for entry in entries:
            if depth and entry.is_dir(follow_symlinks=False):
                yield from walk(Path(entry.path), depth - 1)
            elif not depth and entry.name.endswith(suffix) and entry.is_file(follow_symlinks=False):
                yield Path(entry.path)

    return next(walk(sessions, 3), None)
