"""`agentbox attach ROLE` with the real claude CLI, whose config already holds other projects' folders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.realcli.conftest import FakeView, profile_config, write_project

pytestmark = [pytest.mark.realcli, pytest.mark.bwrap]


def test_attach_claude_with_several_project_folders(make_profile, fake: FakeView, tmp_path: Path) -> None:
    name = make_profile("claude")
    projects = profile_config(name, "claude") / "projects"
    for other in ("-home-someone-one", "-home-someone-two"):  # what any claude home that saw two projects has
        (projects / other).mkdir(parents=True)
    root = write_project(tmp_path / "proj", {"coder": {"profile": name}})
    # no terminal: claude answers the piped line once and exits, as a person typing one prompt would
    result = run_cli("attach", "coder", cwd=root, stdin="hello while attached\n", timeout=240)
    assert "Traceback" not in result.err, result.err
    assert result.code == 0, (result.out, result.err)
    assert "echo: hello while attached" in result.out
    # the typed turn was read back from claude's own transcript into agentbox's history
    listed = run_cli("sessions", "coder", "--json", cwd=root)
    [session] = json.loads(listed.out)
    shown = json.loads(run_cli("sessions", "show", session["id"], "--json", cwd=root).out)
    assert [(t["prompt"].strip(), t["interactive"]) for t in shown["turns"]] == [("hello while attached", True)]
