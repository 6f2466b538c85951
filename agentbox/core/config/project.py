"""The project level: `.agent-box/` creation, crew.yaml loading, checking and editing.

A crew.yaml arrives with a cloned repository, so the person running agentbox did not
write it. Every file it names (role instructions, the work graph) and every file read
for the crew (crew.yaml itself, `knowledge/*.md`) must lie inside `.agent-box/` with
symlinks followed, be a regular file and be small: agentbox reads them on the host and
sends them to a model provider, so a link to `~/.ssh/id_rsa` must never be read.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentbox.core import paths
from agentbox.core.config import profiles
from agentbox.core.config.models import NAME_RULE, Crew, Role, validate_document
from agentbox.core.errors import (
    AlreadyExistsError,
    ConfigError,
    NotFoundError,
    StateError,
    UsageError,
)
from agentbox.core.paths import ProjectPaths
from agentbox.core.safe_io import UnsafeFileError, describe_mode, read_bounded
from agentbox.core.store import atomic_write_text
from agentbox.core.validation import NAME_PATTERN

if TYPE_CHECKING:
    from agentbox.core.config.profile_cache import Source

GITIGNORE = """\
# The crew's definition is tracked; what runs leave here (runs, sessions, locks) is not.
/*
!/.gitignore
!/crew.yaml
!/roles/
!/knowledge/
!/graphs/
!/zones.yaml
!/debt.yaml
"""
"""`.agent-box/.gitignore`: crew.yaml, roles, knowledge, graphs and the memory of where the code rots
(zones.yaml, debt.yaml) tracked, runtime state ignored."""


def init(root: Path) -> list[Path]:
    """Create `<root>/.agent-box/` from the example project (with a `.gitignore` keeping
    runtime state out of git); returns the files created."""
    project = ProjectPaths(root.absolute())
    if project.box.exists():
        raise AlreadyExistsError(
            f"{project.box} already exists", "agentbox never overwrites a project; edit it instead"
        )
    example = paths.example_project_dir()
    if not example.is_dir():
        raise UsageError(f"the example project is missing from this installation ({example})")
    if project.root.exists() and not project.root.is_dir():
        raise UsageError(f"{project.root} is not a directory")
    staging = project.root / ".agent-box.creating"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        shutil.copytree(example, staging, ignore=shutil.ignore_patterns("runs", "sessions", "__pycache__"))
        if not (staging / ".gitignore").exists():  # an installed package may leave dotfiles out
            (staging / ".gitignore").write_text(GITIGNORE, encoding="utf-8")
        staging.rename(project.box)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise StateError(f"cannot create {project.box}: {exc.strerror or exc}") from None
    return sorted(p for p in project.box.rglob("*") if p.is_file())


@dataclass(frozen=True)
class LoadedCrew:
    """A validated crew.yaml with the round-trip document it came from (for line numbers);
    None when it was read from its checked cache (`_located` then parses it for the line)."""

    crew: Crew
    document: object


TEXT_MAX_BYTES = 256 * 1024
"""Largest role instructions or knowledge file agentbox reads (256 KiB); it goes into a prompt."""


def box_file(project: ProjectPaths, relative: str | Path) -> Path:
    """The real path of a file named relative to `.agent-box/`, refused unless it is a
    regular file inside `.agent-box/` once every symlink is followed.

    Raises `UnsafeFileError` (outside, not a regular file) or `FileNotFoundError`.
    """
    candidate = project.box / relative
    real = candidate.resolve()
    box = project.box.resolve()
    if not real.is_relative_to(box) or real == box:
        raise UnsafeFileError(candidate, f"leads outside {project.box} (to {real})")
    info = os.stat(real)
    if not stat.S_ISREG(info.st_mode):
        raise UnsafeFileError(candidate, f"is {describe_mode(info.st_mode)}, not a regular file")
    return real


def read_box_text(project: ProjectPaths, relative: str | Path, max_bytes: int = TEXT_MAX_BYTES) -> str:
    """The UTF-8 text of a file inside `.agent-box/` (see `box_file`); a ConfigError naming
    the file when it leads outside, is not a small regular file, or is not UTF-8."""
    shown = project.box / relative
    try:
        data = read_bounded(box_file(project, relative), max_bytes=max_bytes)
        return data.decode("utf-8")
    except FileNotFoundError:
        raise ConfigError("file not found", file=shown) from None
    except UnsafeFileError as exc:
        raise ConfigError(exc.reason, file=shown, line=1,
                          hint=f"a regular file of at most {max_bytes:,} bytes inside .agent-box/") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not valid UTF-8 (byte {exc.start})", file=shown, hint="save the file as UTF-8") from None
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", file=shown) from None


def _crew_text(project: ProjectPaths) -> str:
    """The text of crew.yaml, a regular file inside `.agent-box/` (bounded, see yaml_io)."""
    from agentbox.core.yaml_io import read_yaml_text  # ruamel is imported only where YAML is read

    try:
        crew_file = box_file(project, paths.CREW_FILE)
    except FileNotFoundError:
        raise ConfigError("file not found", file=project.crew_file,
                          hint="`agentbox init` creates .agent-box/ with a crew.yaml") from None
    except UnsafeFileError as exc:
        raise ConfigError(exc.reason, file=project.crew_file, line=1,
                          hint="crew.yaml is a regular file inside .agent-box/") from None
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", file=project.crew_file, line=1) from None
    try:
        return read_yaml_text(crew_file)
    except ConfigError as exc:
        raise ConfigError(exc.detail, file=project.crew_file, line=exc.line, column=exc.column,
                          hint=exc.hint) from None


def load_crew(project: ProjectPaths) -> LoadedCrew:
    """Read and validate crew.yaml: its schema and the files it names (see `check_references`
    for the profiles and roles it names).

    A crew.yaml that passed these checks before and has not changed since (same bytes and
    file identity, see `crew_cache`) is read from its checked plain data, without the YAML
    parser; its model is validated again and the files it names are checked again. Any
    other crew.yaml is parsed and checked here, with the messages below."""
    from agentbox.core.config import crew_cache

    crew_file, source = _crew_source(project)
    if crew_file is not None and source is not None:
        data = crew_cache.lookup(crew_file, source)
        if data is not None:
            hit = _from_cache(project, data)
            if hit is not None:
                return hit
    from agentbox.core.yaml_io import parse_yaml, plain

    text = _crew_text(project)
    document = parse_yaml(text, project.crew_file)
    crew = validate_document(Crew, document, project.crew_file, document)
    _check_named_files(project, crew, document)
    _check_gate_names(project, crew, document)
    if source is not None and crew_file is not None and source.data == text.encode("utf-8"):
        again = crew_cache.read_source(crew_file)  # kept only when what was checked is still what is there
        if again is not None and again.identity == source.identity:
            crew_cache.store(crew_file, source, plain(document))
    return LoadedCrew(crew, document)


def _crew_source(project: ProjectPaths) -> tuple[Path | None, Source | None]:
    """crew.yaml's path and bytes with its identity, when it is a regular file inside `.agent-box/`."""
    from agentbox.core.config import crew_cache

    try:
        crew_file = box_file(project, paths.CREW_FILE)
    except (OSError, UnsafeFileError):
        return None, None  # the parse path says what is wrong
    return crew_file, crew_cache.read_source(crew_file)


def _from_cache(project: ProjectPaths, data: dict[str, Any]) -> LoadedCrew | None:
    """The crew of checked plain data, when it validates and the files it names are still there; else None."""
    from pydantic import ValidationError

    try:
        crew = Crew.model_validate(data)
    except ValidationError:
        return None
    if any(_box_file_problem(project, relative, "file")[0] for relative in _named_files(crew)):
        return None
    if any(name not in crew.checks for stage in ("submission", "integration", "run_end")
           for name in crew.gates.of(stage)):
        return None
    return LoadedCrew(crew, None)


def _named_files(crew: Crew) -> list[str]:
    named = [role.instructions for role in crew.roles.values() if role.instructions]
    return [*named, crew.graph.file] if crew.graph.file else named


def _check_gate_names(project: ProjectPaths, crew: Crew, document: object) -> None:
    """Every check a gate names is declared under `checks:` (the first that is not is raised at its line)."""
    for stage in ("submission", "integration", "run_end"):
        for index, name in enumerate(crew.gates.of(stage)):
            if name not in crew.checks:
                declared = ", ".join(crew.checks) or "none"
                raise _located(project, document, ("gates", stage, index), f"gate {stage} names unknown check {name!r}",
                               f"declare it under checks: (declared: {declared})")


def _check_named_files(project: ProjectPaths, crew: Crew, document: object) -> None:
    """The instructions and graph files crew.yaml names exist as regular files inside
    `.agent-box/`; the first one that does not is raised as a ConfigError at its line."""
    named: list[tuple[str, tuple[str | int, ...], str]] = [
        (role.instructions, ("roles", name, "instructions"), "instructions file")
        for name, role in crew.roles.items() if role.instructions
    ]
    if crew.graph.file:
        named.append((crew.graph.file, ("graph", "file"), "graph file"))
    for relative, loc, what in named:
        problem, hint = _box_file_problem(project, relative, what)
        if problem:
            raise _located(project, document, loc, problem, hint)


def _box_file_problem(project: ProjectPaths, relative: str, what: str) -> tuple[str | None, str | None]:
    """Why a file crew.yaml names is refused (and a hint), or (None, None)."""
    try:
        box_file(project, relative)
    except FileNotFoundError:
        return f"{what} {relative} does not exist", f"create {project.box / relative}"
    except UnsafeFileError as exc:
        return f"{what} {relative} {exc.reason}", "name a regular file inside .agent-box/"
    except OSError as exc:
        return f"{what} {relative} cannot be read: {exc.strerror or exc}", None
    return None, None


def _located(project: ProjectPaths, document: object, loc: Sequence[str | int], message: str,
             hint: str | None = None) -> ConfigError:
    """A ConfigError at the line of `loc` in crew.yaml (read now when the crew came from its cache)."""
    from agentbox.core.yaml_io import parse_yaml, position

    if document is None:
        try:
            document = parse_yaml(_crew_text(project), project.crew_file)
        except ConfigError:
            document = None
    line, column = position(document, loc)
    return ConfigError(message, file=project.crew_file, line=line, column=column,
                       field=".".join(str(p) for p in loc), hint=hint)


def check_references(project: ProjectPaths, loaded: LoadedCrew) -> list[ConfigError]:
    """Every reference in the crew that points nowhere: profiles, role names, files."""
    crew, document = loaded.crew, loaded.document
    problems: list[ConfigError] = []
    available = None

    def err(message: str, loc: tuple[str | int, ...], hint: str | None = None) -> None:
        problems.append(_located(project, document, loc, message, hint))

    for name, role in crew.roles.items():
        try:
            profiles.resolve(role.profile, cached=True)  # kept checked for the engine's turns
        except NotFoundError:
            available = available or profiles.available_names()
            err(f"unknown profile {role.profile!r}", ("roles", name, "profile"),
                f"available profiles: {', '.join(available)}")
        except ConfigError as exc:
            problems.append(exc)
    role_names = set(crew.roles)

    def need_role(value: str | None, loc: tuple[str | int, ...]) -> None:
        if value is not None and value not in role_names:
            err(f"unknown role {value!r}", loc, f"roles: {', '.join(crew.roles)}")

    for index, step in enumerate(crew.sequential.steps):
        need_role(step, ("sequential", "steps", index))
    if crew.mode == "hierarchical":
        need_role(crew.hierarchical.lead, ("hierarchical", "lead"))
    need_role(crew.hierarchical.reviewer, ("hierarchical", "reviewer"))
    for index, reviewer in enumerate(crew.hierarchical.reviewers):
        need_role(reviewer, ("hierarchical", "reviewers", index))
    for index, speaker in enumerate(crew.group_chat.speakers):
        need_role(speaker, ("group_chat", "speakers", index))
    need_role(crew.group_chat.lead, ("group_chat", "lead"))
    need_role(crew.group_chat.done_role, ("group_chat", "done_role"))
    need_role(crew.handoff.start, ("handoff", "start"))
    try:
        knowledge_text(project)
    except ConfigError as exc:
        problems.append(exc)
    return problems


def load_checked_crew(project: ProjectPaths) -> Crew:
    """The crew, raising the first broken reference as a ConfigError."""
    loaded = load_crew(project)
    problems = check_references(project, loaded)
    if problems:
        raise problems[0]
    return loaded.crew


def role_instructions(project: ProjectPaths, role: Role) -> str | None:
    """The text of a role's instructions file, if it has one (inside `.agent-box/`, bounded)."""
    if not role.instructions:
        return None
    return read_box_text(project, role.instructions)


MAX_KNOWLEDGE_FILES = 200
"""Most `knowledge/*.md` files read into a prompt."""


def knowledge_text(project: ProjectPaths) -> str | None:
    """All shared knowledge (`knowledge/*.md`) concatenated, each under its file name.

    Each file must be a regular file inside `.agent-box/` (symlinks followed) of at most
    TEXT_MAX_BYTES; the knowledge dir itself must not lead out of `.agent-box/`.
    """
    folder = project.knowledge_dir
    if not folder.is_dir():
        return None
    box = project.box.resolve()
    if not folder.resolve().is_relative_to(box):
        raise ConfigError(f"leads outside {project.box} (to {folder.resolve()})", file=folder,
                          hint="knowledge/ is a directory inside .agent-box/")
    names = sorted(p.name for p in folder.glob("*.md"))
    if len(names) > MAX_KNOWLEDGE_FILES:
        raise ConfigError(f"holds {len(names)} .md files, more than the {MAX_KNOWLEDGE_FILES} read into a prompt",
                          file=folder, hint="merge or remove knowledge files")
    if not names:
        return None
    relative = Path(folder.name)
    parts = [f"## {name}\n\n{read_box_text(project, relative / name).strip()}" for name in names]
    return "\n\n".join(parts)


# ----------------------------------------------------------------------------- role editing


def add_role(
    project: ProjectPaths,
    name: str,
    profile: str,
    *,
    instructions: str | None = None,
    writes: list[str] | None = None,
) -> None:
    """Add a role at the end of crew.yaml's roles, keeping every other line as written."""
    import re

    from agentbox.core.yaml_io import new_map, parse_yaml, text_with_entry_added

    if not re.match(NAME_PATTERN, name):
        raise UsageError(f"invalid role name {name!r}", NAME_RULE)
    profiles.resolve(profile)  # unknown profile → NotFoundError listing the available ones
    text = _crew_text(project)
    document = parse_yaml(text, project.crew_file)
    validate_document(Crew, document, project.crew_file, document)
    roles = document["roles"]
    if name in roles:
        raise AlreadyExistsError(f"role {name!r} already exists in {project.crew_file}")
    entry = new_map({"profile": profile})
    if instructions:
        entry["instructions"] = instructions
    if writes is not None:
        _check_writes(writes)
        entry["writes"] = writes
    edited = text_with_entry_added(text, document, ("roles",), name, entry)
    roles[name] = entry
    validate_document(Crew, document, project.crew_file, document)
    if instructions:
        problem, hint = _box_file_problem(project, instructions, "instructions file")
        if problem:
            raise UsageError(problem, hint)
    _write_crew(project, document, edited)


def _check_writes(writes: list[str]) -> None:
    """Refuse a write scope given on the command line the way crew.yaml's would be (UsageError)."""
    from agentbox.core.sandbox.scopes import enforceable_problem, scope_problem

    for scope in writes:
        problem = scope_problem(scope)
        if problem:
            raise UsageError(f"--writes: {problem}", "name a directory (`src/**`), a file, or a one-level "
                                                     "pattern (`src/*.py`) inside the project")
        unenforceable = enforceable_problem(scope)
        if unenforceable:
            raise UsageError(f"--writes: {unenforceable[0]}", unenforceable[1])


def role_uses(crew: Crew, name: str) -> list[str]:
    """Where the mode settings name role `name` (`hierarchical.lead`, `sequential.steps[1]`, ...).

    The hierarchical lead counts even when it is the default `lead`, when the crew runs in
    hierarchical mode: removing it would leave the mode without a planner.
    """
    uses: list[str] = []
    settings = crew.hierarchical
    if settings.lead == name and (crew.mode == "hierarchical" or "lead" in settings.model_fields_set):
        uses.append("hierarchical.lead")
    if settings.reviewer == name:
        uses.append("hierarchical.reviewer")
    uses += [f"sequential.steps[{index}]" for index, step in enumerate(crew.sequential.steps) if step == name]
    uses += [f"group_chat.speakers[{index}]" for index, speaker in enumerate(crew.group_chat.speakers)
             if speaker == name]
    if crew.group_chat.lead == name:
        uses.append("group_chat.lead")
    if crew.group_chat.done_role == name:
        uses.append("group_chat.done_role")
    if crew.handoff.start == name:
        uses.append("handoff.start")
    return uses


def remove_role(project: ProjectPaths, name: str, *, force: bool = False) -> None:
    """Remove a role from crew.yaml, keeping everything else as the person wrote it.

    A role the mode settings still name is refused (the crew would no longer load) unless
    `force`.
    """
    from agentbox.core.yaml_io import parse_yaml, text_with_entry_removed

    text = _crew_text(project)
    document = parse_yaml(text, project.crew_file)
    crew = validate_document(Crew, document, project.crew_file, document)
    roles = document["roles"]
    if name not in roles:
        raise NotFoundError(f"no role {name!r} in {project.crew_file}", f"roles: {', '.join(roles)}")
    if len(roles) == 1:
        raise UsageError("cannot remove the last role of the crew")
    uses = role_uses(crew, name)
    if uses and not force:
        raise UsageError(f"role {name!r} is still named in {project.crew_file.name}: {', '.join(uses)}",
                         f"edit {project.crew_file} to name another role there first, "
                         f"or `agentbox role rm {name} --force` to remove it anyway")
    edited = text_with_entry_removed(text, document, ("roles",), name)
    del roles[name]
    _write_crew(project, document, edited)


def _write_crew(project: ProjectPaths, document: object, edited: str | None) -> None:
    """Write the text edit when it parses back to exactly `document` (values and key order),
    else dump `document` through the round-trip dumper."""
    from agentbox.core.yaml_io import parse_yaml, write_yaml

    if edited is not None:
        try:
            reparsed = parse_yaml(edited, project.crew_file)
            same = json.dumps(reparsed, default=str) == json.dumps(document, default=str)
        except ConfigError:
            same = False
        if same:
            atomic_write_text(project.crew_file, edited)
            return
    write_yaml(project.crew_file, document)
