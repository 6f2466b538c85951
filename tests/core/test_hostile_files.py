"""Hostile files where agentbox expects a small YAML file, through the real CLI.

A repository brings its own crew.yaml and graphs, and a profile.yaml is one typo away from
being anything: every kind of broken file below is put where crew.yaml, profile.yaml or a
graph file should be, and every command that reads it must stop with a clean error that
names the file and a line — never hang (each command runs under a timeout), never a
traceback, never a MemoryError. FIFOs, device links and the 50 MB file are made here at
run time; none is committed.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import REPO, CliResult, run_cli

CLI_TIMEOUT_S = 30
"""A command still running after this is a hang (each should take well under a second)."""

BILLION_LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(8)
)


def _write(content: str | bytes) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        path.write_bytes(content.encode() if isinstance(content, str) else content)

    return make


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _link(target: str) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        path.symlink_to(target)

    return make


def _directory(path: Path) -> None:
    path.mkdir()
    (path / "inside.yaml").write_text("name: x\n")


def _fifty_megabytes(path: Path) -> None:
    with path.open("wb") as file:
        file.write(b"# a huge file\n")
        file.truncate(50 * 1024 * 1024)


HOSTILE: dict[str, Callable[[Path], None]] = {
    "fifo": _fifo,
    "dev-zero": _link("/dev/zero"),
    "dev-urandom": _link("/dev/urandom"),
    "directory": _directory,
    "50mb": _fifty_megabytes,
    "empty": _write(""),
    "comments-only": _write("# nothing\n   # but comments\n\n"),
    "not-utf8": _write(b"name: caf\xe9\n"),
    "billion-laughs": _write(BILLION_LAUGHS),
    "deep-lists": _write("[" * 10_000 + "]" * 10_000 + "\n"),
    "deep-maps": _write("{a: " * 10_000 + "1" + "}" * 10_000 + "\n"),
    "top-level-list": _write("- a\n- b\n"),
}
"""How to make each hostile thing at a path."""

# (target, command) → argv; `{graph}` is the graph's name.
COMMANDS: dict[str, list[tuple[str, ...]]] = {
    "crew": [("role", "list"), ("doctor",), ("invoke", "lead", "hi"), ("run", "a goal")],
    "profile": [("profile", "show", "broken"), ("invoke", "profile:broken", "hi")],
    "graph": [("graph", "check", "bad"), ("run", "--mode", "graph", "--graph", "bad", "a goal")],
}


def _setup(case_dir: Path, target: str, hostile: str) -> tuple[Path, Path, dict[str, str]]:
    """A project (from the example crew) and a home with the hostile thing at the target's
    place; returns (project root, the hostile path, env)."""
    root = case_dir / "repo"
    root.mkdir(parents=True)
    shutil.copytree(REPO / ".agent-box.example", root / ".agent-box")
    home = case_dir / "home"
    (home / "profiles" / "broken").mkdir(parents=True)
    path = {
        "crew": root / ".agent-box" / "crew.yaml",
        "profile": home / "profiles" / "broken" / "profile.yaml",
        "graph": root / ".agent-box" / "graphs" / "bad.yaml",
    }[target]
    path.unlink(missing_ok=True)
    HOSTILE[hostile](path)
    return root, path, {"AGENT_BOX_HOME": str(home)}


CASES = [(target, hostile, argv) for target, argvs in COMMANDS.items() for hostile in HOSTILE for argv in argvs]


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str, tuple[str, ...]], tuple[Path, CliResult]]:
    """Every case run once through the real CLI (in parallel: each is its own process)."""
    base = tmp_path_factory.mktemp("hostile")

    def one(index: int) -> tuple[tuple[str, str, tuple[str, ...]], tuple[Path, CliResult]]:
        target, hostile, argv = CASES[index]
        root, path, env = _setup(base / f"case{index}", target, hostile)
        return (target, hostile, argv), (path, run_cli(*argv, cwd=root, env=env, timeout=CLI_TIMEOUT_S))

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(pool.map(one, range(len(CASES))))


def _case_id(case: tuple[str, str, tuple[str, ...]]) -> str:
    target, hostile, argv = case
    return f"{target}-{hostile}-{'-'.join(argv[:2]).replace(' ', '_')}"


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_a_clean_located_error(
    case: tuple[str, str, tuple[str, ...]],
    results: dict[tuple[str, str, tuple[str, ...]], tuple[Path, CliResult]],
) -> None:
    path, result = results[case]
    output = result.out + result.err
    assert "Traceback" not in output and "MemoryError" not in output and "RecursionError" not in output, output
    located = re.compile(re.escape(str(path)) + r":\d+")
    if case[2] == ("doctor",):
        # doctor reports every check: the project check fails naming the file and line
        assert result.code == 1, output
        assert re.search(r"\[FAIL\] project .*" + located.pattern, result.out), result.out
        return
    assert result.code == 2, (result.code, output)
    if case[2][:2] == ("graph", "check") and not result.err.startswith("error: "):
        # graph check lists violations as FILE:LINE: [rule] detail
        first = result.out.splitlines()[0]
        assert located.match(first) and "[schema]" in first, result.out
        return
    assert result.err.startswith("error: "), result.err
    first = result.err.splitlines()[0].removeprefix("error: ")
    assert located.match(first) or first.startswith(f"{path}: invalid work graph"), first
    if first.startswith(f"{path}: invalid work graph"):
        assert re.search(r"\[schema\] \(line \d+\)", result.err), result.err


def test_profile_list_keeps_listing_and_names_each_broken_profile(tmp_path: Path) -> None:
    """A broken profile is a located warning in `profile list`; the others are still listed."""
    home = tmp_path / "home"
    for name, make in HOSTILE.items():
        (home / "profiles" / name).mkdir(parents=True)
        make(home / "profiles" / name / "profile.yaml")
    result = run_cli("profile", "list", cwd=tmp_path, env={"AGENT_BOX_HOME": str(home)}, timeout=CLI_TIMEOUT_S)
    assert result.code == 0, result.err
    assert "Traceback" not in result.err and "scripted" in result.out
    for name in HOSTILE:
        file = home / "profiles" / name / "profile.yaml"
        assert re.search(r"warning: " + re.escape(str(file)) + r":\d+(:\d+)?: ", result.err), (name, result.err)
