"""A turn's start time, read from /proc as psutil reads it: recovery tells a turn's process from a
later one with the same pid by it (within 0.01 s), and the CLI path imports no psutil for it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import psutil

from agentbox.core.process import start_time


def test_the_start_time_is_psutils_even_for_a_name_with_spaces_and_parens(tmp_path: Path) -> None:
    odd = tmp_path / "a (b) c"
    shutil.copy("/bin/sleep", odd)
    proc = subprocess.Popen([str(odd), "30"])
    try:
        assert psutil.Process(proc.pid).name().startswith("a (b)")
        found = start_time(proc.pid)
        assert found is not None and abs(found - psutil.Process(proc.pid).create_time()) < 0.01
    finally:
        proc.kill()
        proc.wait()
    assert start_time(proc.pid) is None  # gone
