"""`agentbox doctor`: what works here and what does not."""

from __future__ import annotations

import argparse
from pathlib import Path

from agentbox.cli.common import print_json
from agentbox.core.termtext import for_terminal

_MARK = {"ok": "ok  ", "warn": "warn", "fail": "FAIL"}


def doctor(args: argparse.Namespace) -> int:
    """Print the health checks; exit 1 when a required one failed."""
    from agentbox.core.admin.doctor import (
        check_profile_turns,
        environment_summary,
        healthy,
        run_checks,
    )

    project = Path(args.project) if args.project else None
    checks = run_checks(project)
    if args.profiles:
        checks += check_profile_turns(project)
    ok = healthy(checks)
    if args.json:
        print_json({"healthy": ok, "environment": environment_summary(), "checks": [c.as_dict() for c in checks]})
    else:
        for check in checks:
            print(f"[{_MARK[check.status]}] {check.name:9} {for_terminal(check.detail)}")
            if check.hint and check.status != "ok":
                print(f"       {'':9} hint: {for_terminal(check.hint)}")
        print("healthy" if ok else "something required is broken")
    return 0 if ok else 1
