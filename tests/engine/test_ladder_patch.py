"""An advisor's patch is applied only inside the task's writes (real git reads which files it changes)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from agentbox.core.engine.ladder_run import patch_paths, patch_scope_problem


def repo(root: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("one\n")
    (root / "secret.txt").write_text("keep\n")
    subprocess.run(["git", "-C", str(root), "add", "."], check=True)
    subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"],
                   check=True)
    return root


def diff_of(root: Path, *edits: tuple[str, ...]) -> Path:
    """The patch of `edits` (shell commands run in the repo), then the repo put back."""
    for edit in edits:
        subprocess.run(list(edit), cwd=root, check=True)
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    text = subprocess.run(["git", "-C", str(root), "diff", "--cached", "-M"], capture_output=True, check=True).stdout
    subprocess.run(["git", "-C", str(root), "reset", "-q", "--hard"], check=True)
    patch = root.parent / "patch.diff"
    patch.write_bytes(text)
    return patch


def test_files_inside_the_writes_pass_and_anything_outside_is_named(tmp_path: Path) -> None:
    root = repo(tmp_path / "r")
    inside = diff_of(root, ("sh", "-c", "echo two >> src/app.py; echo new > src/new.py"))
    assert sorted(patch_paths(root, inside)) == ["src/app.py", "src/new.py"]
    assert patch_scope_problem(patch_paths(root, inside), ["src/**"]) is None
    outside = diff_of(root, ("sh", "-c", "echo two >> src/app.py; echo gone > secret.txt"))
    assert patch_scope_problem(patch_paths(root, outside), ["src/**"]) == "writes outside the task's scope: secret.txt"


def test_a_rename_counts_both_of_its_sides(tmp_path: Path) -> None:
    root = repo(tmp_path / "r")
    moved = diff_of(root, ("git", "mv", "secret.txt", "src/secret.txt"), ("sh", "-c", "echo two >> src/app.py"))
    touched = patch_paths(root, moved)
    assert "secret.txt" in touched and "src/secret.txt" in touched
    assert "secret.txt" in (patch_scope_problem(touched, ["src/**"]) or "")


def test_a_patch_git_cannot_read_changes_nothing(tmp_path: Path) -> None:
    root = repo(tmp_path / "r")
    junk = tmp_path / "junk.diff"
    junk.write_text("not a patch\n")
    assert patch_scope_problem(patch_paths(root, junk), ["src/**"]) == "changes no file"
