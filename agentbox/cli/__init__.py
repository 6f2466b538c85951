"""The CLI face: parse arguments, call a core service, print, map errors to exit codes.

Handlers live in `agentbox/cli/<command>.py` and are imported only when their command
runs, so `agentbox --version` and non-TUI commands stay fast and never load Textual.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import sys
from collections.abc import Sequence

from agentbox.cli import startup
from agentbox.cli.parser import build_parser, named_command

QUICK_COMMANDS = frozenset({"invoke", "sessions", "status", "runs", "profile", "role", "schema", "graph", "doctor",
                            "approve", "rework", "answer", "cancel", "pause", "resume", "init", "diff", "merge", "clean",
                            "checks", "zones", "debt", "stats", "apply"})
"""Commands that do one thing and end: they run with the cyclic garbage collector paused.

Their start-up makes a few hundred thousand objects (modules, the config models, the
YAML loader) and none of them is garbage, so collecting them again and again costs a
short command ~5-10% of its time, and the collections at the interpreter's exit as much
again (run as the program, the command freezes what it made before it ends). Commands
that stay (run, tui, mcp, attach) keep the collector as it is.
"""


def main(argv: Sequence[str] | None = None) -> int:
    """Run one CLI command; returns the process exit code."""
    words = list(sys.argv[1:] if argv is None else argv)
    command = named_command(words)
    startup.install(command)  # before anything imports pydantic, asyncio or hashlib
    parser = build_parser(only=command)  # the other commands' parsers are not built
    args = parser.parse_args(words)
    target: str | None = getattr(args, "handler", None)
    if target is None:
        if getattr(args, "command", None) is None:
            target = "agentbox.cli.tui:run_default"
        else:
            parser.parse_args([*(argv or sys.argv[1:]), "--help"])
            return 2
    pause_gc = getattr(args, "command", None) in QUICK_COMMANDS and gc.isenabled()
    if pause_gc:
        gc.disable()
    try:
        return _run(target, args)
    finally:
        if pause_gc:
            if argv is None:  # the process ends with the command: its last collections need not walk it all
                gc.freeze()
            gc.enable()


def _run(target: str, args: argparse.Namespace) -> int:
    """Import the handler `module:function` and run it; errors become messages and exit codes."""
    from agentbox.core.errors import AgentboxError

    module_name, _, function_name = target.partition(":")
    try:
        handler = getattr(importlib.import_module(module_name), function_name)
        return int(handler(args) or 0)
    except AgentboxError as exc:
        from agentbox.core.termtext import for_terminal  # a message may quote what an agent wrote

        print(f"error: {for_terminal(exc.message)}", file=sys.stderr)
        if exc.hint:
            print(f"hint: {for_terminal(exc.hint)}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
