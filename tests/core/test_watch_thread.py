"""`watch_project`'s blocking watcher in a thread: watchfiles' Rust watcher alone, or `watchfiles.watch`.

The TUI follows a run through it; awatch's anyio backend imported ssl (~5.6 MB) and the
watchfiles package anyio and multiprocessing (~0.6 MB), neither of which the TUI uses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def test_the_watcher_runs_without_the_watchfiles_package_and_falls_back_to_it(tmp_path: Path) -> None:
    """The Rust watcher alone (no anyio, no multiprocessing); with a WATCHFILES_ setting, watchfiles.watch: same facts."""
    root = tmp_path / "repo"
    (root / ".agent-box" / "runs" / "r1").mkdir(parents=True)
    code = (
        "import asyncio, json, sys\nfrom pathlib import Path\nfrom agentbox.core import watch\n"
        "from agentbox.core.paths import ProjectPaths\n"
        "paths = ProjectPaths(Path(sys.argv[1]))\n"
        "async def main():\n"
        "    watching = asyncio.Event()\n"
        "    stream = watch.watch_project(paths, ready=watching.set)\n"
        "    task = asyncio.ensure_future(stream.__anext__())\n"
        "    await asyncio.wait_for(watching.wait(), 30)\n"
        "    for _ in range(40):  # watchfiles.watch makes its watcher after `ready`: write until it is seen\n"
        "        (paths.box / 'runs' / 'r1' / 'run.json').write_text('{}')\n"
        "        await asyncio.wait([task], timeout=0.5)\n"
        "        if task.done():\n"
        "            break\n"
        "    batch = await asyncio.wait_for(task, 20)\n"
        "    await stream.aclose()\n"
        "    return [repr(f) for f in batch]\n"
        "facts = asyncio.run(main())\n"
        "print(json.dumps({'facts': facts, 'package': 'watchfiles' in sys.modules, 'anyio': 'anyio' in sys.modules}))\n"
    )
    results = {}
    for mode, extra in (("alone", {}), ("fallback", {"WATCHFILES_FORCE_POLLING": "true"})):
        env = {k: v for k, v in os.environ.items() if not k.startswith("WATCHFILES_")}
        done = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, timeout=60,
                              env={**env, **extra})
        assert done.returncode == 0, done.stderr
        results[mode] = json.loads(done.stdout.splitlines()[-1])
        (root / ".agent-box" / "runs" / "r1" / "run.json").unlink()
    assert results["alone"] == {"facts": ["RunChanged(run_id='r1')"], "package": False, "anyio": False}
    assert results["fallback"] == {"facts": ["RunChanged(run_id='r1')"], "package": True, "anyio": True}
