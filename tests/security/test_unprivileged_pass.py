"""The sandbox attacks again, as an ordinary user: the second half of every security test.

Run as root (CI's user), this test copies the working tree to a fresh world-readable
directory and runs `tests/security/` there as the throwaway user `agentbox-test`, with
the Python environment `scripts/setup-test-user.sh` made for it (`make test` runs that
script first). Every test of that run must pass; none may be skipped. Run as an ordinary
user, this whole suite already *is* the unprivileged pass, and there is no root pass to
make: the test says so and skips.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TEST_USER = "agentbox-test"
USER_PYTHON = Path("/var/tmp/agentbox-test-user/venv/bin/python")
COPIED = ("agentbox", "tests", "profiles", ".agent-box.example", "pyproject.toml", "README.md")

pytestmark = pytest.mark.bwrap


def _missing_setup() -> str | None:
    try:
        pwd.getpwnam(TEST_USER)
    except KeyError:
        return f"no user {TEST_USER}"
    if not USER_PYTHON.exists():
        return f"no {USER_PYTHON}"
    return None


@pytest.mark.skipif(os.geteuid() != 0, reason="not root: this run is itself the unprivileged pass")
def test_every_sandbox_attack_also_fails_for_an_unprivileged_user() -> None:
    missing = _missing_setup()
    if missing is not None:
        pytest.fail(f"{missing}: run `bash scripts/setup-test-user.sh` (as `make test` does) to make the "
                    "unprivileged pass possible")
    user = pwd.getpwnam(TEST_USER)
    work = Path(tempfile.mkdtemp(prefix="agentbox-userpass-", dir="/var/tmp"))
    try:
        work.chmod(0o755)
        tree = work / "tree"
        tree.mkdir()
        for name in COPIED:
            source = REPO / name
            if source.is_dir():
                shutil.copytree(source, tree / name, symlinks=True,
                                ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache"))
            else:
                shutil.copy2(source, tree / name)
        home = work / "home"
        home.mkdir()
        os.chown(home, user.pw_uid, user.pw_gid)
        subprocess.run(["chmod", "-R", "a+rX", str(tree)], check=True)
        env = {
            "PATH": f"{REPO / '.tools' / 'bin'}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(home), "USER": TEST_USER, "LANG": "C.UTF-8",
            "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1",
            "AGENTBOX_REQUIRE_BWRAP": "1", "TMPDIR": str(home),
        }
        proc = subprocess.run(
            ["runuser", "-u", TEST_USER, "--", "env", "-i", *(f"{k}={v}" for k, v in env.items()),
             str(USER_PYTHON), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
             "--basetemp", str(home / "pytest"), "tests/security", "-k", "not unprivileged_user", "-rs"],
            cwd=tree, capture_output=True, text=True, timeout=900)
        summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-2000:]
        assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
        passed = re.search(r"(\d+) passed", summary)
        assert passed and int(passed.group(1)) >= 25, summary
        print(f"unprivileged pass: {summary}")
        assert "skipped" not in summary and "failed" not in summary and "error" not in summary, summary
        whoami = subprocess.run(["runuser", "-u", TEST_USER, "--", "id", "-u"], capture_output=True, text=True)
        assert int(whoami.stdout) != 0  # the pass really ran unprivileged
    finally:
        shutil.rmtree(work, ignore_errors=True)
