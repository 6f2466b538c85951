"""Discarding a run leaves nothing behind, whoever runs agentbox: a directory inside the run's state
made read-only (by a tool, or an artifact's own mode) is opened to its owner and removed too
(as a normal user `rmtree` alone cannot empty it; this file runs again as one in the unprivileged pass)."""

from __future__ import annotations

from pathlib import Path

from agentbox.core.admin.discard import TRASH_PREFIX, _remove_dir


def test_a_read_only_directory_in_a_runs_state_is_removed_with_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "run-20260101-000000-abcd"
    locked = run_dir / "artifacts" / "report"
    locked.mkdir(parents=True)
    (locked / "a.md").write_text("kept read-only\n")
    locked.chmod(0o500)
    (run_dir / "artifacts").chmod(0o500)
    try:
        _remove_dir(run_dir)
    finally:
        for place in (run_dir / "artifacts", locked):
            if place.exists():
                place.chmod(0o700)
    assert list((tmp_path / "runs").iterdir()) == []
    assert not any(p.name.startswith(TRASH_PREFIX) for p in (tmp_path / "runs").iterdir())
