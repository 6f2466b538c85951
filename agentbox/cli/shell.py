"""`agentbox shell TASK [--host] [-c COMMAND]`: a shell in the task's worktree."""

from __future__ import annotations

import argparse
import subprocess
import sys

from agentbox.cli.common import project_from


def shell(args: argparse.Namespace) -> int:
    """Open a shell where the task's work is: in its role's sandbox, or with --host on the host; its exit code."""
    from agentbox.core.admin.task_shell import sandboxed_shell, shell_argv, task_place

    project = project_from(args)
    place = task_place(project, args.task, args.run)
    argv = shell_argv(args.shell_command, host=args.host)
    if args.host:
        print(f"[shell on the host, NOT sandboxed · {place.what} · {place.path}]", file=sys.stderr)
        return subprocess.call(argv, cwd=str(place.path))
    agent = place.agent
    if agent.profile.profile.sandbox == "none":
        print(f"warning: {agent.label}'s profile runs WITHOUT a sandbox (sandbox: none): so does this shell",
              file=sys.stderr)
    scopes = "read-only" if agent.read_only else ("writes " + ", ".join(agent.writes or ("everything",)))
    print(f"[shell in {agent.label}'s sandbox · {place.what} · {scopes} · exit to leave]", file=sys.stderr)
    with sandboxed_shell(agent, argv) as command:
        return subprocess.call(command.argv, env=command.env, cwd=str(agent.cwd), pass_fds=command.pass_fds)
