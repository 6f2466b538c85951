"""The headless pieces under the TUI: file-change facts, incremental reads, process sampling, formatting."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentbox.core import runs, store, watch
from agentbox.core.engine.changeset import Changes
from agentbox.core.engine.run_store import RunStore
from agentbox.core.paths import ProjectPaths
from agentbox.core.reports.monitor import ProcessMonitor, agent_pids
from agentbox.tui import model
from agentbox.tui.loaders import Coalescer
from tests.tui.builders import RUN_ID

BOX = Path("/repo/.agent-box")
PROJECT = ProjectPaths(Path("/repo"))


@pytest.mark.parametrize(("path", "fact"), [
    (BOX / "runs/r1/run.json", watch.RunChanged("r1")),
    (BOX / "runs/r1", watch.RunChanged("r1")),
    (BOX / "runs/r1/journal-7.jsonl", watch.RunChanged("r1")),  # a save after the snapshot
    (BOX / "runs/r1/events.jsonl", watch.EventsAppended("r1")),
    (BOX / "runs/r1/artifacts/greet/notes.md", watch.ArtifactsChanged("r1")),
    (BOX / "runs/r1/artifacts/manifest.jsonl", watch.ArtifactsChanged("r1")),
    (BOX / "sessions/builder/abc.json", watch.SessionChanged("builder", "abc")),
    (BOX / "sessions/builder/abc.turns.jsonl", watch.SessionChanged("builder", "abc")),
    (BOX / "crew.yaml", watch.CrewChanged()),
    (BOX / "roles/lead.md", watch.CrewChanged()),
    (BOX / "knowledge/project.md", watch.CrewChanged()),
    (BOX / "graphs/build.yaml", watch.GraphsChanged()),
    (Path("/home/me/.agent-box/profiles/claude"), watch.ProfilesChanged()),
    (Path("/home/me/.agent-box/profiles/claude/profile.yaml"), watch.ProfilesChanged()),
])
def test_changes_become_facts(path: Path, fact: watch.BoxChange) -> None:
    assert watch.classify(PROJECT, path, Path("/home/me/.agent-box/profiles")) == fact


@pytest.mark.parametrize("path", [
    BOX / "runs/r1/.run.json.x8a2.tmp",         # temp file of an atomic write
    BOX / "runs/r1/events.jsonl.lock",
    BOX / "runs/r1/engine.lock",
    BOX / "runs/r1/engine.log",
    BOX / "runs/r1/inbox.jsonl",
    BOX / "sessions/.locks/abc.lock",
    BOX / "sessions/builder/abc.logs/turn-1.log",  # raw agent output
    Path("/elsewhere/file.txt"),
    Path("/home/me/.agent-box/profiles/claude/dot-claude.json"),  # the tool's own state
    Path("/home/me/.agent-box/profiles/claude/dot-claude/profile.yaml"),
])
def test_noise_is_not_news(path: Path) -> None:
    assert watch.classify(PROJECT, path, Path("/home/me/.agent-box/profiles")) is None


def test_a_batch_is_deduplicated_and_ordered() -> None:
    paths = [BOX / "runs/r1/run.json", BOX / "runs/r1/.run.json.1.tmp", BOX / "runs/r1/run.json",
             BOX / "runs/r1/events.jsonl"]
    assert watch.classify_all(PROJECT, paths) == [watch.EventsAppended("r1"), watch.RunChanged("r1")]


async def test_watch_project_sees_a_write_from_another_process(tmp_path: Path) -> None:
    project = ProjectPaths(tmp_path)
    (project.runs_dir / "r1").mkdir(parents=True)
    batches: list[list[watch.BoxChange]] = []

    watching = asyncio.Event()

    async def follow() -> None:
        async for facts in watch.watch_project(project, ready=watching.set):
            batches.append(facts)
            if any(isinstance(f, watch.RunChanged) for f in facts):
                return

    follower = asyncio.ensure_future(follow())
    await asyncio.wait_for(watching.wait(), 30)
    code = "from agentbox.core import store; from pathlib import Path; store.atomic_write_json(Path(%r), {'x': 1})"
    subprocess.run([sys.executable, "-c", code % str(project.runs_dir / "r1" / "run.json")], check=True)
    await asyncio.wait_for(follower, 10)
    assert watch.RunChanged("r1") in [f for batch in batches for f in batch]


async def test_watch_project_sees_a_profile_yaml_edit_and_not_the_tool_state(tmp_path: Path) -> None:
    project = ProjectPaths(tmp_path / "repo")
    project.box.mkdir(parents=True)
    profile = tmp_path / "home" / "profiles" / "claude"
    profile.mkdir(parents=True)
    (profile / "profile.yaml").write_text("name: claude\n")
    batches: list[list[watch.BoxChange]] = []
    watching = asyncio.Event()

    async def follow() -> None:
        async for facts in watch.watch_project(project, profiles_dir=profile.parent, ready=watching.set):
            batches.append(facts)
            if watch.ProfilesChanged() in facts:
                return

    follower = asyncio.ensure_future(follow())
    await asyncio.wait_for(watching.wait(), 30)  # both watchers (the box's and the profiles') watch
    (profile / "dot-claude.json").write_text("{}")  # a turn's tool state: no news
    await asyncio.sleep(0.3)
    assert batches == []
    (profile / "profile.yaml").write_text("name: claude\nruntime: {tool: claude, model: opus}\n")
    await asyncio.wait_for(follower, 10)
    assert batches == [[watch.ProfilesChanged()]]


async def test_a_watcher_that_fails_raises_even_with_the_profiles_dir_watched(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The dashboard falls back to polling when watching fails: the failure must reach it."""
    project = ProjectPaths(tmp_path / "repo")
    project.box.mkdir(parents=True)
    (tmp_path / "profiles").mkdir()

    def broken(*_args: object) -> Iterator[object]:
        raise OSError("inotify watch limit reached")
        yield  # a generator, like the blocking watcher (run in a thread)

    monkeypatch.setattr(watch, "_changes", broken)
    with pytest.raises(OSError, match="inotify"):
        async for _facts in watch.watch_project(project, profiles_dir=tmp_path / "profiles"):
            pass


def test_tail_reads_only_the_end_then_follows(tmp_path: Path) -> None:
    project = ProjectPaths(tmp_path)
    path = RunStore(project).events_path("r1")
    path.parent.mkdir(parents=True)
    with path.open("w") as handle:
        for seq in range(1, 5001):
            handle.write(json.dumps({"seq": seq, "type": "x", "what": "w" * (seq % 50)}) + "\n")
        handle.write('{"seq": 5001, "type": "partial"')  # a writer mid-append
    records, offset = runs.tail_events(project, "r1", 100, chunk=4096)
    assert [r["seq"] for r in records] == list(range(4901, 5001))
    with path.open("a") as handle:
        handle.write(', "what": "done"}\n')
    store.append_jsonl(path, {"seq": 5002, "type": "x", "what": "more"})
    more, end = runs.read_events(project, "r1", offset)
    assert [r["seq"] for r in more] == [5001, 5002]
    assert end == path.stat().st_size


def test_tail_of_a_missing_or_short_log(tmp_path: Path) -> None:
    project = ProjectPaths(tmp_path)
    assert runs.tail_events(project, "nope", 10) == ([], 0)
    path = RunStore(project).events_path("r1")
    path.parent.mkdir(parents=True)
    path.write_text('{"seq": 1}\n{"seq": 2}\n')
    assert runs.tail_events(project, "r1", 10) == ([{"seq": 1}, {"seq": 2}], path.stat().st_size)


def test_task_events_and_manifest(project_at) -> None:  # type: ignore[no-untyped-def]
    project = project_at("waiting")
    greet, offset = runs.task_events(project, RUN_ID, "greet")
    assert greet and {r["task"] for r in greet} == {"greet"}
    assert runs.task_events(project, RUN_ID, "greet", offset) == ([], offset)
    assert any(r["type"] == "verdict" for r in greet)
    entries, offset = runs.read_manifest(project, RUN_ID)
    assert {Path(e["path"]).name for e in entries} == {"greet.py", "test_greet.py"}
    assert runs.read_manifest(project, RUN_ID, offset) == ([], offset)


def test_monitor_samples_a_process_tree() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: sum(range(10000))"])
    try:
        monitor = ProcessMonitor()
        first = monitor.sample({"busy": [child.pid], "gone": [2**22 + 7]})
        assert set(first) == {"busy"} and first["busy"].rss_bytes > 1_000_000
        import time

        time.sleep(0.3)
        second = monitor.sample({"busy": [child.pid]})
        assert second["busy"].cpu_percent > 20  # the kept Process object measures the interval
    finally:
        child.kill()
        child.wait()
    assert monitor.sample({"busy": [child.pid]}) == {}


def test_agent_pids_from_jobs_and_running_sessions(project_at) -> None:  # type: ignore[no-untyped-def]
    project = project_at("executing")
    run = RunStore(project).load(RUN_ID)
    for job, pid in zip(sorted(j for j in run.jobs), (111, 222), strict=True):
        run.jobs[job].pid = pid

    class Record:
        role, status, running = "lead", "running", {"pid": 333}

    pids = agent_pids(run, [Record()])
    assert pids == {"builder": [111], "reviewer": [222], "lead": [333]}
    assert agent_pids(None) == {}


def test_a_member_s_turn_on_a_cluster_node_shows_the_node_s_sample(project_at) -> None:  # type: ignore[no-untyped-def]
    from agentbox.core.reports.monitor import node_samples

    project = project_at("executing")
    run = RunStore(project).load(RUN_ID)
    crew = model.CrewInfo(tuple(model.RoleInfo(r, p, "scripted") for r, p in run.contract.roles.items()))

    class OnNode:  # the session record of a turn on a node: no pid here, the node's sample
        role, status = "builder", "running"
        running = {"pid": None, "node": "n" * 56, "sample": {"cpu_percent": 87.0, "rss_bytes": 300 * 2**20,
                                                             "processes": 3, "at": 1.0}}

    class Here:  # a turn of this machine's: the dashboard samples its pid itself
        role, status, running = "reviewer", "running", {"pid": 333, "sample": {"cpu_percent": 1.0}}

    samples = node_samples([OnNode(), Here()])
    assert set(samples) == {"builder"}
    rows = {r.role: r for r in model.member_rows(crew, run, {}, samples)}
    assert (rows["builder"].cpu, rows["builder"].memory) == ("87%", "300M")
    assert rows["reviewer"].cpu == "—"


def test_coalescer_runs_one_read_and_one_more() -> None:
    gate = Coalescer()
    assert gate.request("run") is True
    assert gate.request("run") is False and gate.request("run") is False
    assert gate.finished("run") is True  # the requests made meanwhile: one more read
    assert gate.finished("run") is False
    assert gate.request("run") is True


@pytest.mark.parametrize(("known", "unknown", "turns", "shown"), [
    (0, 0, 0, "—"), (0, 2, 2, "unknown"), (12300, 1, 3, "12.3k+unknown"), (950, 0, 1, "950"),
    (4_000_000, 0, 9, "4.0M"),
])
def test_unknown_usage_is_never_zero(known: int, unknown: int, turns: int, shown: str) -> None:
    assert model.tokens(known, unknown, turns) == shown


def test_formats() -> None:
    assert [model.elapsed(s) for s in (5, 95, 3725)] == ["5s", "1:35", "1h02m"]
    assert [model.size(n) for n in (512, 20_000, 5 * 1024**2, 3 * 1024**3)] == ["512B", "20K", "5.0M", "3.0G"]
    assert model.cost(None) == "cost unknown" and model.cost(0.0614) == "$0.061"


def test_members_busy_first_with_their_task(project_at) -> None:  # type: ignore[no-untyped-def]
    project = project_at("executing")
    run = RunStore(project).load(RUN_ID)
    crew = model.CrewInfo(tuple(model.RoleInfo(r, p, "scripted") for r, p in run.contract.roles.items()))
    rows = model.member_rows(crew, run, {}, {})
    assert [(r.role, r.state, r.task) for r in rows[:4]] == [
        ("builder", "running", "greet"), ("reviewer", "running", "tests"), ("tester", "submitted", "tests"),
        ("lead", "idle", "—")]
    assert os.path.basename(str(project.root)) == "repo"


def test_a_save_that_changes_nothing_is_not_read_again(project_at) -> None:  # type: ignore[no-untyped-def]
    project = project_at("executing")
    store = RunStore(project)
    store.save(store.load(RUN_ID))  # a snapshot, as an engine's first save writes
    run, digest = runs.read_run_if_changed(project, RUN_ID, None)
    assert run is not None and run.id == RUN_ID
    store.save(store.load(RUN_ID))  # the same state saved again: only `updated` and the save count move
    assert runs.read_run_if_changed(project, RUN_ID, digest) == (None, digest)
    changed = store.load(RUN_ID)
    changed.status_reason = "something happened"
    store.save(changed, Changes(full=False))  # journalled
    again, new_digest = runs.read_run_if_changed(project, RUN_ID, digest)
    assert again is not None and again.status_reason == "something happened" and new_digest != digest
