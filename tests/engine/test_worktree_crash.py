"""Crash recovery of worktree runs: kill -9 the engine's process group at random points, resume, repeat.

A hierarchical run in a git repository (real git, real bwrap, scripted agents as real
processes): writer tasks change files in their own worktrees (adding, changing and deleting
files), one is rejected and reworked in the same worktree, some depend on others and see
their approved work. The engine runs as `agentbox run --resume RUN` and is SIGKILLed with
its whole process group (its git calls too): at a random moment (start-up and recovery
included), just after a task's branch is made (while its worktree is being made), just
after a turn's commit lands on a task branch (before the engine records it), just after a
merge moves the integration branch (before the task is recorded approved, while its
worktree is parked), and as the run ends (while its worktrees are taken away); then
resumed, over and over, then to the end. What git holds must then be exactly the approved
work, each task merged once and each turn committed once, with nothing of the person's
touched and nothing left behind.

The kills are seeded (AGENTBOX_CRASH_SEED replays a failure as closely as timing allows;
the seed and every kill are printed). A kill between a merge conflict brought into a task's
branch and its record is placed exactly, by taking that git step by hand.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agentbox.core.engine.models import Run
from agentbox.core.engine.run_store import RunStore
from agentbox.core.paths import ProjectPaths
from agentbox.core.workspace.worktrees import TURN_TRAILER
from tests.engine.support import (
    WORK_RE,
    agent_processes,
    assert_log_consistent,
    create,
    of_type,
    prompts_of,
    review_rule,
    setup_crew,
    start_engine,
    stop,
    task,
    wait_gone,
    work_rule,
)
from tests.engine.test_crash import ROLES, check_after_kill
from tests.engine.test_worktree_runs import git, make_repo, person_state

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]

KILLS = 20
"""Kills at least, over at most MAX_RUNS runs (a new run starts when one ends first)."""
MAX_KILLS = 45
"""Kills at most: past KILLS, the loop goes on only until a kill has landed in each window."""
MAX_RUNS = 4
SEED = int(os.environ.get("AGENTBOX_CRASH_SEED", "20261201"))
TRAILER = f"{TURN_TRAILER}: "
WORK_S, REVIEW_S = 0.4, 0.2
"""How long a scripted work turn and a review take (besides starting a sandboxed process)."""

TASKS = [
    task("t1", "builder", writes=["src/t1/**"]),
    task("t2", "tester", writes=["tests/t2/**"], deps=["t1"]),
    task("t3", "builder", writes=["src/t3/**"]),
    task("t4", "writer", writes=["docs/**"]),
    task("t5", "builder", writes=["src/t5/**", "src/app.py"], deps=["t3", "t4"]),
    task("t6", "tester", writes=["tests/t6/**"]),
    task("t7", "builder", writes=["src/t7/**"], deps=["t6"]),
    task("t8", "writer", writes=["docs/t8/**"], deps=["t2"]),
]
EXPECTED: dict[str, str | None] = {
    "src/t1/code.py": "VALUE = 1\n",
    "src/t1/util.py": "def util() -> int:\n    return 1\n",
    "tests/t2/seen_t1.py": "VALUE = 1\n",  # t2 copies what it sees of t1's approved work
    "tests/t2/test_t2.py": "def test_t2() -> None:\n    assert True\n",
    "src/t3/first.py": "FIRST = 1\n",
    "src/t3/second.py": "SECOND = 2\n",  # only its rework writes it
    "docs/t4/guide.md": "# Guide\n",
    "docs/old.md": None,  # t4 deletes it
    "src/t5/main.py": "from src.t3.first import FIRST\n",
    "src/app.py": "print('app v2')\n",  # t5 changes a file of the base
    "tests/t6/test_t6.py": "def test_t6() -> None:\n    assert 6\n",
    "src/t7/seven.py": "SEVEN = 7\n",
    "docs/t8/notes.md": "notes\n",
}
"""What the approved tasks change, over the run's base: path → content (None: deleted)."""
COMMITS_PER_TASK = {"t1": 1, "t2": 1, "t3": 2, "t4": 1, "t5": 1, "t6": 1, "t7": 1, "t8": 1}
"""Turns that change something: one each, t3 two (its work and its rework)."""

WORKER = [
    work_rule(WORK_S, task_id="t1", rule_id="w1",
              write={"src/t1/code.py": EXPECTED["src/t1/code.py"], "src/t1/util.py": EXPECTED["src/t1/util.py"]}),
    work_rule(WORK_S, task_id="t2", rule_id="w2", write={"tests/t2/test_t2.py": EXPECTED["tests/t2/test_t2.py"]},
              run="cp src/t1/code.py tests/t2/seen_t1.py"),
    # t3: its first attempt writes one file; the rework (sent after the rejection) adds the second
    {**work_rule(WORK_S, task_id="t3", rule_id="w3b", write={"src/t3/second.py": EXPECTED["src/t3/second.py"]}),
     "when": {"prompt_regex": WORK_RE.replace("(?:work|rework)", "rework").replace(r"(?P<task>[\w.-]+)", "(?P<task>t3)")}},
    work_rule(WORK_S, task_id="t3", rule_id="w3", write={"src/t3/first.py": EXPECTED["src/t3/first.py"]}),
    work_rule(WORK_S, task_id="t4", rule_id="w4", write={"docs/t4/guide.md": EXPECTED["docs/t4/guide.md"]},
              run="rm -f docs/old.md"),
    work_rule(WORK_S, task_id="t5", rule_id="w5",
              write={"src/t5/main.py": EXPECTED["src/t5/main.py"], "src/app.py": EXPECTED["src/app.py"]}),
    *[work_rule(WORK_S, task_id=task_id, rule_id=f"w{task_id}", write={path: EXPECTED[path]})
      for task_id, path in (("t6", "tests/t6/test_t6.py"), ("t7", "src/t7/seven.py"), ("t8", "docs/t8/notes.md"))],
]
REVIEWER = [
    # t3 is rejected as long as the diff the reviewer is shown lacks the rework's file (no
    # `times` counter: a resumed review decides the same)
    {**review_rule("reject", task_id="t3", delay=REVIEW_S, rule_id="r3"),
     "when": {"prompt_regex": r"\[agentbox:review task=(?P<task>t3) (?![\s\S]*src/t3/second\.py)"}},
    review_rule("approve", delay=REVIEW_S, rule_id="ok"),
]


@dataclass
class Kills:
    """What the crash loop did, for the report and the replay."""

    seed: int
    log: list[str] = field(default_factory=list)
    total: int = 0
    unrecorded_commits: int = 0
    """Kills that landed after a turn's commit reached git and before the engine recorded it."""
    unrecorded_merges: int = 0
    """Kills that landed after a merge reached git and before the engine recorded the approval."""

    def windows_hit(self) -> bool:
        return self.unrecorded_commits > 0 and self.unrecorded_merges > 0

    def report(self, runs: int) -> str:
        return (f"seed {self.seed} (AGENTBOX_CRASH_SEED replays it): {self.total} kills over {runs} run(s), "
                f"{self.unrecorded_commits} after a commit, {self.unrecorded_merges} after a merge\n  "
                + "\n  ".join(self.log))


# ----------------------------------------------------------------------------- git facts


def loose_run_refs(common: Path, run_id: str) -> dict[str, str]:
    """The run's branch heads read straight from the loose ref files (cheap enough to poll every few ms)."""
    found = {}
    for path in (common / "refs" / "heads" / "agentbox").glob(f"{run_id}*"):
        if path.name == run_id or (path.name.startswith(f"{run_id}@") and not path.name.endswith(".lock")):
            with contextlib.suppress(OSError):
                found[path.name] = path.read_text().strip()
    return found


def rev(root: Path, name: str) -> str | None:
    out = subprocess.run(["git", "-C", str(root), "rev-parse", "-q", "--verify", f"{name}^{{commit}}"],
                         capture_output=True, text=True)
    return out.stdout.strip() or None if out.returncode == 0 else None


def is_ancestor(root: Path, older: str, newer: str) -> bool:
    return subprocess.run(["git", "-C", str(root), "merge-base", "--is-ancestor", older, newer]).returncode == 0


def unrecorded(root: Path, run: Run) -> tuple[list[str], list[str]]:
    """Tasks whose branch has a commit run.json does not know of, and tasks merged in git but not recorded."""
    commits, merges = [], []
    integration = rev(root, f"agentbox/{run.id}")
    for task_id, state in run.tasks.items():
        head = rev(root, f"agentbox/{run.id}@{task_id}")
        base = rev(root, f"refs/agentbox/{run.id}/tasks/{task_id}/base")
        if head is None or head == base:
            continue
        if head != state.head:
            commits.append(task_id)
        if state.merged is None and integration is not None and is_ancestor(root, head, integration):
            merges.append(task_id)
    return commits, merges


# ----------------------------------------------------------------------------- the crash loop


def wait_taken(paths: ProjectPaths, run_id: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> bool:
    """Wait until the engine process holds the run (its pid in run.json); False when the run has ended."""
    store = RunStore(paths)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = store.load(run_id)
        if state.status in ("done", "failed", "cancelled"):
            return False
        if state.engine and state.engine.pid == proc.pid:
            return True
        if proc.poll() is not None:
            raise AssertionError(f"the engine exited ({proc.returncode}): "
                                 + (proc.stderr.read().decode() if proc.stderr else ""))
        time.sleep(0.01)
    raise AssertionError("the engine did not take the run")


def wait_for_ref_change(common: Path, run_id: str, proc: subprocess.Popen[bytes], what: str,
                        timeout: float = 30) -> str:
    """Poll the run's refs until a task branch is made (`branch`), gets a commit (`commit`), or the
    integration branch gets a merge (`merge`); the branch that moved."""
    before = loose_run_refs(common, run_id)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        now = loose_run_refs(common, run_id)
        for name, value in now.items():
            if what == "branch" and name not in before:
                return name
            if (name == run_id) == (what == "merge") and name in before and before[name] != value:
                return name
        before.update({k: v for k, v in now.items() if k not in before})
        time.sleep(0.002)
    return "nothing (timed out)" if proc.poll() is None else "nothing (the engine ended)"


def kill_group(proc: subprocess.Popen[bytes]) -> bool:
    """SIGKILL the engine's whole process group (git calls included); False when it had ended already."""
    if proc.poll() is not None:
        return False
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    return True


def one_life(paths: ProjectPaths, run_id: str, rng: random.Random, kills: Kills, marker: str) -> bool:
    """Start the engine on the run and kill it at a random point; False when the run ended first."""
    if RunStore(paths).load(run_id).status in ("done", "failed", "cancelled"):
        return False
    common = paths.root / ".git"
    how = rng.choices(["early", "random", "branch", "commit", "merge"], weights=[1, 4, 2, 3, 3])[0]
    delay = {"early": rng.uniform(0.2, 1.2), "random": rng.uniform(0.05, 1.0), "branch": rng.uniform(0, 0.03)
             }.get(how, rng.uniform(0, 0.01))
    proc = start_engine(paths, run_id)
    try:
        if how == "early":  # during start-up and recovery, before the engine has taken the run
            time.sleep(delay)
            where = f"{delay:.2f}s after start"
        else:
            if not wait_taken(paths, run_id, proc):
                return False
            if how == "random":
                time.sleep(delay)
                where = f"{delay:.2f}s after taking the run"
            else:
                moved = wait_for_ref_change(common, run_id, proc, how)
                time.sleep(delay)  # into the git calls that follow (a worktree being made, or parked)
                where = f"{delay * 1000:.0f}ms after {moved} moved"
        if not kill_group(proc):
            return False
    finally:
        stop(proc)
    kills.total += 1
    check_after_kill(paths, run_id)
    assert wait_gone(lambda: agent_processes(marker), timeout=15) == [], "an agent outlived the engine"
    commits, merges = unrecorded(paths.root, RunStore(paths).load(run_id))
    kills.unrecorded_commits += bool(commits)
    kills.unrecorded_merges += bool(merges)
    kills.log.append(f"kill {kills.total} ({how}) {run_id}: {where}"
                     + (f"; commit of {commits} not yet recorded" if commits else "")
                     + (f"; merge of {merges} not yet recorded" if merges else ""))
    return True


def kill_at_the_end(paths: ProjectPaths, run_id: str, kills: Kills) -> None:
    """Kill the engine the moment the run is done, while it takes the run's worktrees away."""
    store = RunStore(paths)
    if store.load(run_id).status == "done":
        return
    proc = start_engine(paths, run_id)
    try:
        deadline = time.monotonic() + 300
        while store.load(run_id).status != "done" and proc.poll() is None:
            assert time.monotonic() < deadline, "the run did not end"
            time.sleep(0.005)
        killed = kill_group(proc)
    finally:
        stop(proc)
    kills.total += killed
    kills.log.append(f"kill {kills.total} (end) {run_id}: as the run ended" if killed
                     else f"no kill (end) {run_id}: the engine had ended")


# ----------------------------------------------------------------------------- what git must hold


def tree(root: Path, commit: str) -> dict[str, str]:
    """path → blob id of every file in `commit`."""
    out = git(root, "ls-tree", "-r", "-z", commit)
    entries = {}
    for entry in out.split("\0"):
        if entry:
            meta, path = entry.split("\t", 1)
            entries[path] = meta.split()[2]
    return entries


def blob_id(root: Path, text: str) -> str:
    return subprocess.run(["git", "-C", str(root), "hash-object", "--stdin"], input=text, capture_output=True,
                          text=True, check=True).stdout.strip()


def check_git(root: Path, run: Run, log: list[dict[str, object]]) -> None:
    """Every approved task merged exactly once, the branch is exactly the approved work, one commit per turn."""
    assert run.git is not None
    integration, base = f"agentbox/{run.id}", run.git.base
    assert rev(root, f"refs/agentbox/{run.id}/base") == base

    expected = tree(root, base)
    for path, text in EXPECTED.items():
        if text is None:
            assert path in expected, f"{path} must be in the base for its deletion to count"
            del expected[path]
        else:
            expected[path] = blob_id(root, text)
    assert tree(root, integration) == expected, "the integration branch is not exactly the approved work"

    # first-parent history: one merge commit per task, merging that task's final head
    lines = git(root, "rev-list", "--first-parent", "--parents", f"{base}..{integration}").split("\n")
    merged_heads = []
    for line in filter(None, lines):
        commit, *parents = line.split()
        assert len(parents) == 2, f"{commit} on {integration} is not a merge of a task"
        merged_heads.append(parents[1])
    heads = {task_id: rev(root, f"agentbox/{run.id}@{task_id}") for task_id in run.tasks}
    assert sorted(merged_heads) == sorted(h for h in heads.values() if h), "a task merged twice, or not at all"

    for task_id, state in run.tasks.items():
        assert state.state == "approved" and state.merged, (task_id, state.state)
        assert state.head == heads[task_id] and state.base == rev(root, f"refs/agentbox/{run.id}/tasks/{task_id}/base")
        assert len(of_type(log, "merge", task_id)) == 1, f"{task_id}: merged {len(of_type(log, 'merge', task_id))} times"
        assert len(of_type(log, "task.approve", task_id)) == 1
        assert len(of_type(log, "merge.conflict", task_id)) == 0
        # one commit per turn that changed something: no commit of a resumed turn repeats its first attempt
        commits = git(root, "rev-list", "--no-merges", f"{state.base}..{state.head}").split()
        assert len(commits) == COMMITS_PER_TASK[task_id], (task_id, len(commits))
        turns = [next(line[len(TRAILER):] for line in git(root, "cat-file", "commit", c).splitlines()
                      if line.startswith(TRAILER)) for c in commits]
        assert len(set(turns)) == len(turns), f"{task_id}: a turn committed twice: {turns}"
        recorded = {e["commit"] for e in of_type(log, "commit", task_id) if e.get("commit")}
        assert recorded == set(commits), f"{task_id}: the log's commits are not the branch's"
    t3 = run.tasks["t3"]
    assert [v.verdict for v in t3.verdicts] == ["reject", "approve"]
    assert [c.path for c in t3.changed_files] == ["src/t3/first.py", "src/t3/second.py"]
    assert {c.path: c.change for c in run.tasks["t4"].changed_files} == {"docs/old.md": "D", "docs/t4/guide.md": "A"}


def check_nothing_left(root: Path, run_ids: list[str]) -> None:
    """No worktree, spare, trash or lock file of agentbox's is left in the repository."""
    common = root / ".git"
    listed = [line for line in git(root, "worktree", "list", "--porcelain").splitlines() if line.startswith("worktree ")]
    assert listed == [f"worktree {root}"], listed
    for run_id in run_ids:
        left = common / "agentbox" / "worktrees" / run_id
        assert [p for p in left.rglob("*") if not p.is_dir()] == []  # (empty directories are clean's to tidy)
    assert not (common / "worktrees").exists() or not any((common / "worktrees").iterdir())
    trash = common / "agentbox" / "trash"
    assert [p for p in trash.rglob("*") if not p.is_dir()] == []
    assert sorted(common.rglob("*.lock")) == []


# ----------------------------------------------------------------------------- the test


def test_kill_9_at_random_points_of_a_worktree_run_and_resume(project: Path, agent_box_home: Path) -> None:
    (project / "docs").mkdir()
    (project / "docs" / "old.md").write_text("# old\n")
    make_repo(project)
    paths = setup_crew(project, roles=ROLES, tasks=TASKS, worker=WORKER, reviewer=REVIEWER,
                       limits={"max_workers": 2})  # crew.yaml changes: the base snapshots the person's change
    (project / "notes.txt").write_text("the person's own, untracked\n")
    before = person_state(project)
    rng = random.Random(SEED)
    kills = Kills(SEED)
    print(f"seed {SEED}")
    run_ids: list[str] = []
    try:
        while len(run_ids) < MAX_RUNS and (kills.total < KILLS or (not kills.windows_hit() and kills.total < MAX_KILLS)):
            run_ids.append(create(paths, f"worktree crash test {len(run_ids) + 1}"))
            while kills.total < KILLS or (not kills.windows_hit() and kills.total < MAX_KILLS):
                if not one_life(paths, run_ids[-1], rng, kills, str(agent_box_home)):
                    break
        for run_id in run_ids:  # each killed as it ends, then resumed to the end, as the person would
            kill_at_the_end(paths, run_id, kills)
            proc = start_engine(paths, run_id)
            try:
                assert proc.wait(timeout=300) == 0, proc.stderr.read().decode() if proc.stderr else ""
            finally:
                stop(proc)
    finally:
        print(kills.report(len(run_ids)))
    assert kills.total >= KILLS
    assert kills.unrecorded_commits and kills.unrecorded_merges, "no kill landed between git and the run's record"
    assert wait_gone(lambda: agent_processes(str(agent_box_home))) == []

    for run_id in run_ids:
        run = RunStore(paths).load(run_id)
        assert run.status == "done", (run.status, run.status_reason)
        assert set(run.tasks) == {t["id"] for t in TASKS}
        assert run.jobs == {} and run.engine is None
        log = assert_log_consistent(paths, run_id)
        check_git(project, run, log)
        assert len([c for c in run.checkpoints.values() if c.kind == "deliver"]) == 1
        assert len(of_type(log, "run.finished")) == 1
    check_nothing_left(project, run_ids)
    assert person_state(project) == before, "the person's tree, index, stash or branch changed"
    assert "agentbox/" not in git(project, "symbolic-ref", "HEAD")


def test_a_kill_after_a_conflict_was_brought_into_the_task_still_sends_it_back(project: Path,
                                                                                agent_box_home: Path) -> None:
    """Killed between bringing the approved work into a conflicting task's branch (with conflict
    markers) and recording it: the resumed review approves again, and the task must still go back
    to its worker, not merge the markers. The kill lands exactly there: the engine is killed while
    the review runs, and the git step it would have taken next is taken by hand."""
    from agentbox.core import workspace

    make_repo(project)
    resolve = work_rule(task_id="t2", rule_id="c2b", write={"src/app.py": "print('t1')\nprint('t2')\n"})
    resolve["when"]["prompt_contains"] = "merge conflict: your approved work conflicts"
    worker = [
        work_rule(task_id="t1", rule_id="c1", write={"src/app.py": "print('t1')\n"}),
        resolve,  # sent back: it resolves the markers, keeping both
        work_rule(task_id="t2", rule_id="c2", write={"src/app.py": "print('t2')\n"}),
    ]
    reviewer = [review_rule("approve", task_id="t2", rule_id="slow2", delay=60, times=1)]  # killed while it runs
    paths = setup_crew(project, worker=worker, reviewer=reviewer, limits={"max_workers": 2},
                       tasks=[task("t1", "builder", writes=["src/**"]), task("t2", "tester", writes=["src/**"])])
    run_id = create(paths)
    store = RunStore(paths)
    proc = start_engine(paths, run_id)
    try:
        deadline = time.monotonic() + 120
        while True:
            run = store.load(run_id)
            if run.tasks.get("t1") and run.tasks["t1"].merged and any(
                    j.kind == "review" and j.task == "t2" and j.pid for j in run.jobs.values()):
                break
            assert time.monotonic() < deadline and proc.poll() is None, "t2's review never started after t1's merge"
            time.sleep(0.02)
        assert kill_group(proc)
    finally:
        stop(proc)
    assert workspace.merge_task(project, run_id, "t2").conflicts == ["src/app.py"]  # what the engine does next
    synced = workspace.sync_task(project, run_id, "t2")
    assert synced.conflicts == ["src/app.py"]
    proc = start_engine(paths, run_id)
    try:
        assert proc.wait(timeout=180) == 0, proc.stderr.read().decode() if proc.stderr else ""
    finally:
        stop(proc)
    run = store.load(run_id)
    assert run.status == "done", run.status_reason
    assert git(project, "show", f"agentbox/{run_id}:src/app.py") == "print('t1')\nprint('t2')\n"
    log = assert_log_consistent(paths, run_id)
    assert [e["files"] for e in of_type(log, "merge.conflict", "t2")] == [["src/app.py"]]
    assert len(of_type(log, "merge", "t2")) == 1 and len(of_type(log, "task.approve", "t2")) == 1
    rework_prompt = prompts_of(paths, run.tasks["t2"].session_id or "")[-1]
    assert "merge conflict" in rework_prompt and "src/app.py" in rework_prompt
    check_nothing_left(project, [run_id])

