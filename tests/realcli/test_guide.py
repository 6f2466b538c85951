"""docs/real-agents.md, run as written: each recipe's files and commands, with the real CLI,
against the fake model server, so the guide cannot rot.

A recipe is the fenced blocks after `<!-- recipe ID FILE -->` comments: FILE is a path in
the profile dir, or `shell` (lines run in order: `export` sets the environment of the
following `agentbox` commands). `TOOL-login` holds the `profile add` every recipe of the
tool starts from. Two things differ from a user's machine, and only those: the URLs in the
recipes (a local server at 127.0.0.1:4000, the vendor's API) point at the fake server, and
opencode's npm registry is kept on loopback too.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from tests.realcli.conftest import FakeView

pytestmark = [pytest.mark.realcli, pytest.mark.bwrap]

GUIDE = REPO / "docs" / "real-agents.md"
_BLOCK = re.compile(r"<!-- recipe (\S+) (\S+) -->\s*\n```\w*\n(.*?)```", re.DOTALL)
LOCAL_URL = "http://127.0.0.1:4000"
VENDOR_URLS = ("https://api.openai.com", "https://api.anthropic.com")


def recipes() -> dict[str, list[tuple[str, str]]]:
    """Recipe id → [(file or 'shell', text)] in document order."""
    found: dict[str, list[tuple[str, str]]] = {}
    for recipe, target, text in _BLOCK.findall(GUIDE.read_text()):
        found.setdefault(recipe, []).append((target, text))
    return found


RUNNABLE = sorted(r for r in recipes() if not r.endswith("-login"))


def test_every_tool_has_recipes() -> None:
    ids = recipes()
    for tool in ("claude", "codex", "opencode", "hermes"):
        assert f"{tool}-login" in ids
        assert any(r.startswith(f"{tool}-") and r != f"{tool}-login" for r in ids), tool
    readme = (REPO / "README.md").read_text()
    assert "docs/real-agents.md" in readme
    for tool in ("claude", "codex", "opencode", "hermes"):
        assert "docs/real-agents.md" in (REPO / "profiles" / tool / "profile.yaml").read_text()


def _shell(text: str, env: dict[str, str]) -> list:
    results = []
    for line in text.strip().splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            continue
        if words[0] == "export":
            key, _, value = words[1].partition("=")
            env[key] = value
            continue
        assert words[0] == "agentbox", line
        result = run_cli(*words[1:], env=dict(env), timeout=300)
        assert result.code == 0, f"{line}\nstdout: {result.out}\nstderr: {result.err}"
        assert "Traceback" not in result.err
        results.append((line, result))
    return results


def _point_at(text: str, fake: FakeView) -> str:
    for url in (LOCAL_URL, *VENDOR_URLS):
        text = text.replace(url, str(fake.base_url))
    return text


@pytest.mark.parametrize("recipe", RUNNABLE)
def test_recipe(recipe: str, realcli_env: dict[str, str], fake: FakeView, agent_box_home: Path) -> None:
    from agentbox.core.yaml_io import load_yaml, write_yaml

    tool = recipe.split("-")[0]
    env: dict[str, str] = {}
    steps = recipes()
    _shell(steps[f"{tool}-login"][0][1], env)
    directory = agent_box_home / "profiles" / f"my-{tool}"
    assert directory.is_dir()
    ran = []
    for target, text in steps[recipe]:
        if target == "shell":
            ran += _shell(text, env)
            continue
        path = directory / target
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_point_at(text, fake))
        if target == "profile.yaml":
            document = load_yaml(path)
            extra = {}
            if tool == "claude" and "ANTHROPIC_BASE_URL" not in document["runtime"].get("env", {}):
                extra["ANTHROPIC_BASE_URL"] = str(fake.base_url)  # the vendor's API, here the fake
            if tool == "opencode":
                extra["npm_config_registry"] = f"{fake.base_url}/npm/"
            if extra:
                document["runtime"]["env"] = {**document["runtime"].get("env", {}), **extra}
                write_yaml(path, document)
    tested = [result for line, result in ran if line.startswith("agentbox profile test")]
    assert tested, "the recipe ends with `agentbox profile test`"
    assert tested[-1].out.strip().splitlines()[-1].startswith("ok:"), tested[-1].out
    requests = fake.model_requests()
    assert requests, "the real CLI reached the (fake) model"
    exported = [value for value in env.values() if value]
    if exported:  # the key from the shell reached the server, by reference or pass_env
        headers = json.dumps([r.get("headers") for r in requests])
        assert any(value in headers for value in exported), headers[:2000]
    for value in exported:
        assert value not in (directory / "profile.yaml").read_text()
