"""Profiles: user profiles in `$AGENT_BOX_HOME/profiles/`, bundled templates, v1 profiles.

Resolution order for a name: a user profile dir with `profile.yaml`; a v1 profile dir
(no `profile.yaml`, tool known from `meta.yaml` or v1's `agent-box.db`); a bundled
template of that name. A bundled profile used directly keeps its writable tool state
under `$AGENT_BOX_HOME/bundled/<name>/` so the repository stays untouched.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from agentbox.core import paths
from agentbox.core.config import profile_cache
from agentbox.core.config.profile_cache import CachedProfile
from agentbox.core.errors import AlreadyExistsError, ConfigError, NotFoundError, UsageError
from agentbox.core.safe_io import describe_mode
from agentbox.core.tools import AGENT_CLIS
from agentbox.core.validation import NAME_PATTERN, NAME_RULE

if TYPE_CHECKING:  # the models and the YAML reader are imported where a profile.yaml is checked
    from agentbox.core.config.models import Profile

Source = Literal["user", "v1", "bundled"]

#: The v1 layout: the tool's config dir inside a profile.
DEFAULT_CONFIG_DIR: dict[str, str] = {
    "claude": "dot-claude",
    "codex": "dot-codex",
    "opencode": "dot-opencode",
    "hermes": "dot-hermes",
    "scripted": "dot-scripted",
}

_V1_TOOL_ALIASES = {
    "claude": "claude",
    "claude-code": "claude",
    "claude_code": "claude",
    "codex": "codex",
    "codex-cli": "codex",
    "opencode": "opencode",
    "hermes": "hermes",
    "hermes-agent": "hermes",
}


@dataclass(frozen=True)
class ProfileInfo:
    """A resolved profile: its validated config, where its files are and where it came from."""

    profile: Profile | CachedProfile
    """The validated profile.yaml (synthesised for a v1 profile); as plain data when it came from
    the cache of checked profiles (`resolve(..., cached=True)`)."""
    source: Source
    """user: has profile.yaml; v1: written by agent-box v1, not adopted; bundled: a template."""
    directory: Path
    """The profile directory holding profile.yaml (the template dir for a bundled profile)."""
    state_dir: Path
    """Where the tool's config dir and other writable resources live."""

    @property
    def name(self) -> str:
        """The profile's name."""
        return self.profile.name

    @property
    def tool(self) -> str:
        """The agent CLI this profile runs."""
        return self.profile.runtime.tool

    @property
    def config_dir(self) -> Path:
        """The tool's config dir inside the profile (bound over the tool's home in the sandbox)."""
        sub = self.profile.resources.config_dir or DEFAULT_CONFIG_DIR[self.tool]
        return self.state_dir / sub

    @property
    def scenario_path(self) -> Path | None:
        """The scripted runtime's scenario file, resolved against the profile dir."""
        scenario = self.profile.runtime.scenario
        if scenario is None:
            return None
        path = Path(scenario).expanduser()
        return path if path.is_absolute() else self.directory / path


# ----------------------------------------------------------------------------- v1


def _v1_rows() -> dict[str, dict[str, str | None]]:
    """The `profiles` table of v1's agent-box.db, by name (empty when absent or unreadable)."""
    db = paths.v1_database()
    if not db.is_file():
        return {}
    import sqlite3

    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            rows = conn.execute(
                "SELECT name, agent_type, display_name, description FROM profiles"
            ).fetchall()
    except sqlite3.Error:
        return {}
    return {
        str(name): {"agent_type": agent_type, "display_name": display, "description": desc}
        for name, agent_type, display, desc in rows
    }


def _v1_profile(directory: Path, db_rows: dict[str, dict[str, str | None]]) -> Profile | None:
    """Synthesise a Profile for a v1 directory, or None when its tool cannot be known."""
    from agentbox.core.config.models import Profile, Runtime
    from agentbox.core.yaml_io import load_yaml

    name = directory.name
    meta: dict[str, object] = {}
    meta_file = directory / "meta.yaml"
    if meta_file.is_file():
        try:
            loaded = load_yaml(meta_file)
        except ConfigError:
            loaded = None
        if isinstance(loaded, dict):
            meta = dict(loaded)
    row = db_rows.get(name, {})
    raw_tool = meta.get("agent_type") or meta.get("tool") or meta.get("type") or row.get("agent_type")
    tool = _V1_TOOL_ALIASES.get(str(raw_tool).lower()) if raw_tool else None
    if tool is None:
        present = [t for t, sub in DEFAULT_CONFIG_DIR.items() if (directory / sub).is_dir()]
        tool = present[0] if len(present) == 1 and present[0] != "scripted" else None
    if tool is None:
        return None
    display = meta.get("display_name") or row.get("display_name")
    description = meta.get("description") or row.get("description")
    return Profile(
        name=name,
        display_name=str(display) if display else None,
        description=str(description) if description else None,
        runtime=Runtime(tool=tool),  # type: ignore[arg-type]
    )


# ----------------------------------------------------------------------------- listing


def _present(path: Path) -> bool:
    """True when anything is at `path` (a broken link, a FIFO or a directory too): a
    profile.yaml that is not a readable file is reported, not mistaken for a v1 profile."""
    return os.path.lexists(path)


def _bundled_state_dir(name: str) -> Path:
    """Where a bundled profile used directly keeps its writable tool state."""
    return paths.agent_box_home() / "bundled" / name


def _bind_problem(target: Path, own_dir: Path) -> str | None:
    """Why binding `target` into a sandbox of the profile whose state lives in `own_dir` is
    refused, or None.

    Refused: the host root, the home dir or a dir holding it, a dir holding (or equal to)
    AGENT_BOX_HOME or this profile's own directory (profile.yaml would become the agent's
    to rewrite), and anything in AGENT_BOX_HOME outside this profile's directory (other
    profiles' credentials and state).
    """
    real = target.resolve()
    home = Path.home().resolve()
    box_home = paths.agent_box_home().resolve()
    own = own_dir.resolve()
    if real == Path(real.anchor):
        return "is the root of the host filesystem"
    if home.is_relative_to(real):
        return f"is your home directory {home}" if real == home else f"contains your home directory {home}"
    if box_home.is_relative_to(real):
        return f"contains AGENT_BOX_HOME ({box_home})"
    if own.is_relative_to(real):
        return f"is this profile's own directory {own} (it holds profile.yaml)" if real == own else (
            f"contains this profile's own directory {own}")
    if real.is_relative_to(box_home) and not real.is_relative_to(own):
        for group in (paths.profiles_dir().resolve(), (box_home / "bundled").resolve()):
            if real.is_relative_to(group) and real != group:
                other = real.relative_to(group).parts[0]
                return f"is inside another profile's directory ({group / other})"
        return f"is inside AGENT_BOX_HOME ({box_home}) outside this profile's directory"
    return None


def _check_binds(profile: Profile | CachedProfile, document: object, file: Path, state_dir: Path) -> None:
    """The profile's config_dir and sandbox binds are places it may own or show: see `_bind_problem`."""
    checks: list[tuple[Path, tuple[str | int, ...], str]] = []
    config_dir = profile.resources.config_dir
    if config_dir is not None:
        checks.append((state_dir / config_dir, ("resources", "config_dir"), config_dir))
    if not isinstance(profile.sandbox, str):
        for kind in ("ro_binds", "rw_binds"):
            for index, value in enumerate(getattr(profile.sandbox, kind)):
                loc: tuple[str | int, ...] = ("sandbox", kind, index)
                target = Path(value).expanduser()
                if not target.is_absolute():
                    raise _bind_error(document, file, loc, f"{value!r} is not an absolute path",
                                      "give the host path to bind, e.g. /opt/tool or ~/.local/share/tool")
                checks.append((target, loc, value))
    for target, loc, value in checks:
        try:
            problem = _bind_problem(target, state_dir)
        except (OSError, RuntimeError, ValueError) as exc:
            problem = f"cannot be resolved ({exc})"
        if problem:
            raise _bind_error(document, file, loc, f"{value!r} {problem}",
                              "bind only a directory of this profile or a dir that holds no one's secrets")


def _bind_error(document: object, file: Path, loc: tuple[str | int, ...], message: str, hint: str) -> ConfigError:
    from agentbox.core.yaml_io import position

    line, column = position(document, loc)
    return ConfigError(message, file=file, line=line, column=column,
                       field=".".join(str(p) for p in loc), hint=hint)


SCENARIO_MAX_BYTES = 1 << 20
"""Largest scenario file a scripted profile may name (as large as any YAML file agentbox reads)."""


def _check_scenario(profile: Profile | CachedProfile, document: object, file: Path, directory: Path) -> None:
    """A scripted profile's `runtime.scenario` is a regular file of at most SCENARIO_MAX_BYTES:
    never a device (`/dev/zero` would be read until memory runs out), a FIFO, a directory or
    a missing file. Checked without opening it."""
    scenario = profile.runtime.scenario
    if scenario is None:
        return
    path = Path(scenario).expanduser()
    path = path if path.is_absolute() else directory / path
    hint = "name a JSON or YAML scenario file (docs/scripted-runtime.md), relative to the profile's directory"
    try:
        info = os.stat(path)  # a symlink to a regular file is fine: its target is checked
    except OSError as exc:
        problem = "does not exist" if isinstance(exc, FileNotFoundError) else f"cannot be read ({exc.strerror or exc})"
        raise _bind_error(document, file, ("runtime", "scenario"), f"{scenario!r} {problem}", hint) from None
    if not stat.S_ISREG(info.st_mode):
        raise _bind_error(document, file, ("runtime", "scenario"),
                          f"{scenario!r} is {describe_mode(info.st_mode)}, not a regular file", hint)
    if info.st_size > SCENARIO_MAX_BYTES:
        raise _bind_error(document, file, ("runtime", "scenario"),
                          f"{scenario!r} is {info.st_size:,} bytes, more than the {SCENARIO_MAX_BYTES:,} allowed", hint)


def _load_user(directory: Path, state_dir: Path | None = None, *, cached: bool = False) -> Profile | CachedProfile:
    """Load `<directory>/profile.yaml`; its name must be the directory's name, and its
    config_dir and binds must stay clear of other people's files (`_bind_problem`).

    `state_dir` is where the profile's writable state lives (default: `directory`). With
    `cached`, a profile.yaml whose bytes and identity were checked before comes back as plain
    data from `agentbox.core.config.profile_cache`, without its parser and models; what depends on
    other files (binds, the scenario) is checked again all the same."""
    file = directory / paths.PROFILE_FILE
    state = state_dir or directory
    source = profile_cache.read_source(file) if cached else None
    if source is not None:
        hit = profile_cache.lookup(_cache_dir(), directory, state, source)
        if hit is not None:
            try:
                _check_binds(hit, None, file, state)
                _check_scenario(hit, None, file, directory)
            except ConfigError:
                profile_cache.drop(_cache_dir(), directory, state)  # checked below, to say it with its line
            else:
                if hit.name == directory.name:
                    return hit
    profile = _check_user(directory, file, state)
    if source is not None:
        again = profile_cache.read_source(file)  # kept only when what was checked is still what is there
        if again is not None and again.identity == source.identity:
            profile_cache.store(_cache_dir(), directory, state, source, profile.model_dump())
    return profile


def _cache_dir() -> Path:
    return paths.agent_box_home() / "cache" / "profiles"


def _check_user(directory: Path, file: Path, state_dir: Path) -> Profile:
    """profile.yaml read, validated and checked against the files it names (raises ConfigError)."""
    from agentbox.core.config.models import Profile, validate_document
    from agentbox.core.yaml_io import load_yaml, position

    document = load_yaml(file)
    profile = validate_document(Profile, document, file, document)
    _check_binds(profile, document, file, state_dir)
    _check_scenario(profile, document, file, directory)
    if profile.name != directory.name:
        line, column = position(document, ("name",))
        raise ConfigError(
            f"{profile.name!r} does not match the directory name {directory.name!r}",
            file=file,
            line=line,
            column=column,
            field="name",
            hint=f"set `name: {directory.name}` or rename the directory",
        )
    return profile


def bundled_profiles() -> list[ProfileInfo]:
    """Every bundled profile template, by name."""
    root = paths.bundled_profiles_dir()
    infos = []
    for directory in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        if _present(directory / paths.PROFILE_FILE):
            state = _bundled_state_dir(directory.name)
            infos.append(ProfileInfo(_load_user(directory, state), "bundled", directory, state))
    return infos


def user_profiles(errors: list[ConfigError] | None = None) -> list[ProfileInfo]:
    """User and v1 profiles in `$AGENT_BOX_HOME/profiles/`; broken ones go to `errors`."""
    root = paths.profiles_dir()
    if not root.is_dir():
        return []
    db_rows = _v1_rows()
    infos = []
    for directory in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if not re.match(NAME_PATTERN, directory.name):
            problem = ConfigError(
                f"{directory.name!r} is not a valid profile name; the directory is ignored",
                file=directory,
                hint=f"rename it: {NAME_RULE}",
            )
            if errors is None:
                raise problem
            errors.append(problem)
            continue
        if _present(directory / paths.PROFILE_FILE):
            try:
                infos.append(ProfileInfo(_load_user(directory), "user", directory, directory))
            except ConfigError as exc:
                if errors is None:
                    raise
                errors.append(exc)
        else:
            v1 = _v1_profile(directory, db_rows)
            if v1 is not None:
                infos.append(ProfileInfo(v1, "v1", directory, directory))
    return infos


def all_profiles(errors: list[ConfigError] | None = None) -> list[ProfileInfo]:
    """User profiles first, then bundled templates not shadowed by a user profile."""
    users = user_profiles(errors)
    taken = {info.name for info in users}
    return users + [info for info in bundled_profiles() if info.name not in taken]


def available_names() -> list[str]:
    """Names usable in crew.yaml, for error messages."""
    return sorted(info.name for info in all_profiles(errors=[]))


def resolve(name: str, *, cached: bool = False) -> ProfileInfo:
    """The profile called `name` (a user profile wins over a bundled one).

    `cached`: a profile.yaml checked before, unchanged since, comes back as plain data
    (`CachedProfile`) without importing the YAML reader and the models (a one-turn command)."""
    _check_name(name)
    user_dir = paths.profiles_dir() / name
    if _present(user_dir / paths.PROFILE_FILE):
        return ProfileInfo(_load_user(user_dir, cached=cached), "user", user_dir, user_dir)
    if user_dir.is_dir():
        v1 = _v1_profile(user_dir, _v1_rows())
        if v1 is not None:
            return ProfileInfo(v1, "v1", user_dir, user_dir)
    template = paths.bundled_profiles_dir() / name
    if (template / paths.PROFILE_FILE).is_file():
        state = _bundled_state_dir(name)
        return ProfileInfo(_load_user(template, state, cached=cached), "bundled", template, state)
    raise NotFoundError(
        f"unknown profile {name!r}",
        f"available profiles: {', '.join(available_names()) or '(none)'}; "
        "create one with `agentbox profile add NAME --from TEMPLATE`",
    )


def ensure_state(info: ProfileInfo) -> None:
    """Create the profile's writable tool config dir (copying a bundled template's on first use)."""
    if info.source == "bundled" and not info.state_dir.exists():
        template_config = info.directory / (info.profile.resources.config_dir or DEFAULT_CONFIG_DIR[info.tool])
        if template_config.is_dir():
            shutil.copytree(template_config, info.state_dir / template_config.name, dirs_exist_ok=True)
    info.config_dir.mkdir(parents=True, exist_ok=True)
    if info.tool == "claude":
        claude_json = info.state_dir / "dot-claude.json"
        if not claude_json.exists():
            claude_json.write_text("{}\n")


# ----------------------------------------------------------------------------- editing


def _check_name(name: str) -> None:
    """A profile name is a plain directory name: never a path that leaves `profiles/`."""
    if not re.match(NAME_PATTERN, name):
        raise UsageError(f"invalid profile name {name!r}", NAME_RULE)


def add(name: str, template: str) -> ProfileInfo:
    """Create a user profile from a bundled template, with the tool's empty config dir."""
    _check_name(name)
    target = paths.profiles_dir() / name
    if target.exists():
        raise AlreadyExistsError(f"profile {name!r} already exists at {target}", "pick another name")
    source = paths.bundled_profiles_dir() / template
    if not re.match(NAME_PATTERN, template) or not (source / paths.PROFILE_FILE).is_file():
        templates = ", ".join(info.name for info in bundled_profiles())
        raise NotFoundError(f"unknown template {template!r}", f"templates: {templates}")
    staging = target.with_name(f".{name}.creating")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(source, staging)
    from agentbox.core.config.models import Profile, validate_document
    from agentbox.core.yaml_io import load_yaml, write_yaml

    document = load_yaml(staging / paths.PROFILE_FILE)
    document["name"] = name
    profile = validate_document(Profile, document, staging / paths.PROFILE_FILE, document)
    (staging / paths.PROFILE_FILE).chmod(0o600)  # it may come to hold a key: yours alone
    write_yaml(staging / paths.PROFILE_FILE, document)
    config_sub = profile.resources.config_dir or DEFAULT_CONFIG_DIR[profile.runtime.tool]
    (staging / config_sub).mkdir(exist_ok=True)
    if profile.runtime.tool == "claude" and not (staging / "dot-claude.json").exists():
        (staging / "dot-claude.json").write_text("{}\n")
    staging.rename(target)
    return ProfileInfo(_load_user(target), "user", target, target)


def removable(name: str) -> Path:
    """The directory of user profile `name` (raises when there is no such profile or it is a template)."""
    _check_name(name)
    target = paths.profiles_dir() / name
    if not target.is_dir():
        if (paths.bundled_profiles_dir() / name).is_dir():
            raise UsageError(f"{name!r} is a bundled template and cannot be removed")
        users = ", ".join(info.name for info in user_profiles(errors=[])) or "(none)"
        raise NotFoundError(f"no such profile {name!r}", f"your profiles: {users} (`agentbox profile list`)")
    return target


def remove(name: str) -> Path:
    """Delete a user profile directory (bundled templates cannot be removed)."""
    target = removable(name)
    trash = target.with_name(f".{name}.removing")
    target.rename(trash)
    shutil.rmtree(trash)
    return target


def adopt(name: str) -> Path:
    """Write a profile.yaml for a v1 profile, without moving any of its files."""
    _check_name(name)
    directory = paths.profiles_dir() / name
    if _present(directory / paths.PROFILE_FILE):
        raise AlreadyExistsError(f"profile {name!r} already has a {paths.PROFILE_FILE}")
    if not directory.is_dir():
        raise NotFoundError(f"no profile directory {directory}")
    from agentbox.core.yaml_io import new_map, write_yaml

    profile = _v1_profile(directory, _v1_rows())
    if profile is None:
        raise UsageError(
            f"cannot tell which tool the v1 profile {name!r} uses",
            f"add an agent_type ({', '.join(AGENT_CLIS)}) to {directory / 'meta.yaml'}",
        )
    document = new_map({"name": profile.name})
    if profile.display_name:
        document["display_name"] = profile.display_name
    if profile.description:
        document["description"] = profile.description
    document["runtime"] = new_map({"tool": profile.runtime.tool})
    write_yaml(directory / paths.PROFILE_FILE, document)
    return directory / paths.PROFILE_FILE
