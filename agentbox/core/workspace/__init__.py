"""Git plumbing for worktree workspaces: a branch and a worktree per writer task.

A run starts from the person's HEAD, or from a commit of their uncommitted changes to
tracked files (`snapshot_base`), on an integration branch `agentbox/<run>`. Each writer
task works on `agentbox/<run>@<task>` in a worktree inside the git dir
(`ensure_task_worktree`); agentbox commits each turn (`commit_turn`), shows what it
changed (`changed_files`, `diff_text`), merges it on approval without touching a working
tree (`merge_task`; after a conflict `sync_task` brings the integrated work into the task
for its rework, and `unresolved_conflicts` tells until the worker has resolved it), and
the person brings the run into their branch (`deliver`). A finished task's worktree is
parked for the run's next task (`remove_task_worktree`), so most tasks pay a switch, not a
checkout. `recover_run` clears what a killed engine's git calls left; `clean` and
`orphans` deal with what finished runs left. The layout of refs and directories is drawn
in `agentbox.core.workspace.layout`; how a sandbox sees git, in `.provision`.

Every git call goes through one runner (`.gitcmd`): no system or global config, no hook,
fsmonitor, filter, textconv, external diff or merge driver, the caller's `GIT_*` environment
dropped; a repository an agent makes inside a worktree is committed as plain files, never
entered (`worktrees.flatten_nested`). Repositories and agents are untrusted.
This package depends on nothing of agentbox's but errors and ids.
"""

from agentbox.core.workspace.bases import make_whole
from agentbox.core.workspace.cleanup import CleanPlan, Orphan, OrphanKind, Refusal, clean, orphans
from agentbox.core.workspace.diffs import (
    Change,
    ChangedFile,
    ChangedSummary,
    Diff,
    changed_files,
    changed_names,
    changed_summary,
    diff_text,
)
from agentbox.core.workspace.gitcmd import GitError
from agentbox.core.workspace.integration import (
    Base,
    DeliverResult,
    MergeConflictError,
    MergeResult,
    deliver,
    ensure_integration_branch,
    merge_task,
    named_base,
    snapshot_base,
)
from agentbox.core.workspace.layout import RepoInfo, integration_branch, repo_info, task_branch
from agentbox.core.workspace.provision import (
    SANDBOX_GIT_DIR,
    SandboxGitView,
    SetupCopy,
    copy_setup_files,
    sandbox_git_view,
)
from agentbox.core.workspace.recovery import recover_run
from agentbox.core.workspace.worktrees import (
    ApprovalState,
    SyncResult,
    TaskHeads,
    TurnCommit,
    Worktree,
    WorktreeOrigin,
    approval_state,
    commit_turn,
    commit_work,
    ensure_task_worktree,
    ensure_view_worktree,
    remove_spares,
    remove_task_worktree,
    remove_view_worktree,
    sync_task,
    task_heads,
    unresolved_conflicts,
)

__all__ = [
    "ApprovalState", "TurnCommit", "approval_state", "commit_work", "SANDBOX_GIT_DIR", "Base", "Change", "ChangedFile", "CleanPlan", "DeliverResult", "Diff", "GitError",
    "MergeConflictError", "MergeResult", "Orphan", "OrphanKind", "Refusal", "RepoInfo", "SandboxGitView",
    "SetupCopy", "SyncResult", "TaskHeads", "Worktree", "WorktreeOrigin", "changed_files", "changed_names",
    "changed_summary", "ChangedSummary", "clean",
    "commit_turn", "copy_setup_files", "deliver", "diff_text", "ensure_integration_branch",
    "ensure_task_worktree", "ensure_view_worktree", "integration_branch", "make_whole", "merge_task", "named_base", "orphans", "recover_run", "remove_spares",
    "remove_task_worktree", "remove_view_worktree", "repo_info", "sandbox_git_view", "snapshot_base", "sync_task",
    "task_branch", "task_heads", "unresolved_conflicts",
]
