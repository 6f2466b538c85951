"""The decision log's typed events: every kind the engine writes is an `Event` member, with the fields its calls pass.

mypy checks that a `RunLedger.event` call names a known kind and known fields of the
right types; which fields belong to which kind is checked here, on every call in the
package (read from the source with `ast`), both ways: a call passes no field its kind's
record lacks, and every field its record requires.
"""

from __future__ import annotations

import ast
import types
import typing
from pathlib import Path

import pytest

from agentbox.core.admin.demo import make_demo_project, run_demo
from agentbox.core.agents.sessions import SessionStore
from agentbox.core.engine import records
from agentbox.core.engine.ledger import task_event_kind
from agentbox.core.engine.records import ArtifactEntry, Event, EventBase, EventFields, EventKind
from agentbox.core.engine.run_store import RunStore
from agentbox.core.records import TurnRecord
from agentbox.core.tasks import TaskEvent

PACKAGE = Path(__file__).resolve().parents[2] / "agentbox"
COMMON = set(EventBase.__annotations__)
MEMBERS: list[type] = list(typing.get_args(Event))


def _kinds(member: type) -> set[str]:
    return set(_flat(typing.get_type_hints(member)["type"]))


def _flat(literal: object) -> list[str]:
    out: list[str] = []
    for arg in typing.get_args(literal):
        out.extend(_flat(arg) if typing.get_origin(arg) is typing.Literal else [arg])
    return out


BY_KIND = {kind: member for member in MEMBERS for kind in _kinds(member)}


def _calls() -> list[tuple[str, str, set[str]]]:
    """(where, kind, keyword names) of every `.event(...)` call of the package with a literal kind."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "event"
                    and node.args and isinstance(node.args[0], ast.Constant)):
                where = f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
                found.append((where, node.args[0].value, {k.arg for k in node.keywords if k.arg}))
    return found


def test_each_kind_belongs_to_exactly_one_member_and_the_kinds_are_the_members_kinds() -> None:
    kinds = [kind for member in MEMBERS for kind in _kinds(member)]
    assert len(kinds) == len(set(kinds)), "a kind is the `type` of two Event members"
    assert set(kinds) == set(_flat(EventKind))


def test_every_task_event_has_its_kind() -> None:
    for event in TaskEvent:
        assert task_event_kind(event) == f"task.{event.value}" and task_event_kind(event) in BY_KIND


def test_every_member_field_is_a_ledger_keyword_of_the_same_type() -> None:
    fields = typing.get_type_hints(EventFields)
    for member in MEMBERS:
        for name, hint in typing.get_type_hints(member).items():
            if name in COMMON or name == "type":
                continue
            assert name in fields, f"{member.__name__}.{name} is no keyword of RunLedger.event"
            assert hint == fields[name], f"{member.__name__}.{name}: {hint} here, {fields[name]} in EventFields"


def test_every_event_call_passes_the_fields_of_its_kind() -> None:
    calls = _calls()
    assert len(calls) > 80  # the scan sees the engine's calls
    for where, kind, keywords in calls:
        assert kind in BY_KIND, f"{where}: {kind!r} is no Event kind"
        member = BY_KIND[kind]
        declared = set(typing.get_type_hints(member)) - COMMON - {"type"}
        required = {k for k, hint in typing.get_type_hints(member, include_extras=True).items()
                    if k not in COMMON and k != "type" and typing.get_origin(hint) is not typing.NotRequired}
        assert keywords - COMMON <= declared, f"{where}: {sorted(keywords - COMMON - declared)} not in {member.__name__}"
        assert required <= keywords, f"{where}: {kind} lacks {sorted(required - keywords)}"


def test_the_members_are_the_modules_event_classes() -> None:
    defined = {name for name, value in vars(records).items()
               if isinstance(value, type) and name.endswith("Event") and value is not EventBase}
    assert defined == {member.__name__ for member in MEMBERS}


def _matches(value: object, hint: object) -> bool:
    """`value` is of type `hint` (the few shapes an event field has)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.NotRequired:
        return _matches(value, args[0])
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in args)
    if origin is typing.Literal:
        return value in _flat(hint)
    if origin is list:
        return isinstance(value, list) and all(_matches(item, args[0]) for item in value)
    if typing.is_typeddict(hint):
        return isinstance(value, dict) and _conforms(value, hint) is None
    if origin is dict:
        return isinstance(value, dict)
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(hint, type) and isinstance(value, hint)


def _conforms(record: dict[str, object], shape: object) -> str | None:
    """What keeps `record` from being of the TypedDict `shape` written whole (None: nothing)."""
    hints = typing.get_type_hints(shape, include_extras=True)
    required = {k for k, hint in hints.items() if typing.get_origin(hint) is not typing.NotRequired}
    if not required <= set(record) <= set(hints):
        return f"keys {sorted(set(record) ^ (required if not required <= set(record) else set(hints)))}"
    wrong = [key for key, value in record.items() if not _matches(value, hints[key])]
    return f"{wrong} not of their type" if wrong else None


@pytest.mark.local_runner('the demo crew end to end under bwrap')
@pytest.mark.bwrap
async def test_the_events_of_a_real_run_are_what_their_kinds_say(tmp_path: Path) -> None:
    """The demo crew (real bwrap and git, checks, a rework, a merge checkpoint): every line it logs has
    exactly its kind's fields, each of its declared type, the same as the engine handed to `on_event`;
    its manifest entries and its sessions' turn lines are whole `ArtifactEntry`s and `TurnRecord`s."""
    project = make_demo_project(tmp_path)
    seen: list[Event] = []
    final = await run_demo(project, on_event=seen.append, answer_after_s=0.1)
    assert final.status == "done", final.status_reason
    logged, _ = RunStore(project).events(final.id)
    assert logged == seen and len({e["type"] for e in logged}) > 15
    wrong = [(e["seq"], e["type"], _conforms(dict(e), BY_KIND[e["type"]])) for e in logged]
    assert [w for w in wrong if w[2] is not None] == []
    entries = RunStore(project).manifest(final.id)
    assert entries and all(e.keys() == ArtifactEntry.__annotations__.keys() for e in entries)  # written whole
    assert [_conforms(dict(e), ArtifactEntry) for e in entries] == [None] * len(entries)
    sessions = SessionStore(project.sessions_dir)
    turns = [turn for record in sessions.list() for turn in sessions.turns(record)]
    assert len(turns) == final.totals.turns
    assert [_conforms(dict(turn), TurnRecord) for turn in turns] == [None] * len(turns)
