"""Pydantic validation errors as located sentences, for config files, work graphs and replies.

pydantic locates an error with its own markers (union member tags, `[key]`, validator
names) and words it for programmers. `problems` follows each error through the model to
the keys and indexes of the document, and words it once for every caller: an unknown key
lists the valid keys, a wrong choice lists the allowed values, a value that fits no member
of a union says what each member accepts. Callers only add where: a file and line for
profile.yaml / crew.yaml, a path prefix for graphs and for the replies of agents.
"""

from __future__ import annotations

import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Union, get_args, get_origin

if TYPE_CHECKING:  # imported where a model is looked at: NAME_PATTERN and the words need no pydantic
    from pydantic import BaseModel

Location = tuple[str | int, ...]
"""Where a value sits in a document: its keys and list indexes from the top."""

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
"""The shape of every name a person gives: profiles, roles, graph nodes."""
NAME_RULE = "use letters, digits, '.', '_' or '-' (at most 64, starting with a letter or digit)"
"""NAME_PATTERN in words, for messages."""


@dataclass(frozen=True)
class Problem:
    """One validation error: where in the document, and what is wrong, in a sentence."""

    loc: Location
    message: str

    @property
    def path(self) -> str:
        """The location as `tasks[0].acceptance` (empty for the whole document)."""
        return path_of(self.loc)


def path_of(loc: Sequence[str | int]) -> str:
    """A location as `tasks[0].acceptance`: keys joined by dots, indexes in brackets."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def short(value: Any) -> str:
    """A value as quoted in a message: short, and containers by their kind."""
    if value is None:
        return "an empty value"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def problems(
    model: type[BaseModel], errors: Sequence[Mapping[str, Any]], synonyms: Mapping[str, str] | None = None
) -> list[Problem]:
    """One located sentence per pydantic error of `model` (from `ValidationError.errors()`).

    A value that matches no member of a union (`sandbox: sometimes`) becomes one sentence
    listing what each member accepts; when the value got inside one member (a mapping),
    only that member's errors are kept. `synonyms` maps likely slips of key names to the
    right ones, offered as "did you mean" for an unknown key.
    """
    followed = [(error, *_follow(model, tuple(error["loc"]))) for error in errors]
    went_inside = {loc[:at] for _, loc, _, at in followed if at is not None and len(loc) > at}
    alternatives: dict[Location, list[str]] = {}
    found: list[tuple[Location, str | None, Any]] = []
    for error, loc, expected, union_at in followed:
        if union_at is not None and len(loc) == union_at:
            if loc in went_inside:
                continue
            if loc not in alternatives:
                alternatives[loc] = []
                found.append((loc, None, error.get("input")))
            if error["type"] == "literal_error":
                alternatives[loc].append(str((error.get("ctx") or {}).get("expected", "")))
            elif _is_model(expected):
                alternatives[loc].append(_mapping_of(expected))
            else:
                alternatives[loc].append(str(error["msg"]))
            continue
        found.append((loc, _describe(error, model, loc, synonyms or {}), None))
    return [
        Problem(loc, message or f"invalid value {short(value)}; allowed: {' or '.join(alternatives[loc])}")
        for loc, message, value in found
    ]


# ----------------------------------------------------------------------------- wording


def _describe(error: Mapping[str, Any], model: type[BaseModel], loc: Location, synonyms: Mapping[str, str]) -> str:
    """One sentence for one pydantic error, with the allowed values or valid keys."""
    kind = error["type"]
    ctx = error.get("ctx") or {}
    got = short(error.get("input"))
    if kind == "extra_forbidden":
        parent = _follow(model, tuple(error["loc"])[:-1])[1]
        key = loc[-1] if loc else None
        slip = f" (did you mean {synonyms[key]!r}?)" if isinstance(key, str) and key in synonyms else ""
        keys = f"; valid keys: {', '.join(_keys(parent))}" if _is_model(parent) else ""
        return f"unknown key{slip}{keys}"
    if kind == "literal_error":
        return f"invalid value {got}; allowed: {ctx.get('expected', '')}"
    if kind == "missing":
        return "required field is missing"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"expected {_mapping_of(_follow(model, tuple(error['loc']))[1])}, got {got}"
    if kind == "list_type":
        return f"expected a list, got {got}"
    if kind in ("string_too_short", "too_short") and ctx.get("min_length") == 1:
        return "must not be empty"
    if kind == "string_pattern_mismatch" and ctx.get("pattern") == NAME_PATTERN:
        return f"invalid name {got}: {NAME_RULE}"
    if kind == "value_error":
        return str(ctx.get("error") or error["msg"]).removeprefix("Value error, ")
    return f"{error['msg']} (got {got})"


def _keys(model: type[BaseModel]) -> list[str]:
    """The keys a model accepts, as written in documents (aliases where a field has one)."""
    return [info.alias or name for name, info in model.model_fields.items()]


def _mapping_of(annotation: Any) -> str:
    """What a mapping of this model looks like, for messages: `a mapping with keys a, b`."""
    keys = f" with keys {', '.join(_keys(annotation))}" if _is_model(annotation) else ""
    return f"a mapping{keys}"


# ----------------------------------------------------------------------------- locations


def _is_model(annotation: Any) -> bool:
    from pydantic import BaseModel

    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _members(annotation: Any) -> tuple[Any, ...]:
    """The alternatives of a union other than None; a single element when it is not a union."""
    if get_origin(annotation) in (Union, types.UnionType):
        return tuple(arg for arg in get_args(annotation) if arg is not type(None))
    return (annotation,)


def _is_tag_of(member: Any, part: object) -> bool:
    """True when `part` is pydantic's name for the union member `member` in an error location."""
    if get_origin(member) is Literal:
        return isinstance(part, str) and part.startswith("literal[")
    return getattr(member, "__name__", None) == part


def _field_annotation(model: type[BaseModel], key: str | int) -> Any:
    """The annotation of the field written as `key` (its name or its alias); None if none."""
    for name, info in model.model_fields.items():
        if key in (name, info.alias):
            return info.annotation
    return None


def _follow(model: type[BaseModel], loc: Location) -> tuple[Location, Any, int | None]:
    """Follow a pydantic error location through the models.

    Returns the location as keys and indexes of the document (union member tags, `[key]`
    and validator markers dropped), the annotation expected there, and the length of the
    location at which a union member was chosen (None when no union was crossed).
    """
    document_loc: list[str | int] = []
    annotation: Any = model
    union_at: int | None = None
    for index, part in enumerate(loc):
        if part == "[key]":  # the error is about a mapping's key itself
            continue
        members = _members(annotation)
        if len(members) > 1:
            union_at = len(document_loc)
            annotation = next((m for m in members if _is_tag_of(m, part)), None)
            continue
        annotation = members[0]
        if (isinstance(part, str) and part.startswith("function-") and index < len(loc) - 1
                and get_origin(annotation) is not dict):
            continue  # a validator's name, not a key of the document
        document_loc.append(part)
        if _is_model(annotation):
            annotation = _field_annotation(annotation, part)
        elif get_origin(annotation) is dict:
            annotation = get_args(annotation)[1]
        elif get_origin(annotation) is list:
            annotation = get_args(annotation)[0]
        else:
            annotation = None
    members = _members(annotation)
    return tuple(document_loc), members[0] if len(members) == 1 else annotation, union_at
