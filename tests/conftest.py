"""Shared fixtures: an isolated AGENT_BOX_HOME for every test, a temp project, the CLI."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("AGENTBOX_VERIFY_JOURNAL", "1")  # every journalled save is read back and compared (run_store)
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    # Started in the background by a shell without job control (`cmd &` in a script), pytest
    # inherits SIGINT ignored, and so would every agentbox it starts: the Ctrl-C tests would test
    # the harness, not agentbox. A person's terminal delivers it, so the tests start from there.
    signal.signal(signal.SIGINT, signal.default_int_handler)
TOOLS_BIN = REPO / ".tools" / "bin"


@pytest.fixture(autouse=True)
def agent_box_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point AGENT_BOX_HOME at a fresh temp dir: tests never touch the real home."""
    home = tmp_path_factory.mktemp("agent-box-home")
    monkeypatch.setenv("AGENT_BOX_HOME", str(home))
    return home


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A fresh project made from `.agent-box.example/` (as `agentbox init` would)."""
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copytree(REPO / ".agent-box.example", root / ".agent-box")
    return root


@dataclass
class CliResult:
    """What one run of the real `agentbox` entry point produced."""

    code: int
    out: str
    err: str


def run_cli(*args: str, cwd: Path | None = None, stdin: str | None = None, env: dict[str, str] | None = None, timeout: float = 120) -> CliResult:
    """Run `python -m agentbox ARGS` as a real subprocess."""
    full_env = {**os.environ, **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-m", "agentbox", *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def cli() -> type[CliResult]:
    """Access to `run_cli` as a fixture (tests may also import it)."""
    return CliResult


def bwrap_works() -> bool:
    """True when bubblewrap is installed and can create a sandbox here."""
    if shutil.which("bwrap") is None:
        return False
    proc = subprocess.run(
        ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "true"],
        capture_output=True,
    )
    return proc.returncode == 0


def chromium_path() -> str | None:
    """Debian's chromium, which the browser tests drive (Playwright with its executable_path)."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """bwrap/realcli tests skip locally when the tool is missing, and FAIL when required (CI)."""
    need_bwrap = any("bwrap" in item.keywords for item in items)
    if need_bwrap and not bwrap_works():
        if os.environ.get("AGENTBOX_REQUIRE_BWRAP") == "1":
            raise pytest.UsageError("AGENTBOX_REQUIRE_BWRAP=1 but bubblewrap cannot create a sandbox here")
        for item in items:
            if "bwrap" in item.keywords:
                item.add_marker(pytest.mark.skip(reason="bubblewrap unavailable (set AGENTBOX_REQUIRE_BWRAP=1 to fail instead)"))
    if any("browser" in item.keywords for item in items) and chromium_path() is None:
        if os.environ.get("AGENTBOX_REQUIRE_BROWSER") == "1":
            raise pytest.UsageError("AGENTBOX_REQUIRE_BROWSER=1 but chromium is missing (apt-get install chromium)")
        for item in items:
            if "browser" in item.keywords:
                item.add_marker(pytest.mark.skip(reason="chromium missing (set AGENTBOX_REQUIRE_BROWSER=1 to fail)"))
    if any("realcli" in item.keywords for item in items):
        missing = [tool for tool in ("claude", "codex", "opencode", "hermes") if not (TOOLS_BIN / tool).exists() and shutil.which(tool) is None]
        if missing:
            if os.environ.get("AGENTBOX_REQUIRE_REAL_CLIS") == "1":
                raise pytest.UsageError(f"AGENTBOX_REQUIRE_REAL_CLIS=1 but missing: {', '.join(missing)} (run scripts/install-clis.sh)")
            for item in items:
                if "realcli" in item.keywords:
                    item.add_marker(pytest.mark.skip(reason=f"agent CLIs missing: {', '.join(missing)}"))
