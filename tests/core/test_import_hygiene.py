"""The headless core and the non-TUI commands never load Textual (fast start, no UI deps).

Checked in a fresh interpreter, since this test process may already have imported it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent

PROBE = textwrap.dedent(
    """
    import contextlib, importlib, io, json, pkgutil, sys

    import agentbox.core

    imported = []
    for module in pkgutil.walk_packages(agentbox.core.__path__, "agentbox.core."):
        importlib.import_module(module.name)
        imported.append(module.name)
    after_core = sorted(m for m in sys.modules if m == "textual" or m.startswith(("textual.", "agentbox.tui")))

    import agentbox.mcp

    for module in pkgutil.walk_packages(agentbox.mcp.__path__, "agentbox.mcp."):
        importlib.import_module(module.name)
        imported.append(module.name)
    after_mcp = sorted(m for m in sys.modules if m == "textual" or m.startswith(("textual.", "agentbox.tui")))

    from agentbox.cli import main

    codes = {}
    for argv in (["profile", "list"], ["doctor", "--json"], ["--version"], ["mcp", "--print-config", "claude"]):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            try:
                codes[" ".join(argv)] = main(argv)
            except SystemExit as exc:
                codes[" ".join(argv)] = exc.code
    after_cli = sorted(m for m in sys.modules if m == "textual" or m.startswith(("textual.", "agentbox.tui")))
    print(json.dumps({"imported": imported, "after_core": after_core, "after_mcp": after_mcp, "after_cli": after_cli,
                      "codes": codes}))
    """
)


def core_module_files() -> set[str]:
    """Every module under agentbox/core/, by dotted name, found from the files themselves."""
    core = REPO / "agentbox" / "core"
    names = set()
    for path in core.rglob("*.py"):
        parts = path.relative_to(REPO).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if len(parts) > 2:  # agentbox.core itself is imported first anyway
            names.add(".".join(parts))
    return names


def test_core_and_non_tui_commands_do_not_import_textual(tmp_path: Path, agent_box_home: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    # every module of the core was imported: none skipped, none failing
    assert set(report["imported"]) >= core_module_files()
    assert report["after_core"] == [], f"agentbox.core imported {report['after_core']}"
    assert "agentbox.mcp.server" in report["imported"]
    assert report["after_mcp"] == [], f"the MCP face imported {report['after_mcp']}"
    assert report["after_cli"] == [], f"non-TUI commands imported {report['after_cli']}"
    assert report["codes"]["profile list"] == 0
    assert report["codes"]["--version"] == 0
    assert report["codes"]["mcp --print-config claude"] == 0
    assert report["codes"]["doctor --json"] in (0, 1)
