"""The dashboard's readers over hostile run files: malformed lines skipped, previews never led out."""

from __future__ import annotations

import json
import os
from pathlib import Path

from agentbox.core.engine.run_store import RunStore
from agentbox.core.paths import ProjectPaths
from agentbox.tui import loaders
from agentbox.tui.widgets.events import event_line
from tests.engine.support import create, setup_crew

WRONG_TYPED_EVENTS = [
    b'{"seq": 1, "at": "yesterday", "type": ["x"], "what": {"a": 1}, "tokens": "many"}\n',
    b'{"seq": 2, "at": 1e300, "type": "turn", "what": "ok", "tokens": [1]}\n',
    b'[1, 2]\n', b'"just a string"\n', b'\xff\xfe\n', b'{"seq": 3, "type": "turn", "what": "fine", "at": 1.0}\n',
]


def test_wrong_typed_event_lines_never_crash_the_event_log(project: ProjectPaths) -> None:
    paths = setup_crew(project.root)
    run_id = create(paths)
    RunStore(paths).events_path(run_id).write_bytes(b"".join(WRONG_TYPED_EVENTS))
    for read in (loaders.tail_events(paths, run_id), loaders.read_events(paths, run_id, 0)):
        assert [type(r) for r in read.records] == [dict, dict, dict]
        for record in read.records:
            event_line(record)  # renders, whatever the field types
    loaders.task_events(paths, run_id, "t1", 0)


def test_malformed_manifest_entries_are_skipped(project: ProjectPaths) -> None:
    paths = setup_crew(project.root)
    run_id = create(paths)
    manifest = RunStore(paths).artifacts_dir(run_id) / "manifest.jsonl"
    good = {"path": str(project.root / "a.txt"), "role": "builder", "session": None, "task": None}
    manifest.write_text("\n".join(json.dumps(e) for e in ({"path": 5}, {"path": "x", "role": ["r"]}, [1], good)) + "\n")
    assert loaders.read_manifest(paths, run_id, 0, True).entries == [good]


def test_the_artifact_preview_never_follows_a_swapped_file(project: ProjectPaths, tmp_path: Path) -> None:
    root = project.root
    secret = tmp_path / "secret"
    secret.write_text("id_rsa contents")
    artifacts = root / "art"
    artifacts.mkdir()
    (artifacts / "link").symlink_to(secret)
    (artifacts / "zero").symlink_to("/dev/zero")
    os.mkfifo(artifacts / "fifo")
    (root / "outside").symlink_to(tmp_path)
    (artifacts / "ok.txt").write_text("hello")
    for name in ("link", "zero", "fifo"):
        loaded = loaders.read_text(str(artifacts / name), root)
        assert loaded.error and loaded.text == "", name
    through_dir = loaders.read_text(str(root / "outside" / "secret"), root)
    assert through_dir.error and "id_rsa" not in through_dir.text
    assert loaders.read_text(str(artifacts / "link")).error  # without a root, still no symlink
    assert loaders.read_text(str(artifacts / "ok.txt"), root).text == "hello"


async def test_the_artifact_tree_takes_any_path_a_manifest_names(project: ProjectPaths) -> None:
    from agentbox.tui.widgets.artifacts import MAX_TREE_DEPTH, ArtifactsPanel
    from tests.tui.conftest import dashboard_loaded, frozen_app

    paths = setup_crew(project.root)
    run_id = create(paths)
    deep = "/".join(["d"] * 5000) + "/deep.txt"  # deeper than Python's recursion limit
    named = ["/etc/passwd", "/", "../../outside.txt", "a/../../b.txt", deep, "x" * 300 + "/y.txt", "ok.txt"]
    manifest = RunStore(paths).artifacts_dir(run_id) / "manifest.jsonl"
    manifest.write_text("".join(json.dumps({"path": p, "role": "builder", "session": None, "task": None}) + "\n"
                                for p in named))
    app = frozen_app(paths)
    async with app.run_test(size=(160, 44)) as pilot:
        await dashboard_loaded(pilot)
        panel = app.screen.query_one(ArtifactsPanel)
        assert len(panel._paths) == len(named)  # every entry has its node: none was lost, nothing raised
        labels = {str(node.label) for node in panel._dirs.values()}
        assert {"/", "etc/", "../", "a/"} <= labels
        assert max(len(parts) for parts in panel._dirs) == MAX_TREE_DEPTH  # the deep one is folded, not drawn 5000 deep
        await pilot.press("tab", "down", "down", "up")  # the tree still moves and previews
        await pilot.pause()
        assert app.is_running
