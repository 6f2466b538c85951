"""One error hierarchy for everything agentbox reports to a person.

    AgentboxError(message, hint)            exit 1: something failed
    ├── UsageError                           exit 2: bad input or usage
    │   ├── ConfigError(file, line, column, field)   a YAML/JSON file is malformed or invalid
    │   ├── NotFoundError                    unknown profile, role, run, task, session
    │   ├── AlreadyExistsError               refusing to overwrite
    │   ├── GraphError(violations)           a work graph breaks its validation rules
    │   ├── ProjectNotFoundError             no .agent-box/ above the working directory
    │   └── IllegalTransitionError           a task or run state change the rules refuse
    ├── SandboxError                         bubblewrap missing or unable to start
    └── StateError                           a state file cannot be read or written

Other modules raise narrower kinds of these (a full disk, a damaged run file is a StateError).
Agent failures are *not* exceptions: invoke() returns them as results.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


class AgentboxError(Exception):
    """Root of every error agentbox reports; carries a one-line hint."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class UsageError(AgentboxError):
    """Bad input from the person: wrong arguments, a file that does not validate."""

    exit_code = 2


class ConfigError(UsageError):
    """A configuration file is malformed or does not validate; names file, line and field."""

    def __init__(
        self,
        message: str,
        *,
        file: Path | str | None = None,
        line: int | None = None,
        column: int | None = None,
        field: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.file = Path(file) if file is not None else None
        self.line = line
        self.column = column
        self.field = field
        self.detail = message
        super().__init__(self._compose(message), hint)

    def _compose(self, message: str) -> str:
        where = ""
        if self.file is not None:
            where = str(self.file)
            if self.line is not None:
                where += f":{self.line}"
                if self.column is not None:
                    where += f":{self.column}"
            where += ": "
        field = f"{self.field}: " if self.field else ""
        return f"{where}{field}{message}"


class NotFoundError(UsageError):
    """Something named by the person does not exist (profile, role, run, task, session)."""


class AlreadyExistsError(UsageError):
    """Refusing to overwrite something that already exists."""


@dataclass(frozen=True)
class Violation:
    """One broken rule of a work graph, as `{rule, detail}` plus where it is."""

    rule: str
    detail: str
    line: int | None = None

    def as_dict(self) -> dict[str, object]:
        """The violation as the `{rule, detail, line}` mapping printed by `graph check`."""
        return {"rule": self.rule, "detail": self.detail, "line": self.line}


class GraphError(UsageError):
    """A work graph breaks one or more of the validation rules."""

    def __init__(self, file: Path | str, violations: list[Violation]) -> None:
        self.file = Path(file)
        self.violations = violations
        lines = [f"{file}: invalid work graph ({len(violations)} violation(s))"]
        for v in violations:
            where = f" (line {v.line})" if v.line else ""
            lines.append(f"  [{v.rule}]{where} {v.detail}")
        super().__init__("\n".join(lines), "fix the graph and run `agentbox graph check FILE`")


class ProjectNotFoundError(UsageError):
    """No `.agent-box/` directory was found above the working directory."""


class SandboxError(AgentboxError):
    """bubblewrap is missing or cannot create a sandbox here."""


class IllegalTransitionError(UsageError):
    """A task or run state change that the transition table refuses."""


class StateError(AgentboxError):
    """A state file cannot be read or written."""
