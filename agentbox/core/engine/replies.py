"""Structured replies: the JSON objects agents put in their answers, validated with pydantic.

An agent answers in free text that contains one JSON object (a plan, a submission, a
verdict, a handoff, a chat turn). `extract_json` finds it, `parse_reply`
validates it, and `check_plan` / `check_verdict` (in `reply_rules`) apply
the rules a schema cannot express (known roles, no dependency cycles, no always-pass
reviews). Every problem is a short human-readable reason; `corrective_prompt` turns them
into the one re-prompt an agent gets before the reply counts as a `contract_defect`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from agentbox.core.validation import problems

NonEmpty = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
"""A string with something in it besides whitespace (which is stripped)."""
TaskId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=64)]
"""A task id: safe as a file name (artifacts live under `<artifacts>/<task id>/`)."""
_ModelT = TypeVar("_ModelT", bound=BaseModel)


class ReplyError(ValueError):
    """An agent's reply holds no usable JSON object, or the object does not validate.

    `reasons` are one line each (field path + problem), fit to send back to the agent.
    """

    def __init__(self, reasons: Sequence[str]) -> None:
        self.reasons = list(reasons)
        super().__init__("; ".join(self.reasons))


class _Reply(BaseModel):
    """Base of every reply model: unknown keys are errors; field docstrings document."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, populate_by_name=True)


# ----------------------------------------------------------------------------- models


class Acceptance(_Reply):
    """One acceptance criterion of a planned task."""

    id: NonEmpty
    """Id of the criterion, unique within its task (e.g. `A1`); reviews check it by id."""
    criterion: NonEmpty
    """What must be true for the task to be accepted, checkable by a reviewer."""


class PlannedTask(_Reply):
    """One task of a plan: who does what, how it is judged, what it may touch."""

    id: TaskId
    """Task id, unique in the run; letters, digits, `_`, `.`, `-`."""
    assignee: NonEmpty
    """The crew role that does the task."""
    brief: NonEmpty
    """What to do, self-contained: the worker sees this, not the whole plan."""
    acceptance: list[Acceptance] = Field(min_length=1)
    """The criteria the review checks, at least one."""
    writes: list[str] = Field(default_factory=list)
    """Globs (relative to the project) the task may write; [] makes it read-only."""
    depends_on: list[str] = Field(default_factory=list)
    """Ids of tasks that must be approved before this one starts."""
    review: Literal["double"] | None = None
    """`double`: two reviewers judge the work independently (for subjective work: design, UI, prose)."""

    @field_validator("writes")
    @classmethod
    def _relative_globs(cls, globs: list[str]) -> list[str]:
        """Refuse absolute or escaping globs: a write scope lives inside the project."""
        for glob in globs:
            parts = glob.replace("\\", "/").split("/")
            if not glob.strip() or glob.startswith(("/", "~", "\\")) or ".." in parts:
                raise ValueError(
                    f"{glob!r} is not a glob relative to the project (no leading '/', no '..')"
                )
        return globs


class Plan(_Reply):
    """The lead's plan: the tasks of a round."""

    tasks: list[PlannedTask] = Field(min_length=1)
    """The tasks, at least one."""
    notes: str | None = None
    """Anything the lead wants to record about the plan."""


class Submission(_Reply):
    """A worker handing in a task (or asking a human first)."""

    summary: NonEmpty
    """What was done; handed on to downstream tasks and the reviewer."""
    artifacts: list[str] = Field(default_factory=list)
    """Paths of the files produced or changed."""
    evidence: list[str] = Field(default_factory=list)
    """What shows the work meets its criteria: commands run and their results."""
    question: str | None = None
    """Set when the agent needs a human decision to go on (a domain_gap)."""

    @field_validator("question")
    @classmethod
    def _blank_is_none(cls, question: str | None) -> str | None:
        """A blank question is no question: an empty string must not open a checkpoint."""
        return question.strip() or None if question is not None else None


class BlockingIssue(_Reply):
    """Something the reviewer requires to change."""

    id: NonEmpty
    """Issue id, unique within the verdict."""
    acceptance_id: str | None = None
    """The acceptance criterion the issue breaks, if any."""
    severity: Literal["blocker", "major", "minor"]
    """blocker and major forbid approval; minor may be approved with a note."""
    detail: NonEmpty
    """What is wrong and what would fix it."""


class ChecklistItem(_Reply):
    """One acceptance criterion as checked by the reviewer (written with the JSON key `pass`, as read)."""

    model_config = ConfigDict(serialize_by_alias=True)

    item: NonEmpty
    """What was checked."""
    acceptance_id: NonEmpty
    """The acceptance criterion this item checks."""
    pass_: bool = Field(alias="pass")
    """Whether the criterion is met (JSON key `pass`)."""
    evidence: str = ""
    """What was run or read that shows the result; required when the item passes."""


class Verdict(_Reply):
    """A review of a submission: a checklist of the acceptance criteria, and what blocks approval."""

    verdict: Literal["approve", "reject"]
    """approve accepts the task; reject sends it back for rework."""
    blocking_issues: list[BlockingIssue] = Field(default_factory=list)
    """What must change; empty when approving cleanly."""
    checklist: list[ChecklistItem]
    """One item per acceptance criterion at least; a review that skips one is invalid."""
    confidence: float = Field(ge=0, le=1)
    """How sure the reviewer is, from 0 to 1."""


class Handoff(_Reply):
    """In handoff mode: answer, or pass the conversation to another role."""

    action: Literal["answer", "handoff"]
    """answer ends the exchange with `message`; handoff passes it to `to`."""
    to: str | None = None
    """The role to hand over to; required for a handoff."""
    message: NonEmpty
    """The answer, or what the next role needs to know."""

    @model_validator(mode="after")
    def _handoff_needs_target(self) -> Handoff:
        """A handoff without a target role cannot be routed."""
        if self.action == "handoff" and not (self.to or "").strip():
            raise ValueError("a handoff needs `to`: the role to hand over to")
        return self


class ChatTurn(_Reply):
    """In group chat: one message to the shared pool."""

    message: NonEmpty
    """What this member says."""
    next_speaker: str | None = None
    """The role that should speak next, when the speaker chooses."""
    done: bool = False
    """True when this member considers the discussion finished."""


class NodeResult(_Reply):
    """In graph mode: a node's report, what it did and whether it succeeded (with a reason when it failed)."""

    summary: NonEmpty
    """What was done (or found); handed on to the next nodes."""
    artifacts: list[str] = Field(default_factory=list)
    """Paths of the files produced or changed."""
    evidence: list[str] = Field(default_factory=list)
    """What shows the outcome: commands run and their results, files read."""
    outcome: Literal["success", "fail"] = "success"
    """`success` follows the node's success edges; `fail` its fail edge for `fail_reason`."""
    fail_reason: str | None = None
    """Why the node failed, matched exactly against the graph's fail edges."""
    remediation: str | None = None
    """For a failure: what the node that gets the work back should change."""
    question: str | None = None
    """Set when the agent needs a human decision to go on (a domain_gap)."""

    @field_validator("fail_reason", "remediation", "question")
    @classmethod
    def _blank_is_none(cls, value: str | None) -> str | None:
        return (value.strip() or None) if value is not None else None

    @model_validator(mode="after")
    def _reason_needs_fail(self) -> NodeResult:
        if self.fail_reason is not None and self.outcome != "fail":
            raise ValueError("fail_reason is only for outcome: fail")
        return self


REPLY_MODELS: tuple[type[BaseModel], ...] = (Plan, Submission, Verdict, Handoff, ChatTurn)
"""The top-level replies an agent can be asked for."""


# ------------------------------------------------------------------------- extraction

_JSON_FENCE = re.compile(r"```[ \t]*json[ \t]*\r?\n(.*?)```", re.DOTALL | re.IGNORECASE)
"""A ```json fence: the tag alone on its line, so prose saying "a ```json block" is no fence."""
_NO_OBJECT = "no JSON object found in the reply; end it with one JSON object in a ```json block"


_OBJECT_START = re.compile(r"\{\s*[\"}]")
_DECODER = json.JSONDecoder()


def extract_json(text: str) -> dict[str, Any]:
    """The reply object in `text`: the last ```json block, else the last top-level `{...}`.

    The last fenced block decides when there is one (an earlier block is often an example
    being quoted); otherwise the last top-level object that parses wins, since agents put
    their answer at the end. Objects are found by the JSON decoder itself, so braces inside
    strings never unbalance them, and an object nested in another is not a candidate.
    ReplyError when there is none.
    """
    fences = _JSON_FENCE.findall(text)
    if fences:
        body = fences[-1].strip()
        try:
            value = json.loads(body)
        except json.JSONDecodeError as err:
            raise ReplyError([
                f"the ```json block is not valid JSON: {err.msg} at line {err.lineno} column {err.colno}"
            ]) from None
        if not isinstance(value, dict):
            raise ReplyError([f"the ```json block holds a JSON {type(value).__name__}, not an object"])
        return value
    found: dict[str, Any] | None = None
    position = 0
    while (match := _OBJECT_START.search(text, position)) is not None:
        start = match.start()
        try:
            # A slice keeps a failed attempt cheap: the decoder's error counts lines from 0.
            value, length = _DECODER.raw_decode(text[start:])
        except json.JSONDecodeError:
            position = start + 1
            continue
        found, position = value, start + length
    if found is None:
        raise ReplyError([_NO_OBJECT])
    return found


def validation_reasons(model_cls: type[BaseModel], error: ValidationError) -> list[str]:
    """One line per pydantic error: the field path, then the problem (with the bad value)."""
    return [f"{problem.path or '(reply)'}: {problem.message}" for problem in problems(model_cls, error.errors())]


def parse_reply(model_cls: type[_ModelT], text: str) -> _ModelT:
    """The `model_cls` reply found in `text`, or ReplyError with every reason it is unusable."""
    data = extract_json(text)
    try:
        return model_cls.model_validate(data)
    except ValidationError as err:
        raise ReplyError(validation_reasons(model_cls, err)) from None


# -------------------------------------------------------------------- prompts to agents

_EXAMPLES: dict[str, dict[str, Any]] = {
    "Plan": {"tasks": [
        {"id": "api", "assignee": "builder", "brief": "Add GET /health returning {\"ok\": true}.",
         "acceptance": [{"id": "A1", "criterion": "GET /health answers 200 with {\"ok\": true}"}],
         "writes": ["src/**", "tests/**"], "depends_on": []},
        {"id": "docs", "assignee": "writer", "brief": "Document /health in the README.",
         "acceptance": [{"id": "A1", "criterion": "README describes /health"}],
         "writes": ["README.md"], "depends_on": ["api"]},
    ], "notes": None},
    "Submission": {"summary": "Added GET /health and its test.",
                   "artifacts": ["src/app.py", "tests/test_health.py"],
                   "evidence": ["pytest -q tests/test_health.py: 2 passed"], "question": None},
    "Verdict": {"verdict": "reject",
                "blocking_issues": [{"id": "B1", "acceptance_id": "A2", "severity": "major",
                                     "detail": "no test covers the 503 case; add one"}],
                "checklist": [
                    {"item": "GET /health answers 200", "acceptance_id": "A1", "pass": True,
                     "evidence": "pytest tests/test_health.py::test_ok passed"},
                    {"item": "503 when the db is down", "acceptance_id": "A2", "pass": False,
                     "evidence": "no test found in tests/"},
                ], "confidence": 0.8},
    "Handoff": {"action": "handoff", "to": "reviewer", "message": "Please review src/app.py."},
    "ChatTurn": {"message": "I agree with the API shape.", "next_speaker": "lead", "done": False},
}

_INSTRUCTIONS: dict[str, str] = {
    "Plan": "End your reply with the plan as one JSON object in a ```json block: tasks with a "
            "unique id, the assignee role, a self-contained brief, acceptance criteria with ids, "
            "the globs each task may write ([] = read-only) and the ids it depends on.",
    "Submission": "When done, end your reply with one JSON object in a ```json block: a summary, "
                  "the artifacts you produced (paths) and the evidence (commands run and their "
                  "results). If you need a human decision to go on, set `question` instead of guessing.",
    "Verdict": "End your review with one JSON object in a ```json block: one checklist item per "
               "acceptance id with `pass` and the evidence (what you ran or read), and blocking "
               "issues (blocker/major/minor) for what must change. Approve only when every item "
               "passes with evidence and no blocker or major issue remains.",
    "Handoff": "End your reply with one JSON object in a ```json block: `answer` with your "
               "message, or `handoff` with the role (`to`) that should take over and what it needs.",
    "ChatTurn": "End your reply with one JSON object in a ```json block: your message, who should "
                "speak next (optional) and `done: true` when the discussion is finished.",
}


def example_json(model_cls: type[BaseModel]) -> str:
    """A small valid example of `model_cls` as JSON (its JSON Schema when there is none)."""
    example = _EXAMPLES.get(model_cls.__name__)
    if example is None:
        return json.dumps(model_cls.model_json_schema(), indent=2)
    return json.dumps(example, indent=2, ensure_ascii=False)


FORMAT_HINTS: dict[str, str] = {
    name: f"{instruction}\nExample:\n```json\n{json.dumps(_EXAMPLES[name], indent=2)}\n```"
    for name, instruction in _INSTRUCTIONS.items()
}
"""Per reply model name: the instruction and example the engine appends to its prompts."""


def corrective_prompt(model_cls: type[BaseModel], reasons: Sequence[str]) -> str:
    """The one re-prompt an agent gets: what was wrong with its reply, and the expected shape."""
    listing = "\n".join(f"- {reason}" for reason in reasons) or "- (no reason recorded)"
    return (
        f"[agentbox:correction model={model_cls.__name__}]\n"
        f"Your last reply could not be used as a {model_cls.__name__}:\n{listing}\n\n"
        "Reply again with exactly one JSON object in a ```json block, fixing every point above. "
        f"Expected shape:\n```json\n{example_json(model_cls)}\n```"
    )


__all__ = [
    "FORMAT_HINTS", "REPLY_MODELS", "Acceptance", "BlockingIssue", "ChatTurn", "ChecklistItem",
    "Handoff", "NodeResult", "NonEmpty", "Plan", "PlannedTask", "ReplyError", "Submission",
    "TaskId", "Verdict", "corrective_prompt", "example_json",
    "extract_json", "parse_reply", "validation_reasons",
]
