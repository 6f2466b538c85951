"""Write scopes made exact (`agentbox.core.sandbox.scopes`): the mounts they become, and what a turn's changes carry back.

These are the pure and host-side halves; the real-bwrap attacks are in tests/security/.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentbox.core.errors import SandboxError, UsageError
from agentbox.core.sandbox import scopes


def test_directory_scopes_are_bound_read_write_and_made_when_missing(tmp_path: Path) -> None:
    made: list[Path] = []
    result = scopes.plan(tmp_path, ["src/**", "build/out/", "lib/**/*"], tmp_path / "stage")
    made = result.made
    assert set(result.writable) == {tmp_path / "src", tmp_path / "build" / "out", tmp_path / "lib"}
    assert (tmp_path / "build" / "out").is_dir() and tmp_path / "build" in made
    assert result.staged == ()


@pytest.mark.parametrize("whole", [None, ["**"], ["./**"], ["."]])
def test_whole_project_scopes(tmp_path: Path, whole: list[str] | None) -> None:
    assert scopes.plan(tmp_path, whole, tmp_path / "s").writable == (tmp_path,)


def test_empty_scope_list_is_read_only(tmp_path: Path) -> None:
    result = scopes.plan(tmp_path, [], tmp_path / "s")
    assert (result.writable, result.staged) == ((), ())


@pytest.mark.parametrize("scope", ["", "  ", "../x", "../x/**", "src/../../x/*", "/etc/**", "/tmp", "~/x",
                                   ".git/**", ".git/hooks/pre-commit", ".agent-box/runs/**", ".agent-box",
                                   ".hg/**", "./.git/config"])
def test_scopes_outside_the_project_or_into_metadata_are_refused(tmp_path: Path, scope: str) -> None:
    with pytest.raises(UsageError):
        scopes.plan(tmp_path, [scope], tmp_path / "s")


def test_absolute_scope_is_refused_even_inside_the_project(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="absolute"):
        scopes.plan(tmp_path, [str(tmp_path / "src")], tmp_path / "s")


@pytest.mark.parametrize("scope", ["g2/**", "g2/hooks/pre-commit", "g2/*.sh", "src/g2/**"])
def test_a_scope_crossing_a_symlink_is_refused_wherever_the_link_points(tmp_path: Path, scope: str) -> None:
    root = tmp_path / "p"
    (root / ".git" / "hooks").mkdir(parents=True)
    (root / "src").mkdir()
    (root / "g2").symlink_to(".git")  # inside the project: still a way round the metadata rule
    (root / "src" / "g2").symlink_to("../.git")
    with pytest.raises(SandboxError, match="symlink"):
        scopes.plan(root, [scope], tmp_path / "s")


def test_a_deep_pattern_is_refused_with_a_hint(tmp_path: Path) -> None:
    with pytest.raises(SandboxError, match="finer than the sandbox") as caught:
        scopes.plan(tmp_path, ["src/**/*.py"], tmp_path / "s")
    assert "src/**" in (caught.value.hint or "")


def test_a_file_scope_stages_its_directory(tmp_path: Path) -> None:
    root = tmp_path / "p"
    (root / "src").mkdir(parents=True)
    (root / "README.md").write_text("old")
    (root / "setup.py").write_text("keep")
    (root / "link").symlink_to("setup.py")
    result = scopes.plan(root, ["README.md", "CHANGES.md", "src/**"], tmp_path / "stage")
    [view] = result.staged
    assert view.real == root and view.patterns == ("README.md", "CHANGES.md")
    assert (view.stage / "README.md").read_text() == "old"
    assert not (view.stage / "setup.py").exists()
    assert root / "setup.py" in view.sealed and root / "src" not in view.sealed  # src/** is bound over it
    assert ("setup.py", root / "link") in view.links
    assert result.writable == (root / "src",)


def test_a_file_inside_a_writable_directory_needs_no_staging(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("x")
    result = scopes.plan(tmp_path, ["docs/**", "docs/index.md"], tmp_path / "s")
    assert (result.writable, result.staged) == ((tmp_path / "docs",), ())


def test_staging_refuses_a_huge_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scopes, "MAX_SEALED_ENTRIES", 3)
    for i in range(5):
        (tmp_path / f"f{i}").write_text("x")
    with pytest.raises(SandboxError, match="too many to seal"):
        scopes.plan(tmp_path, ["out.csv"], tmp_path / "s")


def _turn(root: Path, scope_list: list[str], stage: Path, change) -> list[str]:  # type: ignore[no-untyped-def]
    """Plan, let `change(view_dir)` act as the agent in the staged view, finish; the notes."""
    result = scopes.plan(root, scope_list, stage)
    [view] = result.staged
    change(view.stage)
    return scopes.finish(result, stage / "discarded")


def test_finish_carries_back_matching_files_only_and_keeps_the_rest_aside(tmp_path: Path) -> None:
    root = tmp_path / "p"
    root.mkdir()
    (root / "README.md").write_text("old")
    (root / "docs.md").write_text("gone soon")

    def agent(view: Path) -> None:
        (view / "README.md.tmp").write_text("new")
        os.rename(view / "README.md.tmp", view / "README.md")  # an atomic writer
        (view / "NOTES.md").write_text("created")
        (view / "conftest.py").write_text("planted")
        (view / "docs.md").unlink()

    notes = _turn(root, ["*.md"], tmp_path / "stage", agent)
    assert (root / "README.md").read_text() == "new"
    assert (root / "NOTES.md").read_text() == "created"
    assert not (root / "docs.md").exists()
    assert not (root / "conftest.py").exists()
    assert (tmp_path / "stage" / "discarded" / "p" / "conftest.py").read_text() == "planted"
    assert len(notes) == 1 and "conftest.py" in notes[0]


def test_a_literal_scope_creates_nothing_else(tmp_path: Path) -> None:
    root = tmp_path / "p"
    root.mkdir()

    def agent(view: Path) -> None:
        (view / "README.md").write_text("mine")
        (view / "conftest.py").write_text("import os")
        (view / ".github").mkdir()
        (view / ".github" / "x.yml").write_text("on: push")
        (view / "evil").symlink_to("/etc/passwd")

    _turn(root, ["README.md"], tmp_path / "stage", agent)
    assert sorted(p.name for p in root.iterdir()) == ["README.md"]


def test_a_file_changed_by_someone_else_meanwhile_is_not_overwritten(tmp_path: Path) -> None:
    root = tmp_path / "p"
    root.mkdir()
    (root / "README.md").write_text("old")

    def agent(view: Path) -> None:
        (view / "README.md").write_text("agent")
        (root / "README.md").write_text("user")  # the person edits the live tree during the turn

    notes = _turn(root, ["README.md"], tmp_path / "stage", agent)
    assert (root / "README.md").read_text() == "user"
    assert (tmp_path / "stage" / "discarded" / "p" / "README.md").read_text() == "agent"
    assert "changed outside the turn" in notes[0]


def test_finish_never_writes_through_a_symlink_swapped_in_for_the_directory(tmp_path: Path) -> None:
    root = tmp_path / "p"
    (root / "notes").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def agent(view: Path) -> None:
        (view / "TODO.md").write_text("x")
        (root / "notes").rmdir()
        (root / "notes").symlink_to(elsewhere)

    notes = _turn(root, ["notes/TODO.md"], tmp_path / "stage", agent)
    assert list(elsewhere.iterdir()) == []
    assert notes and "no longer a directory" in notes[0]


def test_metadata_paths_find_git_dirs_worktree_admin_dirs_and_submodules(tmp_path: Path) -> None:
    main = tmp_path / "main"
    (main / ".git" / "worktrees" / "wt").mkdir(parents=True)
    (main / ".agent-box").mkdir()
    (main / "vendor" / "lib").mkdir(parents=True)
    (main / "vendor" / "lib" / ".git").write_text("gitdir: ../../.git/modules/lib\n")
    (main / ".gitmodules").write_text('[submodule "lib"]\n\tpath = vendor/lib\n')
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / ".git").write_text(f"gitdir: {main / '.git' / 'worktrees' / 'wt'}\n")
    assert set(scopes.metadata_paths(main)) == {main / ".git", main / ".agent-box", main / "vendor" / "lib" / ".git"}
    assert set(scopes.metadata_paths(wt)) == {wt / ".git", (main / ".git" / "worktrees" / "wt").resolve()}
