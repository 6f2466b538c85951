"""`agentbox profile list|show|add|rm|adopt`."""

from __future__ import annotations

import argparse
import sys

from agentbox.cli.common import print_json, print_table
from agentbox.core import profiles
from agentbox.core.errors import ConfigError, UsageError


def _info_dict(info: profiles.ProfileInfo) -> dict[str, object]:
    return {
        "name": info.name,
        "tool": info.tool,
        "source": info.source,
        "display_name": info.profile.display_name,
        "description": info.profile.description,
        "model": info.profile.runtime.model,
        "directory": str(info.directory),
        "config_dir": str(info.config_dir),
        "sandbox": info.profile.sandbox if isinstance(info.profile.sandbox, str) else info.profile.sandbox.model_dump(),
    }


def list_(args: argparse.Namespace) -> int:
    """Print every profile usable by name."""
    errors: list[ConfigError] = []
    infos = profiles.all_profiles(errors)
    if args.json:
        print_json({"profiles": [_info_dict(i) for i in infos], "errors": [str(e) for e in errors]})
    else:
        rows = [
            [i.name, i.tool, i.source + (" (adopt with `agentbox profile adopt`)" if i.source == "v1" else ""),
             i.profile.model_dump().get("display_name") or "", i.profile.runtime.model or ""]
            for i in infos
        ]
        print_table(["name", "tool", "source", "display name", "model"], rows)
        for error in errors:
            print(f"warning: {error}", file=sys.stderr)
    return 0


def show(args: argparse.Namespace) -> int:
    """Print one profile."""
    info = profiles.resolve(args.name)
    data = _info_dict(info)
    if args.json:
        print_json(data)
    else:
        for key, value in data.items():
            print(f"{key + ':':14} {value if value is not None else '-'}")
    return 0


def add(args: argparse.Namespace) -> int:
    """Create a user profile from a bundled template."""
    info = profiles.add(args.name, args.template)
    print(f"created profile {info.name!r} ({info.tool}) at {info.directory}")
    print(f"  tool config: {info.config_dir} (log in or copy credentials there)")
    return 0


def rm(args: argparse.Namespace) -> int:
    """Delete a user profile after confirmation."""
    if not args.yes:
        if not sys.stdin.isatty():
            raise UsageError(f"refusing to delete profile {args.name!r} without --yes")
        reply = input(f"delete profile {args.name!r} and its credentials? [y/N] ")
        if reply.strip().lower() not in {"y", "yes"}:
            print("kept")
            return 1
    path = profiles.remove(args.name)
    print(f"removed {path}")
    return 0


def adopt(args: argparse.Namespace) -> int:
    """Write a profile.yaml for a v1 profile."""
    path = profiles.adopt(args.name)
    print(f"adopted {args.name!r}: wrote {path} (no file moved)")
    return 0
