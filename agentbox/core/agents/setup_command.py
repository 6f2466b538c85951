"""crew.yaml's `workspace_setup.run`: a shell command run once in a new task worktree, inside a sandbox.

It runs with the worktree seen at the project's path and writable (it is there to install
what the work needs: `npm ci`, `uv sync`), git metadata and `.agent-box/` read-only, the
person's home and AGENT_BOX_HOME hidden, and a network namespace of its own whose only way
out is the egress proxy: the public package registries and `workspace_setup.allow`, never
this machine's loopback or the cloud metadata address. A crew.yaml comes with the
repository, so its command is as untrusted as an agent: it never runs on the host.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from agentbox.core.agents import egress_turn
from agentbox.core.paths import agent_box_home
from agentbox.core.process import CappedStream, wait_captured
from agentbox.core.sandbox import bwrap as sandbox
from agentbox.core.sandbox import scopes

OUTPUT_TAIL = 2000
"""Characters of the command's output kept for the run's log."""


@dataclass(frozen=True)
class SetupOutcome:
    """How the setup command ended."""

    ok: bool
    detail: str
    """Exit status and the end of its output."""


def run_setup(root: Path, worktree: Path, views: tuple[tuple[Path, Path], ...], view_hidden: tuple[Path, ...],
              command: str, timeout_s: float, log_path: Path, protected_paths: tuple[str, ...] = (),
              allow: tuple[str, ...] = ()) -> SetupOutcome:
    """Run `command` with `sh -c` in the sandboxed worktree; never raises for the command's own failure.

    crew.yaml's `protected_paths` stay read-only to it as to every role (what it creates
    there is moved aside next to the log).

    Its output (stdout and stderr together) goes to `log_path`, capped as an agent's is;
    memory holds a bounded head and tail, so a command that floods its output costs a few
    MB, and one that hangs is killed with its process group at `timeout_s`.
    """
    home = Path.home()
    box = root / ".agent-box"
    hidden = sandbox.private_paths(home, agent_box_home())
    state = sandbox.run_state_dirs(root)
    metadata = scopes.worktree_metadata_paths(worktree)
    scope_plan = scopes.plan(worktree, None, None, protected_paths)
    network = egress_turn.plan_for(egress_turn.crew_rules(list(allow), "workspace_setup.allow"))
    try:
        spec = sandbox.SandboxSpec(
            project_root=worktree, mount_at=root, views=views, view_hidden=view_hidden, writable=(worktree,),
            protected=(box, *metadata, *scope_plan.protected), pinned=scope_plan.pinned, extra_rw=(), homes=(),
            hidden=(*hidden, *state), ro_binds=(),
            network=False, cwd=root,
            env=sandbox.sandbox_env(sandbox.host_env(), home, {"AGENTBOX_SETUP": "1", **network.env}),
            **sandbox.host_layout(),
        )
        argv = sandbox.bwrap_argv(spec, ["/bin/sh", "-c", command], sandbox.require_bwrap())
        output = CappedStream(log_path)
        try:
            with egress_turn.serving(network), sandbox.launch(argv, before_exec=network.join) as launched:
                proc = subprocess.Popen(launched.argv, pass_fds=launched.pass_fds, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
                with proc:
                    timed_out = wait_captured(proc, None, output, output, timeout_s)
        finally:
            output.close()
    finally:
        network.remove()
        scopes.finish(scope_plan, log_path.with_suffix(".discarded"))
    if timed_out:
        return SetupOutcome(False, f"`{command[:200]}` did not finish in {timeout_s:g} s (killed); "
                                   f"its output is in {log_path}")
    tail = output.text()[-OUTPUT_TAIL:].strip()
    return SetupOutcome(proc.returncode == 0, f"`{command[:200]}` exited {proc.returncode}" + (f": {tail}" if tail else ""))
