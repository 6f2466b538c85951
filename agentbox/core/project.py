"""The project level: `.agent-box/` creation, crew.yaml loading, checking and editing."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from agentbox.core import paths, profiles
from agentbox.core.config import NAME_PATTERN, NAME_RULE, Crew, Role, validate_document
from agentbox.core.errors import (
    AlreadyExistsError,
    ConfigError,
    NotFoundError,
    StateError,
    UsageError,
)
from agentbox.core.paths import ProjectPaths
from agentbox.core.store import atomic_write_text
from agentbox.core.yaml_io import (
    load_yaml,
    new_map,
    parse_yaml,
    position,
    read_yaml_text,
    text_with_entry_added,
    text_with_entry_removed,
    write_yaml,
)


def init(root: Path) -> list[Path]:
    """Create `<root>/.agent-box/` from the example project; returns the files created."""
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
        staging.rename(project.box)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise StateError(f"cannot create {project.box}: {exc.strerror or exc}") from None
    return sorted(p for p in project.box.rglob("*") if p.is_file())


@dataclass(frozen=True)
class LoadedCrew:
    """A validated crew.yaml with the round-trip document it came from (for line numbers)."""

    crew: Crew
    document: object


def load_crew(project: ProjectPaths) -> LoadedCrew:
    """Read and validate crew.yaml (schema only; see `check_references`)."""
    document = load_yaml(project.crew_file)
    crew = validate_document(Crew, document, project.crew_file, document)
    return LoadedCrew(crew, document)


def check_references(project: ProjectPaths, loaded: LoadedCrew) -> list[ConfigError]:
    """Every reference in the crew that points nowhere: profiles, role names, files."""
    crew, document = loaded.crew, loaded.document
    problems: list[ConfigError] = []
    available = None

    def err(message: str, loc: tuple[str | int, ...], hint: str | None = None) -> None:
        line, column = position(document, loc)
        problems.append(
            ConfigError(message, file=project.crew_file, line=line, column=column,
                        field=".".join(str(p) for p in loc), hint=hint)
        )

    for name, role in crew.roles.items():
        try:
            profiles.resolve(role.profile)
        except NotFoundError:
            available = available or profiles.available_names()
            err(f"unknown profile {role.profile!r}", ("roles", name, "profile"),
                f"available profiles: {', '.join(available)}")
        except ConfigError as exc:
            problems.append(exc)
        if role.instructions and not (project.box / role.instructions).is_file():
            err(f"instructions file {role.instructions} does not exist",
                ("roles", name, "instructions"), f"create {project.box / role.instructions}")
    role_names = set(crew.roles)

    def need_role(value: str | None, loc: tuple[str | int, ...]) -> None:
        if value is not None and value not in role_names:
            err(f"unknown role {value!r}", loc, f"roles: {', '.join(crew.roles)}")

    for index, step in enumerate(crew.sequential.steps):
        need_role(step, ("sequential", "steps", index))
    if crew.mode == "hierarchical":
        need_role(crew.hierarchical.lead, ("hierarchical", "lead"))
    need_role(crew.hierarchical.reviewer, ("hierarchical", "reviewer"))
    for index, speaker in enumerate(crew.group_chat.speakers):
        need_role(speaker, ("group_chat", "speakers", index))
    need_role(crew.group_chat.lead, ("group_chat", "lead"))
    need_role(crew.group_chat.done_role, ("group_chat", "done_role"))
    need_role(crew.handoff.start, ("handoff", "start"))
    if crew.graph.file and not (project.box / crew.graph.file).is_file():
        err(f"graph file {crew.graph.file} does not exist", ("graph", "file"))
    return problems


def load_checked_crew(project: ProjectPaths) -> Crew:
    """The crew, raising the first broken reference as a ConfigError."""
    loaded = load_crew(project)
    problems = check_references(project, loaded)
    if problems:
        raise problems[0]
    return loaded.crew


def role_instructions(project: ProjectPaths, role: Role) -> str | None:
    """The text of a role's instructions file, if it has one."""
    if not role.instructions:
        return None
    return (project.box / role.instructions).read_text(encoding="utf-8")


def knowledge_text(project: ProjectPaths) -> str | None:
    """All shared knowledge (`knowledge/*.md`) concatenated, each under its file name."""
    files = sorted(project.knowledge_dir.glob("*.md")) if project.knowledge_dir.is_dir() else []
    if not files:
        return None
    return "\n\n".join(f"## {f.name}\n\n{f.read_text(encoding='utf-8').strip()}" for f in files)


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

    if not re.match(NAME_PATTERN, name):
        raise UsageError(f"invalid role name {name!r}", NAME_RULE)
    profiles.resolve(profile)  # unknown profile → NotFoundError listing the available ones
    text = read_yaml_text(project.crew_file)
    document = parse_yaml(text, project.crew_file)
    validate_document(Crew, document, project.crew_file, document)
    roles = document["roles"]
    if name in roles:
        raise AlreadyExistsError(f"role {name!r} already exists in {project.crew_file}")
    entry = new_map({"profile": profile})
    if instructions:
        entry["instructions"] = instructions
    if writes is not None:
        entry["writes"] = writes
    edited = text_with_entry_added(text, document, ("roles",), name, entry)
    roles[name] = entry
    validate_document(Crew, document, project.crew_file, document)
    _write_crew(project, document, edited)


def remove_role(project: ProjectPaths, name: str) -> None:
    """Remove a role from crew.yaml, keeping everything else as the person wrote it."""
    text = read_yaml_text(project.crew_file)
    document = parse_yaml(text, project.crew_file)
    validate_document(Crew, document, project.crew_file, document)
    roles = document["roles"]
    if name not in roles:
        raise NotFoundError(f"no role {name!r} in {project.crew_file}", f"roles: {', '.join(roles)}")
    if len(roles) == 1:
        raise UsageError("cannot remove the last role of the crew")
    edited = text_with_entry_removed(text, document, ("roles",), name)
    del roles[name]
    _write_crew(project, document, edited)


def _write_crew(project: ProjectPaths, document: object, edited: str | None) -> None:
    """Write the text edit when it parses back to exactly `document` (values and key order),
    else dump `document` through the round-trip dumper."""
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
