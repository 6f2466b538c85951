"""`agentbox profile test` on a profile that runs without a sandbox: checked like any other, never crashed."""

from __future__ import annotations

from pathlib import Path

from agentbox.core.admin.profile_check import check_profile


def test_a_profile_without_a_sandbox_gets_its_diagnosis(agent_box_home: Path) -> None:
    directory = agent_box_home / "profiles" / "bare"
    directory.mkdir(parents=True)
    (directory / "profile.yaml").write_text(
        "name: bare\nruntime:\n  tool: codex\n  command: /nonexistent/codex\nsandbox: none\n")
    report = check_profile("bare")
    assert not report.ok
    assert report.problem == "cli_missing", report.diagnosis
