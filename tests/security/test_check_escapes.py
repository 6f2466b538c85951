"""crew.yaml's checks are as untrusted as an agent: the sandbox a check runs in, attacked.

A check is read-only over the tree it judges (a scratch dir or $HOME is a private RAM disk),
sees nothing of the person's, reaches no network unless the crew asks, and cannot touch git
metadata. Run as root and again as an unprivileged user (see test_unprivileged_pass.py).
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from tests.core.test_checks import check, tree

pytestmark = pytest.mark.bwrap


def test_the_tree_is_read_only_and_scratch_dirs_are_private(tmp_path: Path) -> None:
    root = tree(tmp_path)
    outcome = check(root, tmp_path, "echo changed > src/app.py; touch src/new.py; "
                    "echo cache > .pytest_cache/x && cat .pytest_cache/x && echo home > $HOME/h && cat $HOME/h",
                    scratch=[".pytest_cache"])
    assert (root / "src" / "app.py").read_text() == "VALUE = 1\n" and not (root / "src" / "new.py").exists()
    assert outcome.status == "passed", outcome.tail  # the scratch dir and $HOME were writable inside
    assert "cache\nhome\n" in outcome.tail and "Read-only file system" in outcome.tail
    assert (root / ".pytest_cache").is_dir() and not list((root / ".pytest_cache").iterdir())


def test_the_person_and_the_network_are_out_of_reach(tmp_path: Path) -> None:
    root = tree(tmp_path)
    secret = Path(os.environ["AGENT_BOX_HOME"]) / "secret.txt"
    secret.write_text("the person's key\n")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    try:
        probe = f"cat {secret}; bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}' && echo reached"
        outcome = check(root, tmp_path, probe)
        assert "the person's key" not in outcome.tail and "reached" not in outcome.tail
        # with network a check goes out through the egress proxy only: this machine's loopback stays out of reach
        networked = check(root, tmp_path, probe + '; echo "proxy=$HTTPS_PROXY"', network=True)
        assert "reached" not in networked.tail and "proxy=http://127.0.0.1:" in networked.tail
    finally:
        listener.close()


def test_git_in_the_tree_is_read_only(tmp_path: Path) -> None:
    root = tree(tmp_path)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    outcome = check(root, tmp_path, "echo '[core]' >> .git/config && echo wrote")
    assert "wrote" not in outcome.tail and "[core]\n[core]" not in (root / ".git" / "config").read_text()
