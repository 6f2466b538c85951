"""The argument parser of every command (argparse only: nothing heavy is imported here)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any, Protocol

from agentbox import __version__


class Subcommands(Protocol):
    """What the commands are added to: argparse's subparsers action, or `_OneCommand` standing in for it."""

    def add_parser(self, name: str, **kw: Any) -> Any:
        """The parser of command `name` (a stand-in that takes every call when it is not built)."""
        ...


def _cmd(sub: Subcommands, name: str, handler: str, help_text: str, **kw: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help_text, description=help_text, **kw)
    parser.set_defaults(handler=handler)
    return parser


def _json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output")


class _Modes:
    """The crew modes `--mode` takes, read from where they are defined only when the option is given or shown."""

    def __iter__(self) -> Iterator[str]:
        from agentbox.core.config.models import MODES

        return iter(MODES)

    def __contains__(self, name: object) -> bool:
        return name in list(self)


class _Unused:
    """Stands for the parser of a command the command line does not name: takes every call, is never parsed."""

    def __getattr__(self, name: str) -> object:
        return self._take

    def _take(self, *args: object, **kw: object) -> _Unused:
        return self


class _OneCommand:
    """The subcommands action with only the parser of `name` built (argparse builds each one eagerly)."""

    def __init__(self, sub: Subcommands, name: str) -> None:
        self.sub, self.name, self.found = sub, name, False

    def add_parser(self, name: str, **kw: Any) -> Any:
        if name != self.name:
            return _Unused()
        self.found = True
        return self.sub.add_parser(name, **kw)


def named_command(argv: list[str]) -> str | None:
    """The command an argument list names (its first word after the global options), if any."""
    index = 0
    while index < len(argv):
        word = argv[index]
        if word == "--project":
            index += 2
            continue
        if word.startswith("--project="):
            index += 1
            continue
        return None if word.startswith("-") else word  # --help, --version: the whole parser explains them
    return None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole CLI: `agentbox [--project DIR] COMMAND ...`.

    `only`: a command name; the parsers of the other commands are not built (a one-turn command
    starts sooner). When no command has that name the whole parser is built, to explain it.
    """
    parser = argparse.ArgumentParser(
        prog="agentbox",
        description="A workbench for project-level teams of CLI coding agents. "
        "With no command inside a project, opens the dashboard.",
    )
    parser.add_argument("--version", action="version", version=f"agentbox {__version__}")
    parser.add_argument("--project", metavar="DIR", help="the project directory (default: nearest .agent-box/ above the cwd)")
    sub: Subcommands = parser.add_subparsers(dest="command", metavar="COMMAND")
    if only is not None:
        one = _OneCommand(sub, only)
        sub = one

    # --- project and profiles
    p = _cmd(sub, "init", "agentbox.cli.project:init", "create .agent-box/ here from the example project")
    p.add_argument("directory", nargs="?", default=".", help="where to create it (default: .)")

    profile = sub.add_parser("profile", help="manage profiles in $AGENT_BOX_HOME/profiles")
    psub = profile.add_subparsers(dest="profile_command", metavar="ACTION", required=True)
    p = _cmd(psub, "list", "agentbox.cli.profile:list_", "list user, v1 and bundled profiles")
    _json(p)
    p = _cmd(psub, "show", "agentbox.cli.profile:show", "show one profile")
    p.add_argument("name")
    _json(p)
    p = _cmd(psub, "add", "agentbox.cli.profile:add", "create a profile from a bundled template")
    p.add_argument("name")
    p.add_argument("--from", dest="template", required=True, metavar="TEMPLATE", help="bundled template (claude, codex, opencode, hermes, scripted, ...)")
    p = _cmd(psub, "rm", "agentbox.cli.profile:rm", "delete a user profile (its config and credentials)")
    p.add_argument("name")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p = _cmd(psub, "test", "agentbox.cli.profile:test",
             "run one turn through a profile: reachability, login, model, tokens, latency, and what is wrong")
    p.add_argument("name")
    p.add_argument("--timeout", type=float, metavar="SECONDS", help="give up on the turn after this long (default 90)")
    _json(p)
    p = _cmd(psub, "adopt", "agentbox.cli.profile:adopt", "write profile.yaml for an agent-box v1 profile (moves nothing)")
    p.add_argument("name")

    role = sub.add_parser("role", help="manage the crew's roles in crew.yaml")
    rsub = role.add_subparsers(dest="role_command", metavar="ACTION", required=True)
    p = _cmd(rsub, "list", "agentbox.cli.project:role_list", "list the crew's roles")
    _json(p)
    p = _cmd(rsub, "add", "agentbox.cli.project:role_add", "add a role (keeps crew.yaml's comments)")
    p.add_argument("name")
    p.add_argument("--profile", required=True)
    p.add_argument("--instructions", help="instructions file relative to .agent-box/")
    p.add_argument("--writes", action="append", metavar="GLOB", help="a path the role may write (repeatable)")
    p.add_argument("--read-only", action="store_true", help="the role may not write the project")
    p = _cmd(rsub, "rm", "agentbox.cli.project:role_rm", "remove a role (refused while the mode settings name it)")
    p.add_argument("name")
    p.add_argument("--force", action="store_true", help="remove it even when the mode settings still name it")

    p = _cmd(sub, "schema", "agentbox.cli.project:schema",
             "print the JSON Schema of profile.yaml, crew.yaml, a work graph or $AGENT_BOX_HOME/config.yaml")
    p.add_argument("kind", choices=["profile", "crew", "graph", "config"], nargs="?", default="crew")

    p = _cmd(sub, "doctor", "agentbox.cli.doctor:doctor", "check bwrap, agent CLIs, AGENT_BOX_HOME and the project")
    p.add_argument("--profiles", action="store_true",
                   help="also run one test turn through every profile the crew uses (`profile test`)")
    _json(p)

    # --- agents
    p = _cmd(sub, "invoke", "agentbox.cli.agents:invoke", "run one prompt through a role or profile:NAME, headless, sandboxed")
    p.add_argument("target", help="a role of the project, or profile:NAME")
    p.add_argument("prompt", help="the prompt ('-' reads stdin)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--session", metavar="UUID", help="resume this agentbox session")
    group.add_argument("--continue", dest="continue_", action="store_true", help="resume the latest session of this role/profile")
    group.add_argument("--new", action="store_true", help="start a new session (default)")
    p.add_argument("--timeout", type=float, metavar="SECONDS", help="kill the agent after this long")
    _json(p)

    sessions = _cmd(sub, "sessions", "agentbox.cli.agents:sessions", "session history per role (or profile)")
    sessions.add_argument("role", nargs="?", help="a role (or profile:NAME); 'show UUID' shows one session")
    sessions.add_argument("session_id", nargs="?", help=argparse.SUPPRESS)
    _json(sessions)

    p = _cmd(sub, "attach", "agentbox.cli.agents:attach", "open a role's tool interactively, resuming its session, in its sandbox")
    p.add_argument("role")
    p.add_argument("session_id", nargs="?", metavar="UUID")
    p = _cmd(sub, "tail", "agentbox.cli.tail:tail",
             "show what a member's turn prints (its text, tool calls and results), as it happens")
    p.add_argument("target", metavar="ROLE|TASK", help="a role of the crew (its running or last turn), or a task")
    p.add_argument("--run", help="the run of the task (default: the latest run that has it)")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the turn ends")
    p = _cmd(sub, "shell", "agentbox.cli.shell:shell",
             "open a shell in a task's worktree (or the run's view), in its role's sandbox")
    p.add_argument("task", metavar="TASK")
    p.add_argument("--run", help="the run of the task (default: the latest run that has it)")
    p.add_argument("--host", action="store_true", help="your own $SHELL on the host, in that directory (no sandbox)")
    p.add_argument("-c", dest="shell_command", metavar="COMMAND", help="run COMMAND in the shell and exit with its status")
    p = _cmd(sub, "launch", "agentbox.cli.agents:launch", "open a profile's tool interactively in its sandbox (agent-box v1's launch)")
    p.add_argument("profile")
    p.add_argument("--session", metavar="UUID", help="resume this agentbox session")

    # --- runs
    p = _cmd(sub, "run", "agentbox.cli.runs:run", "start a run of the crew on a goal (or --resume one)")
    p.add_argument("goal", nargs="?", help="what the crew should achieve")
    mode = p.add_argument("--mode", help="how the crew works together (default: crew.yaml's mode): sequential "
                          "pipeline, hierarchical lead + workers + review, group_chat, handoff, or graph (with --graph)")
    mode.choices = _Modes()  # set after: argparse would list them at once to check the option's metavar
    p.add_argument("--graph", metavar="NAME|FILE", help="work graph for graph mode")
    p.add_argument("--base", metavar="BRANCH|COMMIT",
                   help="start the run's branch from this branch or commit instead of your HEAD (worktree runs)")
    p.add_argument("--detach", action="store_true", help="run in the background; print the run id")
    p.add_argument("--resume", metavar="RUN", help="continue a run from disk")
    p.add_argument("--quiet", action="store_true", help="no live progress")
    p = _cmd(sub, "runs", "agentbox.cli.runs_list:runs",
             "list the project's runs: goal, status, age, tasks done, tokens, cost, merged")
    _json(p)
    p = _cmd(sub, "stats", "agentbox.cli.stats:stats",
             "how well the crew works across runs: first pass, repair rounds, escalations, cost, by role and model")
    p.add_argument("--since", metavar="DATE", help="only runs created on or after this date (YYYY-MM-DD)")
    p.add_argument("--role", metavar="ROLE", help="only the tasks of this role")
    _json(p)
    p = _cmd(sub, "status", "agentbox.cli.runs:status", "show a run (default: the latest)")
    p.add_argument("run", nargs="?")
    _json(p)
    p = _cmd(sub, "checks", "agentbox.cli.checks:checks",
             "the checks crew.yaml's gates ran: name, stage, commit, result, exit status, duration, log")
    p.add_argument("run", nargs="?", help="the run (default: the latest)")
    p.add_argument("task", nargs="?", help="only this task's checks")
    _json(p)
    p = _cmd(sub, "zones", "agentbox.cli.ladder:zones",
             "the project's high-rot zones: modules where a task's failure ladder reached L3 (.agent-box/zones.yaml)")
    _json(p)
    p = _cmd(sub, "debt", "agentbox.cli.ladder:debt",
             "the tech debt of compromise patches (.agent-box/debt.yaml); close or waive one (comments kept)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--close", metavar="ID", help="mark this debt closed (it was paid back)")
    group.add_argument("--waive", metavar="ID", help="mark this debt waived (it no longer blocks a controlled rewrite)")
    p.add_argument("--note", help="why, kept with the debt")
    _json(p)
    p = _cmd(sub, "apply", "agentbox.cli.apply:apply",
             "apply the advisor's patch of a task (failure ladder, advisor mode) in its worktree and resubmit it")
    p.add_argument("task", metavar="TASK")
    p.add_argument("--run", help="the run of the task (default: the latest run that has it)")
    p = _cmd(sub, "approve", "agentbox.cli.runs:approve",
             "approve a task in review (`approve TASK`), or the plan (`approve --plan`, `approve RUN cp-N`)")
    p.add_argument("task", nargs="?", metavar="TASK|RUN", help="a task in review; or a run, followed by its plan checkpoint")
    p.add_argument("checkpoint", nargs="?", metavar="CHECKPOINT", help="the plan checkpoint (cp-N) of RUN")
    p.add_argument("--plan", action="store_true", help="approve the plan waiting for approval (of --run, else the one run waiting)")
    p.add_argument("--run", help="the run of the task (or of the plan)")
    p.add_argument("--note", default="approved by a human")
    p.add_argument("--at", metavar="COMMIT", help="the commit you looked at (default: the one shown); "
                                                   "refused when the task's branch is no longer there")
    p = _cmd(sub, "rework", "agentbox.cli.runs:rework", "send a task in review back for rework")
    p.add_argument("task")
    p.add_argument("--run")
    p.add_argument("--note", required=True)
    p = _cmd(sub, "answer", "agentbox.cli.runs:answer", "answer a checkpoint")
    p.add_argument("run", help="run id (or 'latest')")
    p.add_argument("checkpoint")
    p.add_argument("text")
    p = _cmd(sub, "cancel", "agentbox.cli.runs:cancel", "cancel a run or one task")
    p.add_argument("target", nargs="?", help="a run id or a task id (default: the only active run)")
    p.add_argument("--run", help="the run of the task")
    p = _cmd(sub, "pause", "agentbox.cli.runs:pause", "pause a run (running turns finish)")
    p.add_argument("run", nargs="?", help="the run (default: the only active run)")
    p = _cmd(sub, "resume", "agentbox.cli.runs:resume_run", "resume a paused run")
    p.add_argument("run", nargs="?", help="the run (default: the only active run)")

    p = _cmd(sub, "discard", "agentbox.cli.discard:discard",
             "throw a run away: stop its engine, remove its worktrees, branches, state and sessions' links to it")
    p.add_argument("run", help="the run (a unique prefix of its id will do)")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    _json(p)
    p = _cmd(sub, "diff", "agentbox.cli.workspace:diff",
             "what a worktree run changed: the run's branch against its base, or one task's branch")
    p.add_argument("run", nargs="?", help="run id (default: the latest)")
    p.add_argument("task", nargs="?", help="one task of the run")
    p.add_argument("--stat", action="store_true", help="only the files and their counts")
    _json(p)
    p = _cmd(sub, "merge", "agentbox.cli.workspace:merge",
             "bring a worktree run's approved work into your branch (never rewrites your history)")
    p.add_argument("run", nargs="?", help="run id (default: the latest)")
    p.add_argument("--into", metavar="BRANCH", help="the branch (default: the one checked out when the run started)")
    p.add_argument("--squash", action="store_true", help="one commit instead of a merge commit")
    p = _cmd(sub, "clean", "agentbox.cli.workspace:clean",
             "remove the worktrees and branches finished runs left (never unmerged work without --force)")
    p.add_argument("run", nargs="?", help="only this run (default: every finished run)")
    p.add_argument("--dry-run", action="store_true", help="say what would be removed, change nothing")
    p.add_argument("--force", action="store_true", help="also drop unmerged work (the integration branch stays)")
    _json(p)

    graph = sub.add_parser("graph", help="work graphs")
    gsub = graph.add_subparsers(dest="graph_command", metavar="ACTION", required=True)
    p = _cmd(gsub, "check", "agentbox.cli.graph:graph_check", "validate a work graph: schema, role names, no forward cycle, one entry, reachable nodes, labelled back edges, fail fallbacks")
    p.add_argument("file")
    _json(p)

    # --- faces
    _cmd(sub, "tui", "agentbox.cli.tui:tui", "open the dashboard")
    p = _cmd(sub, "mcp", "agentbox.cli.mcp:mcp",
             "serve this project to MCP clients (Claude Code, Codex, opencode): stdio, or --http on loopback")
    p.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT instead of stdio")
    p.add_argument("--print-config", choices=["claude", "codex", "opencode"], metavar="CLIENT",
                   help="print the snippet that registers this server with claude, codex or opencode, and exit")
    p = _cmd(sub, "ask", "agentbox.cli.ask:ask",
             "ask the crew's liaison where things stand (a read-only turn answering from the run's state, "
             "with the time of its data)")
    p.add_argument("words", nargs="+", metavar="[RUN] QUESTION", help="a run id (or prefix; default: the latest "
                   "run) and the question")
    p.add_argument("--runs", action="store_true", help="about the project's runs, not one run")
    _json(p)
    p = _cmd(sub, "serve", "agentbox.cli.serve:serve",
             "the dashboard in a browser: 127.0.0.1 by default, a token on every request, TLS beyond loopback")
    p.add_argument("--host", default="127.0.0.1", metavar="ADDR", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="port to listen on (default 8765)")
    p.add_argument("--new-token", action="store_true", help="make a new token (old addresses and cookies stop working)")
    p.add_argument("--tls-cert", metavar="FILE", help="PEM certificate: serve over https (needed beyond loopback)")
    p.add_argument("--tls-key", metavar="FILE", help="PEM key of --tls-cert")
    p.add_argument("--insecure-http", action="store_true", help="beyond loopback without TLS (says why not)")
    p.add_argument("--max-sessions", type=int, default=4, metavar="N", help="browser tabs at once (default 4)")
    p.add_argument("--public-url", metavar="URL", help="the address browsers use, when not http(s)://HOST:PORT")
    p = _cmd(sub, "demo", "agentbox.cli.tui:demo", "run the demo crew in a temp project and watch it")
    p.add_argument("--no-tui", action="store_true", help="print progress instead of opening the dashboard")
    p.add_argument("--keep", action="store_true", help="keep the temp project")
    if only is not None and not one.found:
        return build_parser()
    return parser
