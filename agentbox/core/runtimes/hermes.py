"""hermes-agent 0.19.0: new turns with `-z` + `--usage-file`, resumed turns with `chat -q --resume`.

Why two variants: in 0.19.0 `-z` silently ignores `--resume` (a new session, no history),
while `hermes chat -q PROMPT -Q --resume ID` really resumes. `chat -q` writes no usage
file, so a resumed turn's usage is the difference of the session's cumulative counters in
`$HERMES_HOME/state.db` before and after the turn.

hermes takes a prompt only as an argument (`-z PROMPT`, `chat -q PROMPT`; no stdin or file
option in 0.19.0). So that the prompt is never on the command line of any process (which
every local user can read in /proc), hermes' Python entry script is run by a small
launcher that reads the prompt from stdin and puts it into hermes' own `sys.argv`, inside
the process. Both files hermes leaves for agentbox (the usage file in the scratch dir,
`state.db` in its home) are written by the agent's process, so they are read as hostile:
regular files only, no symlinks, bounded, a time limit on the SQLite query.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
from pathlib import Path
from typing import Any, ClassVar

from agentbox.core import safe_io
from agentbox.core.runtimes.base import (
    Adapter,
    CapturedOutput,
    HomeBind,
    LineDisplay,
    ParsedTurn,
    ParseError,
    ToolCommand,
    TurnHome,
    TurnRequest,
    TypedTurn,
    Usage,
    bound_home,
    optional_int,
)
from agentbox.core.runtimes.common import read_sqlite, sqlite_rows, with_instructions

USAGE_FILE = "hermes-usage.json"
#: The usage file is a small JSON object; anything bigger is not hermes' report.
USAGE_FILE_MAX_BYTES = 64 * 1024
#: Runs hermes' entry script (argv[2]) with the prompt read from stdin appended to its
#: sys.argv as `OPTION=PROMPT` (argv[1]); the kernel's command line never holds it.
#: sys.path[0] is the script's dir, as when the script runs itself: the cwd (the agent's
#: project, where a turn may have written a `runpy.py`) leaves sys.path before anything is imported.
#:
#: It also makes httpx build one default SSL context per process instead of one per
#: transport (what httpx's own docs advise: one context shared by the clients). An httpx
#: client made with the proxy settings of a sandbox with its own network builds a transport
#: for each of HTTP_PROXY, HTTPS_PROXY and ALL_PROXY, and each transport parsed the whole CA
#: bundle (15-20 ms on a quiet core, encode/httpx#3627) though the model's loopback endpoint
#: is in NO_PROXY and never uses them: hermes makes two such clients a turn (its local-server
#: probe), +120 ms a turn through the egress proxy. Only the default case is shared (verify
#: True, no client certificate, keyed by the CA variables it reads), and only where httpx
#: cannot speak HTTP/2 (no `h2`), so no client changes the ALPN list another one sends.
LAUNCHER = """\
import sys
if sys.path and sys.path[0] == "":
    del sys.path[0]
import importlib.util, os, runpy
option, script = sys.argv[1:3]
sys.path.insert(0, os.path.dirname(os.path.realpath(script)))
try:
    import httpx._transports.default as transports
except Exception:
    transports = None
make = getattr(transports, "create_ssl_context", None)
if callable(make) and importlib.util.find_spec("h2") is None:
    def shared_ssl_context(verify=True, cert=None, trust_env=True, make=make, made={}):
        if verify is not True or cert:
            return make(verify=verify, cert=cert, trust_env=trust_env)
        key = (trust_env, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
        if key not in made:
            made[key] = make(verify=verify, cert=cert, trust_env=trust_env)
        return made[key]
    transports.create_ssl_context = shared_ssl_context
prompt = sys.stdin.buffer.read().decode("utf-8", "surrogateescape")
sys.argv = [script, *sys.argv[3:], option + "=" + prompt]
runpy.run_path(script, run_name="__main__")
"""
#: The toolsets of a read-only role: hermes has no read-only file toolset (`file` is
#: read_file with write_file and patch), so the shell is how it reads, as claude's Bash;
#: `file`, `code_execution`, `delegation`, `skills`, `memory`, `cronjob` and the rest stay off.
READ_ONLY_TOOLSETS = "terminal,web,todo,session_search"
_NATIVE_ID = re.compile(r"[\w.:-]{1,128}")
#: pip's entry script when the interpreter path is too long for `#!`.
_PIP_SH_SHEBANG = re.compile(rb"#!/bin/sh\n'''exec' \"?([^\"\s]+)\"? ")
_SESSION_LINE = re.compile(r"session_id:\s*(\S+)")
#: What `hermes chat` prints on stdout, before the answer, when its default tirith command
#: scanner is on but not installed (cli.py `_ensure_tirith_security`, not silenced by
#: `-Q`). Config and `TIRITH_ENABLED` cannot be relied on (a user's config may say
#: anything), so exactly this line is dropped from the start of the answer.
_TIRITH_WARNING = re.compile(r"\A(?:(?:[ \t]|\x1b\[[0-9;]*m)*⚠ tirith security scanner enabled but not available"
                             r"[^\n]*(?:\n|\Z))+")
_DB_COUNTERS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens",
                "estimated_cost_usd")


class HermesAdapter(LineDisplay, Adapter):
    """Nous Research's hermes. The profile's `dot-hermes/` is `HERMES_HOME` inside the sandbox.

    hermes prints its answer as plain text (`-z`, `chat -q -Q`), so that is what is shown live.
    """

    tool: ClassVar[str] = "hermes"
    executable_name: ClassVar[str] = "hermes"
    env_defaults: ClassVar[dict[str, str]] = {
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        # hermes pip-installs optional backends into its own venv on first use (`edge-tts` for
        # its TTS tool, at every start). The install is read-only in the sandbox, so each turn
        # spent 5-8 s in pip and its retries (through the egress proxy: five refused CONNECTs to
        # pypi.org with back-off) and never got the package. The sealed-venv switch turns it off.
        "HERMES_DISABLE_LAZY_INSTALLS": "1",
    }
    loaded_config: ClassVar[tuple[str, ...]] = (
        "config.yaml", ".env", "SOUL.md", "honcho.json", "mem0.json",
        "skills/", "optional-skills/", "skill-bundles/", "plugins/", "hooks/", "memories/", "hindsight/",
        "scripts/", "cron/", "skins/", "mcp-installs/", "optional-mcps/", "node/", "node_modules/", "profiles/",
        "checkpoints/",  # git dirs it runs git on with the project as work tree, when checkpoints are on
        "bin/", "lsp/", "lsp/bin/",  # binaries it installs there and runs (tirith, uv, language servers)
        ".skills_prompt_snapshot.json")  # its skills prompt, reused while the skill files look unchanged
    turn_home: ClassVar[TurnHome | None] = None

    def homes(self, config_dir: Path, home: Path) -> tuple[list[HomeBind], dict[str, str]]:
        """dot-hermes/ → ~/.hermes."""
        return bound_home(config_dir, home / ".hermes", "HERMES_HOME")

    def _model(self, request: TurnRequest) -> list[str]:
        return ["-m", request.model] if request.model else []

    def _toolsets(self, request: TurnRequest) -> list[str]:
        return ["--toolsets", READ_ONLY_TOOLSETS] if request.read_only else []

    def build(self, request: TurnRequest) -> ToolCommand:
        """`hermes -z PROMPT --usage-file F` (new) or `hermes chat -q PROMPT -Q --yolo --resume ID`.

        Both auto-approve (`-z` sets HERMES_YOLO_MODE itself; `--yolo` does the same for
        `chat`, which would otherwise wait for a person): the sandbox is the boundary. A
        read-only role gets `READ_ONLY_TOOLSETS` on new and resumed turns alike. Run
        through `LAUNCHER`, the prompt on stdin. An entry point that is not a Python script
        (no interpreter in its first line) can only get the prompt as an argument.
        """
        prompt = with_instructions(request.prompt, request.instructions, request.first_turn)
        if request.native_id is None:
            usage_file = request.scratch / USAGE_FILE
            option, args = "--oneshot", ["--usage-file", str(usage_file)]
        else:
            option, args = "--query", ["chat", "-Q", "--yolo", "--resume", request.native_id]
        args += [*self._model(request), *self._toolsets(request)]
        env = {"HERMES_YOLO_MODE": "1"}
        python = python_of(request.executable)
        if python is None:
            return ToolCommand([request.executable, *args, *request.extra_args, f"{option}={prompt}"], env=env)
        return ToolCommand([*python, "-c", LAUNCHER, option, request.executable, *args, *request.extra_args],
                           env=env, stdin=prompt.encode("utf-8", "surrogateescape"))

    def interactive(self, request: TurnRequest) -> ToolCommand:
        """The hermes chat TUI resuming the session."""
        argv = [request.executable, "chat"]
        if request.native_id is not None:
            argv += ["--resume", request.native_id]
        return ToolCommand([*argv, *self._model(request), *self._toolsets(request), *request.extra_args])

    def read_transcript(self, config_dir: Path, native_id: str) -> list[TypedTurn]:
        """The turns a person typed in an attached session, from hermes's own session files (read as hostile)."""
        return _transcript_turns(config_dir / "state.db", native_id)

    def parse(self, output: CapturedOutput, request: TurnRequest) -> ParsedTurn:
        """stdout is the answer; the usage file (new) or state.db deltas (resume) give the rest."""
        text = answer_text(output.stdout)
        state = dict(request.adapter_state)
        if request.native_id is None:
            data = _usage_report(output.scratch / USAGE_FILE)
            if data is None:
                if output.exit_code == 0 and not text:
                    raise ParseError("hermes wrote no usage file and no answer")
                data = {}
            native = _native_id(data.get("session_id"))
            usage = Usage(
                input_tokens=optional_int(data.get("input_tokens")),
                cached_input_tokens=optional_int(data.get("cache_read_tokens")),
                cache_write_tokens=optional_int(data.get("cache_write_tokens")),
                output_tokens=optional_int(data.get("output_tokens")),
                reasoning_tokens=optional_int(data.get("reasoning_tokens")),
                cost_usd=_cost(data.get("estimated_cost_usd"), data.get("cost_status")),
            )
            if native:
                state["cumulative"] = _session_counters(request.config_dir, native)
            failed = bool(data.get("failed")) or (bool(data) and data.get("completed") is False)
            if failed:  # hermes exits 0 on a failed run: only the usage file tells
                return ParsedTurn(text=text, native_id=native, usage=usage, is_error=True,
                                  error=text or "hermes reported a failed run", adapter_state=state)
            if not data and output.exit_code != 0:
                raise ParseError("hermes failed before writing its usage file")
            model = data.get("model")
            return ParsedTurn(text=text, native_id=native, usage=usage, adapter_state=state,
                              model=str(model) if isinstance(model, str) and model else None)
        ids = [i for i in _SESSION_LINE.findall(output.stderr) if _native_id(i)]
        native = ids[-1] if ids else request.native_id
        now = _session_counters(request.config_dir, native)
        before = state.get("cumulative") or {}
        state["cumulative"] = now
        usage = _usage_delta(now, before) if now else Usage()
        if output.exit_code not in (0, None):
            return ParsedTurn(text=text, native_id=native, usage=usage, is_error=True,
                              error=text or output.stderr.strip() or "hermes failed", adapter_state=state)
        return ParsedTurn(text=text, native_id=native, usage=usage, adapter_state=state)


def answer_text(stdout: str) -> str:
    """hermes' answer: its stdout without the tirith warning it may print in front."""
    return _TIRITH_WARNING.sub("", stdout.lstrip("\n"), count=1).strip()


def python_of(executable: str) -> list[str] | None:
    """The interpreter command of a Python entry script (from its `#!` line), or None.

    Knows `#!/path/python`, `#!/usr/bin/env python3` and pip's `#!/bin/sh` +
    `'''exec' /path/python` form for interpreter paths too long for `#!`.
    """
    try:
        with open(executable, "rb") as handle:
            head = handle.read(512)
    except OSError:
        return None
    pip_sh = _PIP_SH_SHEBANG.match(head)
    if pip_sh:
        words = [os.fsdecode(pip_sh.group(1))]
    elif head.startswith(b"#!"):
        words = os.fsdecode(head[2:].split(b"\n", 1)[0]).split()
    else:
        return None
    if not words or not os.path.basename(words[-1]).startswith("python"):
        return None
    return words


def _native_id(value: Any) -> str | None:
    """A hermes session id from its output, or None when it does not look like one."""
    return value if isinstance(value, str) and _NATIVE_ID.fullmatch(value) else None


def _usage_report(path: Path) -> dict[str, Any] | None:
    """The usage file hermes wrote; None when there is none or it does not parse.

    Raises ParseError when the path is something hermes never writes (a symlink, FIFO,
    device, directory, a file over `USAGE_FILE_MAX_BYTES`): the agent put it there.
    """
    try:
        raw = safe_io.read_bounded(path, max_bytes=USAGE_FILE_MAX_BYTES)
    except safe_io.UnsafeFileError as exc:
        raise ParseError(f"hermes usage file {exc.path.name} {exc.reason}") from None
    except OSError:
        return None
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _cost(value: Any, status: Any) -> float | None:
    if status == "unknown" or not isinstance(value, int | float):
        return None
    return float(value)


def _session_counters(config_dir: Path, session_id: str | None) -> dict[str, Any]:
    """The session's cumulative counters in state.db (empty when unreadable).

    The agent can rewrite its HERMES_HOME, so the database and its side files must be
    regular files (no symlink out, no FIFO to block on), it is opened read-only, its
    `sessions` must be a table (a view could compute forever) and the query is abandoned
    after a time limit (`read_sqlite`). Only numbers (and a short cost status) are kept.
    """
    if session_id is None:
        return {}

    def read(conn: sqlite3.Connection) -> tuple[list[str], tuple[Any, ...] | None]:
        columns = {str(info[1]) for info in conn.execute("PRAGMA table_info(sessions)")}
        wanted = [k for k in (*_DB_COUNTERS, "cost_status") if k in columns]
        if not wanted:
            return wanted, None
        selected = ", ".join(f'"{k}"' for k in wanted)
        return wanted, conn.execute(f"SELECT {selected} FROM sessions WHERE id = ?", (session_id,)).fetchone()

    found = read_sqlite(config_dir / "state.db", ("sessions",), read)
    if found is None:
        return {}
    wanted, row = found
    if row is None:
        return {}
    counters: dict[str, Any] = {}
    for key, value in zip(wanted, row, strict=True):
        if key == "cost_status":
            if isinstance(value, str) and len(value) <= 32:
                counters[key] = value
        elif isinstance(value, int | float) and not isinstance(value, bool):
            counters[key] = value
    return counters


def _usage_delta(now: dict[str, Any], before: dict[str, Any]) -> Usage:
    def delta(key: str) -> int | None:
        value = optional_int(now.get(key))
        if value is None:
            return None
        return value - (optional_int(before.get(key)) or 0)

    cost_now, cost_before = now.get("estimated_cost_usd"), before.get("estimated_cost_usd") or 0.0
    cost = None
    if now.get("cost_status") not in (None, "unknown") and isinstance(cost_now, int | float):
        cost = float(cost_now) - float(cost_before)
    return Usage(input_tokens=delta("input_tokens"), cached_input_tokens=delta("cache_read_tokens"),
                 cache_write_tokens=delta("cache_write_tokens"), output_tokens=delta("output_tokens"),
                 reasoning_tokens=delta("reasoning_tokens"), cost_usd=cost)


# ----------------------------------------------------------------------------- the transcript


def _transcript_turns(db: Path, native_id: str) -> list[TypedTurn]:
    """hermes's `messages`: a user message starts a turn, the assistant's last text ends it (usage unknown)."""
    rows = sqlite_rows(db, ("messages",), "SELECT role, content FROM messages WHERE session_id = ? ORDER BY id",
                       (native_id,))
    turns: list[dict[str, str]] = []
    for role, content in rows:
        if not isinstance(content, str):
            continue
        if role == "user":
            turns.append({"prompt": content, "text": ""})
        elif role == "assistant" and turns and content.strip():
            turns[-1]["text"] = content
    return [TypedTurn(t["prompt"], t["text"], Usage()) for t in turns]
