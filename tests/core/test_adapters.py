"""The four CLI adapters, pure: the argv/env/stdin of every kind of turn, and parsing of
every output shape recorded in tests/fakes/NOTES.md (literal samples from the real tools),
error variants included. Unknown usage stays None, never 0.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentbox.core.runtimes import adapter_for
from agentbox.core.runtimes.base import CapturedOutput, ParseError, TurnRequest, Usage, optional_int
from agentbox.core.runtimes.claude import SYSTEM_PROMPT_FILE, ClaudeAdapter
from agentbox.core.runtimes.codex import CodexAdapter
from agentbox.core.runtimes.common import json_lines, with_instructions
from agentbox.core.runtimes.hermes import LAUNCHER, USAGE_FILE, HermesAdapter, python_of
from agentbox.core.runtimes.opencode import OpencodeAdapter
from agentbox.core.tools import AGENT_CLIS, TOOL_TABLE, TOOLS

SID = "0f49bb1b-4366-4aff-b25a-fad243ac5c83"
CWD = Path("/work/proj")
HOME = Path("/home/agent")


def req(tool: str, tmp: Path | None = None, **kw: Any) -> TurnRequest:
    """A TurnRequest with sensible defaults (a new session's first turn)."""
    base = Path(tmp) if tmp is not None else Path("/nonexistent")
    fields: dict[str, Any] = dict(
        prompt="do the thing", session_id=SID, native_id=None, first_turn=True, instructions=None,
        model=None, extra_args=(), read_only=False, cwd=CWD, home=HOME, scratch=base / "scratch",
        executable=f"/opt/bin/{tool}", config_dir=base / f"dot-{tool}",
    )
    fields.update(kw)
    return TurnRequest(**fields)


def out(stdout: str = "", stderr: str = "", exit_code: int | None = 0, scratch: Path | None = None) -> CapturedOutput:
    return CapturedOutput(stdout, stderr, exit_code, False, scratch or Path("/nonexistent/scratch"))


def jl(*events: dict[str, Any]) -> str:
    return "\n".join(json.dumps(e) for e in events) + "\n"


ALL_NONE = Usage()


# ============================================================================ shared helpers


def test_adapter_registry() -> None:
    assert isinstance(adapter_for("claude"), ClaudeAdapter)
    assert isinstance(adapter_for("codex"), CodexAdapter)
    assert isinstance(adapter_for("opencode"), OpencodeAdapter)
    assert isinstance(adapter_for("hermes"), HermesAdapter)
    for tool in TOOLS:
        assert adapter_for(tool).tool == tool
    for tool in AGENT_CLIS:
        assert adapter_for(tool).executable_name == TOOL_TABLE[tool].executable == tool


def test_usage_unknown_is_none_not_zero() -> None:
    assert not Usage().known and Usage().total_tokens is None
    assert Usage(output_tokens=0).known and Usage(output_tokens=0).total_tokens == 0
    full = Usage(1, 2, 3, 4, 5, 0.5)
    assert full.total_tokens == 15
    assert Usage.from_dict(full.as_dict()) == full
    assert Usage.from_dict(None) == Usage() and Usage.from_dict({"input_tokens": 3}) == Usage(input_tokens=3)


@pytest.mark.parametrize(("value", "expected"), [(None, None), (True, None), (False, None), ("12", None),
                                                 ([], None), (0, 0), (7, 7), (7.9, 7)])
def test_optional_int(value: Any, expected: int | None) -> None:
    assert optional_int(value) == expected


def test_json_lines_skips_noise() -> None:
    text = 'Reading additional input from stdin...\n{"a": 1}\n[1, 2]\n{broken\n  {"b": 2}  \n\n'
    assert list(json_lines(text)) == [{"a": 1}, {"b": 2}]


def test_with_instructions() -> None:
    assert with_instructions("p", "Be brief.\n", True) == "Be brief.\n\n---\n\np"
    assert with_instructions("p", "Be brief.", False) == "p"
    assert with_instructions("p", None, True) == "p" and with_instructions("p", "", True) == "p"


# ============================================================================ claude


class TestClaudeArgv:
    a = ClaudeAdapter()

    def test_new(self) -> None:
        cmd = self.a.build(req("claude"))
        assert cmd.argv == ["/opt/bin/claude", "-p", "--output-format", "stream-json", "--verbose", "--session-id", SID,
                            "--permission-mode", "bypassPermissions"]
        assert cmd.stdin == b"do the thing" and cmd.env == {}

    def test_resume(self) -> None:
        argv = self.a.build(req("claude", native_id=SID, first_turn=False)).argv
        assert argv[argv.index("-r") + 1] == SID
        assert "--session-id" not in argv

    def test_model_extra_args_and_instructions_file(self, tmp_path: Path) -> None:
        request = req("claude", tmp_path, model="sonnet", extra_args=("--add-dir", "/data"),
                      instructions="You build.")
        request.scratch.mkdir()
        cmd = self.a.build(request)
        argv = cmd.argv
        assert argv[argv.index("--model") + 1] == "sonnet"
        system_file = Path(argv[argv.index("--append-system-prompt-file") + 1])
        assert system_file == request.scratch / SYSTEM_PROMPT_FILE and system_file.read_text() == "You build."
        # a variadic option last in extra_args has no prompt argument to eat
        assert argv[-2:] == ["--add-dir", "/data"]
        assert cmd.stdin == b"do the thing"  # claude gets a system prompt, not a prepended one

    def test_instructions_only_on_first_turn(self, tmp_path: Path) -> None:
        request = req("claude", tmp_path, native_id=SID, first_turn=False, instructions="You build.")
        argv = self.a.build(request).argv
        assert "--append-system-prompt-file" not in argv and "You build." not in " ".join(argv)
        assert not request.scratch.exists()

    def test_read_only_denies_write_tools_in_one_argv_item(self) -> None:
        argv = self.a.build(req("claude", read_only=True)).argv
        # `--disallowedTools <tools...>` is variadic: as two items it swallowed the prompt
        assert "--disallowedTools=Edit,Write,NotebookEdit" in argv
        assert "--disallowedTools" not in argv

    def test_dash_prompt(self) -> None:
        cmd = self.a.build(req("claude", prompt="-v?"))
        assert "-v?" not in cmd.argv and cmd.stdin == b"-v?"

    def test_env_defaults(self) -> None:
        env = ClaudeAdapter.env_defaults
        assert env["IS_SANDBOX"] == "1"  # bypassPermissions as root
        assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
        assert env["DISABLE_TELEMETRY"] == env["DISABLE_AUTOUPDATER"] == env["DISABLE_ERROR_REPORTING"] == "1"

    def test_homes(self, tmp_path: Path) -> None:
        config = tmp_path / "dot-claude"
        (tmp_path / "dot-claude.json").write_text('{"oauthAccount": {"x": 1}}')  # agent-box v1 layout
        binds, env = self.a.homes(config, HOME)
        assert [(b.source, b.target) for b in binds] == [(config, HOME / ".claude")]
        assert env == {"CLAUDE_CONFIG_DIR": str(HOME / ".claude")}
        assert json.loads((config / ".claude.json").read_text()) == {"oauthAccount": {"x": 1}}

    def test_homes_ignores_empty_legacy_json(self, tmp_path: Path) -> None:
        (tmp_path / "dot-claude.json").write_text("{}\n")
        self.a.homes(tmp_path / "dot-claude", HOME)
        assert not (tmp_path / "dot-claude" / ".claude.json").exists()

    def test_interactive(self) -> None:
        cmd = self.a.interactive(req("claude", native_id=SID, first_turn=False, read_only=True))
        assert cmd.argv == ["/opt/bin/claude", "-r", SID, "--disallowedTools=Edit,Write,NotebookEdit"]
        assert self.a.interactive(req("claude")).argv == ["/opt/bin/claude", "--session-id", SID]

    def test_created_session(self, tmp_path: Path) -> None:
        request = req("claude", tmp_path)
        assert self.a.created_session(request) is None
        project = request.config_dir / "projects" / "-work-proj"
        project.mkdir(parents=True)
        (project / f"{SID}.jsonl").write_text("{}\n")
        assert self.a.created_session(request) == SID


# agent-clis.md, literal
CLAUDE_OK = ('{"type":"result","subtype":"success","is_error":false,"duration_ms":121,"num_turns":1,'
             '"result":"…final text…","stop_reason":"end_turn","session_id":"1111-5555",'
             '"total_cost_usd":0.00025125,'
             '"usage":{"input_tokens":11,"cache_creation_input_tokens":3,"cache_read_input_tokens":5,"output_tokens":7},'
             '"modelUsage":{"claude-opus-4-8[1m]":{"inputTokens":11,"outputTokens":7,"costUSD":0.00025125}}}')
# NOTES.md, the fake's 400
CLAUDE_400 = ('{"type":"result","subtype":"success","is_error":true,"api_error_status":400,"duration_ms":80,'
              '"num_turns":1,"result":"API Error: 400 fake bad request","session_id":"' + SID + '",'
              '"total_cost_usd":0,"usage":{"input_tokens":0,"cache_creation_input_tokens":0,'
              '"cache_read_input_tokens":0,"output_tokens":0}}')


class TestClaudeParse:
    a = ClaudeAdapter()

    def test_success(self) -> None:
        parsed = self.a.parse(out(CLAUDE_OK + "\n"), req("claude"))
        assert parsed.text == "…final text…" and parsed.native_id == "1111-5555"
        assert not parsed.is_error and parsed.error is None
        assert parsed.usage == Usage(input_tokens=11, cached_input_tokens=5, cache_write_tokens=3,
                                     output_tokens=7, reasoning_tokens=None, cost_usd=0.00025125)

    def test_is_error_with_subtype_success(self) -> None:
        parsed = self.a.parse(out(CLAUDE_400 + "\n", exit_code=1), req("claude"))
        assert parsed.is_error and parsed.error == "API Error: 400 fake bad request"
        assert parsed.native_id == SID

    def test_is_error_without_text_reports_subtype(self) -> None:
        line = json.dumps({"type": "result", "subtype": "error_max_turns", "is_error": True, "session_id": SID})
        parsed = self.a.parse(out(line), req("claude"))
        assert parsed.is_error and parsed.error == "error_max_turns" and parsed.text == ""

    def test_missing_usage_and_cost_stay_unknown(self) -> None:
        line = json.dumps({"type": "result", "subtype": "success", "is_error": False, "result": "hi"})
        parsed = self.a.parse(out(line), req("claude"))
        assert parsed.usage == ALL_NONE
        assert parsed.native_id == SID  # falls back to the id agentbox chose

    def test_last_result_wins_and_noise_is_skipped(self) -> None:
        first = json.dumps({"type": "result", "result": "old", "session_id": SID})
        stdout = "some warning\n" + json.dumps({"type": "system", "subtype": "init"}) + "\n" + first + "\n" + CLAUDE_OK
        assert self.a.parse(out(stdout), req("claude")).text == "…final text…"

    @pytest.mark.parametrize("stdout", ["", "Error: Invalid session ID\n", '{"type":"system"}\n', "{not json",
                                        "\x00\xff garbage " * 50])
    def test_garbage_is_a_parse_error(self, stdout: str) -> None:
        with pytest.raises(ParseError):
            self.a.parse(out(stdout, exit_code=1), req("claude"))


# ============================================================================ codex


class TestCodexArgv:
    a = CodexAdapter()

    def test_new(self) -> None:
        cmd = self.a.build(req("codex"))
        assert cmd.argv == ["/opt/bin/codex", "exec", "--json", "--skip-git-repo-check",
                            "--dangerously-bypass-approvals-and-sandbox", *QUIET, "-"]
        assert cmd.stdin == b"do the thing" and cmd.env == {}

    def test_resume_options_after_resume(self) -> None:
        argv = self.a.build(req("codex", native_id="thr-1", first_turn=False, model="m1",
                                extra_args=("-c", "x=1"))).argv
        assert argv[:3] == ["/opt/bin/codex", "exec", "resume"]
        assert argv[3:] == ["--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
                            *QUIET, "-m", "m1", "-c", "x=1", "thr-1", "-"]

    def test_model_and_extra_args_new(self) -> None:
        argv = self.a.build(req("codex", model="gpt-x", extra_args=("--oss",))).argv
        assert argv[-4:] == ["-m", "gpt-x", "--oss", "-"]

    def test_read_only_relies_on_the_mount_not_codex_sandbox(self) -> None:
        argv = self.a.build(req("codex", read_only=True)).argv
        assert "--dangerously-bypass-approvals-and-sandbox" in argv
        assert "-s" not in argv

    def test_instructions_prepended_on_first_turn_only(self) -> None:
        first = self.a.build(req("codex", instructions="You build.")).stdin
        assert first == b"You build.\n\n---\n\ndo the thing"
        later = self.a.build(req("codex", native_id="t", first_turn=False, instructions="You build.")).stdin
        assert later == b"do the thing"

    def test_dash_prompt(self) -> None:
        cmd = self.a.build(req("codex", prompt="--help me"))
        assert cmd.argv[-1] == "-" and cmd.stdin == b"--help me"
        resumed = self.a.build(req("codex", native_id="t", first_turn=False, prompt="-x"))
        assert resumed.argv[-2:] == ["t", "-"] and resumed.stdin == b"-x"

    def test_homes_and_env(self) -> None:
        binds, env = self.a.homes(Path("/p/dot-codex"), HOME)
        assert [(b.source, b.target) for b in binds] == [(Path("/p/dot-codex"), HOME / ".codex")]
        assert env == {"CODEX_HOME": str(HOME / ".codex")}
        assert CodexAdapter.env_defaults == {}

    def test_interactive(self) -> None:
        argv = self.a.interactive(req("codex", native_id="thr", first_turn=False, model="m")).argv
        assert argv == ["/opt/bin/codex", "resume", "thr", "-m", "m"]


QUIET = ["-c", "analytics.enabled=false", "-c", "features.plugins=false"]
"""The side-traffic switches a headless codex turn gets from a profile that sets neither."""


class TestCodexQuietSwitches:
    """Analytics and the plugin system's start-up sync are off unless the profile says otherwise."""

    a = CodexAdapter()

    def switches(self, tmp_path: Path, config: str | None = None, extra: tuple[str, ...] = (),
                 files: dict[str, str] | None = None) -> list[str]:
        home = tmp_path / "dot-codex"
        home.mkdir(exist_ok=True)
        if config is not None:
            (home / "config.toml").write_text(config)
        for name, text in (files or {}).items():
            (home / name).write_text(text)
        argv = self.a.build(req("codex", tmp_path, extra_args=extra)).argv
        return [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "-c" and argv[i + 1] in
                ("analytics.enabled=false", "features.plugins=false")]

    def test_a_plain_profile_gets_both(self, tmp_path: Path) -> None:
        assert self.switches(tmp_path, 'model = "m"\n[model_providers.fake]\nbase_url = "http://x"\n') == \
            ["analytics.enabled=false", "features.plugins=false"]
        argv = self.a.build(req("codex", tmp_path / "no-such-dir")).argv  # no config dir at all
        assert argv[5:9] == QUIET

    @pytest.mark.parametrize("config", [
        "[analytics]\nenabled = true\n",
        "analytics = { enabled = true }\n",
        '[profiles.work.analytics]\nenabled = true\n',
    ])
    def test_analytics_set_by_the_profile_is_left_alone(self, tmp_path: Path, config: str) -> None:
        assert self.switches(tmp_path, config) == ["features.plugins=false"]

    @pytest.mark.parametrize("config", [
        "[features]\nplugins = true\n",
        '[plugins."github@openai-curated"]\nenabled = true\n',
        "[marketplaces.mine]\nsource = \"git\"\n",
        "[profiles.p.features]\nplugins = true\n",
    ])
    def test_a_profile_using_plugins_keeps_them(self, tmp_path: Path, config: str) -> None:
        assert self.switches(tmp_path, config) == ["analytics.enabled=false"]

    @pytest.mark.parametrize("extra", [
        ("-c", "analytics.enabled=true"), ("--config", "analytics={enabled=true}"), ("-canalytics.enabled=true",),
        ("--config=analytics.enabled=true",),
    ])
    def test_extra_args_setting_analytics_win(self, tmp_path: Path, extra: tuple[str, ...]) -> None:
        assert self.switches(tmp_path, extra=extra) == ["features.plugins=false"]

    @pytest.mark.parametrize("extra", [
        ("--enable", "plugins"), ("--disable", "plugins"), ("--enable=plugins",), ("-c", "features.plugins=true"),
        ("-c", "features={plugins=true}"),
    ])
    def test_extra_args_naming_plugins_win(self, tmp_path: Path, extra: tuple[str, ...]) -> None:
        assert self.switches(tmp_path, extra=extra) == ["analytics.enabled=false"]

    def test_a_codex_profile_file_chosen_by_extra_args_counts(self, tmp_path: Path) -> None:
        files = {"work.config.toml": "[analytics]\nenabled = true\n"}
        assert self.switches(tmp_path, extra=("-p", "work"), files=files) == ["features.plugins=false"]
        assert self.switches(tmp_path, extra=("-c", "x=1"), files=files) == \
            ["analytics.enabled=false", "features.plugins=false"]

    def test_unrelated_arguments_do_not_count(self, tmp_path: Path) -> None:
        assert self.switches(tmp_path, extra=("--enable", "apps", "-c", "analytics_x=1", "analytics.enabled=true")) \
            == ["analytics.enabled=false", "features.plugins=false"]

    @pytest.mark.parametrize("config", ["not = [toml", "\xff"])
    def test_an_unreadable_config_sets_nothing_and_raises_nothing(self, tmp_path: Path, config: str) -> None:
        home = tmp_path / "dot-codex"
        home.mkdir()
        (home / "config.toml").write_bytes(config.encode("latin-1"))
        assert self.switches(tmp_path) == ["analytics.enabled=false", "features.plugins=false"]

    def test_a_symlinked_config_is_not_followed(self, tmp_path: Path) -> None:
        (tmp_path / "elsewhere.toml").write_text("[analytics]\nenabled = true\n")
        home = tmp_path / "dot-codex"
        home.mkdir()
        (home / "config.toml").symlink_to(tmp_path / "elsewhere.toml")
        assert self.switches(tmp_path) == ["analytics.enabled=false", "features.plugins=false"]

    def test_the_person_s_interactive_codex_is_left_as_configured(self, tmp_path: Path) -> None:
        assert "-c" not in self.a.interactive(req("codex", tmp_path)).argv


THREAD = "01a22833-ee78-7a23-ac0c-7f82fb33ba17"
CODEX_WARNING = {"type": "item.completed", "item": {"id": "item_0", "type": "error",
                                                    "message": "Model metadata for `fake-model` not found. Defaulting to fallback metadata; this can degrade performance and cause issues."}}


def codex_turn(text: str, usage: dict[str, Any] | None, thread: str = THREAD) -> str:
    events: list[dict[str, Any]] = [{"type": "thread.started", "thread_id": thread}, CODEX_WARNING,
                                    {"type": "turn.started"},
                                    {"type": "item.completed", "item": {"id": "item_1", "type": "agent_message", "text": text}}]
    if usage is not None:
        events.append({"type": "turn.completed", "usage": usage})
    return "Reading additional input from stdin...\n" + jl(*events)


def codex_usage(inp: int, cached: int, output: int, reasoning: int = 0, write: int = 0) -> dict[str, int]:
    return {"input_tokens": inp, "cached_input_tokens": cached, "cache_write_input_tokens": write,
            "output_tokens": output, "reasoning_output_tokens": reasoning}


class TestCodexParse:
    a = CodexAdapter()

    def test_literal_shape_warning_item_is_not_a_failure(self) -> None:
        parsed = self.a.parse(out(codex_turn("…final text…", codex_usage(13, 4, 6))), req("codex"))
        assert not parsed.is_error and parsed.error is None
        assert parsed.text == "…final text…" and parsed.native_id == THREAD
        # cached input split out of codex's input (13 = 9 uncached + 4 cached)
        assert parsed.usage == Usage(input_tokens=9, cached_input_tokens=4, cache_write_tokens=0,
                                     output_tokens=6, reasoning_tokens=0, cost_usd=None)
        assert parsed.adapter_state == {"cumulative": codex_usage(13, 4, 6)}

    def test_cumulative_to_per_turn_deltas_across_two_turns(self) -> None:
        t1 = self.a.parse(out(codex_turn("one", codex_usage(13, 4, 6))), req("codex"))
        resumed = req("codex", native_id=THREAD, first_turn=False, adapter_state=t1.adapter_state)
        t2 = self.a.parse(out(codex_turn("two", codex_usage(26, 8, 12))), resumed)
        assert t2.usage == Usage(input_tokens=9, cached_input_tokens=4, cache_write_tokens=0,
                                 output_tokens=6, reasoning_tokens=0)
        assert t2.native_id == THREAD
        # a tool turn of two requests after that: 52 cumulative → this turn 26 (18 + 8)
        t3 = self.a.parse(out(codex_turn("three", codex_usage(52, 16, 24))),
                          req("codex", native_id=THREAD, first_turn=False, adapter_state=t2.adapter_state))
        assert (t3.usage.input_tokens, t3.usage.cached_input_tokens, t3.usage.output_tokens) == (18, 8, 12)
        assert t3.adapter_state["cumulative"]["input_tokens"] == 52

    def test_reasoning_split_out_of_output(self) -> None:
        parsed = self.a.parse(out(codex_turn("r", codex_usage(20, 5, 30, reasoning=12, write=3))), req("codex"))
        assert parsed.usage == Usage(input_tokens=15, cached_input_tokens=5, cache_write_tokens=3,
                                     output_tokens=18, reasoning_tokens=12)

    def test_missing_counters_stay_unknown(self) -> None:
        parsed = self.a.parse(out(codex_turn("x", {"input_tokens": 10, "output_tokens": 3})), req("codex"))
        assert parsed.usage == Usage(input_tokens=10, cached_input_tokens=None, cache_write_tokens=None,
                                     output_tokens=3, reasoning_tokens=None)
        empty = self.a.parse(out(codex_turn("x", {})), req("codex"))
        assert empty.usage == ALL_NONE and not empty.usage.known

    def test_no_turn_completed_means_unknown_usage(self) -> None:
        parsed = self.a.parse(out(codex_turn("x", None)), req("codex"))
        assert parsed.text == "x" and parsed.usage == ALL_NONE and not parsed.is_error

    def test_counter_reset_is_taken_as_is(self) -> None:
        state = {"cumulative": codex_usage(100, 40, 60)}
        parsed = self.a.parse(out(codex_turn("x", codex_usage(13, 4, 6))),
                              req("codex", native_id=THREAD, first_turn=False, adapter_state=state))
        assert (parsed.usage.input_tokens, parsed.usage.output_tokens) == (9, 6)

    def test_resume_without_thread_started_keeps_native_id(self) -> None:
        stdout = jl({"type": "item.completed", "item": {"type": "agent_message", "text": "hi"}},
                    {"type": "turn.completed", "usage": codex_usage(13, 4, 6)})
        parsed = self.a.parse(out(stdout), req("codex", native_id="thr-old", first_turn=False))
        assert parsed.native_id == "thr-old"

    def test_last_agent_message_is_the_answer(self) -> None:
        stdout = jl({"type": "thread.started", "thread_id": THREAD},
                    {"type": "item.completed", "item": {"type": "agent_message", "text": "working on it"}},
                    {"type": "item.completed", "item": {"type": "command_execution", "command": "ls", "exit_code": 0}},
                    {"type": "item.completed", "item": {"type": "agent_message", "text": "done"}},
                    {"type": "turn.completed", "usage": codex_usage(52, 16, 24)})
        assert self.a.parse(out(stdout), req("codex")).text == "done"

    def test_turn_failed(self) -> None:
        raw = '{"error": {"message": "fake bad request", "type": "invalid_request_error", "code": null}}'
        stdout = jl({"type": "thread.started", "thread_id": THREAD}, CODEX_WARNING, {"type": "turn.started"},
                    {"type": "error", "message": raw}, {"type": "turn.failed", "error": {"message": raw}})
        parsed = self.a.parse(out(stdout, exit_code=1), req("codex"))
        assert parsed.is_error and "fake bad request" in (parsed.error or "")
        assert parsed.native_id == THREAD and parsed.usage == ALL_NONE

    def test_top_level_error_event_alone(self) -> None:
        parsed = self.a.parse(out(jl({"type": "error", "message": "stream disconnected"}), exit_code=1), req("codex"))
        assert parsed.is_error and parsed.error == "stream disconnected"

    def test_error_event_followed_by_completion_is_not_a_failure(self) -> None:
        stdout = jl({"type": "thread.started", "thread_id": THREAD},
                    {"type": "error", "message": "Reconnecting... 1/5"},
                    {"type": "item.completed", "item": {"type": "agent_message", "text": "fine"}},
                    {"type": "turn.completed", "usage": codex_usage(13, 4, 6)})
        parsed = self.a.parse(out(stdout), req("codex"))
        assert not parsed.is_error and parsed.text == "fine"

    @pytest.mark.parametrize("stdout", ["", "Reading additional input from stdin...\n", "panic: oh no\n",
                                        jl({"type": "thread.started", "thread_id": THREAD})])
    def test_garbage_is_a_parse_error(self, stdout: str) -> None:
        with pytest.raises(ParseError):
            self.a.parse(out(stdout, exit_code=1), req("codex"))


# ============================================================================ opencode


class TestOpencodeArgv:
    a = OpencodeAdapter()

    def test_new_prompt_on_stdin(self) -> None:
        cmd = self.a.build(req("opencode"))
        assert cmd.argv == ["/opt/bin/opencode", "run", "--format", "json", "--auto"]
        assert cmd.stdin == b"do the thing"
        assert set(cmd.env) == {"OPENCODE_CONFIG_CONTENT", "XDG_CACHE_HOME"}
        assert Path(cmd.env["XDG_CACHE_HOME"]).parent == req("opencode").scratch  # a new cache every turn

    def test_resume_session_and_dir(self) -> None:
        cmd = self.a.build(req("opencode", native_id="ses_abc", first_turn=False, model="fake/fake-model",
                               extra_args=("--print-logs",)))
        assert cmd.argv == ["/opt/bin/opencode", "run", "--format", "json", "--auto", "-s", "ses_abc",
                            "--dir", str(CWD), "-m", "fake/fake-model", "--print-logs"]
        assert cmd.stdin == b"do the thing"

    def test_instructions_prepended_on_first_turn_only(self) -> None:
        assert self.a.build(req("opencode", instructions="Rules.")).stdin == b"Rules.\n\n---\n\ndo the thing"
        resumed = self.a.build(req("opencode", native_id="ses_a", first_turn=False, instructions="Rules."))
        assert resumed.stdin == b"do the thing"

    def test_prompt_with_spaces_and_dashes_never_in_argv(self) -> None:
        cmd = self.a.build(req("opencode", prompt="-- two words"))
        assert "-- two words" not in cmd.argv and cmd.stdin == b"-- two words"

    def test_read_only(self) -> None:
        cmd = self.a.build(req("opencode", read_only=True))
        assert "--auto" not in cmd.argv
        config = json.loads(cmd.env["OPENCODE_CONFIG_CONTENT"])
        assert config["permission"]["edit"] == "deny"
        assert config["agent"]["title"]["disable"] is True

    @pytest.mark.parametrize("resumed", [False, True], ids=["new", "resume"])
    def test_headless_turns_remove_the_title_agent(self, resumed: bool) -> None:
        """Its title request is a model call opencode leaves out of the turn's usage."""
        native = {"native_id": "ses_a", "first_turn": False} if resumed else {}
        config = json.loads(self.a.build(req("opencode", **native)).env["OPENCODE_CONFIG_CONTENT"])
        assert config == {"agent": {"title": {"disable": True}}, "snapshot": False}

    def test_homes_and_env(self) -> None:
        binds, env = self.a.homes(Path("/p/dot-opencode"), HOME)
        target = HOME / ".config" / "opencode"
        assert [(b.source, b.target) for b in binds] == [(Path("/p/dot-opencode"), target)]
        assert env["XDG_CONFIG_HOME"] == str(HOME / ".config")
        for key in ("XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
            assert Path(env[key]).is_relative_to(target)  # sessions persist in the profile
        assert OpencodeAdapter.env_defaults == {"OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1",
                                                "OPENCODE_DISABLE_LSP_DOWNLOAD": "1"}

    def test_interactive(self) -> None:
        argv = self.a.interactive(req("opencode", native_id="ses_a", first_turn=False)).argv
        assert argv == ["/opt/bin/opencode", str(CWD), "-s", "ses_a"]


SES = "ses_dd7c0ffee"


def oc_step(text: str | None, reason: str, tokens: dict[str, Any] | None = None, cost: Any = 0,
            tool: bool = False) -> list[dict[str, Any]]:
    tokens = tokens if tokens is not None else {"total": 19, "input": 9, "output": 6, "reasoning": 0,
                                                "cache": {"write": 0, "read": 4}}
    events: list[dict[str, Any]] = [{"type": "step_start", "sessionID": SES, "part": {"type": "step-start"}}]
    if text is not None:
        events.append({"type": "text", "sessionID": SES, "part": {"type": "text", "text": text}})
    if tool:
        events.append({"type": "tool_use", "sessionID": SES, "part": {
            "type": "tool", "tool": "bash", "callID": "call_fake_3_0",
            "state": {"status": "completed", "input": {"command": "echo hi"}, "output": "hi\n"}}})
    events.append({"type": "step_finish", "sessionID": SES,
                   "part": {"reason": reason, "tokens": tokens, "cost": cost}})
    return events


class TestOpencodeParse:
    a = OpencodeAdapter()

    def test_literal_shape(self) -> None:
        parsed = self.a.parse(out(jl(*oc_step("…final text…", "stop"))), req("opencode"))
        assert parsed.text == "…final text…" and parsed.native_id == SES and not parsed.is_error
        # cost 0 (no cost table for the model) is unknown, not free
        assert parsed.usage == Usage(input_tokens=9, cached_input_tokens=4, cache_write_tokens=0,
                                     output_tokens=6, reasoning_tokens=0, cost_usd=None)

    def test_tool_turn_last_step_text_and_summed_tokens(self) -> None:
        stdout = jl(*oc_step("Let me run that.", "tool-calls", tool=True),
                    *oc_step("echo: made-by-opencode\n", "stop"))
        parsed = self.a.parse(out(stdout), req("opencode"))
        assert parsed.text == "echo: made-by-opencode"
        assert parsed.usage == Usage(input_tokens=18, cached_input_tokens=8, cache_write_tokens=0,
                                     output_tokens=12, reasoning_tokens=0, cost_usd=None)

    def test_text_split_over_events_is_joined(self) -> None:
        events = oc_step("part one, ", "stop")
        events.insert(2, {"type": "text", "sessionID": SES, "part": {"type": "text", "text": "part two"}})
        assert self.a.parse(out(jl(*events)), req("opencode")).text == "part one, part two"

    def test_cost_summed_when_reported(self) -> None:
        stdout = jl(*oc_step(None, "tool-calls", cost=0.001, tool=True), *oc_step("ok", "stop", cost=0.002))
        assert self.a.parse(out(stdout), req("opencode")).usage.cost_usd == pytest.approx(0.003)

    def test_missing_tokens_stay_unknown(self) -> None:
        parsed = self.a.parse(out(jl(*oc_step("x", "stop", tokens={"input": 5}))), req("opencode"))
        assert parsed.usage == Usage(input_tokens=5)
        none = self.a.parse(out(jl(*oc_step("x", "stop", tokens={}))), req("opencode"))
        assert none.usage == ALL_NONE

    def test_error_event(self) -> None:
        line = {"type": "error", "sessionID": SES, "error": {"name": "APIError", "data": {
            "message": "fake bad request", "statusCode": 400, "isRetryable": False}}}
        parsed = self.a.parse(out(jl(line), exit_code=1), req("opencode"))
        assert parsed.is_error and parsed.error == "fake bad request" and parsed.native_id == SES
        assert parsed.usage == ALL_NONE

    def test_error_event_without_message_uses_name(self) -> None:
        line = {"type": "error", "error": {"name": "ProviderAuthError"}}
        parsed = self.a.parse(out(jl(line), exit_code=1), req("opencode", native_id="ses_x", first_turn=False))
        assert parsed.error == "ProviderAuthError" and parsed.native_id == "ses_x"

    @pytest.mark.parametrize("stdout", ["", "Error: Session not found\n", "\x1b[31mboom\x1b[0m", "[1,2,3]\n"])
    def test_garbage_is_a_parse_error(self, stdout: str) -> None:
        with pytest.raises(ParseError):
            self.a.parse(out(stdout, exit_code=1), req("opencode"))


# ============================================================================ hermes


def hermes_script(tmp_path: Path, body: str = "import sys\n") -> str:
    """A hermes entry script as pip writes it (a `#!` line naming its venv's Python)."""
    script = tmp_path / "venv" / "bin" / "hermes"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(f"#!{sys.executable}\n{body}")
    script.chmod(0o755)
    return str(script)


class TestHermesArgv:
    a = HermesAdapter()

    def test_new_uses_oneshot_through_the_launcher(self, tmp_path: Path) -> None:
        script = hermes_script(tmp_path)
        request = req("hermes", tmp_path, executable=script)
        cmd = self.a.build(request)
        assert cmd.argv == [sys.executable, "-c", LAUNCHER, "--oneshot", script,
                            "--usage-file", str(request.scratch / USAGE_FILE)]
        assert cmd.stdin == b"do the thing"
        assert cmd.env == {"HERMES_YOLO_MODE": "1"}

    def test_resume_uses_chat_query(self, tmp_path: Path) -> None:
        script = hermes_script(tmp_path)
        cmd = self.a.build(req("hermes", native_id="20261129_165312_df19ca", first_turn=False, executable=script))
        assert cmd.argv == [sys.executable, "-c", LAUNCHER, "--query", script, "chat", "-Q", "--yolo",
                            "--resume", "20261129_165312_df19ca"]
        assert "--usage-file" not in cmd.argv and "--oneshot" not in cmd.argv  # -z ignores --resume in 0.19.0
        assert cmd.stdin == b"do the thing"

    def test_model_and_extra_args(self, tmp_path: Path) -> None:
        script = hermes_script(tmp_path)
        new = self.a.build(req("hermes", model="fake-model", extra_args=("--provider", "custom"),
                               executable=script)).argv
        assert new[-4:] == ["-m", "fake-model", "--provider", "custom"]
        resumed = self.a.build(req("hermes", native_id="s", first_turn=False, model="fake-model",
                                   executable=script)).argv
        assert resumed[-2:] == ["-m", "fake-model"]

    def test_instructions_prepended_on_first_turn_only(self, tmp_path: Path) -> None:
        script = hermes_script(tmp_path)
        assert self.a.build(req("hermes", instructions="Rules.", executable=script)).stdin == \
            b"Rules.\n\n---\n\ndo the thing"
        resumed = self.a.build(req("hermes", native_id="s", first_turn=False, instructions="Rules.",
                                   executable=script))
        assert resumed.stdin == b"do the thing"

    def test_not_a_python_script_gets_the_prompt_as_an_argument(self) -> None:
        # /opt/bin/hermes does not exist: no interpreter to run the launcher with
        cmd = self.a.build(req("hermes", prompt="-dash first"))
        assert cmd.argv[-1] == "--oneshot=-dash first" and cmd.stdin is None

    @pytest.mark.parametrize(("head", "expected"), [
        ("#!/venv/bin/python3.11\n", ["/venv/bin/python3.11"]),
        ("#!/usr/bin/env python3\n", ["/usr/bin/env", "python3"]),
        ("#!/bin/sh\n'''exec' \"/a/very/long/venv/bin/python\" \"$0\" \"$@\"\n' '''\n", ["/a/very/long/venv/bin/python"]),
        ("#!/bin/sh\nexec node x\n", None),
        ("\x7fELF", None),
    ])
    def test_python_of(self, tmp_path: Path, head: str, expected: list[str] | None) -> None:
        path = tmp_path / "hermes"
        path.write_text(head)
        assert python_of(str(path)) == expected
        assert python_of(str(tmp_path / "missing")) is None

    def test_launcher_hands_hermes_the_prompt_inside_the_process_only(self, tmp_path: Path) -> None:
        """The entry script sees the prompt in sys.argv; the kernel's command line never holds it."""
        report = tmp_path / "report.json"
        body = ("import json, os, sys\n"
                "cmdline = open('/proc/self/cmdline', 'rb').read().decode()\n"
                f"json.dump({{'argv': sys.argv, 'path0': sys.path[0], 'cmdline': cmdline}}, open({str(report)!r}, 'w'))\n")
        script = hermes_script(tmp_path, body)
        (tmp_path / "work").mkdir()
        cmd = self.a.build(req("hermes", tmp_path, prompt="-rf ünïcode\nline two", executable=script, model="m"))
        done = subprocess.run(cmd.argv, input=cmd.stdin, cwd=tmp_path / "work", capture_output=True, timeout=30)
        assert done.returncode == 0, done.stderr
        seen = json.loads(report.read_text())
        assert seen["argv"] == [script, "--usage-file", str(tmp_path / "scratch" / USAGE_FILE), "-m", "m",
                                "--oneshot=-rf ünïcode\nline two"]
        assert "ünïcode" not in seen["cmdline"] and "-rf" not in seen["cmdline"]
        assert seen["path0"] == os.path.dirname(script)  # not the agent's cwd

    def test_launcher_imports_nothing_from_the_agents_project(self, tmp_path: Path) -> None:
        """A `runpy.py` (or `httpx.py`) a turn wrote into the project is not what the launcher imports."""
        script = hermes_script(tmp_path, "print('entry script ran')\n")
        work = tmp_path / "work"
        work.mkdir()
        planted = tmp_path / "planted"
        for module in ("runpy", "httpx", "importlib"):
            (work / f"{module}.py").write_text(f"open({str(planted)!r}, 'a').write({module!r})\n")
        cmd = self.a.build(req("hermes", tmp_path, executable=script))
        done = subprocess.run(cmd.argv, input=cmd.stdin, cwd=work, capture_output=True, timeout=30)
        assert done.returncode == 0, done.stderr
        assert done.stdout == b"entry script ran\n"
        assert not planted.exists(), planted.read_text()

    @pytest.mark.parametrize("resumed", [False, True], ids=["new", "resume"])
    def test_read_only_narrows_toolsets_on_new_and_resumed_turns(self, tmp_path: Path, resumed: bool) -> None:
        script = hermes_script(tmp_path)
        native = {"native_id": HERMES_ID, "first_turn": False} if resumed else {}
        reader = self.a.build(req("hermes", read_only=True, executable=script, **native))
        writer = self.a.build(req("hermes", executable=script, **native))
        toolsets = reader.argv[reader.argv.index("--toolsets") + 1].split(",")
        assert not {"file", "code_execution", "delegation", "skills", "memory"} & set(toolsets), toolsets
        assert "--toolsets" not in writer.argv
        assert reader.env == writer.env == {"HERMES_YOLO_MODE": "1"}  # -z sets it itself anyway
        assert ("--yolo" in reader.argv) is ("--yolo" in writer.argv) is resumed
        interactive = self.a.interactive(req("hermes", read_only=True, **native))
        assert "--toolsets" in interactive.argv

    def test_homes_and_env(self) -> None:
        binds, env = self.a.homes(Path("/p/dot-hermes"), HOME)
        assert [(b.source, b.target) for b in binds] == [(Path("/p/dot-hermes"), HOME / ".hermes")]
        assert env == {"HERMES_HOME": str(HOME / ".hermes")}
        assert HermesAdapter.env_defaults == {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "HERMES_DISABLE_LAZY_INSTALLS": "1"}

    def test_interactive(self) -> None:
        assert self.a.interactive(req("hermes", native_id="s1", first_turn=False)).argv == [
            "/opt/bin/hermes", "chat", "--resume", "s1"]


HERMES_ID = "20261129_175616_396f74"
HERMES_USAGE_OK = {"estimated_cost_usd": 0.0, "cost_status": "unknown", "cost_source": "none", "input_tokens": 9,
                   "output_tokens": 6, "cache_read_tokens": 4, "cache_write_tokens": 0, "reasoning_tokens": 0,
                   "total_tokens": 19, "api_calls": 1, "model": "fake-model", "provider": "custom",
                   "session_id": HERMES_ID, "completed": True, "failed": False, "service_tier": None}
HERMES_USAGE_FAILED = {"estimated_cost_usd": None, "cost_status": "unknown", "input_tokens": None,
                       "output_tokens": None, "cache_read_tokens": None, "cache_write_tokens": None,
                       "reasoning_tokens": None, "total_tokens": None, "session_id": None,
                       "completed": False, "failed": True}

#: The counter columns of hermes 0.19.0's `sessions` table (its full schema has ~45 columns).
STATE_SCHEMA = """CREATE TABLE sessions (
    id TEXT PRIMARY KEY, source TEXT NOT NULL, model TEXT, started_at REAL NOT NULL,
    message_count INTEGER DEFAULT 0, tool_call_count INTEGER DEFAULT 0,
    input_tokens INTEGER DEFAULT 0, output_tokens INTEGER DEFAULT 0,
    cache_read_tokens INTEGER DEFAULT 0, cache_write_tokens INTEGER DEFAULT 0,
    reasoning_tokens INTEGER DEFAULT 0, estimated_cost_usd REAL, actual_cost_usd REAL,
    cost_status TEXT, cost_source TEXT, api_call_count INTEGER DEFAULT 0)"""


def hermes_db(config_dir: Path, session: str = HERMES_ID, **counters: Any) -> None:
    """Create or update $HERMES_HOME/state.db with one session's cumulative counters."""
    config_dir.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(config_dir / "state.db") as conn:
        conn.execute("PRAGMA journal_mode=WAL")  # as hermes keeps it
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name='sessions'").fetchone():
            conn.execute(STATE_SCHEMA)
        conn.execute("INSERT OR IGNORE INTO sessions (id, source, model, started_at) VALUES (?, 'cli', 'fake-model', 0)",
                     (session,))
        values = {"cost_status": "unknown", "estimated_cost_usd": 0.0, **counters}
        sets = ", ".join(f"{k} = ?" for k in values)
        conn.execute(f"UPDATE sessions SET {sets} WHERE id = ?", (*values.values(), session))
    conn.close()


RESUMED_STDERR = (f"↻ Resumed session {HERMES_ID} (1 user message, 2 total messages)\n\n"
                  f"session_id: {HERMES_ID}\n")


class TestHermesParse:
    a = HermesAdapter()

    def _new(self, tmp_path: Path, usage: dict[str, Any] | None, stdout: str = "echo: alpha one\n",
             exit_code: int = 0) -> tuple[Any, TurnRequest]:
        request = req("hermes", tmp_path)
        request.scratch.mkdir(parents=True, exist_ok=True)
        if usage is not None:
            (request.scratch / USAGE_FILE).write_text(json.dumps(usage, indent=2))
        return self.a.parse(out(stdout, exit_code=exit_code, scratch=request.scratch), request), request

    def test_new_turn_usage_file(self, tmp_path: Path) -> None:
        hermes_db(tmp_path / "dot-hermes", input_tokens=9, output_tokens=6, cache_read_tokens=4)
        parsed, _ = self._new(tmp_path, HERMES_USAGE_OK)
        assert parsed.text == "echo: alpha one" and parsed.native_id == HERMES_ID and not parsed.is_error
        assert parsed.usage == Usage(input_tokens=9, cached_input_tokens=4, cache_write_tokens=0,
                                     output_tokens=6, reasoning_tokens=0, cost_usd=None)  # cost_status unknown
        assert parsed.adapter_state["cumulative"]["input_tokens"] == 9

    def test_new_turn_with_known_cost(self, tmp_path: Path) -> None:
        parsed, _ = self._new(tmp_path, {**HERMES_USAGE_OK, "estimated_cost_usd": 0.0123, "cost_status": "estimated"})
        assert parsed.usage.cost_usd == pytest.approx(0.0123)
        assert parsed.adapter_state == {"cumulative": {}}  # no state.db: nothing to remember

    def test_failed_run_exits_zero(self, tmp_path: Path) -> None:
        parsed, _ = self._new(tmp_path, HERMES_USAGE_FAILED, stdout="HTTP 400: fake bad request\n")
        assert parsed.is_error and parsed.error == "HTTP 400: fake bad request"
        assert parsed.native_id is None and parsed.usage == ALL_NONE

    def test_completed_false_is_a_failure_too(self, tmp_path: Path) -> None:
        parsed, _ = self._new(tmp_path, {**HERMES_USAGE_OK, "completed": False, "failed": False}, stdout="")
        assert parsed.is_error and parsed.error == "hermes reported a failed run"

    def test_no_usage_file_and_no_answer_is_a_parse_error(self, tmp_path: Path) -> None:
        with pytest.raises(ParseError):
            self._new(tmp_path, None, stdout="")

    def test_no_usage_file_after_a_crash_is_a_parse_error(self, tmp_path: Path) -> None:
        with pytest.raises(ParseError):
            self._new(tmp_path, None, stdout="Traceback (most recent call last): …", exit_code=1)

    def test_unreadable_usage_file_leaves_usage_unknown(self, tmp_path: Path) -> None:
        request = req("hermes", tmp_path)
        request.scratch.mkdir(parents=True)
        (request.scratch / USAGE_FILE).write_text("{truncated")
        parsed = self.a.parse(out("an answer\n", scratch=request.scratch), request)
        assert parsed.text == "an answer" and parsed.usage == ALL_NONE and not parsed.usage.known

    def test_resume_session_id_from_stderr_and_state_db_delta(self, tmp_path: Path) -> None:
        config = tmp_path / "dot-hermes"
        hermes_db(config, input_tokens=9, output_tokens=6, cache_read_tokens=4, api_call_count=1)
        t1, _ = self._new(tmp_path, HERMES_USAGE_OK)
        hermes_db(config, input_tokens=18, output_tokens=12, cache_read_tokens=8, api_call_count=2)
        resumed = req("hermes", tmp_path, native_id=HERMES_ID, first_turn=False, adapter_state=t1.adapter_state)
        t2 = self.a.parse(out("echo: beta two\n", RESUMED_STDERR), resumed)
        assert t2.text == "echo: beta two" and t2.native_id == HERMES_ID and not t2.is_error
        assert t2.usage == Usage(input_tokens=9, cached_input_tokens=4, cache_write_tokens=0,
                                 output_tokens=6, reasoning_tokens=0, cost_usd=None)
        assert t2.adapter_state["cumulative"]["input_tokens"] == 18

    @pytest.mark.parametrize("warning", [
        "  ⚠ tirith security scanner enabled but not available — command scanning will use pattern matching only\n",
        "\x1b[2m  ⚠ tirith security scanner enabled but not available — command scanning will use pattern "
        "matching only\x1b[0m\n",
    ])
    def test_resume_drops_the_tirith_warning_of_hermes_defaults(self, tmp_path: Path, warning: str) -> None:
        """`chat` prints it on stdout when the default scanner is on but not installed (any config)."""
        resumed = req("hermes", tmp_path, native_id=HERMES_ID, first_turn=False)
        parsed = self.a.parse(out(f"{warning}echo: beta two\n", RESUMED_STDERR), resumed)
        assert parsed.text == "echo: beta two"
        quoted = self.a.parse(out("The log said: ⚠ tirith security scanner enabled but not available\n"), resumed)
        assert "tirith" in quoted.text  # only the warning in front of the answer is dropped

    def test_resume_tool_turn_delta_and_known_cost(self, tmp_path: Path) -> None:
        config = tmp_path / "dot-hermes"
        hermes_db(config, input_tokens=18, output_tokens=12, cache_read_tokens=8, cost_status="estimated",
                  estimated_cost_usd=0.25)
        state = {"cumulative": {"input_tokens": 18, "output_tokens": 12, "cache_read_tokens": 8,
                                "estimated_cost_usd": 0.25, "cost_status": "estimated"}}
        hermes_db(config, input_tokens=54, output_tokens=36, cache_read_tokens=24, reasoning_tokens=5,
                  cost_status="estimated", estimated_cost_usd=0.75)
        parsed = self.a.parse(out("done\n", RESUMED_STDERR),
                              req("hermes", tmp_path, native_id=HERMES_ID, first_turn=False, adapter_state=state))
        assert parsed.usage == Usage(input_tokens=36, cached_input_tokens=16, cache_write_tokens=0,
                                     output_tokens=24, reasoning_tokens=5, cost_usd=pytest.approx(0.5))

    def test_resume_without_previous_state_counts_whole_session(self, tmp_path: Path) -> None:
        hermes_db(tmp_path / "dot-hermes", input_tokens=18, output_tokens=12, cache_read_tokens=8)
        parsed = self.a.parse(out("x\n", RESUMED_STDERR),
                              req("hermes", tmp_path, native_id=HERMES_ID, first_turn=False))
        assert parsed.usage.input_tokens == 18

    def test_resume_without_state_db_is_unknown(self, tmp_path: Path) -> None:
        parsed = self.a.parse(out("x\n", RESUMED_STDERR),
                              req("hermes", tmp_path, native_id=HERMES_ID, first_turn=False))
        assert parsed.usage == ALL_NONE and parsed.native_id == HERMES_ID

    def test_resume_unknown_session_row_is_unknown(self, tmp_path: Path) -> None:
        hermes_db(tmp_path / "dot-hermes", session="20260101_000000_aaaaaa", input_tokens=5)
        parsed = self.a.parse(out("x\n", RESUMED_STDERR),
                              req("hermes", tmp_path, native_id=HERMES_ID, first_turn=False))
        assert parsed.usage == ALL_NONE

    def test_resume_corrupt_state_db_is_unknown(self, tmp_path: Path) -> None:
        (tmp_path / "dot-hermes").mkdir()
        (tmp_path / "dot-hermes" / "state.db").write_bytes(b"not a database" * 100)
        parsed = self.a.parse(out("x\n", RESUMED_STDERR),
                              req("hermes", tmp_path, native_id=HERMES_ID, first_turn=False))
        assert parsed.usage == ALL_NONE and not parsed.is_error

    def test_resume_failure_exit_1(self, tmp_path: Path) -> None:
        stderr = "session_id: 20261129_180000_abcdef\n"
        parsed = self.a.parse(out("HTTP 400: fake bad request\n", stderr, exit_code=1),
                              req("hermes", tmp_path, native_id=HERMES_ID, first_turn=False))
        assert parsed.is_error and parsed.error == "HTTP 400: fake bad request"
        assert parsed.native_id == "20261129_180000_abcdef"

    def test_resume_without_session_line_keeps_native_id(self, tmp_path: Path) -> None:
        parsed = self.a.parse(out("ok\n", ""), req("hermes", tmp_path, native_id=HERMES_ID, first_turn=False))
        assert parsed.native_id == HERMES_ID and parsed.text == "ok"


# ============================================================================ prompts off the command line


SECRET_PROMPT = "PROMPT-7f3a do not show this in ps"
SECRET_INSTRUCTIONS = "INSTRUCTIONS-91c2 never on a command line"


def _fake_executable(directory: Path, tool: str) -> Path:
    """An executable standing in for `tool` (hermes: a Python entry script, as pip makes it)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / tool
    path.write_text("#!/usr/bin/python3\nimport sys\n" if tool == "hermes" else "#!/bin/sh\n")
    path.chmod(0o755)
    return path


def _no_secret(argv: list[str]) -> None:
    for item in argv:
        assert SECRET_PROMPT not in item and "PROMPT-7f3a" not in item, item
        assert SECRET_INSTRUCTIONS not in item and "INSTRUCTIONS-91c2" not in item, item


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("resumed", [False, True], ids=["new", "resume"])
def test_build_keeps_prompt_and_instructions_off_argv(tool: str, resumed: bool, tmp_path: Path) -> None:
    executable = sys.executable if tool == "scripted" else str(_fake_executable(tmp_path / "bin", tool))
    request = req(tool, tmp_path, prompt=SECRET_PROMPT, instructions=SECRET_INSTRUCTIONS,
                  native_id="native-1" if resumed else None, first_turn=not resumed, executable=executable,
                  scenario=Path(__file__))
    request.scratch.mkdir()
    cmd = adapter_for(tool).build(request)
    _no_secret(cmd.argv)
    _no_secret(list(cmd.env.values()))
    assert cmd.stdin is not None and SECRET_PROMPT in cmd.stdin.decode()
    written = "".join(p.read_text() for p in request.scratch.iterdir())
    # the instructions reached the tool: in front of the prompt, or in a scratch file
    assert resumed or SECRET_INSTRUCTIONS in cmd.stdin.decode() + written


def _prepared_argv(tool: str, tmp_path: Path, agent_box_home: Path, sandbox: str | dict[str, Any]) -> Any:
    from dataclasses import replace

    from agentbox.core.agents import resolve as services
    from agentbox.core.agents.invoke import prepare, prepare_session

    profile_dir = agent_box_home / "profiles" / f"p-{tool}"
    profile_dir.mkdir(parents=True)
    runtime: dict[str, Any] = {"tool": tool}
    if tool == "scripted":
        (profile_dir / "scenario.yaml").write_text("rules: []\n")
        runtime["scenario"] = "scenario.yaml"
    else:
        runtime["command"] = str(_fake_executable(tmp_path / "bin", tool))
    (profile_dir / "profile.yaml").write_text(json.dumps({"name": f"p-{tool}", "runtime": runtime,
                                                          "sandbox": sandbox}))
    workdir = tmp_path / "work"
    workdir.mkdir()
    agent = replace(services.profile_agent(f"p-{tool}", workdir, None), instructions=SECRET_INSTRUCTIONS)
    return prepare(agent, SECRET_PROMPT, prepare_session(agent, None))


@pytest.mark.parametrize("tool", TOOLS)
def test_unsandboxed_command_line_has_no_prompt(tool: str, tmp_path: Path, agent_box_home: Path) -> None:
    prepared = _prepared_argv(tool, tmp_path, agent_box_home, "none")
    _no_secret(prepared.argv)
    assert prepared.stdin is not None and SECRET_PROMPT in prepared.stdin.decode()


@pytest.mark.bwrap
@pytest.mark.parametrize("tool", TOOLS)
def test_bwrap_command_line_has_no_prompt(tool: str, tmp_path: Path, agent_box_home: Path) -> None:
    prepared = _prepared_argv(tool, tmp_path, agent_box_home, {"network": False})
    assert Path(prepared.argv[0]).name == "bwrap"
    _no_secret(prepared.argv)
    assert prepared.stdin is not None and SECRET_PROMPT in prepared.stdin.decode()


# ============================================================================ hermes: files the agent controls


def _parse_in_time(request: TurnRequest, output: CapturedOutput, limit_s: float = 10.0) -> Any:
    """HermesAdapter.parse in a thread: its result or exception, failing the test if it blocks."""
    import threading

    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["parsed"] = HermesAdapter().parse(output, request)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit_s)
    assert not thread.is_alive(), "hermes' adapter blocked on a file the agent controls"
    return box


class TestHermesHostileFiles:
    def _request(self, tmp_path: Path, **kw: Any) -> TurnRequest:
        request = req("hermes", tmp_path, **kw)
        request.scratch.mkdir(parents=True, exist_ok=True)
        return request

    @pytest.mark.parametrize("kind", ["dev_zero", "fifo", "huge", "directory", "symlink_to_valid_report"])
    def test_usage_file_that_hermes_never_writes_is_a_parse_error(self, tmp_path: Path, kind: str) -> None:
        request = self._request(tmp_path)
        usage = request.scratch / USAGE_FILE
        if kind == "dev_zero":
            usage.symlink_to("/dev/zero")
        elif kind == "fifo":
            os.mkfifo(usage)
        elif kind == "huge":
            with usage.open("wb") as handle:
                handle.truncate(200 * 1024 * 1024)  # sparse: instant, takes no disk
        elif kind == "directory":
            usage.mkdir()
        else:
            elsewhere = tmp_path / "elsewhere.json"
            elsewhere.write_text(json.dumps(HERMES_USAGE_OK))
            usage.symlink_to(elsewhere)
        box = _parse_in_time(request, out("an answer\n", scratch=request.scratch))
        assert isinstance(box.get("error"), ParseError), box
        assert USAGE_FILE in str(box["error"])

    @pytest.mark.parametrize("content", ["[1, 2, 3]", "[" * 30_000 + "]" * 30_000, '"text"', "\xff\xfe{}",
                                         json.dumps({**HERMES_USAGE_OK, "session_id": {"not": "an id"}}),
                                         json.dumps({**HERMES_USAGE_OK, "session_id": "../../etc/passwd"})],
                             ids=["list", "deep", "string", "not-utf8", "id-object", "id-path"])
    def test_wrong_shapes_leave_usage_and_id_unknown(self, tmp_path: Path, content: str) -> None:
        request = self._request(tmp_path)
        (request.scratch / USAGE_FILE).write_bytes(content.encode("utf-8", "surrogateescape"))
        box = _parse_in_time(request, out("an answer\n", scratch=request.scratch))
        parsed = box.get("parsed")
        assert parsed is not None, box
        assert parsed.text == "an answer" and parsed.native_id is None

    def _resume(self, tmp_path: Path) -> Any:
        request = req("hermes", tmp_path, native_id=HERMES_ID, first_turn=False)
        return _parse_in_time(request, out("x\n", RESUMED_STDERR))

    def test_state_db_symlink_is_not_followed(self, tmp_path: Path) -> None:
        hermes_db(tmp_path / "real", input_tokens=18)
        (tmp_path / "dot-hermes").mkdir()
        (tmp_path / "dot-hermes" / "state.db").symlink_to(tmp_path / "real" / "state.db")
        assert self._resume(tmp_path)["parsed"].usage == ALL_NONE

    def test_state_db_fifo_side_file_does_not_block(self, tmp_path: Path) -> None:
        hermes_db(tmp_path / "dot-hermes", input_tokens=18)
        wal = tmp_path / "dot-hermes" / "state.db-wal"
        wal.unlink(missing_ok=True)
        os.mkfifo(wal)
        assert self._resume(tmp_path)["parsed"].usage == ALL_NONE

    def test_state_db_fifo_does_not_block(self, tmp_path: Path) -> None:
        (tmp_path / "dot-hermes").mkdir()
        os.mkfifo(tmp_path / "dot-hermes" / "state.db")
        assert self._resume(tmp_path)["parsed"].usage == ALL_NONE

    def test_sessions_view_that_never_ends_is_abandoned(self, tmp_path: Path) -> None:
        config = tmp_path / "dot-hermes"
        config.mkdir()
        with sqlite3.connect(config / "state.db") as conn:
            conn.execute("CREATE VIEW sessions AS WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) "
                         f"SELECT '{HERMES_ID}' AS id, x AS input_tokens FROM n WHERE x < 0")
        conn.close()
        assert self._resume(tmp_path)["parsed"].usage == ALL_NONE

    def test_non_numbers_in_counters_are_dropped(self, tmp_path: Path) -> None:
        hermes_db(tmp_path / "dot-hermes", input_tokens="x" * 10_000, output_tokens=6, cost_status="y" * 100)
        parsed = self._resume(tmp_path)["parsed"]
        assert parsed.usage.input_tokens is None and parsed.usage.output_tokens == 6
        assert "cost_status" not in parsed.adapter_state["cumulative"]


# ============================================================================ scripted: files written where the agent writes


def test_scripted_scenario_json_never_written_through_a_planted_symlink(tmp_path: Path) -> None:
    from agentbox.core.runtimes.scripted import SCENARIO_JSON

    scenario = tmp_path / "scenario.yaml"
    scenario.write_text("rules: []\n")
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's file\n")
    request = req("scripted", tmp_path, executable=sys.executable, scenario=scenario, instructions="Rules.")
    request.scratch.mkdir()
    (request.scratch / SCENARIO_JSON).symlink_to(victim)  # left by the agent of an earlier (attached) turn
    (request.scratch / "system-prompt.md").symlink_to(victim)
    cmd = adapter_for("scripted").build(request)
    assert victim.read_text() == "the user's file\n"
    written = request.scratch / SCENARIO_JSON
    assert not written.is_symlink() and json.loads(written.read_text()) == {"rules": []}
    assert str(written) in cmd.argv
    assert not (request.scratch / "system-prompt.md").is_symlink()


def test_scratch_file_refuses_a_planted_directory(tmp_path: Path) -> None:
    from agentbox.core.errors import SandboxError

    request = req("claude", tmp_path, instructions="Rules.")
    (request.scratch / SYSTEM_PROMPT_FILE).mkdir(parents=True)
    with pytest.raises(SandboxError):
        ClaudeAdapter().build(request)


def test_optional_capabilities_come_from_the_adapter_interface_with_defaults() -> None:
    """Every adapter subclasses `Adapter`, so an optional capability is there with its default (no attribute probing)."""
    from agentbox.core.runtimes import adapter_for
    from agentbox.core.runtimes.base import Adapter

    tools = ("claude", "codex", "opencode", "hermes", "scripted")
    assert all(Adapter in type(adapter_for(tool)).__mro__ for tool in tools)
    takes = {tool for tool in tools if adapter_for(tool).takes_session_id}
    assert takes == {"claude", "scripted"}  # the tools that make a new session under agentbox's id
    overridden = {tool for tool in tools if type(adapter_for(tool)).created_session is not Adapter.created_session}
    assert overridden == takes
    assert {tool for tool in tools if adapter_for(tool).turn_home is not None} == {"claude"}
    # each tool's transcript reader is its adapter's (the base's default reads nothing)
    assert all(type(adapter_for(tool)).read_transcript is not Adapter.read_transcript for tool in tools)
