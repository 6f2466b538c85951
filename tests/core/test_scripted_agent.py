"""Tests for the scripted runtime, run as a real subprocess exactly as the launcher runs it.

The program is the engine's stand-in for a real agent CLI, so every test drives it through
`python -I scripted_agent.py …` with a temp state home and a temp working directory.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

SCRIPT = (
    Path(__file__).resolve().parents[2] / "agentbox" / "core" / "runtimes" / "scripted_agent.py"
)
SID = "11111111-2222-3333-4444-555555555555"
OTHER_SID = "99999999-8888-7777-6666-555555555555"


class Agent:
    """Runs the scripted agent in a temp project dir with a temp SCRIPTED_HOME."""

    def __init__(self, tmp_path: Path) -> None:
        self.home = tmp_path / "home"
        self.cwd = tmp_path / "project"
        self.cwd.mkdir()
        self.scenario = tmp_path / "scenario.json"
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(tmp_path / "user"),
            "SCRIPTED_HOME": str(self.home),
        }

    def script(self, scenario: dict[str, Any] | str, name: str = "scenario.json") -> None:
        """Write the scenario (a dict as JSON, or raw text) and use it from now on."""
        self.scenario = self.scenario.parent / name
        text = scenario if isinstance(scenario, str) else json.dumps(scenario)
        self.scenario.write_text(text, encoding="utf-8")

    def argv(self, *args: str) -> list[str]:
        """Build the command line for this agent."""
        return [sys.executable, "-I", str(SCRIPT), "--scenario", str(self.scenario), *args]

    def run(
        self,
        *args: str,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
        stdin: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run once and capture everything (stdin is /dev/null unless given)."""
        return subprocess.run(
            self.argv(*args),
            cwd=cwd or self.cwd,
            env={**self.env, **(env or {})},
            input=stdin,
            stdin=None if stdin is not None else subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=20,
        )

    def turn(self, prompt: str, *args: str, **kwargs: Any) -> dict[str, Any]:
        """Run one successful headless turn and return the parsed result object."""
        done = self.run("-p", prompt, *args, **kwargs)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def session(self, session_id: str = SID) -> dict[str, Any]:
        """Read a stored session file."""
        return json.loads((self.home / "sessions" / f"{session_id}.json").read_text())


@pytest.fixture
def agent(tmp_path: Path) -> Agent:
    agent = Agent(tmp_path)
    agent.script({"rules": []})
    return agent


# ---------------------------------------------------------------- sessions


def test_new_session_then_resume_counts_turns_and_keeps_history(agent: Agent) -> None:
    first = agent.turn("hello", "--session-id", SID, "--model", "m1")
    assert first == {
        "type": "result",
        "is_error": False,
        "session_id": SID,
        "turn": 1,
        "result": "ok: hello",
        "usage": None,
        "cost_usd": None,
        "duration_ms": first["duration_ms"],
        "model": "m1",
        "rule": "fallback",
    }
    second = agent.turn("again", "--resume", SID)
    assert (second["turn"], second["result"], second["model"]) == (2, "ok: again", "m1")
    session = agent.session()
    assert session["cwd"] == str(agent.cwd)
    assert [(t["prompt"], t["reply"]) for t in session["turns"]] == [
        ("hello", "ok: hello"),
        ("again", "ok: again"),
    ]


def test_session_id_already_in_use(agent: Agent) -> None:
    agent.turn("hello", "--session-id", SID)
    done = agent.run("-p", "again", "--session-id", SID)
    assert done.returncode == 1
    assert done.stderr.strip() == f"Error: Session ID {SID} is already in use"
    assert done.stdout == ""


@pytest.mark.parametrize("bad_id", ["not-a-uuid", "../../etc/passwd", ""])
def test_invalid_session_id(agent: Agent, bad_id: str) -> None:
    done = agent.run("-p", "x", "--session-id", bad_id)
    assert (done.returncode, done.stderr.strip()) == (1, "Error: Invalid session ID")


def test_resume_unknown_id_or_other_cwd_is_not_found(agent: Agent, tmp_path: Path) -> None:
    unknown = agent.run("-p", "x", "--resume", OTHER_SID)
    assert unknown.returncode == 1
    assert unknown.stderr.strip() == f"Error: No conversation found with session ID: {OTHER_SID}"
    agent.turn("hello", "--session-id", SID)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    moved = agent.run("-p", "x", "--resume", SID, cwd=elsewhere)
    assert moved.returncode == 1
    assert moved.stderr.strip() == f"Error: No conversation found with session ID: {SID}"


def test_missing_home_is_a_usage_error(agent: Agent) -> None:
    done = agent.run("-p", "x", env={"SCRIPTED_HOME": ""})
    assert done.returncode == 2
    assert "SCRIPTED_HOME" in done.stderr


def test_without_an_id_a_fresh_uuid_is_used(agent: Agent) -> None:
    result = agent.turn("hello")
    assert len(result["session_id"]) == 36
    assert agent.turn("again", "--resume", result["session_id"])["turn"] == 2


# ---------------------------------------------------------------- conditions


def rule(when: dict[str, Any], reply: str = "hit", **extra: Any) -> dict[str, Any]:
    """A scenario with one rule, falling back to "miss"."""
    return {
        "rules": [{"id": "r", "when": when, "do": {"reply": reply, **extra}}],
        "fallback": {"reply": "miss"},
    }


@pytest.mark.parametrize(
    ("when", "prompt", "hit"),
    [
        ({}, "anything", True),
        ({"prompt_contains": "REVIEW"}, "please REVIEW", True),
        ({"prompt_contains": "REVIEW"}, "please review", False),
        ({"prompt_contains": ["a1", "b2"]}, "a1 and b2", True),
        ({"prompt_contains": ["a1", "b2"]}, "a1 only", False),
        ({"prompt_regex": r"task \w+"}, "do task t1", True),
        ({"prompt_regex": r"^task"}, "do task t1", False),
        ({"prompt_regex": r"a.b"}, "a\nb", True),
        ({"env": {"AGENTBOX_ROLE": "reviewer"}}, "x", True),
        ({"env": {"AGENTBOX_ROLE": "writer"}}, "x", False),
        ({"env": {"NOT_SET_ANYWHERE": None}}, "x", True),
        ({"env": {"AGENTBOX_ROLE": None}}, "x", False),
        ({"first_turn": True}, "x", True),
        ({"first_turn": False}, "x", False),
        ({"turn": 1}, "x", True),
        ({"turn": [2, 3]}, "x", False),
        ({"system_contains": "reviewer"}, "x", True),
        ({"system_contains": "writer"}, "x", False),
    ],
)
def test_condition(agent: Agent, when: dict[str, Any], prompt: str, hit: bool) -> None:
    agent.script(rule(when))
    result = agent.turn(
        prompt,
        "--append-system-prompt",
        "You are the reviewer.",
        env={"AGENTBOX_ROLE": "reviewer"},
    )
    assert result["result"] == ("hit" if hit else "miss")


def test_turn_conditions_follow_the_session(agent: Agent) -> None:
    agent.script(
        {
            "rules": [
                {"when": {"first_turn": True}, "do": {"reply": "first"}},
                {"when": {"turn": 2}, "do": {"reply": "second"}},
                {"when": {"system_contains": "reviewer"}, "do": {"reply": "reviewer {system}"}},
            ]
        }
    )
    system = ("--append-system-prompt", "the reviewer")
    assert agent.turn("x", "--session-id", SID, *system)["result"] == "first"
    assert agent.turn("x", "--resume", SID)["result"] == "second"
    assert agent.turn("x", "--resume", SID)["result"] == "reviewer the reviewer"


def test_times_falls_through_once_spent(agent: Agent) -> None:
    agent.script(
        {
            "rules": [
                {
                    "id": "reject-first",
                    "when": {"prompt_contains": "REVIEW", "times": 1},
                    "do": {"reply": "REJECT"},
                },
                {
                    "id": "approve",
                    "when": {"prompt_contains": "REVIEW"},
                    "do": {"reply": "OK {counter}"},
                },
            ]
        }
    )
    replies = [agent.turn("REVIEW it")["result"] for _ in range(3)]
    assert replies == ["REJECT", "OK 1", "OK 2"]
    assert json.loads((agent.home / "counters.json").read_text()) == {
        "reject-first": 1,
        "approve": 2,
    }


def test_times_is_not_double_fired_by_concurrent_agents(agent: Agent) -> None:
    agent.script(
        {
            "rules": [
                {"id": "once", "when": {"times": 1}, "do": {"reply": "once"}},
                {"id": "after", "do": {"reply": "after"}},
            ]
        }
    )
    procs = [
        subprocess.Popen(
            agent.argv("-p", f"go {n}"),
            cwd=agent.cwd,
            env=agent.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(4)
    ]
    replies = sorted(json.loads(proc.communicate(timeout=20)[0])["result"] for proc in procs)
    assert replies == ["after", "after", "after", "once"]


# ---------------------------------------------------------------- templates


def test_template_variables_and_regex_groups(agent: Agent) -> None:
    agent.script(
        rule(
            {"prompt_regex": r"task (?P<task>[\w-]+) by (\w+)"},
            "{task}|{m[0]}|{m[2]}|{session_id}|{turn}|{model}|{role}|{counter}|{env[EXTRA]}|{cwd}",
        )
    )
    result = agent.turn(
        "do task fix-7 by ann now",
        "--session-id",
        SID,
        "--model",
        "m9",
        env={"AGENTBOX_ROLE": "writer", "EXTRA": "e"},
    )
    expected = f"fix-7|task fix-7 by ann|ann|{SID}|1|m9|writer|1|e|{agent.cwd}"
    assert result["result"] == expected


def test_unknown_names_and_literal_braces_survive(agent: Agent) -> None:
    agent.script(rule({}, '{"k": {prompt}} {nope} {m[5]} {env[NOPE]} {prompt:>5} {} {{prompt}}'))
    assert agent.turn("p")["result"] == '{"k": p} {nope} {m[5]} {env[NOPE]} {prompt:>5} {} {p}'


def test_reply_json_templates_string_leaves(agent: Agent) -> None:
    scenario = rule({"prompt_regex": r"task (?P<task>\S+)"}, "unused")
    del scenario["rules"][0]["do"]["reply"]
    scenario["rules"][0]["do"]["reply_json"] = {
        "summary": "done {task}",
        "artifacts": ["notes/{task}.md"],
        "count": 2,
        "ok": True,
    }
    agent.script(scenario)
    result = agent.turn("task t1")
    assert json.loads(result["result"]) == {
        "summary": "done t1",
        "artifacts": ["notes/t1.md"],
        "count": 2,
        "ok": True,
    }


# ---------------------------------------------------------------- actions


def test_write_read_and_run(agent: Agent, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("secret")
    agent.script(
        {
            "rules": [
                {
                    "when": {"prompt_regex": r"task (?P<task>\S+)"},
                    "do": {
                        "write": {"notes/deep/{task}.md": 'text {task} {"a": 1}'},
                        "read": ["notes/deep/{task}.md", "~/.ssh/id_rsa", str(outside)],
                        "run": "cat notes/deep/{task}.md; echo; exit 3",
                        "reply": "{reads}|{run_output}|{run_status}",
                    },
                }
            ]
        }
    )
    result = agent.turn("task t1")
    assert (agent.cwd / "notes" / "deep" / "t1.md").read_text() == 'text t1 {"a": 1}'
    reads_text, run_output, run_status = result["result"].split("|")
    reads = json.loads(reads_text)
    assert reads["notes/deep/t1.md"] == 'text t1 {"a": 1}'
    assert reads["~/.ssh/id_rsa"].startswith("ERROR: ")
    assert reads[str(outside)] == "secret"
    assert (run_output, run_status) == ('text t1 {"a": 1}', "3")


def test_failed_write_is_an_error_result_and_not_recorded(agent: Agent, tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a dir")
    agent.script(rule({}, "never", write={str(blocker / "x.md"): "x"}))
    done = agent.run("-p", "go", "--session-id", SID)
    assert done.returncode == 1
    result = json.loads(done.stdout)
    assert result["is_error"] is True
    assert "write failed" in result["result"] and "blocker" in result["result"]
    assert agent.session()["turns"] == []


def test_delay_is_reflected_in_duration(agent: Agent) -> None:
    agent.script(rule({}, delay_s=0.2))
    assert agent.turn("x")["duration_ms"] >= 200


# ---------------------------------------------------------------- usage


def test_usage_given_partial_unknown_and_absent(agent: Agent) -> None:
    agent.script(
        {
            "defaults": {"usage": {"input_tokens": 120, "output_tokens": 40}, "cost_usd": 0.5},
            "rules": [
                {
                    "when": {"prompt_contains": "given"},
                    "do": {"usage": {"input_tokens": 3, "cached_input_tokens": 0}},
                },
                {
                    "when": {"prompt_contains": "unknown"},
                    "do": {"usage": "unknown", "cost_usd": None},
                },
            ],
        }
    )
    given = agent.turn("given")
    assert given["usage"] == {
        "input_tokens": 3,
        "cached_input_tokens": 0,
        "cache_write_tokens": None,
        "output_tokens": None,
        "reasoning_tokens": None,
    }
    assert given["cost_usd"] == 0.5
    defaulted = agent.turn("other")
    assert (defaulted["usage"]["input_tokens"], defaulted["usage"]["output_tokens"]) == (120, 40)
    unknown = agent.turn("unknown")
    assert (unknown["usage"], unknown["cost_usd"]) == (None, None)
    agent.script({"rules": []})
    assert agent.turn("plain")["usage"] is None


# ---------------------------------------------------------------- failure modes


def fail_scenario(mode: str, **extra: Any) -> dict[str, Any]:
    """A scenario whose only rule fails in `mode` with reply "boom"."""
    return rule({}, "boom", fail=mode, stderr="extra line", **extra)


@pytest.mark.parametrize(("extra", "code"), [({}, 2), ({"exit_code": 5}, 5)])
def test_crash(agent: Agent, extra: dict[str, Any], code: int) -> None:
    agent.script(fail_scenario("crash", **extra))
    done = agent.run("-p", "x", "--session-id", SID)
    assert done.returncode == code
    assert done.stdout == ""
    assert "Traceback (most recent call last)" in done.stderr
    assert "extra line" in done.stderr
    assert agent.session()["turns"] == []


def test_garbage_exits_zero_with_non_json(agent: Agent) -> None:
    agent.script(fail_scenario("garbage"))
    done = agent.run("-p", "x", "--session-id", SID)
    assert done.returncode == 0
    with pytest.raises(json.JSONDecodeError):
        json.loads(done.stdout)
    assert agent.session()["turns"] == []


def test_error_exit0(agent: Agent) -> None:
    agent.script(fail_scenario("error_exit0"))
    done = agent.run("-p", "x", "--session-id", SID)
    assert done.returncode == 0
    result = json.loads(done.stdout)
    assert (result["is_error"], result["result"]) == (True, "boom")
    assert agent.session()["turns"] == []


def test_kill_self(agent: Agent) -> None:
    agent.script(fail_scenario("kill_self"))
    done = agent.run("-p", "x", "--session-id", SID)
    assert done.returncode == -signal.SIGKILL
    assert agent.session()["turns"] == []


def test_exit_prints_result_then_exits_with_code(agent: Agent) -> None:
    agent.script(fail_scenario("exit", exit_code=7))
    done = agent.run("-p", "x", "--session-id", SID)
    assert done.returncode == 7
    assert json.loads(done.stdout)["result"] == "boom"
    assert len(agent.session()["turns"]) == 1


def test_flood_then_result(agent: Agent) -> None:
    size = 3 * 1024 * 1024 + 17
    agent.script(fail_scenario("flood", flood_bytes=size))
    done = subprocess.run(
        agent.argv("-p", "x"),
        cwd=agent.cwd,
        env=agent.env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=20,
        check=False,
    )
    assert done.returncode == 0
    flood, _, last = done.stdout.rstrip(b"\n").rpartition(b"\n")
    assert len(flood) + 1 == size
    assert json.loads(last)["result"] == "boom"


def test_hang_leaves_a_child_in_the_group_until_it_is_killed(agent: Agent) -> None:
    agent.script(fail_scenario("hang"))
    proc = subprocess.Popen(
        agent.argv("-p", "x", "--session-id", SID),
        cwd=agent.cwd,
        env=agent.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 10
        children: list[psutil.Process] = []
        while not children and time.monotonic() < deadline:
            children = psutil.Process(proc.pid).children(recursive=True)
            time.sleep(0.02)
        assert children, "the hanging agent started no child"
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=0.3)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=10)
    for child in children:
        assert child_is_gone(child)
    assert agent.session()["turns"] == []


def child_is_gone(child: psutil.Process, timeout: float = 5.0) -> bool:
    """Tell whether a killed process has exited (a zombie awaiting its reaper counts)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.02)
    return False


# ---------------------------------------------------------------- scenario files


YAML_SCENARIO = """\
defaults:
  usage: {input_tokens: 120, output_tokens: 40}
rules:
  - id: review
    when:
      prompt_regex: "task (?P<task>[\\\\w-]+)"
      first_turn: true
    do:
      reply: "done {task} # not a comment"
fallback:
  reply: "fallback {prompt}"
"""


@pytest.mark.parametrize("suffix", [".yaml", ".yml"])
def test_yaml_scenario(agent: Agent, suffix: str) -> None:
    agent.script(YAML_SCENARIO, name=f"scenario{suffix}")
    result = agent.turn("task t-1", "--session-id", SID)
    assert (result["result"], result["rule"]) == ("done t-1 # not a comment", "review")
    assert result["usage"]["input_tokens"] == 120
    assert agent.turn("task t-1", "--resume", SID)["result"] == "fallback task t-1"


@pytest.mark.parametrize(
    ("name", "text", "complaint"),
    [
        ("bad.json", "{not json", "invalid JSON"),
        ("bad.yaml", "rules: [\n", "invalid YAML at line"),
        ("bad.json", '["a list"]', "top level must be a mapping"),
        ("bad.json", '{"rulez": []}', "unknown key 'rulez'"),
        ("bad.json", '{"rules": {}}', "rules: must be a list"),
        ("bad.json", '{"rules": [{"when": {"bogus": 1}}]}', "rules[0].when: unknown key 'bogus'"),
        ("bad.json", '{"rules": [{"when": {"prompt_regex": "("}}]}', "rules[0].when.prompt_regex"),
        (
            "bad.json",
            '{"rules": [{"do": {"fail": "explode"}}]}',
            "rules[0].do.fail: must be one of",
        ),
        ("bad.json", '{"rules": [{"do": {"usage": {"tokens": 1}}}]}', "rules[0].do.usage"),
        ("bad.json", '{"rules": [{"do": {"reply": "a", "reply_json": {}}}]}', "not both"),
        ("bad.json", '{"rules": [{"id": "a"}, {"id": "a"}]}', "duplicate"),
        ("bad.json", '{"defaults": {"delay_s": -1}}', "defaults.delay_s"),
        ("missing.json", None, "cannot read"),
    ],
)
def test_malformed_scenario_exits_2(
    agent: Agent, name: str, text: str | None, complaint: str
) -> None:
    if text is None:
        agent.scenario = agent.scenario.parent / name
    else:
        agent.script(text, name=name)
    done = agent.run("-p", "x", "--session-id", SID)
    assert done.returncode == 2
    assert done.stderr.startswith(f"Error: scenario {agent.scenario}: ")
    assert complaint in done.stderr
    assert "Traceback" not in done.stderr
    assert not (agent.home / "sessions" / f"{SID}.json").exists()


def test_bad_command_line_exits_2(agent: Agent) -> None:
    assert agent.run("--bogus", "x").returncode == 2
    assert agent.run("-p", "x", "--session-id", SID, "--resume", SID).returncode == 2


# ---------------------------------------------------------------- interactive


def test_interactive_session_answers_lines_until_exit(agent: Agent) -> None:
    agent.script(rule({"turn": 2}, "second {prompt}"))
    done = agent.run("--session-id", SID, stdin="hello\n\nworld\n/exit\nignored\n")
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    assert SID in lines[0]
    assert lines[1:] == ["miss", "second world"]
    assert [t["prompt"] for t in agent.session()["turns"]] == ["hello", "world"]
    resumed = agent.run("--resume", SID, stdin="third\n")
    assert resumed.returncode == 0
    assert resumed.stdout.splitlines()[1:] == ["miss"]
    assert len(agent.session()["turns"]) == 3


# ---------------------------------------------------------------- prompt and system prompt off the command line


def test_prompt_from_stdin_and_system_prompt_from_a_file(agent: Agent, tmp_path: Path) -> None:
    agent.script({"rules": [{"when": {"system_contains": "reviewer"}, "do": {"reply": "{system} / {prompt}"}}]})
    system = tmp_path / "system.md"
    system.write_text("You are the reviewer.", encoding="utf-8")
    done = agent.run("-p", "-", "--session-id", SID, "--append-system-prompt-file", str(system),
                     stdin="-rf ünïcode\nline two")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["result"] == "You are the reviewer. / -rf ünïcode\nline two"
    assert agent.session()["system"] == "You are the reviewer."


def test_system_prompt_file_errors(agent: Agent, tmp_path: Path) -> None:
    missing = agent.run("-p", "x", "--append-system-prompt-file", str(tmp_path / "missing.md"))
    assert missing.returncode == 2 and "--append-system-prompt-file" in missing.stderr
    both = agent.run("-p", "x", "--append-system-prompt", "a", "--append-system-prompt-file", str(tmp_path))
    assert both.returncode == 2 and "not both" in both.stderr


@pytest.mark.parametrize("kind", ["device", "fifo", "directory", "huge", "not-utf8"])
def test_a_scenario_that_is_no_bounded_file_is_refused_without_reading_it_all(
    agent: Agent, tmp_path: Path, kind: str
) -> None:
    if kind == "device":
        agent.scenario = Path("/dev/zero")
    elif kind == "fifo":
        agent.scenario = tmp_path / "fifo.json"
        os.mkfifo(agent.scenario)  # nobody writes it: a blocking read would never end
    elif kind == "directory":
        agent.scenario = tmp_path
    elif kind == "huge":
        agent.script(" " * (2 << 20) + "{}")
    else:
        agent.scenario = tmp_path / "latin.json"
        agent.scenario.write_bytes(b'{"fallback": {"reply": "\xff"}}')
    done = agent.run("-p", "x", "--session-id", SID)
    assert done.returncode == 2 and done.stderr.startswith(f"Error: scenario {agent.scenario}: "), done.stderr
    assert "Traceback" not in done.stderr
