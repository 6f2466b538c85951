"""Bad input to the run lifecycle and crew commands: one `error:` line (with file and line when
it comes from a file), exit 2, no traceback, and nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import CliResult, run_cli


def assert_usage_error(result: CliResult, *fragments: str) -> None:
    """Exit 2, `error:` first on stderr, no traceback, and every fragment mentioned."""
    assert result.code == 2, (result.code, result.out, result.err)
    assert result.err.startswith("error: ") and "Traceback" not in result.err, result.err
    for fragment in fragments:
        assert fragment in result.err, (fragment, result.err)


BAD_SCOPES = [("../etc/**", "'..'"), ("/etc/**", "absolute"), (".git/**", ".git/"),
              ("src/**/*.py", "finer than the sandbox can enforce")]


@pytest.mark.parametrize(("scope", "why"), BAD_SCOPES)
def test_role_add_refuses_a_write_scope_the_sandbox_would_refuse(project: Path, scope: str, why: str) -> None:
    crew = project / ".agent-box" / "crew.yaml"
    before = crew.read_bytes()
    result = run_cli("role", "add", "extra", "--profile", "scripted", "--writes", "src/**", "--writes", scope,
                     cwd=project)
    assert_usage_error(result, "--writes", repr(scope), why)
    assert crew.read_bytes() == before


@pytest.mark.parametrize(("scope", "why"), BAD_SCOPES)
def test_a_crew_file_with_such_a_scope_is_refused_where_it_is_written(project: Path, scope: str, why: str) -> None:
    crew = project / ".agent-box" / "crew.yaml"
    text = crew.read_text()
    at = text.index("\nroles:\n") + len("\nroles:\n")
    crew.write_text(text[:at] + f"  extra:\n    profile: scripted\n    writes:\n      - {scope!r}\n" + text[at:])
    line = text[:at].count("\n") + 4
    where = f"crew.yaml:{line}:"
    assert_usage_error(run_cli("role", "list", cwd=project), where, "roles.extra.writes.0", why)
    doctor = run_cli("doctor", cwd=project)
    assert doctor.code != 0 and "Traceback" not in doctor.err
    [project_line] = [ln for ln in doctor.out.splitlines() if ln.startswith("[FAIL] project")]
    assert where in project_line and why in project_line, doctor.out


def test_run_with_a_graph_is_a_graph_run_and_refuses_another_mode(project: Path) -> None:
    runs_dir = project / ".agent-box" / "runs"
    # --graph alone means graph mode: an unknown graph is refused, no run is made
    assert_usage_error(run_cli("run", "the goal", "--graph", "nosuch", cwd=project), "no work graph 'nosuch'")
    assert_usage_error(run_cli("run", "the goal", "--graph", "build", "--mode", "sequential", cwd=project),
                       "graph mode, not sequential mode", "--mode graph")
    assert not runs_dir.exists() or not any(runs_dir.iterdir())
    # a graph that exists, with no --mode: a graph run (the crew's own mode is hierarchical)
    from agentbox.core import runs
    from agentbox.core.paths import ProjectPaths

    assert runs.create_run(ProjectPaths(project), "the goal", None, "build").contract.mode == "graph"


@pytest.mark.parametrize("seconds", ["-1", "0", "nan"])
def test_invoke_and_profile_test_refuse_a_timeout_that_is_no_time(project: Path, seconds: str) -> None:
    assert_usage_error(run_cli("invoke", "builder", "hello", "--timeout", seconds, cwd=project),
                       "--timeout must be a number of seconds above 0")
    assert not (project / ".agent-box" / "sessions").exists(), "no turn ran"
    assert_usage_error(run_cli("profile", "test", "scripted", "--timeout", seconds), "--timeout")


def test_sessions_of_an_unknown_role_names_the_known_ones(project: Path) -> None:
    assert_usage_error(run_cli("sessions", "nosuchrole", cwd=project), "no role 'nosuchrole'", "lead, builder")
    assert_usage_error(run_cli("sessions", "profile:nosuch", cwd=project), "unknown profile 'nosuch'")
    known = run_cli("sessions", "builder", cwd=project)  # a role without sessions yet: an empty table
    assert known.code == 0 and "SESSION" in known.out
