"""Import rules, checked rather than hoped for: who may import whom inside `agentbox/`.

Every import counts, at module level, inside functions and under TYPE_CHECKING alike: a
lazy or type-only import still ties two modules together. The graph is read from the
source with `ast`, so the test needs no import-linter and runs in milliseconds.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "agentbox"

def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()


def _imports(name: str) -> Iterator[str]:
    """The agentbox modules that module `name` imports, anywhere in its source."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name in MODULES)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            submodules = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES]
            yield from submodules
            if base in MODULES and len(submodules) < len(node.names):  # names defined in the module itself
                yield base


GRAPH = {name: set(_imports(name)) - {name} for name in MODULES}


def _cycles() -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in sorted(GRAPH):
        if root in index:
            continue
        work = [(root, iter(sorted(GRAPH[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(GRAPH[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def _violations(importers: str, forbidden: tuple[str, ...]) -> list[str]:
    return sorted(f"{name} imports {target}" for name, targets in GRAPH.items() if name.startswith(importers)
                  for target in targets if target.startswith(forbidden))


def test_the_graph_is_read() -> None:
    assert "agentbox.core.engine.run_store" in GRAPH["agentbox.core.engine.engine"]
    assert "agentbox.core.sandbox.bwrap" in GRAPH["agentbox.core.agents.invoke"]


def test_no_import_circle_anywhere() -> None:
    assert [sorted(c) for c in _cycles()] == []


def test_the_cycle_finder_finds_a_circle() -> None:
    """The check above could pass by finding nothing: make sure it sees a planted circle."""
    GRAPH["agentbox.core.errors"].add("agentbox.core.engine.engine")
    try:
        assert any("agentbox.core.errors" in c for c in _cycles())
    finally:
        GRAPH["agentbox.core.errors"].discard("agentbox.core.engine.engine")


def test_nothing_in_the_engine_imports_its_loop() -> None:
    """Policies, turns, modes and the ledger get what they need passed in; only faces and services drive the loop."""
    inside = [f"{name} imports the loop" for name, targets in GRAPH.items()
              if name.startswith("agentbox.core.engine.") and name != "agentbox.core.engine.engine"
              and "agentbox.core.engine.engine" in targets]
    assert inside == []


def test_core_never_imports_a_face() -> None:
    assert _violations("agentbox.core", ("agentbox.cli", "agentbox.tui", "agentbox.mcp", "agentbox.web")) == []


def test_runtimes_know_nothing_of_runs() -> None:
    assert _violations("agentbox.core.runtimes", ("agentbox.core.engine", "agentbox.core.runs",
                                                  "agentbox.core.agents.resolve")) == []


def test_the_faces_go_through_the_same_services() -> None:
    """The CLI, the TUI and the MCP face read runs (models, run store) and change them through
    `core.runs` and the other services, never by reaching into the engine's inside."""
    readable = ("agentbox.core.engine.models", "agentbox.core.engine.commands",
                "agentbox.core.engine.records",  # the typed records and commands that cross to the faces
                "agentbox.core.engine.notify")  # how a notice reads: the foreground run's banner
    inside = [v for v in _violations("agentbox.cli", ("agentbox.core.engine.",))
              + _violations("agentbox.tui", ("agentbox.core.engine.",))
              + _violations("agentbox.mcp", ("agentbox.core.engine.",)) if not v.endswith(readable)]
    assert inside == []


def test_the_sandbox_and_safe_io_stand_alone() -> None:
    """The security layer imports nothing of sessions, runs or faces (it is easy to audit)."""
    for module in ("agentbox.core.sandbox.bwrap", "agentbox.core.sandbox.seccomp", "agentbox.core.sandbox.scopes", "agentbox.core.safe_io",
                   "agentbox.core.sandbox.protected",
                   "agentbox.core.sandbox.egress", "agentbox.core.sandbox.egress_proxy", "agentbox.core.sandbox.netns"):
        allowed = {"agentbox.core.errors", "agentbox.core.runtimes.base", "agentbox.core.sandbox.seccomp",
                   "agentbox.core.safe_io", "agentbox.core.sandbox.protected",
                   "agentbox.core.sandbox.egress"}  # each other and the error types, nothing more
        assert GRAPH[module] <= allowed, (module, GRAPH[module] - allowed)


def test_screens_opened_from_the_dashboard_never_import_it() -> None:
    assert _violations("agentbox.tui.screens", ("agentbox.tui.screens.dashboard",)) == []
    assert _violations("agentbox.tui.actions", ("agentbox.tui.screens.dashboard",)) == []


FACES = ("agentbox.cli", "agentbox.tui", "agentbox.mcp", "agentbox.web")


def test_no_face_reaches_the_run_store() -> None:
    """`core.runs` is the faces' one door to runs: the run store behind it is private to core,
    whether imported as a module or as the `RunStore` name through another module."""
    assert _violations(FACES, ("agentbox.core.engine.run_store",)) == []
    named = sorted(f"{name} names RunStore" for name in MODULES if name.startswith(FACES)
                   for node in ast.walk(ast.parse(MODULES[name].read_text(encoding="utf-8")))
                   if isinstance(node, ast.Name | ast.Attribute | ast.alias)
                   and "RunStore" in (getattr(node, "id", None), getattr(node, "attr", None), getattr(node, "name", None)))
    assert named == []


def test_core_never_imports_the_mcp_face_or_sdk() -> None:
    """The MCP face sits on core; core knows nothing of it, nor of the MCP SDK it is built on."""
    assert _violations("agentbox.core", ("agentbox.mcp",)) == []
    sdk = sorted(name for name in MODULES if name.startswith("agentbox.core")
                 for node in ast.walk(ast.parse(MODULES[name].read_text(encoding="utf-8")))
                 if (isinstance(node, ast.Import) and any(a.name.split(".")[0] == "mcp" for a in node.names))
                 or (isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "mcp"))
    assert sdk == []


def test_no_module_imports_another_modules_private_name() -> None:
    """A `_name` is its module's own: another module that needs it gets a public name instead."""
    private = sorted(f"{name} imports {node.module}.{alias.name}" for name in MODULES
                     for node in ast.walk(ast.parse(MODULES[name].read_text(encoding="utf-8")))
                     if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("agentbox")
                     for alias in node.names if alias.name.startswith("_") and not alias.name.startswith("__"))
    assert private == []


# ---------------------------------------------------------------- the layers of core
# From the ground up; a module may import its own layer and the layers below it, never one above.
# A trailing dot names a module or package and all under it; without one, that module alone.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ground", ("agentbox", "agentbox.core", "agentbox.core.errors", "agentbox.core.ids", "agentbox.core.paths",
                "agentbox.core.store", "agentbox.core.safe_io", "agentbox.core.process", "agentbox.core.termtext",
                "agentbox.core.tools", "agentbox.core.tasks", "agentbox.core.validation", "agentbox.core.yaml_io")),
    ("runtimes and git", ("agentbox.core.runtimes.", "agentbox.core.workspace.",
                          "agentbox.core.records")),  # a session's records hold a turn's Usage
    ("sandbox", ("agentbox.core.sandbox.",)),
    ("config", ("agentbox.core.config.",)),
    ("graphs", ("agentbox.core.graph.",)),
    ("agents", ("agentbox.core.agents.",)),
    ("engine", ("agentbox.core.engine.", "agentbox.core.telemetry.")),
    ("door", ("agentbox.core.runs.", "agentbox.core.watch.", "agentbox.core.reports.", "agentbox.core.admin.")),
    ("faces", ("agentbox.__main__", "agentbox.cli.", "agentbox.tui.", "agentbox.mcp.", "agentbox.web.")),
)


def _in(name: str, entry: str) -> bool:
    return name.startswith(entry) or name == entry.rstrip(".") if entry.endswith(".") else name == entry


def _layer(name: str) -> int | None:
    """The layer of module `name` (the most specific entry that holds it), or None."""
    found = [(len(entry), index) for index, (_, entries) in enumerate(LAYERS) for entry in entries if _in(name, entry)]
    return max(found)[1] if found else None


def _upward(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{name} ({LAYERS[_layer(name)][0]}) imports {target} ({LAYERS[_layer(target)][0]})"  # type: ignore[index]
                  for name, targets in graph.items() if _layer(name) is not None
                  for target in targets if _layer(target) is not None and _layer(target) > _layer(name))  # type: ignore[operator]


def test_every_module_stands_on_a_layer() -> None:
    """A new module is given its layer here (where it may import from, and who may import it)."""
    assert sorted(name for name in MODULES if _layer(name) is None) == []


def test_no_import_runs_back_up_a_layer() -> None:
    assert _upward(GRAPH) == []


def test_the_layer_check_sees_an_arrow_up() -> None:
    """The check above could pass by reading nothing: a planted arrow from the sandbox to the engine is seen."""
    planted = {name: set(targets) for name, targets in GRAPH.items()}
    planted["agentbox.core.sandbox.scopes"].add("agentbox.core.engine.models")
    assert _upward(planted) == ["agentbox.core.sandbox.scopes (sandbox) imports agentbox.core.engine.models (engine)"]


def test_core_imports_no_face_and_no_face_library() -> None:
    """Not the MCP SDK, not Textual, not the web server either: core runs headless, under any face."""
    faces = ("agentbox.cli", "agentbox.tui", "agentbox.mcp", "agentbox.web")
    libraries = ("mcp", "textual", "textual_serve", "starlette", "uvicorn")
    found = []
    for name, path in MODULES.items():
        if not name.startswith("agentbox.core"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = ([a.name for a in node.names] if isinstance(node, ast.Import)
                       else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            found += [f"{name} imports {t}" for t in targets
                      if t.startswith(faces) or t.split(".")[0] in libraries]
    assert found == []
