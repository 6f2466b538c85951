"""`agentbox profile list|show|add|rm|adopt`."""

from __future__ import annotations

import argparse
import sys

from agentbox.cli.common import print_json, print_table
from agentbox.core.config import profiles, secrets
from agentbox.core.errors import ConfigError, UsageError
from agentbox.core.termtext import for_line, for_terminal


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
        # references (${VAR}) as written, never resolved; literal keys masked
        "env": secrets.display_env(info.profile.runtime.env),
        "pass_env": list(info.profile.runtime.pass_env),
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
            print(f"warning: {for_terminal(error)}", file=sys.stderr)
    return 0


def show(args: argparse.Namespace) -> int:
    """Print one profile."""
    info = profiles.resolve(args.name)
    data = _info_dict(info)
    if args.json:
        print_json(data)
    else:
        for key, value in data.items():
            print(f"{key + ':':14} {for_line(value) if value is not None else '-'}")
    return 0


def add(args: argparse.Namespace) -> int:
    """Create a user profile from a bundled template."""
    info = profiles.add(args.name, args.template)
    print(f"created profile {info.name!r} ({info.tool}) at {info.directory}")
    print(f"  tool config: {info.config_dir} (log in or copy credentials there)")
    return 0


def rm(args: argparse.Namespace) -> int:
    """Delete a user profile after confirmation."""
    profiles.removable(args.name)  # "no such profile" before any question
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


def test(args: argparse.Namespace) -> int:
    """Run one turn through a profile and diagnose what is wrong with it."""
    from agentbox.cli.agents import check_timeout
    from agentbox.core.admin.profile_check import DEFAULT_TURN_TIMEOUT_S, check_profile

    report = check_profile(args.name, timeout_s=check_timeout(args.timeout) or DEFAULT_TURN_TIMEOUT_S)
    if args.json:
        print_json(report.as_dict())
        return 0 if report.ok else 1
    facts = [("endpoint", report.endpoint or "the tool's default"),
             ("reachable", _yes_no(report.reachable)), ("authenticated", _yes_no(report.authenticated)),
             ("model", report.model or "the tool's default"),
             ("model used", report.model_used or "not reported by the tool"), ("session", report.session_id or "-"),
             ("native id", report.native_id or "-"),
             ("tokens", f"in {report.usage.get('input_tokens', '?')}, out {report.usage.get('output_tokens', '?')}"
              if report.usage else "-"),
             ("latency", f"{report.latency_s:g} s" if report.latency_s is not None else "-")]
    print(f"profile {report.profile} ({report.tool})")
    for key, value in facts:
        print(f"  {key + ':':15} {for_line(value)}")
    print(for_terminal(report.diagnosis), file=sys.stdout if report.ok else sys.stderr)
    return 0 if report.ok else 1


def _yes_no(value: bool | None) -> str:
    return "unknown" if value is None else ("yes" if value else "no")
