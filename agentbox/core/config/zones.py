"""Where the code base rots, remembered across runs: high-rot zones and compromise tech debt.

Two files a person can read and git can track, in the project's `.agent-box/`:

- `zones.yaml`: each module where a task's failure ladder reached L3 (its failures, the
  highest level, the escape hatches used, how it was resolved);
- `debt.yaml`: each change a compromise patch tagged `FIXME: Tech Debt` (file, line, owner
  role, task, run, risk, due date), open until a person closes or waives it.

Both come with a clone, so they are read like crew.yaml: bounded, validated, every error
naming file, line and field; a symlink is refused. agentbox edits them as text, entry by
entry, so a person's comments and key order stay. The lead's planning prompt gets the zones
and debts that touch the goal's files (`touching`); an overdue debt on a module blocks a
controlled rewrite of it (`overdue_on`); `debt_tags_in_diff` finds the tagged lines of a
compromise patch.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agentbox.core.errors import ConfigError, NotFoundError
from agentbox.core.sandbox.scopes import has_control_character
from agentbox.core.store import atomic_write_text, locked
from agentbox.core.validation import NAME_PATTERN

ZONES_FILE = "zones.yaml"
DEBT_FILE = "debt.yaml"
DEBT_TAG = "FIXME: Tech Debt"
"""The tag every change of a compromise patch carries in the code."""

LadderLevelName = Literal["L0", "L1", "L2", "L3"]


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    @field_validator("*", mode="after")
    @classmethod
    def _printable(cls, value: Any) -> Any:
        """Text from a cloned file is shown on terminals: control characters are refused."""
        for text in value if isinstance(value, list) else [value]:
            if isinstance(text, str) and has_control_character(text):
                raise ValueError("control characters are not allowed")
        return value


Text = Field(default="", max_length=2000)


def _relative(path: str) -> str:
    """A path inside the project: no leading `/` or `~`, no `..` (a zone's module may become protected)."""
    parts = path.replace("\\", "/").split("/")
    if path.startswith(("/", "~")) or ".." in parts or not path.strip():
        raise ValueError(f"{path!r} is not a path relative to the project (no leading '/', no '..')")
    return path


class ZoneFailure(_Entry):
    """One failure of a task in the zone."""

    fingerprint: str = Field(max_length=200)
    level: LadderLevelName
    task: str = Field(default="", max_length=200)
    run: str = Field(default="", max_length=200)
    at: datetime | None = None


class Zone(_Entry):
    """A high-rot zone: a module where the failure ladder reached L3."""

    module_path: str = Field(min_length=1, max_length=400)
    """The module's directory (or file), relative to the project."""
    failure_history: list[ZoneFailure] = Field(default_factory=list, max_length=1000)
    max_ladder_level: LadderLevelName = "L3"
    escape_hatches_used: list[str] = Field(default_factory=list, max_length=100)
    resolution: str = Field(default="open", max_length=200)
    """open, or the exit taken (controlled_rewrite, advisor_again, bypass, abandon) and how it went."""
    fail_count: int = Field(default=0, ge=0)
    suggested_bypass: str | None = Field(default=None, max_length=2000)
    created: datetime | None = None
    updated: datetime | None = None

    @field_validator("module_path")
    @classmethod
    def _inside(cls, path: str) -> str:
        return _relative(path)


class Debt(_Entry):
    """One change of a compromise patch tagged `FIXME: Tech Debt`."""

    file: str = Field(min_length=1, max_length=400)
    line: int = Field(ge=1)
    owner_role: str = Field(default="", max_length=200)
    task: str = Field(default="", max_length=200)
    run: str = Field(default="", max_length=200)
    risk: Literal["low", "medium", "high"] = "medium"
    due: date | None = None
    status: Literal["open", "closed", "waived"] = "open"
    note: str = Text
    created: datetime | None = None
    closed: datetime | None = None
    """When a person closed or waived it."""

    @field_validator("file")
    @classmethod
    def _inside(cls, path: str) -> str:
        return _relative(path)

    def overdue(self, today: date) -> bool:
        """Open past its due date."""
        return self.status == "open" and self.due is not None and self.due < today


EntryId = str


class _Book(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ZonesFile(_Book):
    """zones.yaml: zone id → zone."""

    zones: dict[str, Zone] = Field(default_factory=dict, max_length=10_000)


class DebtFile(_Book):
    """debt.yaml: debt id → debt."""

    debts: dict[str, Debt] = Field(default_factory=dict, max_length=10_000)


_HEADERS = {
    "zones": "# High-rot zones: modules where a task's failure ladder reached L3. Written by agentbox,\n"
             "# read into the lead's planning prompt when a goal touches them; edit freely.\n",
    "debts": "# Tech debt of compromise patches (`FIXME: Tech Debt` in the code). Close or waive one with\n"
             "# `agentbox debt --close ID` / `--waive ID`; an overdue one blocks a controlled rewrite of its module.\n",
}


# ----------------------------------------------------------------------------- reading


def _load(path: Path, model: type[_Book]) -> tuple[str, Any, Any]:
    """(text, round-trip document, validated model) of `path`; an absent file is empty."""
    from agentbox.core.config.models import validate_document
    from agentbox.core.yaml_io import parse_yaml, read_yaml_text

    if path.is_symlink():
        raise ConfigError("is a symlink; agentbox does not follow it here", file=path, line=1,
                          hint=f"make {path.name} a regular file of the project")
    if not path.exists():
        return "", None, model()
    text = read_yaml_text(path)
    document = parse_yaml(text, path)
    if document is None:
        return text, None, model()
    for key, entries in (document.items() if isinstance(document, dict) else ()):
        for entry_id in entries if isinstance(entries, dict) else ():
            if not isinstance(entry_id, str) or not re.match(NAME_PATTERN, entry_id):
                line = entries.lc.key(entry_id)[0] + 1 if hasattr(entries, "lc") else None
                raise ConfigError(f"invalid id {entry_id!r}: letters, digits, '.', '_' or '-'", file=path, line=line,
                                  field=f"{key}.{entry_id}")
    hint = f"see the comments at the top of a {path.name} agentbox wrote"
    return text, document, validate_document(model, document, path, document, schema_hint=hint)


def load_zones(box: Path) -> dict[str, Zone]:
    """The zones of `.agent-box/zones.yaml` (none when the file is absent)."""
    book = _load(box / ZONES_FILE, ZonesFile)[2]
    assert isinstance(book, ZonesFile)
    return book.zones


def load_debts(box: Path) -> dict[str, Debt]:
    """The debts of `.agent-box/debt.yaml` (none when the file is absent)."""
    book = _load(box / DEBT_FILE, DebtFile)[2]
    assert isinstance(book, DebtFile)
    return book.debts


# ----------------------------------------------------------------------------- writing


def _dumped(entry: BaseModel) -> dict[str, Any]:
    return entry.model_dump(mode="json")


def _write_checked(path: Path, text: str, model: type[_Book]) -> None:
    """Write `text` atomically once it reads back as `model` (a bad edit leaves the old file as it was)."""
    from agentbox.core.config.models import validate_document
    from agentbox.core.yaml_io import parse_yaml

    document = parse_yaml(text, path)
    validate_document(model, document, path, document)
    atomic_write_text(path, text)


def _add_entry(path: Path, top: str, model: type[_Book], entry_id: str, entry: BaseModel) -> None:
    """Append `entry_id: entry` to the `top` mapping of `path`, every other line untouched."""
    from agentbox.core.yaml_io import dump_yaml, new_map, text_with_entry_added

    text, document, _ = _load(path, model)
    if document is None:
        _write_checked(path, (text if text.strip() else _HEADERS[top]) + dump_yaml({top: {entry_id: _dumped(entry)}}),
                       model)
        return
    edited = text_with_entry_added(text, document, (top,), entry_id, _dumped(entry)) if top in document else None
    if edited is None:  # no block mapping to append to: the round-trip dumper (comments mostly kept)
        section = document.get(top)
        if not isinstance(section, dict):
            document[top] = section = new_map()
        section[entry_id] = _dumped(entry)
        edited = dump_yaml(document)
    _write_checked(path, edited, model)


def _set_fields(path: Path, top: str, model: type[_Book], entry_id: str, values: dict[str, Any]) -> None:
    """Set fields of one entry, by text edits of those fields' lines only (comments elsewhere stay)."""
    from agentbox.core.yaml_io import (
        dump_yaml,
        parse_yaml,
        text_with_entry_added,
        text_with_entry_replaced,
    )

    text, document, _ = _load(path, model)
    for key, value in values.items():
        entry = document[top][entry_id]
        edited = (text_with_entry_replaced(text, document, (top, entry_id), key, value) if key in entry
                  else text_with_entry_added(text, document, (top, entry_id), key, value))
        if edited is None:  # a flow-style entry (`{file: a, line: 1}`) has no lines: the round-trip dumper
            for name, new in values.items():
                entry[name] = new
            text = dump_yaml(document)
            break
        text = edited
        document = parse_yaml(text, path)
    _write_checked(path, text, model)


def _next_id(prefix: str, taken: Iterable[str]) -> str:
    numbers = [int(m.group(1)) for name in taken if (m := re.fullmatch(rf"{prefix}-(\d+)", name))]
    return f"{prefix}-{max(numbers, default=0) + 1}"


def _now(now: datetime | None) -> datetime:
    return (now or datetime.now(UTC)).replace(microsecond=0)


def record_zone(box: Path, module_path: str, failure: ZoneFailure, *, escape_hatches_used: Sequence[str] = (),
                now: datetime | None = None) -> tuple[str, Zone]:
    """Record an L3 failure of `module_path`: a new zone, or one more failure of the zone it already is."""
    with locked(box / ZONES_FILE):
        when = _now(now)
        path = box / ZONES_FILE
        zones = load_zones(box)
        found = next((zone_id for zone_id, z in zones.items() if z.module_path == module_path), None)
        if found is None:
            zone_id = _next_id("Z", zones)
            zone = Zone(module_path=module_path, failure_history=[failure], max_ladder_level=failure.level,
                        escape_hatches_used=list(escape_hatches_used), fail_count=1, created=when, updated=when)
            _add_entry(path, "zones", ZonesFile, zone_id, zone)
            return zone_id, zone
        old = zones[found]
        hatches = [*old.escape_hatches_used, *(h for h in escape_hatches_used if h not in old.escape_hatches_used)]
        zone = old.model_copy(update={
            "failure_history": [*old.failure_history, failure],
            "max_ladder_level": max(old.max_ladder_level, failure.level), "escape_hatches_used": hatches,
            "fail_count": old.fail_count + 1, "updated": when})
        dumped = _dumped(zone)
        _set_fields(path, "zones", ZonesFile, found, {key: dumped[key] for key in
                                                       ("failure_history", "max_ladder_level", "escape_hatches_used",
                                                        "fail_count", "updated")})
        return found, zone


def resolve_zone(box: Path, zone_id: str, resolution: str, *, suggested_bypass: str | None = None,
                 now: datetime | None = None) -> None:
    """Say how a zone was resolved (the exit the human chose, and a bypass suggestion)."""
    with locked(box / ZONES_FILE):
        if zone_id not in load_zones(box):
            raise NotFoundError(f"no zone {zone_id!r} in {box / ZONES_FILE}")
        values: dict[str, Any] = {"resolution": resolution, "updated": _now(now).isoformat().replace("+00:00", "Z")}
        if suggested_bypass is not None:
            values["suggested_bypass"] = suggested_bypass
        _set_fields(box / ZONES_FILE, "zones", ZonesFile, zone_id, values)


def record_debts(box: Path, tagged: Sequence[TaggedLine], *, owner_role: str, task: str, run: str,
                 risk: Literal["low", "medium", "high"] = "medium", due: date | None = None,
                 now: datetime | None = None) -> list[tuple[str, Debt]]:
    """One open debt per tagged line of a compromise patch, appended to debt.yaml."""
    with locked(box / DEBT_FILE):
        recorded: list[tuple[str, Debt]] = []
        taken = set(load_debts(box))
        for line in tagged:
            debt_id = _next_id("D", taken)
            taken.add(debt_id)
            debt = Debt(file=line.file, line=line.line, owner_role=owner_role, task=task, run=run, risk=risk, due=due,
                        note=line.text[:2000], created=_now(now))
            _add_entry(box / DEBT_FILE, "debts", DebtFile, debt_id, debt)
            recorded.append((debt_id, debt))
        return recorded


def close_debt(box: Path, debt_id: str, *, status: Literal["closed", "waived"] = "closed", note: str | None = None,
               now: datetime | None = None) -> Debt:
    """Close (or waive) a debt; its other lines and every comment of the file stay."""
    with locked(box / DEBT_FILE):
        debts = load_debts(box)
        if debt_id not in debts:
            known = ", ".join(debts) or "(none)"
            raise NotFoundError(f"no debt {debt_id!r} in {box / DEBT_FILE}", f"debts: {known}")
        if note is not None and has_control_character(note):
            raise ConfigError("the note holds control characters", field="note")
        when = _now(now)
        values: dict[str, Any] = {"status": status, "closed": when.isoformat().replace("+00:00", "Z")}
        if note:
            values["note"] = note
        _set_fields(box / DEBT_FILE, "debts", DebtFile, debt_id, values)
        return debts[debt_id].model_copy(update={"status": status, "closed": when, **({"note": note} if note else {})})


# ----------------------------------------------------------------------------- pure rules


def _static(path: str) -> str:
    """A path or glob cut to its literal leading directories (`src/**/x.py` → `src`)."""
    text = path.strip()
    while text.startswith("./"):
        text = text[2:]
    parts: list[str] = []
    for part in PurePosixPath(text or ".").parts:
        if any(c in part for c in "*?["):
            break
        parts.append(part)
    return "/".join(p for p in parts if p not in (".", ""))


def _overlaps(a: str, b: str) -> bool:
    """Whether two project paths (or globs, by their literal part) lie one inside the other."""
    left, right = _static(a), _static(b)
    if not left or not right:
        return True  # `**` or `.`: the whole project
    return left == right or left.startswith(right + "/") or right.startswith(left + "/")


def touching(zones: dict[str, Zone], debts: dict[str, Debt], files: Sequence[str]
             ) -> tuple[dict[str, Zone], dict[str, Debt]]:
    """The zones and the open debts that touch `files` (paths or globs): for the lead's planning prompt."""
    near_zones = {i: z for i, z in zones.items() if any(_overlaps(z.module_path, f) for f in files)}
    near_debts = {i: d for i, d in debts.items() if d.status == "open" and any(_overlaps(d.file, f) for f in files)}
    return near_zones, near_debts


def planning_notes(zones: dict[str, Zone], debts: dict[str, Debt], files: Sequence[str], today: date,
                   *, max_items: int = 20) -> str:
    """What the lead's planning prompt is told about the rot near `files` ("" when nothing touches them).

    Each zone and open debt is one line, at most `max_items` of each, so a long history never
    crowds the goal out of the prompt.
    """
    near_zones, near_debts = touching(zones, debts, files)
    if not near_zones and not near_debts:
        return ""
    lines = ["Where this code base has rotted before (plan around it: smaller tasks, a bypass, or a rewrite):"]
    for zone_id, zone in list(near_zones.items())[:max_items]:
        hatches = ", ".join(zone.escape_hatches_used) or "none"
        lines.append(f"- zone {zone_id} {zone.module_path}: {zone.fail_count} failure(s), reached "
                     f"{zone.max_ladder_level}, escape hatches used: {hatches}, resolution: {zone.resolution}"
                     + (f", suggested bypass: {zone.suggested_bypass}" if zone.suggested_bypass else ""))
    for debt_id, debt in list(near_debts.items())[:max_items]:
        due = f", due {debt.due.isoformat()}" + (" (overdue: blocks a controlled rewrite)" if debt.overdue(today)
                                                 else "") if debt.due else ""
        lines.append(f"- debt {debt_id} {debt.file}:{debt.line}: {debt.risk} risk{due}"
                     + (f", {debt.note[:200]}" if debt.note else ""))
    hidden = max(len(near_zones) - max_items, 0) + max(len(near_debts) - max_items, 0)
    if hidden:
        lines.append(f"- and {hidden} more (`agentbox zones`, `agentbox debt`)")
    return "\n".join(lines)


def overdue_on(debts: dict[str, Debt], module_path: str, today: date) -> list[str]:
    """Ids of the overdue debts inside `module_path`: they block a controlled rewrite of it."""
    return [i for i, d in debts.items() if d.overdue(today) and _overlaps(d.file, module_path)]


def module_of(paths: Sequence[str]) -> str:
    """The module a task's files belong to: their deepest common directory ("." when none)."""
    dirs = [PurePosixPath(_static(p)).parent.parts if "." in PurePosixPath(_static(p)).name
            else PurePosixPath(_static(p)).parts for p in paths if _static(p)]
    if not dirs:
        return "."
    common: list[str] = []
    for parts in zip(*dirs, strict=False):
        if len(set(parts)) != 1:
            break
        common.append(parts[0])
    return "/".join(common) or "."


@dataclass(frozen=True)
class TaggedLine:
    """An added line of a diff that carries `FIXME: Tech Debt`."""

    file: str
    line: int
    """Its line number in the new file."""
    text: str


_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _diff_path(header: str) -> str | None:
    """The path of a `+++ b/path` header (None for /dev/null); git's quoted form (`"b/\\303\\251"`) is unquoted."""
    name = header[4:].rstrip("\n").split("\t")[0]
    if name.startswith('"') and name.endswith('"'):
        raw = name[1:-1].encode("utf-8").decode("unicode_escape")
        name = raw.encode("latin-1", "replace").decode("utf-8", "replace")
    if name == "/dev/null":
        return None
    return name[2:] if name.startswith(("b/", "a/")) else name


def debt_tags_in_diff(diff: str, tag: str = DEBT_TAG) -> list[TaggedLine]:
    """Every added line of a unified diff that carries `tag`, with its file and new line number.

    Hunks are followed by their line counts, so a removed line that starts `--` or an added one
    that starts `++` is never taken for a file header.
    """
    found: list[TaggedLine] = []
    file: str | None = None
    line = old_left = new_left = 0
    for raw in diff.splitlines():
        if old_left > 0 or new_left > 0:
            if raw.startswith("+"):
                if file is not None and tag in raw:
                    found.append(TaggedLine(file, line, raw[1:].strip()))
                line, new_left = line + 1, new_left - 1
            elif raw.startswith("-"):
                old_left -= 1
            elif raw.startswith("\\"):
                pass  # "\ No newline at end of file"
            else:  # context (an empty line too: some tools strip its space)
                line, old_left, new_left = line + 1, old_left - 1, new_left - 1
        elif raw.startswith("diff --git "):
            file = None
        elif raw.startswith("+++ "):
            file = _diff_path(raw)
        elif (match := _HUNK.match(raw)) is not None:
            old_left = int(match.group(1) or 1)
            line = int(match.group(2))
            new_left = int(match.group(3) or 1)
    return found
