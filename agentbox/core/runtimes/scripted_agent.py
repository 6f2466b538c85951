#!/usr/bin/env python3
"""The scripted runtime: a deterministic agent CLI whose answers come from a scenario file.

It behaves like `claude -p` (caller-chosen session ids, resume only from the same cwd, one
JSON result object on stdout) so the engine, the example project, the demo and the
test-suite drive real processes through the real launcher and sandbox. It is standalone on
purpose: it runs as `python -I scripted_agent.py …` inside a sandbox, never imports
agentbox, and keeps start-up cheap (stdlib only; ruamel.yaml is imported lazily, and only
for YAML scenarios). The scenario format is documented in docs/scripted-runtime.md.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time

TYPE_CHECKING = False  # typing is imported by the type checker only: start-up stays cheap
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    # Scenario mappings are JSON the user wrote, checked key by key against WHEN_FIELDS and
    # DO_FIELDS, so their values are whatever those tables accept.
    When = dict[str, Any]
    Action = dict[str, Any]
    # A session file, a result object and the template variables: JSON the agent writes.
    Session = dict[str, Any]
    Result = dict[str, Any]
    Values = dict[str, Any]
    FieldTable = dict[str, tuple[Callable[[Any], bool], str]]

USAGE = (
    "usage: scripted_agent.py --scenario FILE [-p PROMPT|-] [--session-id UUID | --resume UUID]"
    " [--append-system-prompt TEXT | --append-system-prompt-file FILE] [--model MODEL]"
)
UUID_PATTERN = re.compile(r"[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")
USAGE_FIELDS = (
    "input_tokens",
    "cached_input_tokens",
    "cache_write_tokens",
    "output_tokens",
    "reasoning_tokens",
)
FAIL_MODES = ("crash", "hang", "flood", "garbage", "error_exit0", "kill_self", "exit")
DEFAULT_FALLBACK: dict[str, object] = {"reply": "ok: {prompt}"}
DEFAULT_FLOOD_BYTES = 1024 * 1024
SIGKILL = 9  # literal so the hot path does not import `signal` (and `enum` with it)
OPTIONS = {
    "--scenario": "scenario",
    "-p": "prompt",
    "--print": "prompt",
    "--session-id": "session_id",
    "--resume": "resume",
    "-r": "resume",
    "--append-system-prompt": "system",
    "--append-system-prompt-file": "system_file",
    "--model": "model",
    "--output-format": "output_format",
}
PLACEHOLDER = re.compile(r"\{([A-Za-z_]\w*)((?:\[[^\[\]{}]*\])*)\}")
INDEX = re.compile(r"\[([^\]]*)\]")


class Fatal(Exception):
    """An error that ends the program with `Error: <message>` on stderr and an exit code."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


# ---------------------------------------------------------------- validation helpers


def is_number(value: object) -> bool:
    """Tell whether `value` is an int or float (bools excluded, YAML makes them easy)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_count(value: object) -> bool:
    """Tell whether `value` is a non-negative integer."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def is_strings(value: object) -> bool:
    """Tell whether `value` is a string or a list of strings."""
    return isinstance(value, str) or (
        isinstance(value, list) and all(isinstance(item, str) for item in value)
    )


def is_usage(value: object) -> bool:
    """Tell whether `value` is "unknown" or a mapping of known usage fields to counts."""
    if value == "unknown":
        return True
    return isinstance(value, dict) and all(
        key in USAGE_FIELDS and (item is None or is_count(item)) for key, item in value.items()
    )


STREAM_KINDS = ("text", "tool", "tool_result")


def is_stream(value: object) -> bool:
    """Tell whether `value` is a list of stream items: one of STREAM_KINDS each, optional input and delay_s."""
    if not isinstance(value, list):
        return False
    for item in value:
        if not isinstance(item, dict) or set(item) - {*STREAM_KINDS, "input", "delay_s"}:
            return False
        if sum(kind in item for kind in STREAM_KINDS) > 1 or not all(
                isinstance(item[kind], str) for kind in STREAM_KINDS if kind in item):
            return False
        if "delay_s" in item and not (is_number(item["delay_s"]) and item["delay_s"] >= 0):
            return False
    return True


WHEN_FIELDS = {
    "prompt_contains": (is_strings, "a string or a list of strings"),
    "prompt_regex": (lambda v: isinstance(v, str), "a regular expression string"),
    "system_contains": (is_strings, "a string or a list of strings"),
    "first_turn": (lambda v: isinstance(v, bool), "true or false"),
    "turn": (
        lambda v: is_count(v) or (isinstance(v, list) and all(is_count(i) for i in v)),
        "a turn number or a list of them",
    ),
    "env": (
        lambda v: (
            isinstance(v, dict)
            and all(
                isinstance(item, str | int | float | bool) or item is None for item in v.values()
            )
        ),
        "a mapping of variable name to value (null = unset)",
    ),
    "times": (is_count, "a non-negative integer"),
}
DO_FIELDS = {
    "delay_s": (lambda v: is_number(v) and v >= 0, "a number >= 0"),
    "write": (
        lambda v: (
            isinstance(v, dict)
            and all(isinstance(k, str) and isinstance(t, str) for k, t in v.items())
        ),
        "a mapping of path to text",
    ),
    "read": (is_strings, "a path or a list of paths"),
    "run": (lambda v: isinstance(v, str), "a shell command string"),
    "reply": (lambda v: isinstance(v, str), "a string"),
    "reply_json": (lambda v: True, "any JSON value"),
    "usage": (is_usage, f'"unknown" or a mapping with keys from {", ".join(USAGE_FIELDS)}'),
    "cost_usd": (lambda v: v is None or is_number(v), "a number or null"),
    "fail": (lambda v: v in FAIL_MODES, f"one of {', '.join(FAIL_MODES)}"),
    "exit_code": (lambda v: is_count(v) and v <= 255, "an integer 0-255"),
    "flood_bytes": (is_count, "a non-negative integer"),
    "stderr": (lambda v: isinstance(v, str), "a string"),
    "stream": (lambda v: is_stream(v), "a list of {text | tool (+ input) | tool_result, delay_s} mappings"),
}


# ---------------------------------------------------------------- scenario


class Rule:
    """One scenario rule: the conditions to match and the action (defaults merged in)."""

    def __init__(self, rule_id: str, when: When, action: Action, regex: re.Pattern[str] | None) -> None:
        self.id = rule_id
        self.when = when
        self.action = action
        self.regex = regex


class Scenario:
    """A validated scenario: rules in order plus the fallback action."""

    def __init__(self, rules: list[Rule], fallback: Action) -> None:
        self.rules = rules
        self.fallback = fallback


MAX_SCENARIO_BYTES = 1 << 20
"""Largest scenario read (agentbox refuses a bigger one when it loads the profile)."""


def load_scenario(path: str) -> Scenario:
    """Read, parse and validate a JSON or YAML scenario file (a regular file, bounded: never a
    device or a FIFO read without end)."""
    import stat

    try:
        with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise Fatal(f"scenario {path}: not a regular file", 2)
            data = handle.read(MAX_SCENARIO_BYTES + 1)
    except OSError as exc:
        raise Fatal(f"scenario {path}: cannot read: {exc.strerror or exc}", 2) from exc
    if len(data) > MAX_SCENARIO_BYTES:
        raise Fatal(f"scenario {path}: more than {MAX_SCENARIO_BYTES} bytes", 2)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Fatal(f"scenario {path}: not UTF-8 ({exc.reason} at byte {exc.start})", 2) from exc
    parsed = parse_scenario(path, text)
    try:
        return validate_scenario(parsed)
    except ValueError as exc:
        raise Fatal(f"scenario {path}: {exc}", 2) from exc


def parse_scenario(path: str, text: str) -> object:
    """Parse the scenario text as YAML (by extension) or JSON, with a located error."""
    if path.endswith((".yaml", ".yml")):
        try:
            from ruamel.yaml import YAML
            from ruamel.yaml.error import YAMLError
        except ImportError as exc:
            raise Fatal(
                f"scenario {path}: YAML needs ruamel.yaml; use a .json scenario", 2
            ) from exc
        try:
            return YAML(typ="safe", pure=True).load(text)
        except YAMLError as exc:
            raise Fatal(f"scenario {path}: invalid YAML{yaml_problem(exc)}", 2) from exc
    try:
        return json.loads(text)
    except ValueError as exc:
        raise Fatal(f"scenario {path}: invalid JSON: {exc}", 2) from exc


def yaml_problem(exc: Exception) -> str:
    """Summarise a ruamel.yaml error as ` at line L, column C: problem` on one line."""
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = getattr(exc, "problem", None) or str(exc)
    return f"{where}: {' '.join(str(problem).split())}"


def check_fields(where: str, value: object, fields: FieldTable) -> dict[str, Any]:
    """Check a mapping's keys and value types against a field table; return it."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{where}: must be a mapping")
    for key, item in value.items():
        if key not in fields:
            raise ValueError(f"{where}: unknown key {key!r} (valid: {', '.join(fields)})")
        accepts, wanted = fields[key]
        if not accepts(item):
            raise ValueError(f"{where}.{key}: must be {wanted}, got {item!r}")
    if "reply" in value and "reply_json" in value:
        raise ValueError(f"{where}: give reply or reply_json, not both")
    return value


def validate_scenario(data: object) -> Scenario:
    """Turn parsed scenario data into a Scenario, raising ValueError naming the bad field."""
    if not isinstance(data, dict):
        raise ValueError("the top level must be a mapping with `rules`")
    unknown = set(data) - {"defaults", "rules", "fallback"}
    if unknown:
        raise ValueError(f"unknown key {sorted(unknown)[0]!r} (valid: defaults, rules, fallback)")
    defaults = check_fields("defaults", data.get("defaults"), DO_FIELDS)
    raw_rules = data.get("rules")
    raw_rules = [] if raw_rules is None else raw_rules
    if not isinstance(raw_rules, list):
        raise ValueError("rules: must be a list")
    rules = [validate_rule(index, raw, defaults) for index, raw in enumerate(raw_rules)]
    ids = [rule.id for rule in rules]
    duplicate = next((rule_id for rule_id in ids if ids.count(rule_id) > 1), None)
    if duplicate is not None or "fallback" in ids:
        raise ValueError(f"rules: duplicate or reserved id {duplicate or 'fallback'!r}")
    fallback = check_fields("fallback", data.get("fallback", DEFAULT_FALLBACK), DO_FIELDS)
    return Scenario(rules, {**defaults, **fallback})


def validate_rule(index: int, raw: object, defaults: Action) -> Rule:
    """Validate one rule and merge the defaults under its action."""
    where = f"rules[{index}]"
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: must be a mapping")
    unknown = set(raw) - {"id", "when", "do"}
    if unknown:
        raise ValueError(f"{where}: unknown key {sorted(unknown)[0]!r} (valid: id, when, do)")
    rule_id = raw.get("id", f"rule-{index}")
    if not isinstance(rule_id, str) or not rule_id:
        raise ValueError(f"{where}.id: must be a non-empty string")
    when = check_fields(f"{where}.when", raw.get("when"), WHEN_FIELDS)
    action = check_fields(f"{where}.do", raw.get("do"), DO_FIELDS)
    regex = None
    if "prompt_regex" in when:
        try:
            regex = re.compile(when["prompt_regex"], re.DOTALL)
        except re.error as exc:
            raise ValueError(f"{where}.when.prompt_regex: invalid regex: {exc}") from exc
    return Rule(rule_id, when, {**defaults, **action}, regex)


# ---------------------------------------------------------------- state home


def write_json_atomic(path: str, data: object) -> None:
    """Write JSON to `path` via a temp file and rename, so readers never see half a file."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(data, handle, ensure_ascii=False, indent=1)
    os.replace(tmp, path)


def read_json(path: str, default: Any) -> Any:
    """Read a JSON state file (any JSON value), or return `default` when it does not exist."""
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return default


class HomeLock:
    """An exclusive fcntl lock on the state home; agents sharing a home never race."""

    def __init__(self, home: str) -> None:
        self.path = os.path.join(home, ".lock")
        self.fd = -1

    def __enter__(self) -> HomeLock:
        import fcntl

        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc_info: object) -> None:
        os.close(self.fd)


def state_home() -> str:
    """Return `$SCRIPTED_HOME`, creating its sessions dir."""
    home = os.environ.get("SCRIPTED_HOME")
    if not home:
        raise Fatal("SCRIPTED_HOME is not set (the scripted agent's state directory)", 2)
    try:
        os.makedirs(os.path.join(home, "sessions"), exist_ok=True)
    except OSError as exc:
        raise Fatal(f"SCRIPTED_HOME {home}: {exc.strerror or exc}", 2) from exc
    return home


def bump_counter(home: str, rule_id: str, times: int | None) -> int | None:
    """Count one firing of a rule; None when its `times` budget is already spent."""
    path = os.path.join(home, "counters.json")
    with HomeLock(home):
        counters: dict[str, int] = read_json(path, {})
        fired = counters.get(rule_id, 0) + 1
        if times is not None and fired > times:
            return None
        counters[rule_id] = fired
        write_json_atomic(path, counters)
    return fired


# ---------------------------------------------------------------- sessions


def session_path(home: str, session_id: str) -> str:
    """Return where a session's JSON file lives."""
    return os.path.join(home, "sessions", f"{session_id}.json")


def new_session_id() -> str:
    """Make a fresh UUID4 (only when the caller gave no id, so `uuid` loads lazily)."""
    import uuid

    return str(uuid.uuid4())


def create_session(home: str, session_id: str, cwd: str, model: str | None, system: str) -> Session:
    """Claim a new session id under the lock, like claude does when a turn starts."""
    if not UUID_PATTERN.fullmatch(session_id):
        raise Fatal("Invalid session ID")
    path = session_path(home, session_id)
    session: Session = {
        "id": session_id,
        "cwd": cwd,
        "created": timestamp(),
        "model": model,
        "system": system,
        "turns": [],
    }
    with HomeLock(home):
        if os.path.exists(path):
            raise Fatal(f"Session ID {session_id} is already in use")
        write_json_atomic(path, session)
    return session


def load_session(home: str, session_id: str, cwd: str) -> Session:
    """Load a session to resume; unknown ids and other cwds are 'not found', as in claude."""
    not_found = Fatal(f"No conversation found with session ID: {session_id}")
    if not UUID_PATTERN.fullmatch(session_id):
        raise not_found
    try:
        session = read_json(session_path(home, session_id), None)
    except ValueError as exc:
        raise Fatal(f"session {session_id} is corrupt: {exc}") from exc
    if not isinstance(session, dict) or session.get("cwd") != cwd:
        raise not_found
    return session


def record_turn(home: str, session: Session, entry: dict[str, str]) -> None:
    """Append a finished turn to the session file (re-read under the lock first)."""
    path = session_path(home, session["id"])
    with HomeLock(home):
        stored: Session = read_json(path, session)
        stored.setdefault("turns", []).append(entry)
        write_json_atomic(path, stored)
    session["turns"] = stored["turns"]


def timestamp() -> str:
    """Return the current UTC time in ISO 8601 (without importing datetime)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# ---------------------------------------------------------------- templates


def render(template: str, values: Values) -> str:
    """Substitute `{name}` / `{name[key]}` for known names only; other braces stay as written."""

    def substitute(match: re.Match[str]) -> str:
        name, indexes = match.group(1), match.group(2)
        value: object
        if name not in values:
            return match.group(0)
        value = values[name]
        for key in INDEX.findall(indexes):
            value = lookup(value, key)
            if value is MISSING:
                return match.group(0)
        return as_text(value)

    return PLACEHOLDER.sub(substitute, template)


MISSING = object()


def lookup(container: object, key: str) -> object:
    """Index a list by number or a dict by key, or return MISSING."""
    if isinstance(container, list) and key.lstrip("-").isdigit():
        index = int(key)
        return container[index] if -len(container) <= index < len(container) else MISSING
    if isinstance(container, dict):
        return container.get(key, MISSING)
    return MISSING


def as_text(value: object) -> str:
    """Show a template value: strings as-is, None as empty, containers as JSON."""
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def render_leaves(value: object, values: Values) -> object:
    """Render every string leaf of a JSON-like value (used for reply_json)."""
    if isinstance(value, str):
        return render(value, values)
    if isinstance(value, list):
        return [render_leaves(item, values) for item in value]
    if isinstance(value, dict):
        return {key: render_leaves(item, values) for key, item in value.items()}
    return value


# ---------------------------------------------------------------- matching


def match_rule(rule: Rule, prompt: str, system: str, turn: int) -> Values | None:
    """Check a rule's conditions (except `times`); return its regex variables or None."""
    when = rule.when
    if not contains_all(prompt, when.get("prompt_contains")):
        return None
    if not contains_all(system, when.get("system_contains")):
        return None
    if "first_turn" in when and when["first_turn"] != (turn == 1):
        return None
    wanted_turn = when.get("turn")
    if wanted_turn is not None and turn not in (
        wanted_turn if isinstance(wanted_turn, list) else [wanted_turn]
    ):
        return None
    for name, expected in (when.get("env") or {}).items():
        actual = os.environ.get(name)
        if (expected is None) != (actual is None) or (
            expected is not None and actual != env_text(expected)
        ):
            return None
    if rule.regex is None:
        return {}
    found = rule.regex.search(prompt)
    if found is None:
        return None
    groups = {name: text or "" for name, text in found.groupdict().items()}
    return {**groups, "m": [found.group(0), *(text or "" for text in found.groups())]}


def contains_all(text: str, needles: str | list[str] | None) -> bool:
    """Tell whether every needle occurs in `text` (no needles = true)."""
    if needles is None:
        return True
    return all(needle in text for needle in ([needles] if isinstance(needles, str) else needles))


def env_text(value: object) -> str:
    """Spell a scenario env value the way the environment would (true -> "true")."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def choose_rule(
    scenario: Scenario, home: str, prompt: str, system: str, turn: int
) -> tuple[str, Action, Values, int]:
    """Pick the first rule whose conditions hold and whose `times` is not spent."""
    for rule in scenario.rules:
        variables = match_rule(rule, prompt, system, turn)
        if variables is None:
            continue
        counter = bump_counter(home, rule.id, rule.when.get("times"))
        if counter is not None:
            return rule.id, rule.action, variables, counter
    return "fallback", scenario.fallback, {}, bump_counter(home, "fallback", None) or 0


# ---------------------------------------------------------------- actions


def do_reads(paths: str | list[str], values: Values) -> dict[str, str]:
    """Try to read each path; map it to the content or `ERROR: <message>`."""
    reads = {}
    for raw in [paths] if isinstance(paths, str) else paths:
        path = render(raw, values)
        try:
            with open(os.path.expanduser(path), encoding="utf-8", errors="replace") as handle:
                reads[path] = handle.read()
        except OSError as exc:
            reads[path] = f"ERROR: {exc}"
    return reads


def do_writes(files: dict[str, str], values: Values) -> str | None:
    """Write each templated file (parents created); return an error message on failure."""
    for raw_path, raw_text in files.items():
        path = os.path.expanduser(render(raw_path, values))
        try:
            parent = os.path.dirname(path)
            if parent:
                os.makedirs(parent, exist_ok=True)
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(render(raw_text, values))
        except OSError as exc:
            return f"write failed: {exc}"
    return None


def do_run(command: str) -> tuple[str, int]:
    """Run a shell command with stdin closed; return its combined output and exit status."""
    import subprocess

    done = subprocess.run(
        ["/bin/sh", "-c", command],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        check=False,
    )
    return done.stdout.decode("utf-8", "replace").rstrip("\n"), done.returncode


def perform(action: Action, values: Values) -> str | None:
    """Delay, write, read and run as the action says; return a write error, if any."""
    if action.get("delay_s"):
        time.sleep(action["delay_s"])
    for item in action.get("stream") or ():
        stream_item(item, values)
    error = do_writes(action.get("write") or {}, values)
    if error is not None:
        return error
    if "read" in action:
        values["reads"] = do_reads(action["read"], values)
    if "run" in action:
        values["run_output"], values["run_status"] = do_run(render(action["run"], values))
    return None


def stream_item(item: dict[str, Any], values: Values) -> None:
    """Print one event of the turn as it happens (a JSON line before the result), after its delay."""
    if item.get("delay_s"):
        time.sleep(item["delay_s"])
    for kind in STREAM_KINDS:
        if kind in item:
            event: dict[str, object] = {"type": kind, "text": render(item[kind], values)}
            if "input" in item:
                event["input"] = render_leaves(item["input"], values)
            emit(json.dumps(event, ensure_ascii=False))


def reply_text(action: Action, values: Values) -> str:
    """Render the reply, or serialise the templated reply_json."""
    if "reply_json" in action:
        return json.dumps(render_leaves(action["reply_json"], values), ensure_ascii=False)
    return render(action.get("reply", ""), values)


def usage_object(usage: dict[str, int | None] | str | None) -> dict[str, int | None] | None:
    """Expand scenario usage to all fields; unknown (absent or "unknown") stays null."""
    if usage is None or isinstance(usage, str):  # "unknown", the only string is_usage accepts
        return None
    return {field: usage.get(field) for field in USAGE_FIELDS}


# ---------------------------------------------------------------- a turn


class Turn:
    """What one turn produced: the result object plus how it should be delivered."""

    def __init__(self, result: Result, action: Action, values: Values, failed_write: bool) -> None:
        self.result = result
        self.action = action
        self.values = values
        self.failed_write = failed_write


class Agent:
    """One scripted agent process: its scenario, state home, cwd, options and session."""

    def __init__(self, options: dict[str, str], scenario: Scenario, home: str, session: Session) -> None:
        self.options = options
        self.scenario = scenario
        self.home = home
        self.session = session
        self.cwd = session["cwd"]

    def play(self, prompt: str) -> Turn:
        """Match the prompt against the scenario, perform the action and build the result."""
        started = time.monotonic()
        session = self.session
        turn = len(session.get("turns", [])) + 1
        system = session.get("system") or self.options.get("system") or ""
        model = self.options.get("model") or session.get("model")
        rule_id, action, variables, counter = choose_rule(
            self.scenario, self.home, prompt, system, turn
        )
        values = self.template_values(prompt, turn, model, system, counter)
        values.update(variables)
        error = perform(action, values)
        text = error if error is not None else reply_text(action, values)
        result: Result = {
            "type": "result",
            "is_error": error is not None or action.get("fail") == "error_exit0",
            "session_id": session["id"],
            "turn": turn,
            "result": text,
            "usage": usage_object(action.get("usage")),
            "cost_usd": action.get("cost_usd"),
            "duration_ms": int((time.monotonic() - started) * 1000),
            "model": model,
            "rule": rule_id,
        }
        return Turn(result, action, values, error is not None)

    def template_values(
        self, prompt: str, turn: int, model: str | None, system: str, counter: int
    ) -> Values:
        """Build the template variables every turn has (regex groups are added later)."""
        return {
            "prompt": prompt,
            "session_id": self.session["id"],
            "turn": turn,
            "model": model,
            "system": system,
            "cwd": self.cwd,
            "role": os.environ.get("AGENTBOX_ROLE", ""),
            "task": "",
            "m": [],
            "env": dict(os.environ),
            "reads": {},
            "run_output": "",
            "run_status": "",
            "counter": counter,
        }

    def record(self, turn: Turn, prompt: str) -> None:
        """Append a successful turn to the session history."""
        entry = {
            "prompt": prompt,
            "reply": turn.result["result"],
            "at": timestamp(),
            "rule": turn.result["rule"],
        }
        record_turn(self.home, self.session, entry)


# ---------------------------------------------------------------- delivery


def emit(text: str) -> None:
    """Print one line to stdout and flush (the caller may be about to die)."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def warn(text: str) -> None:
    """Print one line to stderr and flush."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def flood(size: int) -> None:
    """Write `size` bytes of non-JSON text lines to stdout in large chunks."""
    line = b"flood " * 10 + b"flood\n"
    chunk = line * (65536 // len(line))
    out = sys.stdout.buffer
    sys.stdout.flush()
    remaining = size
    while remaining > 0:
        piece = chunk if remaining > len(chunk) else chunk[: remaining - 1] + b"\n"
        out.write(piece)
        remaining -= len(piece)
    out.flush()


def hang() -> None:
    """Start a long-lived child in our process group, then sleep forever."""
    try:
        child = os.posix_spawnp("sleep", ["sleep", "3600"], os.environ)
    except OSError:
        child = os.fork()
        if child == 0:
            while True:
                time.sleep(3600)
    warn(f"scripted agent: hanging (child pid {child})")
    while True:
        time.sleep(3600)


def crash(turn: Turn) -> int:
    """Print a traceback-like stderr and return the crash exit code (default 2)."""
    reason = turn.result["result"] or f"rule {turn.result['rule']}"
    warn(
        "Traceback (most recent call last):\n"
        '  File "scripted_agent.py", line 1, in <module>\n'
        f"RuntimeError: scripted crash: {reason}"
    )
    exit_code: int = turn.action.get("exit_code", 2)
    return exit_code


def deliver(agent: Agent, turn: Turn, prompt: str, interactive: bool) -> int | None:
    """Output a turn as its failure mode says; return an exit code, or None to go on."""
    action, result = turn.action, turn.result
    if "stderr" in action:
        warn(render(action["stderr"], turn.values))

    def show(shown: Result) -> None:
        emit(shown["result"] if interactive else json.dumps(shown))

    if turn.failed_write:
        show(result)
        return None if interactive else 1
    fail = action.get("fail")
    if fail == "crash":
        return crash(turn)
    if fail == "kill_self":
        os.kill(os.getpid(), SIGKILL)
    if fail == "hang":
        hang()
    if fail == "garbage":
        head = result["result"][:40]
        emit(f'garbage: this is not JSON {{"type": "result", "result": "{head}')
        return None if interactive else 0
    if fail == "error_exit0":
        show(result)
        return None if interactive else 0
    if fail == "flood":
        flood(action.get("flood_bytes", DEFAULT_FLOOD_BYTES))
    agent.record(turn, prompt)
    show(result)
    if fail == "exit":
        exit_code: int = action.get("exit_code", 1)
        return exit_code
    return None if interactive else 0


# ---------------------------------------------------------------- command line


def parse_args(argv: list[str]) -> dict[str, str]:
    """Parse claude-like options (`--opt value` or `--opt=value`) into a dict."""
    options: dict[str, str] = {}
    index = 0
    while index < len(argv):
        arg = argv[index]
        name, has_value, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if name in ("-h", "--help"):
            raise Fatal(USAGE, 0)
        if name not in OPTIONS:
            raise Fatal(f"unknown option {arg!r}\n{USAGE}", 2)
        if has_value:
            value = inline
        elif index + 1 < len(argv):
            index += 1
            value = argv[index]
        else:
            raise Fatal(f"option {name} needs a value\n{USAGE}", 2)
        options[OPTIONS[name]] = value
        index += 1
    if "scenario" not in options:
        raise Fatal(f"--scenario is required\n{USAGE}", 2)
    if "session_id" in options and "resume" in options:
        raise Fatal("give --session-id or --resume, not both", 2)
    if options.get("output_format", "json") != "json":
        raise Fatal("only --output-format json is supported", 2)
    if "system_file" in options:
        if "system" in options:
            raise Fatal("give --append-system-prompt or --append-system-prompt-file, not both", 2)
        options["system"] = read_text_file(options.pop("system_file"), "--append-system-prompt-file")
    return options


def read_text_file(path: str, option: str) -> str:
    """The UTF-8 text of the file an option names (a Fatal error when unreadable)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise Fatal(f"{option} {path}: {exc}", 2) from None


def open_agent(options: dict[str, str]) -> Agent:
    """Load the scenario, then claim or resume the session (scenario errors come first)."""
    scenario = load_scenario(options["scenario"])
    home = state_home()
    cwd = os.getcwd()
    if "resume" in options:
        session = load_session(home, options["resume"], cwd)
    else:
        session_id = options["session_id"] if "session_id" in options else new_session_id()
        session = create_session(
            home, session_id, cwd, options.get("model"), options.get("system") or ""
        )
    return Agent(options, scenario, home, session)


def interact(agent: Agent) -> int:
    """Answer stdin lines as turns of the session until EOF or `/exit` (for attach)."""
    emit(f"scripted agent - session {agent.session['id']} - type /exit to quit")
    prompt_mark = sys.stdin.isatty()
    while True:
        if prompt_mark:
            sys.stdout.write("> ")
            sys.stdout.flush()
        line = sys.stdin.readline()
        if not line or line.strip() == "/exit":
            return 0
        prompt = line.rstrip("\n")
        if not prompt.strip():
            continue
        code = deliver(agent, agent.play(prompt), prompt, interactive=True)
        if code is not None:
            return code


def main(argv: list[str] | None = None) -> int:
    """Run one headless turn (`-p`) or an interactive session; return the exit code."""
    try:
        options = parse_args(sys.argv[1:] if argv is None else argv)
        agent = open_agent(options)
        if "prompt" not in options:
            return interact(agent)
        prompt = options["prompt"]
        if prompt == "-":  # like codex: the prompt is read from stdin, off the command line
            prompt = sys.stdin.buffer.read().decode("utf-8", "replace")
        return deliver(agent, agent.play(prompt), prompt, interactive=False) or 0
    except Fatal as exc:
        if exc.exit_code == 0:
            emit(exc.message)
        else:
            warn(f"Error: {exc.message}")
        return exc.exit_code
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as exc:
        warn(f"Error: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
