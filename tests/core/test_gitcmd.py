"""The one git runner: every git agentbox starts goes through it, and nothing a config or a
tree names runs (filters, textconv, diff and merge drivers, from any config file)."""

from __future__ import annotations

import ast
import os
import subprocess
from pathlib import Path

import pytest

from agentbox.core import workspace as ws
from agentbox.core.workspace import gitcmd

PACKAGE = Path(__file__).resolve().parents[2] / "agentbox"


def git(root: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "XDG_CONFIG_HOME"}
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True,
                          env=env).stdout


def test_no_module_but_the_runner_starts_git() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "gitcmd.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        shown = {id(node.args[0]) for node in ast.walk(tree) if isinstance(node, ast.Call) and node.args
                 and isinstance(node.func, ast.Attribute) and node.func.attr == "join"}  # shlex.join: text shown
        for node in ast.walk(tree):
            if (isinstance(node, ast.List | ast.Tuple) and node.elts and isinstance(node.elts[0], ast.Constant)
                    and node.elts[0].value == "git" and id(node) not in shown):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert found == [], "git started outside core/workspace/gitcmd.py"


@pytest.fixture
def hostile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A repository whose own config and the person's global config define drivers that touch
    markers, and a worktree tree whose attributes name every one of them."""
    markers = tmp_path / "markers"
    markers.mkdir()
    xdg = tmp_path / "xdg"
    (xdg / "git").mkdir(parents=True)
    (xdg / "git" / "config").write_text(f"[filter \"g\"]\n\tclean = touch {markers}/global; cat\n")
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "a.txt").write_text("one\n")
    git(root, "add", "-A")
    git(root, "-c", "user.name=P", "-c", "user.email=p@x", "commit", "-qm", "start")
    extra = tmp_path / "included.cfg"
    extra.write_text(f"[diff \"i\"]\n\ttextconv = touch {markers}/included; cat\n")
    for key, value in [("filter.l.clean", f"touch {markers}/clean; cat"),
                       ("filter.l.smudge", f"touch {markers}/smudge; cat"),
                       ("filter.l.process", f"touch {markers}/process"), ("filter.l.required", "true"),
                       ("diff.l.textconv", f"touch {markers}/textconv; cat"),
                       ("diff.l.command", f"touch {markers}/command"), ("diff.external", f"touch {markers}/external"),
                       ("merge.l.driver", f"touch {markers}/merge; false"), ("include.path", str(extra))]:
        git(root, "config", key, value)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    return root, markers


def test_a_tree_naming_the_configs_drivers_runs_none_of_them(hostile: tuple[Path, Path]) -> None:
    root, markers = hostile
    (root / ".gitattributes").write_text("* filter=l diff=l merge=l\n*.txt filter=g diff=i\n")
    (root / "a.txt").write_text("two\n")
    gitcmd.git(root, "add", "-A")
    tree = gitcmd.git(root, "write-tree").text
    commit = gitcmd.commit_tree(root, tree, [ws.layout.heads("main")], "two\n", gitcmd.ident_env("a", "a@x"))
    ws.diff_text(root, "HEAD", commit)
    ws.changed_files(root, "HEAD", commit)
    gitcmd.git(root, "diff", "HEAD")
    gitcmd.git(root, "log", "-p", "-1", commit)
    gitcmd.git(root, "show", commit)
    gitcmd.git(root, "status", "--porcelain")
    other = gitcmd.commit_tree(root, gitcmd.tree_of(root, "HEAD"), [commit], "x\n", gitcmd.ident_env("a", "a@x"))
    gitcmd.merge_tree(root, commit, other)
    gitcmd.git(root, "read-tree", "-m", "-u", "HEAD", commit)
    assert sorted(p.name for p in markers.iterdir()) == []
    assert gitcmd.git(root, "cat-file", "blob", f"{commit}:a.txt").text == "two"  # byte for byte


def test_a_driver_whose_name_holds_an_equals_sign_is_overridden_too(hostile: tuple[Path, Path]) -> None:
    root, markers = hostile
    git(root, "config", "filter.a=b.clean", f"touch {markers}/equals; cat")  # `-c filter.a=b.clean=` would miss it
    (root / ".gitattributes").write_text("*.txt filter=a=b\n")
    (root / "a.txt").write_text("three\n")
    gitcmd.git(root, "add", "-A")
    gitcmd.git(root, "status", "--porcelain")
    assert sorted(p.name for p in markers.iterdir()) == []


def test_no_gpg_program_a_repository_names_runs_to_show_a_signature(hostile: tuple[Path, Path]) -> None:
    root, markers = hostile
    program = markers.parent / "fake-gpg"
    program.write_text(f"#!/bin/sh\ntouch {markers}/gpg\nexit 1\n")
    program.chmod(0o755)
    git(root, "config", "log.showSignature", "true")
    git(root, "config", "gpg.program", str(program))
    git(root, "-c", f"gpg.program={program}", "-c", "user.name=P", "-c", "user.email=p@x", "commit", "-q",
        "--allow-empty", "-m", "signed?", "--no-gpg-sign")
    # a signed-looking commit: its header names a signature, which showSignature would ask gpg to check
    body = git(root, "cat-file", "commit", "HEAD")
    head, _, message = body.partition("\n\n")
    fake = head + "\ngpgsig -----BEGIN PGP SIGNATURE-----\n \n -----END PGP SIGNATURE-----\n\n" + message
    signed = subprocess.run(["git", "-C", str(root), "hash-object", "-t", "commit", "-w", "--stdin"],
                            input=fake, capture_output=True, text=True, check=True).stdout.strip()
    gitcmd.git(root, "log", "-1", "--format=%s", signed)
    gitcmd.git(root, "show", "-s", signed)
    assert not (markers / "gpg").exists()
    subprocess.run(["git", "-C", str(root), "log", "-1", "--format=%s", signed], capture_output=True)
    assert (markers / "gpg").exists()  # the control: plain git does run it


def test_a_driver_added_to_the_config_later_is_overridden_too(hostile: tuple[Path, Path]) -> None:
    root, _ = hostile
    first = gitcmd.driver_overrides(root)
    assert {"filter.l.clean=", "filter.l.required=false", "diff.i.textconv=cat",
            "merge.l.driver=git merge-file %A %O %B"} <= set(first)
    git(root, "config", "filter.late.clean", "touch /nonexistent; cat")
    assert "filter.late.clean=" in gitcmd.driver_overrides(root)


def test_commits_in_the_persons_name_still_use_their_global_identity(hostile: tuple[Path, Path], tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    root, _ = hostile
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".gitconfig").write_text("[user]\n\tname = Pat Person\n\temail = pat@example.invalid\n")
    ident = gitcmd.person_ident(root)
    assert ident is not None and ident["GIT_AUTHOR_NAME"] == "Pat Person"
    assert ident["GIT_COMMITTER_EMAIL"] == "pat@example.invalid"


def test_a_nested_repository_is_committed_as_plain_files(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "top.txt").write_text("top\n")
    git(root, "add", "-A")
    git(root, "-c", "user.name=P", "-c", "user.email=p@x", "commit", "-qm", "start")
    for name in ("with-commit", "empty"):
        nested = root / "src" / name
        nested.mkdir(parents=True)
        git(nested, "init", "-q")
        (nested / "f.txt").write_text(f"{name}\n")
    git(root / "src" / "with-commit", "add", "-A")
    git(root / "src" / "with-commit", "-c", "user.name=a", "-c", "user.email=a@x", "commit", "-qm", "n")
    (root / "src" / "linked").mkdir()
    (root / "src" / "linked" / "g.txt").write_text("g\n")
    (root / "src" / "linked" / ".git").write_text(f"gitdir: {root / '.git'}\n")  # a file naming the real repo
    commit = ws.commit_turn(root, author_name="w", author_email="w@x", message="turn\n")
    assert commit is not None
    entries = git(root, "ls-tree", "-r", commit).splitlines()
    assert not [e for e in entries if e.startswith("160000")], entries
    assert {e.split("\t")[1] for e in entries} == {"top.txt", "src/with-commit/f.txt", "src/empty/f.txt",
                                                  "src/linked/g.txt"}
    assert not any((root / "src" / n / ".git").exists() for n in ("with-commit", "empty", "linked"))
    message = git(root, "log", "-1", "--format=%B", commit)
    assert "src/empty\n" in message and "src/with-commit\n" in message and "committed as plain files" in message


def test_what_the_person_ignores_everywhere_stays_out_of_a_turns_commit(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "a.txt").write_text("a\n")
    git(root, "add", "-A")
    git(root, "-c", "user.name=P", "-c", "user.email=p@x", "commit", "-qm", "start")
    (tmp_path / "global-ignore").write_text("*.swp\n")
    (tmp_path / ".gitconfig").write_text(f"[core]\n\texcludesFile = {tmp_path / 'global-ignore'}\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    gitcmd._person_excludes.cache_clear()
    try:
        (root / "b.txt").write_text("b\n")
        (root / "b.txt.swp").write_text("editor state\n")
        commit = ws.commit_turn(root, author_name="w", author_email="w@x", message="turn\n")
    finally:
        gitcmd._person_excludes.cache_clear()
    assert commit is not None and git(root, "ls-tree", "--name-only", commit).split() == ["a.txt", "b.txt"]


@pytest.mark.skipif(os.geteuid() != 0, reason="making a repository another user owns needs root")
def test_a_repository_the_person_trusts_in_their_config_is_opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pwd

    root = tmp_path / "theirs"
    root.mkdir()
    git(root, "init", "-q")
    other = pwd.getpwnam("nobody")
    for path in [root, *root.rglob("*")]:
        os.chown(path, other.pw_uid, other.pw_gid)
    monkeypatch.setenv("HOME", str(tmp_path))
    gitcmd._person_safe_directories.cache_clear()
    try:
        with pytest.raises(ws.GitError, match="dubious ownership"):
            gitcmd.git(root, "status")
        gitcmd._person_safe_directories.cache_clear()
        (tmp_path / ".gitconfig").write_text(f"[safe]\n\tdirectory = {root}\n")
        assert gitcmd.git(root, "status", "--porcelain").returncode == 0
    finally:
        gitcmd._person_safe_directories.cache_clear()


def test_a_name_git_refuses_leaves_out_that_directory_not_the_turn(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "a.txt").write_text("a\n")
    git(root, "add", "-A")
    git(root, "-c", "user.name=P", "-c", "user.email=p@x", "commit", "-qm", "start")
    for name in ("src/.GIT/config", "src/deep/GIT~1/x", "src/ok.txt"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("x\n")
    commit = ws.commit_turn(root, author_name="w", author_email="w@x", message="turn\n")
    assert commit is not None
    assert git(root, "ls-tree", "-r", "--name-only", commit).split() == ["a.txt", "src/ok.txt"]
    message = git(root, "log", "-1", "--format=%B", commit)
    assert "Not committed" in message and "  src/.GIT\n" in message and "  src/deep/GIT~1\n" in message
