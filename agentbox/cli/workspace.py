"""`agentbox diff`, `merge` and `clean`: a worktree run's branches, seen, delivered and tidied."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from typing import Any

from agentbox.cli.common import print_json, print_table, project_from
from agentbox.core.termtext import for_terminal


def diff(args: argparse.Namespace) -> int:
    """The run's changes (its integration branch against its base) or one task's, from git."""
    from agentbox.core import runs as runs_mod
    from agentbox.core.reports import changes as run_changes

    project = project_from(args)
    run = runs_mod.load(project, args.run)
    if args.task:
        text = run_changes.task_diff(project, run, args.task, stat_only=args.stat)
        files = next((c.files for c in run_changes.task_changes(run) if c.task == args.task), [])
    else:
        text = run_changes.run_diff(project, run, stat_only=args.stat)
        files = run_changes.run_files(project, run)
    if args.json:
        data: dict[str, Any] = {"run": run.id, "task": args.task, "files": [f.model_dump() for f in files],
                                "stat": text.stat, "truncated": text.truncated, "full_command": text.full_command}
        if not args.task:
            data["tasks"] = [{**asdict(c), "files": [f.model_dump() for f in c.files]}
                             for c in run_changes.task_changes(run)]
        if not args.stat:
            data["patch"] = text.patch
        print_json(data)
        return 0
    if not text.stat.strip():
        print("no changes")
        return 0
    sys.stdout.write(for_terminal(text.stat if args.stat else text.stat + "\n" + text.patch))
    if text.truncated:
        print(f"\n(cut here; the whole diff: {text.full_command})")
    return 0


def merge(args: argparse.Namespace) -> int:
    """Bring the run's integration branch into a branch of the person's (through the run's command path)."""
    from agentbox.cli.runs import _send

    project = project_from(args)
    return _send(project, args.run, {"action": "deliver", "into": args.into, "squash": args.squash})


def clean(args: argparse.Namespace) -> int:
    """Remove what finished runs left behind; unmerged work is kept unless --force."""
    from agentbox.core import runs as runs_mod
    from agentbox.core import workspace as git
    from agentbox.core.engine.run_store import RunStore
    from agentbox.core.errors import UsageError

    project = project_from(args)
    if git.repo_info(project.root) is None:
        raise UsageError(f"{project.root} is not a git repository with a commit: there is nothing to clean")
    live = [r.id for r in runs_mod.active_runs(project)]
    run_id = RunStore(project).resolve_id(args.run) if args.run else None
    plan = git.clean(project.root, run_id, dry_run=args.dry_run, force=args.force, keep_runs=live)
    if args.json:
        print_json({"dry_run": plan.dry_run, "worktrees": [str(p) for p in plan.worktrees], "branches": plan.branches,
                    "refs": plan.refs, "kept": [{"name": r.name, "reason": r.reason} for r in plan.refused]})
        return 0
    verb = "would remove" if plan.dry_run else "removed"
    rows = [[verb, "worktree", str(p)] for p in plan.worktrees] + [[verb, "branch", b] for b in plan.branches]
    rows += [["kept", r.name, r.reason] for r in plan.refused]
    if rows:
        print_table(["", "what", ""], rows)
    else:
        print("nothing to clean")
    return 0
