"""Secrets in profiles: `${VAR}` references and `pass_env`, resolved at turn time.

A profile's `runtime.env` values may name variables of the environment agentbox runs in
(`${ANTHROPIC_API_KEY}`, `${VAR:-default}`; `$$` is a literal `$`), and `runtime.pass_env`
passes variables through by name. They are resolved only when a turn is prepared and go
to the sandbox through bwrap's memory-fd argv: agentbox never writes them to a file.
Only profiles (the user's own files) are resolved; a role's `env` in crew.yaml arrives
with a repository and is passed literally, so a cloned crew cannot read your environment.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from agentbox.core.errors import ConfigError


class ProfileInfo(Protocol):
    """What the resolution needs of a profile (`agentbox.core.config.profiles.ProfileInfo` is one)."""

    name: str
    directory: Path
    profile: Any
    """The validated profile.yaml: its `runtime.env` and `runtime.pass_env`."""

VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_REFERENCE = re.compile(r"\$(\$|\{)")

#: Env names that usually hold a credential.
_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH)", re.IGNORECASE)
#: Values that look like a vendor's API key, whatever the variable is called.
_KEY_SHAPE = re.compile(r"\b(sk-[A-Za-z0-9_-]{16,}|sk-ant-[A-Za-z0-9_-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}"
                        r"|xox[abp]-[A-Za-z0-9-]{16,}|AIza[A-Za-z0-9_-]{30,})")
MASK = "****"


@dataclass(frozen=True)
class Reference:
    """One `${NAME}` or `${NAME:-default}` in a value."""

    name: str
    default: str | None


def _parts(value: str) -> list[str | Reference]:
    """Split `value` into literal text and references (raises ValueError on bad syntax)."""
    parts: list[str | Reference] = []
    text: list[str] = []
    index = 0
    while True:
        found = _REFERENCE.search(value, index)
        if found is None:
            text.append(value[index:])
            break
        text.append(value[index:found.start()])
        if found.group(1) == "$":
            text.append("$")
            index = found.end()
            continue
        close = value.find("}", found.end())
        if close < 0:
            raise ValueError(f"unterminated '${{' in {value!r} (write $$ for a literal $)")
        body = value[found.end():close]
        name, sep, default = body.partition(":-")
        if not VAR_NAME.match(name):
            raise ValueError(f"${{{body}}} does not name an environment variable "
                             "(letters, digits and '_'; `${VAR:-default}` for a default)")
        parts += ["".join(text), Reference(name, default if sep else None)]
        text = []
        index = close + 1
    parts.append("".join(text))
    return [p for p in parts if p != ""]


def reference_problem(value: str) -> str | None:
    """Why `value` is not a valid env value with references, or None."""
    try:
        _parts(value)
    except ValueError as exc:
        return str(exc)
    return None


def references(value: str) -> list[Reference]:
    """The variables `value` names (empty when the syntax is bad: validation reports that)."""
    try:
        return [p for p in _parts(value) if isinstance(p, Reference)]
    except ValueError:
        return []


def is_literal(value: str) -> bool:
    """True when `value` names no variable (it is stored as it is)."""
    return not references(value)


class MissingVariable(LookupError):
    """A referenced variable is not set and has no default."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def expand(value: str, environ: Mapping[str, str]) -> str:
    """`value` with its references replaced from `environ` (raises MissingVariable)."""
    out: list[str] = []
    for part in _parts(value):
        if isinstance(part, str):
            out.append(part)
        elif part.default is not None:
            out.append(environ.get(part.name) or part.default)
        elif part.name in environ:
            out.append(environ[part.name])
        else:
            raise MissingVariable(part.name)
    return "".join(out)


def _where(info: ProfileInfo, location: tuple[str | int, ...]) -> tuple[Path | None, int | None, int | None]:
    """profile.yaml and the (line, column) of `location` in it, as far as they can be known."""
    from agentbox.core import paths
    from agentbox.core.yaml_io import load_yaml, position

    file = info.directory / paths.PROFILE_FILE
    if not file.is_file():
        return None, None, None
    try:
        line, column = position(load_yaml(file), location)
    except ConfigError:
        return file, None, None
    return file, line, column


def _missing(info: ProfileInfo, name: str, location: tuple[str | int, ...]) -> ConfigError:
    file, line, column = _where(info, location)
    return ConfigError(
        f"profile {info.name!r} needs the environment variable {name}, which is not set",
        file=file, line=line, column=column, field=".".join(str(p) for p in location),
        hint=f"export {name}=... in the shell that runs agentbox (or write `${{{name}:-default}}`); "
        "agentbox never stores the value",
    )


def resolve_env(info: ProfileInfo, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The profile's runtime env with references resolved, plus its `pass_env` variables.

    Raises ConfigError naming the profile, profile.yaml:line and the variable when one is
    unset. The result is for the sandbox only: never persist or print it.
    """
    environ = os.environ if environ is None else environ
    runtime = info.profile.runtime
    resolved: dict[str, str] = {}
    for index, name in enumerate(runtime.pass_env):
        if name not in environ:
            raise _missing(info, name, ("runtime", "pass_env", index))
        resolved[name] = environ[name]
    for key, value in runtime.env.items():
        try:
            resolved[key] = expand(value, environ)
        except MissingVariable as exc:
            raise _missing(info, exc.name, ("runtime", "env", key)) from None
    return resolved


def secret_values(info: ProfileInfo, environ: Mapping[str, str] | None = None) -> list[str]:
    """The values that came from the environment (for `mask`); unset ones are skipped."""
    environ = os.environ if environ is None else environ
    runtime = info.profile.runtime
    names = {ref.name for value in runtime.env.values() for ref in references(value)} | set(runtime.pass_env)
    return sorted((environ[n] for n in names if environ.get(n)), key=len, reverse=True)


def mask(text: str, values: Iterable[str]) -> str:
    """`text` with every value of `values` (4 characters or more) replaced by ****."""
    for value in values:
        if len(value) >= 4:
            text = text.replace(value, MASK)
    return text


def looks_like_key(name: str, value: str) -> bool:
    """True when a literal env value looks like a credential (a key-shaped value, or a
    non-trivial value under a name such as *_API_KEY or *_TOKEN)."""
    if not is_literal(value) or not value:
        return False
    if _KEY_SHAPE.search(value):
        return True
    return bool(_SECRET_NAME.search(name)) and len(value) >= 12


def keys_in_text(text: str) -> list[str]:
    """Key-shaped substrings of a config file's text (for `doctor`)."""
    return [m.group(0) for m in _KEY_SHAPE.finditer(text)]


def display_env(env: Mapping[str, str]) -> dict[str, str]:
    """The env as `profile show` prints it: references as written, literal keys masked."""
    return {key: MASK if looks_like_key(key, value) else value for key, value in env.items()}
