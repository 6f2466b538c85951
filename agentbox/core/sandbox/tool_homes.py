"""The tool's config home in a turn: what the tool may write there, and what it may only read.

A profile's config dir holds the tool's sessions, which every turn writes, next to what the
tool loads as settings or code (MCP servers, hooks, plugins, instructions), which no turn
may change: a read-only reviewer would otherwise plant something the next writer turn of
the same profile runs. Two shapes, declared by each adapter:

* the config dir bound read-write, with everything in `Adapter.loaded_config` bound
  read-only over it (made empty when missing, so it cannot be created either);
* `Adapter.turn_home` set: the home inside the sandbox is a fresh per-turn dir, with only the
  declared state dirs of the profile bound read-write, every other entry of the profile
  read-only, and private copies of the files the tool both rewrites and loads; after the
  turn the adapter's `keep` decides what of those copies goes back into the profile, and
  the rest of the per-turn dir is dropped.

A person at the keyboard (an interactive session) gets the config dir read-write as it is.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from agentbox.core import safe_io
from agentbox.core.errors import SandboxError
from agentbox.core.runtimes.base import Adapter, HomeBind, TurnHome

COPY_MAX_BYTES = 16 << 20
"""Largest copied config file agentbox reads back (claude's `.claude.json` grows with use)."""


@dataclass(frozen=True)
class TurnCopy:
    """One file of the profile given to a turn as a private copy."""

    profile_file: Path
    """The profile's file (host path; never visible inside the sandbox)."""
    turn_file: Path
    """The turn's copy (host path, inside the per-turn home)."""
    name: str
    """Its name relative to the config dir (what `TurnHome.keep` is asked about)."""
    home: TurnHome


@dataclass
class HomePlan:
    """The binds of a turn's config homes and what to do with them after the turn."""

    binds: list[HomeBind] = field(default_factory=list)
    """Read-write binds, in mount order (a per-turn home before the state dirs inside it)."""
    read_only: list[tuple[Path, Path]] = field(default_factory=list)
    """(host path, sandbox path) bound read-only after `binds`."""
    copies: list[TurnCopy] = field(default_factory=list)
    turn_dirs: list[Path] = field(default_factory=list)
    """Per-turn homes, removed after the turn (with `turn_root`, the dir that holds them)."""
    turn_root: Path | None = None


def check_bind_source(source: Path, state_dir: Path) -> None:
    """A profile path bound into the sandbox must be what agentbox made, not a link an agent planted."""
    top = str(state_dir).rstrip(os.sep) + os.sep
    path = str(source)
    while path.startswith(top):  # `source` and each of its parents under `state_dir` (not it)
        if os.path.islink(path):
            raise SandboxError(f"{path} is a symlink; agentbox binds only real files and dirs of a profile "
                               "(an agent may have planted it)", f"inspect and remove {path}")
        path = os.path.dirname(path)


def plan(adapter: Adapter, homes: list[HomeBind], state_dir: Path, turn_dir: Path, *,
         interactive: bool) -> HomePlan:
    """The binds of `homes` for one turn; a per-turn home is made under `turn_dir`."""
    result = HomePlan(turn_root=turn_dir)
    for index, bind in enumerate(homes):
        check_bind_source(bind.source, state_dir)
        if bind.is_file:
            bind.source.parent.mkdir(parents=True, exist_ok=True)
            if not bind.source.exists():
                safe_io.write_new(bind.source, b"", 0o600)
            result.binds.append(bind)
            continue
        bind.source.mkdir(parents=True, exist_ok=True)
        if interactive:  # a person at the keyboard may change the tool's settings; a turn may not
            result.binds.append(bind)
            continue
        loaded = loaded_config(adapter.loaded_config, bind, state_dir)
        if adapter.turn_home is None:
            result.binds.append(bind)
            result.read_only += loaded
            continue
        view = turn_dir / str(index)
        view.mkdir(mode=0o700, parents=True)
        result.turn_dirs.append(view)
        _turn_home(adapter.turn_home, bind, view, state_dir, loaded, result)
    result.binds += _pins(result)
    return result


def _pins(result: HomePlan) -> list[HomeBind]:
    """The directories between a read-write bind and a read-only entry inside it, each bound onto
    itself: a mount point cannot be renamed, so no turn moves a nested entry's parent aside and
    puts a planted directory where the next turn binds the entry (`data/opencode/snapshot/`)."""
    pins: dict[Path, HomeBind] = {}
    for source, _target in result.read_only:
        for bind in result.binds:
            if bind.is_file or source == bind.source or not source.is_relative_to(bind.source):
                continue
            for parent in source.parents:
                if parent == bind.source or not parent.is_relative_to(bind.source):
                    break
                pins[parent] = HomeBind(parent, bind.target / parent.relative_to(bind.source))
    return sorted(pins.values(), key=lambda pin: len(pin.target.parts))


def _turn_home(home: TurnHome, bind: HomeBind, view: Path, state_dir: Path,
               loaded: list[tuple[Path, Path]], result: HomePlan) -> None:
    result.binds.append(HomeBind(view, bind.target))
    for name in home.state:
        source = bind.source / name
        check_bind_source(source, state_dir)
        source.mkdir(parents=True, exist_ok=True)
        result.binds.append(HomeBind(source, bind.target / name))
    for name in home.copies:
        profile_file = bind.source / name
        content = _read_regular(profile_file)
        if content is not None:
            safe_io.write_new(view / name, content, 0o600)
        result.copies.append(TurnCopy(profile_file, view / name, name, home))
    result.read_only += loaded
    taken = {*home.state, *home.copies, *(source.name for source, _ in loaded)}
    with os.scandir(bind.source) as entries:
        others = sorted(e.name for e in entries if e.name not in taken and not e.is_symlink())
    # whatever else the profile holds may be something the tool loads: seen, never changed
    result.read_only += [(bind.source / name, bind.target / name) for name in others]


def loaded_config(names: tuple[str, ...], bind: HomeBind, state_dir: Path) -> list[tuple[Path, Path]]:
    """The config files and dirs a tool loads, made if missing, as (host path, sandbox path) to bind read-only."""
    pairs: list[tuple[Path, Path]] = []
    for name in names:
        relative = name.rstrip("/")
        source = bind.source / relative
        check_bind_source(source, state_dir)
        if name.endswith("/"):
            source.mkdir(parents=True, exist_ok=True)
        elif not os.path.lexists(source):
            source.parent.mkdir(parents=True, exist_ok=True)
            safe_io.write_new(source, b"{}\n" if source.suffix == ".json" else b"", 0o600)
        pairs.append((source, bind.target / relative))
    return pairs


def finish(home_plan: HomePlan) -> None:
    """After the turn: what each copy's adapter keeps goes back into the profile, atomically."""
    from agentbox.core.store import atomic_write_bytes, locked

    for copy in home_plan.copies:
        if copy.home.keep is None:
            continue
        turn_bytes = _read_regular(copy.turn_file, quiet=True)
        config_dir = copy.profile_file.parent
        with locked(config_dir.with_name(config_dir.name + ".turn-copies")):  # beside it, unseen by agents
            try:
                profile_bytes = _read_regular(copy.profile_file)
            except SandboxError:
                continue  # not a file agentbox can merge into: the person's to sort out
            kept = copy.home.keep(copy.name, profile_bytes, turn_bytes)
            if kept is not None and kept != profile_bytes:
                atomic_write_bytes(copy.profile_file, kept)
                os.chmod(copy.profile_file, 0o600)
    home_plan.copies.clear()


def remove(home_plan: HomePlan) -> None:
    """Drop the per-turn homes (with whatever the turn made in them)."""
    for directory in home_plan.turn_dirs:
        shutil.rmtree(directory, ignore_errors=True)
    if home_plan.turn_root is not None and home_plan.turn_dirs:
        shutil.rmtree(home_plan.turn_root, ignore_errors=True)


def _read_regular(path: Path, *, quiet: bool = False) -> bytes | None:
    """The file's bytes; None when there is none. What is not a bounded regular file is an error
    (`quiet`: None, for a turn's copy, which the agent may have replaced by anything)."""
    try:
        return safe_io.read_bounded(path, max_bytes=COPY_MAX_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if quiet:
            return None
        raise SandboxError(f"{path} cannot be copied for the turn: {exc}",
                           f"inspect {path}; agentbox copies only a regular file") from None
