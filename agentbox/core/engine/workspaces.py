"""The git side of a worktree run, carried out for the engine: worktrees, turn commits, merges, delivery.

A writer task works in its own worktree on `agentbox/<run>@<task>` (`core.workspace` does
the git plumbing); its turn sees the worktree at the project's own path. After each work
turn agentbox commits what changed, and the task's changed files come from git. A review
reads the real diff in the task's worktree. Approval merges the task into the run's
integration branch without touching a working tree; a conflict brings the approved work
into the task's branch with conflict markers and sends the task back (`integrate`). A turn
that writes nothing (a plan, a synthesis, a chat turn) reads the run's view: a detached
worktree at the integration head (`view`). When the run is done its branch is delivered
as crew.yaml's `deliver` says.

Slow git (a checkout, `git add -A` over a big tree) runs in a worker thread off the loop
(`mount`, `commit`); quick ref updates (a merge) run in the loop. Every operation is
idempotent, so a run killed at any point and resumed never commits or merges twice.
In a `shared` run nothing here does anything (`active` is False).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agentbox.core import workspace as git
from agentbox.core.engine.changed_files import kept_changed_paths, merge_hint
from agentbox.core.engine.ledger import RunLedger
from agentbox.core.engine.models import ChangedPath, Job, Task
from agentbox.core.errors import AgentboxError, UsageError
from agentbox.core.sandbox import scopes
from agentbox.core.workspace.layout import admin_dir, common_dir, task_worktree_path
from agentbox.core.workspace.reach import widen_reach

DIFF_PROMPT_BYTES = 48 * 1024
"""Most bytes of a task's patch put in a review prompt (the stat always goes in whole)."""
SETUP_DONE = "agentbox-setup-done"
"""Marker in a worktree's git admin dir: crew.yaml's setup command has run there."""
VIEW_KEY = "view"
"""`Mount.key` of the run's read-only view of its integration branch (not a task's: ids are checked apart)."""
HANDOFF_KEY = "handoff"
"""The branch of a handoff conversation's writing turns (merged after every turn: no review)."""


def merge_conflict_note(conflicts: list[str]) -> str:
    """What a worker is told when its approved work conflicts with work approved before it."""
    return ("merge conflict: your approved work conflicts with work the run approved before it, in "
            + ", ".join(conflicts[:20]) + ". That work was brought into your branch with conflict markers "
            "(<<<<<<< ======= >>>>>>>): resolve them, keeping both intents, and submit again.")


class StaleApproval(UsageError):
    """An approval names a commit the task's branch is no longer at."""

    def __init__(self, task_id: str, judged: str, head: str) -> None:
        super().__init__(f"the approval of {task_id} is stale: it judged {judged[:10]}, but {task_id}'s branch is now "
                         f"at {head[:10]}", f"look at the new work (`agentbox diff` the task) and approve it with "
                         f"--at {head[:10]}, or send it back")
        self.head = head


@dataclass(frozen=True)
class Mount:
    """A turn's worktree and what makes git readable in it."""

    key: str
    """The task id (or HANDOFF_KEY) whose branch the worktree holds; VIEW_KEY for the run's read-only view."""
    path: Path
    views: tuple[tuple[Path, Path], ...]
    hidden: tuple[Path, ...]
    setup_marker: Path | None = None
    """Written once crew.yaml's setup command has run in this worktree (None: nothing to run)."""
    base: Path | None = None
    """A sparse worktree's shared base, seen under `over` (`agentbox.core.workspace.bases`)."""
    over: tuple[Path, ...] = ()
    task_base: str | None = None
    """The commit the branch's work is measured from, as the mount found it (None: the view)."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment git inside the sandbox needs (`SandboxGitView.env`)."""


@dataclass(frozen=True)
class TurnGit:
    """What a work turn left in git: the task branch's base and head and what changed between them."""

    key: str
    branch: str
    base: str
    head: str
    commit: str | None
    """The commit of this turn (None: the turn changed nothing)."""
    changed: list[ChangedPath]
    more: int = 0
    """Files changed beyond `changed` (a flood: the run state keeps the first ones)."""


class Workspaces:
    """The git side of one run (see the module docstring)."""

    def __init__(self, root: Path, ledger: RunLedger) -> None:
        self.root = root
        self.ledger = ledger

    @property
    def active(self) -> bool:
        """True for a worktree run."""
        return self.ledger.run.in_worktrees

    # ------------------------------------------------------------------ turns
    def key_for(self, job: Job) -> str | None:
        """Whose worktree a job's turn runs in: its task's, the handoff branch's, or none (the
        run's read-only view in a worktree run, see `view`; the live tree in a shared one)."""
        if not self.active:
            return None
        if job.task is not None and job.task in self.ledger.run.tasks and (job.works_on_task or job.kind == "review"):
            return job.task
        if job.kind == "handoff" and job.data.writes:
            return HANDOFF_KEY
        return None

    def mount(self, key: str, copy_patterns: list[str], setup_command: str | None = None,
              writes: Sequence[str] | None = None) -> Mount:
        """Make or find the worktree of `key` (in a worker thread: a checkout may take a while).

        `writes`: the turn's write scopes (None: the whole tree), noted in the worktree's reach
        before the turn can write, so its commit scans only what it could change."""
        run_id = self.ledger.run.id
        admin = admin_dir(task_worktree_path(common_dir(self.root), run_id, key))
        pending = bool(setup_command) and (admin is None or not (admin / SETUP_DONE).exists())
        # a new worktree holds only what its scopes need over a shared base, unless a setup command
        # (which may write anywhere) or copied setup files (not in git) need every file there
        tree = git.ensure_task_worktree(self.root, run_id, key, reach=scopes.reach(writes),
                                        sparse=not pending and not copy_patterns,
                                        new_dirs=scopes.directory_reach(writes))
        marker = None
        admin = admin_dir(tree.path)
        if setup_command and admin is not None and not (admin / SETUP_DONE).exists():
            marker = admin / SETUP_DONE
            widen_reach(tree.path, None, once=True)  # a setup command may write anywhere
            git.make_whole(tree.path)
        view = self._prepare(tree, f"task {key}'s branch", copy_patterns)
        return Mount(key, tree.path, tuple(view.binds), tuple(view.hide), marker, view.base, view.over,
                     tree.base_commit, view.env)

    def view(self, copy_patterns: list[str]) -> Mount:
        """The run's read-only view at its integration head, for a turn that writes nothing:
        a plan, a synthesis or a chat turn reads the work the run has approved so far, not
        the person's live tree, which they may be editing (in a worker thread). Seen over the
        shared base, as a new task's worktree is, unless setup files (not in git) are copied into it."""
        tree = git.ensure_view_worktree(self.root, self.ledger.run.id, sparse=not copy_patterns)
        view = self._prepare(tree, f"run {self.ledger.run.id}'s branch", copy_patterns)
        return Mount(VIEW_KEY, tree.path, tuple(view.binds), tuple(view.hide), base=view.base, over=view.over,
                     env=view.env)

    def _prepare(self, tree: git.Worktree, whose: str, copy_patterns: list[str]) -> git.SandboxGitView:
        """Make `tree` ready for a sandbox: a place for .agent-box, the setup files copied
        into a new tree, and the view of git the sandbox gets."""
        box = tree.path / ".agent-box"
        if box.is_symlink() or (box.exists() and not box.is_dir()):
            raise AgentboxError(f"{box} is not a directory in {whose}",
                                "the real .agent-box/ is shown there; remove what the branch put in its place")
        box.mkdir(exist_ok=True)  # where the project's own .agent-box is shown, read-only
        if tree.origin != git.WorktreeOrigin.EXISTING and copy_patterns:
            git.copy_setup_files(self.root, tree.path, copy_patterns)
        return git.sandbox_git_view(self.root, tree.path, common=tree.common)

    def commit(self, job: Job, mount: Mount, *, profile: str, summary: str) -> TurnGit:
        """Commit what the turn changed on its branch (in a worker thread); what the branch holds now."""
        run_id = self.ledger.run.id
        subject = f"{mount.key}: {summary.strip().splitlines()[0][:72] if summary.strip() else job.kind + ' turn'}"
        message = (f"{subject}\n\nRole: {job.role}\nProfile: {profile}\nRun: {run_id}\nJob: {job.id}\n")
        made = git.commit_work(mount.path, author_name=f"{job.role} ({profile})",
                               author_email=f"{job.role}@agentbox.invalid", message=message,
                               turn_id=f"{run_id}/{job.id}/{job.attempt}")
        known = git.TaskHeads(git.task_branch(run_id, mount.key), mount.task_base, made.head) \
            if mount.task_base is not None else None
        return self.heads(mount.key, made.commit, known=known)

    def heads(self, key: str, commit: str | None = None, *, known: git.TaskHeads | None = None) -> TurnGit:
        """Where `key`'s branch stands: its base, head and changed files, from git (`known`: its
        refs as the caller has just read or moved them)."""
        heads = known or git.task_heads(self.root, self.ledger.run.id, key)
        if heads.base is None or heads.head is None:
            raise AgentboxError(f"task {key} has no branch in git any more ({heads.branch})",
                                "was it deleted by hand? the task's work cannot be found")
        changed, more = kept_changed_paths(self.root, heads.base, heads.head)
        return TurnGit(key, heads.branch, heads.base, heads.head, commit, changed, more)

    def record(self, turn: TurnGit, job: Job) -> None:
        """Put what a turn left in git on its task and in the log (in the loop)."""
        task = self.ledger.run.tasks.get(turn.key)
        files = [c.path for c in turn.changed]
        if task is not None:
            self.ledger.record_git(task, branch=turn.branch, base=turn.base, head=turn.head, changed=turn.changed,
                                   more=turn.more)
        what = (f"{turn.key}: {job.role}'s turn changed nothing" if turn.commit is None
                else f"{turn.key}: {job.role}'s turn committed ({len(files) + turn.more} file(s) changed on the branch)")
        self.ledger.event("commit", what, ", ".join(files[:20]) or None, task=task.id if task else None,
                          role=job.role, commit=turn.commit, head=turn.head, files=files[:200])
        if task is None and turn.commit is not None:  # a handoff turn: no review, merged at once
            self._merge(turn.key, None)

    def review_section(self, task: Task) -> str:
        """The task's diff against its base for the review prompt: stat, patch (bounded), and claims it does not back."""
        run = self.ledger.run
        if task.base is None or task.head is None:
            return "\n\n## The task's changes\n(no commit on the task's branch yet: the worker changed nothing)\n"
        diff = git.diff_text(self.root, task.base, task.head, max_bytes=DIFF_PROMPT_BYTES,
                             full_command=f"agentbox diff {run.id} {task.id}")
        changed = {c.path for c in task.changed_files}
        listed = list(getattr(task.submission, "artifacts", None) or [])
        unbacked = [] if task.changed_more else [  # a flood's unrecorded files may back any claim
            p for p in listed if p.strip("./") not in changed and not p.startswith(".agent-box/")]
        parts = [f"\n\n## The task's changes (git diff {task.base[:10]}..{task.head[:10]}, committed by agentbox)\n"
                 "You are in the task's worktree, read-only: read and run the real result.\n"]
        if not changed:
            parts.append("The worker changed no file.\n")
        else:
            parts.append("```\n" + diff.stat + "```\n```diff\n" + diff.patch + "```\n")
            if diff.truncated:
                parts.append(f"(the patch is cut here; the whole diff: `{diff.full_command}`, or read the files)\n")
        if unbacked:
            parts.append("Files the worker named that its branch does not change: " + ", ".join(unbacked[:20]) + "\n")
        return "".join(parts)

    # ------------------------------------------------------------------ approval
    def integrate(self, task: Task, at: str | None = None) -> list[str]:
        """Merge an approved task into the integration branch; the conflicting files (nothing merged) or [].

        `at` is the commit the approval judged (a prefix of it from a person): the branch must
        still be there, else the approval is stale (`StaleApproval`), and nothing left
        uncommitted is taken. Without it what a stopped turn left uncommitted is committed
        first (a person approving work in progress takes it as it is). On a conflict the
        approved work is brought into the task's branch with conflict markers for the worker
        to resolve; until a commit follows (a resumed approval, a rework that changed
        nothing) the task goes back again.
        """
        if not self.active:
            return []
        run_id = self.ledger.run.id
        state = git.approval_state(self.root, run_id, task.id)  # one git call for the head, its message, the run's
        if state.head is None:
            return []  # never dispatched in a worktree (approved before it ran): nothing to merge
        head, unresolved = state.head, state.unresolved
        path = self._worktree_path(task.id)
        if path is not None and at is None:
            left = git.commit_turn(path, author_name=f"{task.assignee}",
                                   author_email=f"{task.assignee}@agentbox.invalid",
                                   message=f"{task.id}: work left when the task was approved\n")
            if left is not None:  # a commit on top: no conflict left unresolved
                head, unresolved = left, []
        if unresolved:
            self._sent_back(task.id, task, unresolved, "its branch still holds the conflict markers brought into it")
            return unresolved
        if at is not None and not head.startswith(at):
            raise StaleApproval(task.id, at, head)
        return self._merge(task.id, task, known=(head, state.integration, state.integration_tree))

    def _merge(self, key: str, task: Task | None,
               known: tuple[str, str | None, str | None] | None = None) -> list[str]:
        run_id = self.ledger.run.id
        result = git.merge_task(self.root, run_id, key, known=known)
        if result.conflicts:
            synced = git.sync_task(self.root, run_id, key)
            self._sent_back(key, task, result.conflicts,
                            f"the approved work was brought into its branch with conflict markers ({synced.commit[:10]})")
            return result.conflicts
        assert result.merged_commit is not None
        if task is not None:
            self.ledger.record_merge(task, result.merged_commit)
        self.ledger.event("merge", f"{key} merged into {git.integration_branch(run_id)}"
                          + (" (already)" if result.already else ""), None, task=task.id if task else None,
                          commit=result.merged_commit)
        if task is not None:
            self.release(task)
        return []

    def _sent_back(self, key: str, task: Task | None, conflicts: list[str], how: str) -> None:
        """Record where a conflicting task's branch stands, leave its worker the note saying what
        to resolve, and log the conflict (the caller sends it back)."""
        if task is not None:
            turn = self.heads(key)
            self.ledger.record_git(task, branch=turn.branch, base=turn.base, head=turn.head, changed=turn.changed,
                                   more=turn.more)
            self.ledger.leave_note(task, merge_conflict_note(conflicts), by="agentbox")
        self.ledger.event("merge.conflict", f"{key} conflicts with the run's approved work",
                          "in " + ", ".join(conflicts[:20]) + "; " + how, task=task.id if task else None,
                          files=conflicts[:200], human_required=False)

    def release(self, task: Task, *, discard: bool = False) -> None:
        """Take a finished task's worktree away (its branch stays until the run is delivered or cleaned)."""
        if not self.active:
            return
        try:
            git.remove_task_worktree(self.root, self.ledger.run.id, task.id, discard_uncommitted=discard)
        except AgentboxError as exc:
            self.ledger.event("workspace", f"{task.id}'s worktree was kept", exc.message, task=task.id)

    # ------------------------------------------------------------------ the run
    def started(self) -> None:
        """Say where the run's work lives (its first events)."""
        run = self.ledger.run
        if not self.active:
            self.ledger.event("workspace", "shared workspace: writers work in the project's live tree",
                              "crew.yaml `workspace: shared`, or the project is no git repository with a commit")
            return
        assert run.git is not None
        where = (f"--base {run.git.named_base}" if run.git.named_base else None) or run.git.branch or "a detached HEAD"
        if run.git.dirty:
            why = (f"your uncommitted changes to tracked files on {where} were snapshotted as {run.git.base[:10]} "
                   "(your tree, index and stash are untouched), so agents see what you see")
        else:
            why = f"the base is {where} at {run.git.base[:10]}"
        self.ledger.event("workspace", f"worktree workspace: each writer task gets its own branch; approved work "
                          f"goes to {run.git.integration_branch}", why)

    def recover(self) -> None:
        """Take the run's git up again after a crash (stale lock files of killed git calls)."""
        if self.active:
            removed = git.recover_run(self.root, self.ledger.run.id)
            if removed:
                self.ledger.event("workspace", f"removed {len(removed)} lock file(s) a killed git left", None)

    def finish(self, checks: tuple[bool, str] | None = None) -> None:
        """The run ended: worktrees away; a done run's branch delivered as crew.yaml's `deliver` says.

        `checks`: whether the run's final checks passed, and what to tell the person of them; a
        red one is never merged without asking, and the question says so."""
        run = self.ledger.run
        if not self.active or run.git is None:
            return
        for task in run.tasks.values():
            # most were released when merged or cancelled; a call for a gone one would walk
            # every worktree of the repository again
            if task.is_terminal and self._worktree_path(task.id) is not None:
                self.release(task, discard=True)
        if run.contract.mode == "handoff":  # its writing turns' worktree (each turn was merged after it)
            with contextlib.suppress(AgentboxError):
                git.remove_task_worktree(self.root, run.id, HANDOFF_KEY, keep_spare=False, discard_uncommitted=True)
        with contextlib.suppress(AgentboxError):
            git.remove_view_worktree(self.root, run.id)
            git.remove_spares(self.root, run.id)
        if run.status != "done" or run.git.delivered or any(c.kind == "deliver" for c in run.checkpoints.values()):
            return
        stat = self.run_stat()
        red = checks is not None and not checks[0]
        report = f"\n{checks[1]}" if checks is not None else ""
        if run.git.branch is None or run.contract.deliver == "manual":  # no branch of the person's to go into
            self.ledger.event("deliver", f"the run's work is on {run.git.integration_branch}",
                              f"{merge_hint(run)}\n{stat}{report}", human_required=True)
        elif run.contract.deliver == "merge" and not red:
            self.deliver(None, squash=False)
        else:  # asked: `checkpoint`, or `merge` whose final checks failed (never merged without saying so)
            ask = (f"Merge {run.git.integration_branch} into {run.git.branch} although its final checks failed?"
                   if red else f"Merge {run.git.integration_branch} into {run.git.branch}?")
            self.ledger.checkpoint(
                "deliver", f"The run is done. {ask}\n{stat}{report}\n"
                "Answer 'merge', 'squash' (one commit), or 'later' (then `agentbox merge` does it).",
                options=["merge", "squash", "later"])

    def run_stat(self) -> str:
        """The stat of everything the run's integration branch holds over its base."""
        run = self.ledger.run
        assert run.git is not None
        diff = git.diff_text(self.root, run.git.base, git.integration_branch(run.id), max_bytes=16 * 1024,
                             stat_only=True)
        return diff.stat.rstrip() or "(no changes)"

    def deliver(self, into: str | None, *, squash: bool) -> str:
        """Bring the run's integration branch into the person's branch; what happened (errors raise)."""
        run = self.ledger.run
        if not self.active or run.git is None:
            raise AgentboxError(f"run {run.id} has no branch to merge: its workspace is shared",
                                "its work is already in your tree")
        base = git.Base(commit=run.git.base, branch=run.git.branch, dirty=run.git.dirty, head=run.git.head)
        try:
            result = git.deliver(self.root, run.id, into=into, squash=squash, base=base, goal=run.contract.goal)
        except AgentboxError as exc:  # a conflict, uncommitted changes in the way: a refusal saying what to do
            # the command channel carries one text: the hint goes on its own line, as the CLI prints one
            raise UsageError(f"{exc.message}\nhint: {exc.hint}" if exc.hint else exc.message) from None
        self.ledger.record_delivery(result.commit, result.into)
        for cp in run.open_checkpoints():
            if cp.kind == "deliver":
                self.ledger.close_checkpoint(cp, "merged")
        how = "squashed into one commit" if result.squashed else "merged"
        if result.already:
            what = f"{run.git.integration_branch} was already in {result.into}"
        elif result.empty:
            what = f"the run changed nothing in {result.into}: no commit was made"
        else:
            what = f"{run.git.integration_branch} {how} into {result.into} ({result.commit[:10]})"
        self.ledger.event("deliver", what, None, commit=result.commit, human_required=False)
        return what

    def _worktree_path(self, key: str) -> Path | None:
        path = task_worktree_path(common_dir(self.root), self.ledger.run.id, key)
        return path if path.is_dir() else None
