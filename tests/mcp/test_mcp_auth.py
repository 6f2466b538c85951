"""The HTTP face's bearer token: made once, kept 0600 in AGENT_BOX_HOME, refused when others could know it."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from agentbox.core.errors import StateError
from agentbox.mcp.auth import authorized, http_token
from agentbox.mcp.registration import snippet
from tests.conftest import run_cli


def test_the_token_is_made_once_and_kept_private(agent_box_home: Path) -> None:
    made: list[str] = []
    threads = [threading.Thread(target=lambda: made.append(http_token())) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    path = agent_box_home / "mcp-token"
    assert len(set(made)) == 1 and len(made[0]) >= 43  # 256 bits, url-safe
    assert path.read_text().strip() == made[0] and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert http_token() == made[0]
    assert [p.name for p in agent_box_home.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.parametrize("damage", ["readable", "symlink", "garbage", "directory"])
def test_a_token_file_others_could_know_or_that_agentbox_did_not_make_is_refused(
        agent_box_home: Path, project: Path, tmp_path: Path, damage: str) -> None:
    path = agent_box_home / "mcp-token"
    if damage == "readable":
        http_token()
        path.chmod(0o644)
    elif damage == "symlink":
        planted = tmp_path / "planted"
        planted.write_text("A" * 43 + "\n")
        planted.chmod(0o600)
        path.symlink_to(planted)
    elif damage == "garbage":
        path.write_text("not a token!\n")
        path.chmod(0o600)
    else:
        path.mkdir()
    with pytest.raises(StateError) as refused:
        http_token()
    assert str(path) in refused.value.message and refused.value.hint
    served = run_cli("mcp", "--http", "1", cwd=project)  # refused before any port opens
    assert served.code == 1 and "error:" in served.err and "Traceback" not in served.err


def test_the_header_must_carry_exactly_the_token() -> None:
    assert authorized(b"Bearer s3cret-token", "s3cret-token")
    for header in (None, b"", b"Bearer", b"Bearer s3cret-toke", b"Bearer s3cret-token ", b"bearer s3cret-token",
                   b"s3cret-token", b"Basic s3cret-token"):
        assert not authorized(header, "s3cret-token"), header


@pytest.mark.parametrize("client", ["claude", "codex", "opencode"])
def test_each_http_registration_carries_the_token(client: str, agent_box_home: Path) -> None:
    text, where = snippet(client, None, http_port=8765)  # type: ignore[arg-type]
    token = http_token()
    assert f"Bearer {token}" in text and "http://127.0.0.1:8765/mcp" in text and "token" in where
    assert os.environ["AGENT_BOX_HOME"] == str(agent_box_home)
