"""`agentbox invoke | sessions | attach | launch` through the real entry point.

Each test runs `python -m agentbox` in a fresh project made from `.agent-box.example/`
(scripted crew, real sandbox) with the isolated AGENT_BOX_HOME of the autouse fixture.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agentbox.core.config.project import load_crew
from agentbox.core.paths import ProjectPaths
from tests.conftest import CliResult, run_cli

pytestmark = pytest.mark.bwrap

UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
FOOTER = re.compile(
    rf"^\[(?P<label>[\w:@-]+) · session (?P<session>{UUID}) · turn (?P<turn>\d+) · "
    rf"(?P<tokens>[\d,]+|unknown) tokens(?P<cost>, \$[\d.]+)? · [\d.]+s(?P<unsandboxed> · NOT SANDBOXED)?\]$",
    re.M,
)
RESULT_KEYS = {"status", "error_kind", "error", "text", "session_id", "native_id", "usage", "cost_usd",
               "duration_s", "exit_code", "log_path", "turn", "role", "profile", "tool", "sandboxed",
               "truncated", "network", "model"}
ROLES = ("lead", "builder", "tester", "reviewer")

FLAKY = {
    "rules": [
        {"when": {"prompt_regex": "^crash$"}, "do": {"fail": "crash"}},
        {"when": {"prompt_regex": "^hang$"}, "do": {"fail": "hang"}},
    ],
    "fallback": {"reply": "flaky says {prompt}"},
}


def footer(result: CliResult) -> re.Match[str]:
    match = FOOTER.search(result.err)
    assert match, f"no footer in {result.err!r}"
    return match


def invoke_ok(project: Path, *args: str, stdin: str | None = None) -> tuple[CliResult, re.Match[str]]:
    result = run_cli("invoke", *args, cwd=project, stdin=stdin)
    assert result.code == 0, (result.out, result.err)
    assert "error:" not in result.err
    return result, footer(result)


def make_profile(home: Path, name: str, scenario: dict[str, object], sandbox: object = None) -> None:
    directory = home / "profiles" / name
    directory.mkdir(parents=True)
    (directory / "scenario.json").write_text(json.dumps(scenario))
    profile = {"name": name, "runtime": {"tool": "scripted", "scenario": "scenario.json"},
               "sandbox": {"network": False} if sandbox is None else sandbox}
    (directory / "profile.yaml").write_text(json.dumps(profile))


def assert_usage_error(result: CliResult, *fragments: str) -> None:
    assert result.code == 2, (result.code, result.out, result.err)
    assert result.err.startswith("error: ") and "Traceback" not in result.err, result.err
    for fragment in fragments:
        assert fragment in result.err, (fragment, result.err)


# ----------------------------------------------------------------------------- invoke


FALLBACK = "Nothing to do: the demo worker knows only the greeting tasks."
"""The demo worker's answer to a prompt that is not one of its tasks."""


def test_invoke_then_continue(project: Path, agent_box_home: Path) -> None:
    first, f1 = invoke_ok(project, "builder", "hello")
    assert json.loads(first.out) == {"summary": FALLBACK, "evidence": ["no change needed"]}
    assert (f1["label"], f1["turn"], f1["tokens"], f1["cost"]) == ("builder", "1", "3,950", ", $0.0094")
    assert f1["unsandboxed"] is None
    second, f2 = invoke_ok(project, "builder", "--continue", "again")
    assert FALLBACK in second.out
    assert (f2["session"], f2["turn"]) == (f1["session"], "2")
    assert scripted_turns(agent_box_home, "demo-worker", f1["session"]) == ["hello", "again"]  # both reached it


def test_invoke_json_has_the_full_result(project: Path) -> None:
    result = run_cli("invoke", "builder", "hello", "--json", cwd=project)
    assert result.code == 0, result.err
    data = json.loads(result.out)
    assert set(data) == RESULT_KEYS
    assert (data["status"], data["error_kind"], data["turn"], data["role"]) == ("ok", None, 1, "builder")
    assert (data["profile"], data["tool"], data["sandboxed"], data["truncated"]) == ("demo-worker", "scripted", True, False)
    assert data["native_id"] == data["session_id"] and re.fullmatch(UUID, data["session_id"])
    assert data["usage"] == {"input_tokens": 2400, "cached_input_tokens": 900, "cache_write_tokens": None,
                             "output_tokens": 650, "reasoning_tokens": None, "cost_usd": 0.0094,
                             "cost_source": "tool", "billing": None}  # the scripted tool reports its own cost
    assert data["cost_usd"] == 0.0094 and data["exit_code"] == 0
    assert Path(data["log_path"]).is_file()
    assert result.err == ""  # --json prints no footer


def test_prompt_from_stdin(project: Path, agent_box_home: Path) -> None:
    result, footer = invoke_ok(project, "builder", "-", stdin="a prompt\nover two lines\n")
    assert FALLBACK in result.out
    assert scripted_turns(agent_box_home, "demo-worker", footer["session"]) == ["a prompt\nover two lines\n"]
    assert_usage_error(run_cli("invoke", "builder", "-", cwd=project, stdin="  \n"), "prompt is empty")


def test_session_flag_resumes_that_session(project: Path) -> None:
    _, a = invoke_ok(project, "builder", "first")
    _, b = invoke_ok(project, "builder", "second")
    assert a["session"] != b["session"]
    _, again = invoke_ok(project, "builder", "--session", a["session"], "back to a")
    assert (again["session"], again["turn"]) == (a["session"], "2")
    assert_usage_error(run_cli("invoke", "builder", "--session", "00000000-0000-4000-8000-000000000000", "x",
                               cwd=project), "no session 00000000-0000-4000-8000-000000000000")
    assert_usage_error(run_cli("invoke", "tester", "--session", a["session"], "x", cwd=project),
                       "belongs to builder")


def test_continue_without_a_session(project: Path) -> None:
    assert_usage_error(run_cli("invoke", "tester", "--continue", "x", cwd=project), "no session to continue")


def test_unknown_role_lists_the_roles(project: Path) -> None:
    roles = list(load_crew(ProjectPaths(project)).crew.roles)
    assert set(ROLES) <= set(roles)
    result = run_cli("invoke", "plumber", "fix it", cwd=project)
    assert_usage_error(result, "plumber", "profile:NAME", "roles: " + ", ".join(roles))


def test_role_outside_a_project(tmp_path: Path) -> None:
    assert_usage_error(run_cli("invoke", "builder", "x", cwd=tmp_path), "no project found")


def test_profile_target(project: Path, agent_box_home: Path) -> None:
    result, found = invoke_ok(project, "profile:scripted", "hi there")
    assert result.out.strip() == "ok: hi there"
    assert found["label"] == "profile:scripted" and found["tokens"] == "60"
    assert (agent_box_home / "sessions" / "profile@scripted" / f"{found['session']}.json").is_file()
    _, again = invoke_ok(project, "profile:scripted", "--continue", "more")
    assert (again["session"], again["turn"]) == (found["session"], "2")
    assert_usage_error(run_cli("invoke", "profile:nope", "x", cwd=project), "unknown profile 'nope'")


def test_agent_failure_exits_1_with_the_error(project: Path, agent_box_home: Path) -> None:
    make_profile(agent_box_home, "flaky", FLAKY)
    result = run_cli("invoke", "profile:flaky", "crash", cwd=project)
    assert result.code == 1, (result.out, result.err)
    assert "error: nonzero_exit: " in result.err and "scripted crash" in result.err
    assert "hint: raw output in " in result.err and "Traceback (most recent call last):\n  File \"scripted" in result.err
    assert footer(result)["tokens"] == "unknown"
    as_json = run_cli("invoke", "profile:flaky", "crash", "--json", cwd=project)
    assert as_json.code == 1 and json.loads(as_json.out)["error_kind"] == "nonzero_exit"


def test_timeout_flag(project: Path, agent_box_home: Path) -> None:
    make_profile(agent_box_home, "flaky", FLAKY)
    result = run_cli("invoke", "profile:flaky", "hang", "--timeout", "0.5", cwd=project, timeout=30)
    assert result.code == 1, (result.out, result.err)
    assert "error: timeout: no answer within 0.5 s" in result.err


def test_unsandboxed_profile_says_so(project: Path, agent_box_home: Path) -> None:
    make_profile(agent_box_home, "bare", FLAKY, sandbox="none")
    result, found = invoke_ok(project, "profile:bare", "hi")
    assert result.out.strip() == "flaky says hi" and found["unsandboxed"]


# ----------------------------------------------------------------------------- sessions


def test_sessions_table_json_and_show(project: Path) -> None:
    _, b = invoke_ok(project, "builder", "build it")
    invoke_ok(project, "builder", "--continue", "and test it")
    _, t = invoke_ok(project, "tester", "test it")

    table = run_cli("sessions", cwd=project)
    assert table.code == 0, table.err
    lines = table.out.splitlines()
    assert lines[0].split() == ["ROLE", "SESSION", "TOOL", "RUN", "TASK", "TURNS", "TOKENS", "LAST", "UPDATED"]
    rows = {line.split()[1]: line.split() for line in lines[1:]}  # sessions of `invoke`: no run, no task
    assert rows[b["session"]][:8] == ["builder", b["session"], "scripted", "-", "-", "2", "7,900", "ok"]
    assert rows[t["session"]][:8] == ["tester", t["session"], "scripted", "-", "-", "1", "3,950", "ok"]
    only_tester = run_cli("sessions", "tester", cwd=project)
    assert b["session"] not in only_tester.out and t["session"] in only_tester.out

    listed = json.loads(run_cli("sessions", "--json", cwd=project).out)
    assert {r["id"] for r in listed} == {b["session"], t["session"]}
    builder = next(r for r in listed if r["id"] == b["session"])
    assert (builder["owner"], builder["turns"], builder["totals"]["tokens"], builder["status"]) == ("builder", 2, 7900, "idle")

    shown = run_cli("sessions", "show", b["session"], cwd=project)
    assert shown.code == 0, shown.err
    assert shown.out.startswith(f"session {b['session']} · builder · profile demo-worker (scripted)")
    assert "--- turn 1 · ok" in shown.out and "--- turn 2 · ok" in shown.out
    assert "> build it" in shown.out and "> and test it" in shown.out
    assert shown.out.count(FALLBACK) == 2
    detail = json.loads(run_cli("sessions", "show", b["session"], "--json", cwd=project).out)
    assert [turn["prompt"] for turn in detail["turns"]] == ["build it", "and test it"]
    assert detail["session"]["id"] == b["session"]


def test_sessions_show_unknown_and_missing_id(project: Path) -> None:
    assert_usage_error(run_cli("sessions", "show", "00000000-0000-4000-8000-000000000000", cwd=project),
                       "no session 00000000-0000-4000-8000-000000000000")
    assert_usage_error(run_cli("sessions", "show", cwd=project), "usage: agentbox sessions show UUID")


def test_sessions_of_failed_and_unknown_usage_turns(project: Path, agent_box_home: Path) -> None:
    make_profile(agent_box_home, "flaky", FLAKY)
    run_cli("invoke", "profile:flaky", "crash", cwd=project)
    listed = run_cli("sessions", "profile:flaky", cwd=project)
    assert listed.code == 0
    [row] = listed.out.splitlines()[1:]
    assert "(+1 unknown)" in row and row.split()[-3] == "error"
    session = row.split()[1]
    shown = run_cli("sessions", "show", session, cwd=project)
    assert "--- turn 1 · error (nonzero_exit) · unknown tokens" in shown.out


def test_sessions_empty(project: Path) -> None:
    result = run_cli("sessions", cwd=project)
    assert result.code == 0 and result.out.split() == ["ROLE", "SESSION", "TOOL", "RUN", "TASK", "TURNS", "TOKENS",
                                                       "LAST", "UPDATED"]
    assert json.loads(run_cli("sessions", "--json", cwd=project).out) == []


# ----------------------------------------------------------------------------- attach / launch


def scripted_turns(agent_box_home: Path, profile: str, session: str) -> list[str]:
    """Prompts the scripted agent itself recorded in its session (its own native history)."""
    path = agent_box_home / "bundled" / profile / "dot-scripted" / "sessions" / f"{session}.json"
    return [turn["prompt"] for turn in json.loads(path.read_text())["turns"]]


def test_attach_resumes_the_latest_session(project: Path, agent_box_home: Path) -> None:
    _, first = invoke_ok(project, "builder", "headless turn")
    result = run_cli("attach", "builder", cwd=project, stdin="hi\n/exit\n")
    assert result.code == 0, (result.out, result.err)
    assert f"[attaching to builder · session {first['session']}]" in result.err
    assert result.out.startswith(f"scripted agent - session {first['session']} - type /exit to quit")
    assert FALLBACK in result.out
    assert scripted_turns(agent_box_home, "demo-worker", first["session"]) == ["headless turn", "hi"]


def test_attach_a_given_session_or_a_new_one(project: Path, agent_box_home: Path) -> None:
    _, older = invoke_ok(project, "builder", "older")
    invoke_ok(project, "builder", "newer")
    chosen = run_cli("attach", "builder", older["session"], cwd=project, stdin="pick me\n")
    assert chosen.code == 0 and f"session {older['session']}" in chosen.out
    assert scripted_turns(agent_box_home, "demo-worker", older["session"]) == ["older", "pick me"]

    fresh = run_cli("attach", "tester", cwd=project, stdin="/exit\n")
    assert fresh.code == 0, fresh.err
    session = re.search(rf"session ({UUID})\]", fresh.err)
    assert session and f"scripted agent - session {session[1]}" in fresh.out
    # the attached session is in the history, so `--continue` picks it up headless
    _, cont = invoke_ok(project, "tester", "--continue", "headless now")
    assert cont["session"] == session[1]


def test_launch_a_profile(project: Path, agent_box_home: Path) -> None:
    result = run_cli("launch", "scripted", cwd=project, stdin="hi\nthere\n/exit\n")
    assert result.code == 0, (result.out, result.err)
    session = re.search(rf"\[attaching to profile:scripted · session ({UUID})\]", result.err)
    assert session, result.err
    assert result.out.splitlines()[1:] == ["ok: hi", "ok: there"]
    assert scripted_turns(agent_box_home, "scripted", session[1]) == ["hi", "there"]
    resumed = run_cli("launch", "scripted", "--session", session[1], cwd=project, stdin="again\n")
    assert resumed.code == 0 and "ok: again" in resumed.out
    assert scripted_turns(agent_box_home, "scripted", session[1]) == ["hi", "there", "again"]


def test_launch_unsandboxed_profile_warns(project: Path, agent_box_home: Path) -> None:
    make_profile(agent_box_home, "bare", FLAKY, sandbox="none")
    result = run_cli("launch", "bare", cwd=project, stdin="yo\n")
    assert result.code == 0 and "flaky says yo" in result.out
    assert "WITHOUT a sandbox" in result.err
