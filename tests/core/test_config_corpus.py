"""The malformed-input corpus: every bad crew.yaml / profile.yaml gets one clear error.

Each file in `tests/data/malformed/` is checked twice: loading it in-process raises a
`ConfigError` naming the file, the line and (where it applies) the field and the allowed
values or valid keys listed in `expected.yaml`; and the real CLI given the same file exits
2 with a one-paragraph `error:` on stderr and no traceback.
"""

from __future__ import annotations

import random
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from agentbox.core.config import profiles
from agentbox.core.config.models import Crew, Profile, load_model
from agentbox.core.errors import ConfigError
from tests.conftest import CliResult, run_cli

CORPUS = Path(__file__).resolve().parent.parent / "data" / "malformed"
EXPECTED: dict[str, dict[str, Any]] = YAML(typ="safe").load(CORPUS / "expected.yaml")
CREW_FILES = sorted(p.name for p in CORPUS.glob("crew-*.yaml"))
PROFILE_FILES = sorted(p.name for p in CORPUS.glob("profile-*.yaml"))
ALL_FILES = CREW_FILES + PROFILE_FILES

#: The profile directory a corpus profile is installed as (the name-mismatch case needs it).
PROFILE_DIR_NAME = "broken"


def test_corpus_is_large_enough_and_fully_described() -> None:
    assert len(CREW_FILES) >= 20
    assert len(PROFILE_FILES) >= 12
    assert sorted(EXPECTED) == sorted(ALL_FILES), "expected.yaml and the corpus disagree"


def install_profile(home: Path, corpus_file: str) -> Path:
    """Put a corpus profile at `$AGENT_BOX_HOME/profiles/broken/profile.yaml`."""
    target = home / "profiles" / PROFILE_DIR_NAME / "profile.yaml"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(CORPUS / corpus_file, target)
    return target


def install_crew(root: Path, corpus_file: str) -> Path:
    """Make a project at `root` whose crew.yaml is the corpus file."""
    target = root / ".agent-box" / "crew.yaml"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(CORPUS / corpus_file, target)
    return target


def assert_names_place(message: str, hint: str | None, file: Path, expected: dict[str, Any]) -> None:
    """The message starts with `file:line:` (`file: ` when there is no line), then the field;
    the expected substrings are in the message or its hint."""
    line = expected["line"]
    where = f"{file}:{line}:" if line is not None else f"{file}: "
    assert message.startswith(where), f"{message!r} does not start with {where!r}"
    if expected.get("field"):
        assert f": {expected['field']}: " in message, message
    text = f"{message}\n{hint or ''}"
    for part in expected["contains"]:
        assert part in text, f"{part!r} not in {text!r}"


# ----------------------------------------------------------------------------- in-process


@pytest.mark.parametrize("name", CREW_FILES)
def test_crew_file_raises_config_error(name: str) -> None:
    expected = EXPECTED[name]
    path = CORPUS / name
    with pytest.raises(ConfigError) as caught:
        load_model(Crew, path)
    error = caught.value
    assert error.file == path
    assert error.line == expected["line"]
    assert error.field == expected.get("field")
    assert error.exit_code == 2
    assert_names_place(error.message, error.hint, path, expected)


@pytest.mark.parametrize("name", PROFILE_FILES)
def test_profile_file_raises_config_error(name: str, agent_box_home: Path) -> None:
    expected = EXPECTED[name]
    path = install_profile(agent_box_home, name)
    with pytest.raises(ConfigError) as caught:
        profiles.resolve(PROFILE_DIR_NAME)
    error = caught.value
    assert error.file == path
    assert error.line == expected["line"]
    assert error.field == expected.get("field")
    assert_names_place(error.message, error.hint, path, expected)


def test_broken_user_profile_is_a_warning_in_listings(agent_box_home: Path) -> None:
    """`profile list` keeps working: a broken profile is reported, the others are listed."""
    install_profile(agent_box_home, "profile-bad-tool.yaml")
    errors: list[ConfigError] = []
    names = [info.name for info in profiles.all_profiles(errors)]
    assert "scripted" in names and PROFILE_DIR_NAME not in names
    assert len(errors) == 1 and "runtime.tool" in errors[0].message


# ----------------------------------------------------------------------------- real CLI


@pytest.fixture(scope="module")
def cli_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, CliResult]]:
    """Run the real CLI once per corpus file (in parallel: each is its own process)."""
    base = tmp_path_factory.mktemp("corpus-cli")

    def one(name: str) -> tuple[str, tuple[Path, CliResult]]:
        case_dir = base / name.removesuffix(".yaml")
        home = case_dir / "home"
        home.mkdir(parents=True)
        env = {"AGENT_BOX_HOME": str(home)}
        if name.startswith("crew-"):
            root = case_dir / "repo"
            path = install_crew(root, name)
            return name, (path, run_cli("role", "list", cwd=root, env=env, timeout=60))
        path = install_profile(home, name)
        return name, (path, run_cli("profile", "show", PROFILE_DIR_NAME, cwd=case_dir, env=env, timeout=60))

    with ThreadPoolExecutor(max_workers=8) as pool:
        return dict(pool.map(one, ALL_FILES))


@pytest.mark.parametrize("name", ALL_FILES)
def test_cli_reports_a_clean_error(name: str, cli_results: dict[str, tuple[Path, CliResult]]) -> None:
    path, result = cli_results[name]
    assert result.code == 2, (result.code, result.err)
    assert result.err.startswith("error: "), result.err
    assert "Traceback" not in result.err + result.out
    assert result.out.strip() == ""
    lines = result.err.rstrip("\n").splitlines()
    # one paragraph: the error line, optionally followed by one hint line
    assert len(lines) <= 2, result.err
    if len(lines) == 2:
        assert lines[1].startswith("hint: ")
    assert lines[0].startswith("error: ")
    hint = lines[1].removeprefix("hint: ") if len(lines) == 2 else None
    assert_names_place(lines[0].removeprefix("error: "), hint, path, EXPECTED[name])


# ----------------------------------------------------------------------------- mutations


@pytest.mark.parametrize("seed", range(4))
def test_random_mutations_only_ever_give_config_errors(seed: int, tmp_path: Path) -> None:
    """Beyond the corpus: damaged copies of real files load or fail with a ConfigError, never
    another exception (seeded, so a failure reproduces)."""
    rng = random.Random(seed)
    repo = CORPUS.parent.parent.parent
    sources = [
        (Crew, (repo / ".agent-box.example" / "crew.yaml").read_text()),
        (Profile, (repo / "profiles" / "claude" / "profile.yaml").read_text()),
    ]
    alphabet = list(":-[]{}\"'#\t\n &*!|>%@`,?0123456789abcxyz")
    path = tmp_path / "mutated.yaml"
    failures = 0
    for _ in range(150):
        model, text = rng.choice(sources)
        chars = list(text)
        for _ in range(rng.randint(1, 4)):
            spot = rng.randrange(len(chars))
            action = rng.random()
            if action < 0.4:
                del chars[spot]
            elif action < 0.8:
                chars.insert(spot, rng.choice(alphabet))
            else:
                chars[spot] = rng.choice(alphabet)
        path.write_text("".join(chars))
        try:
            load_model(model, path)
        except ConfigError as error:
            failures += 1
            assert error.message.startswith(f"{path}:"), error.message
            assert "Traceback" not in error.message and "\n" not in error.message
    assert failures > 0
