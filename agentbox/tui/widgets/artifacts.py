"""The run's artifacts: a tree of the files the crew made, and a syntax-highlighted preview."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.reactive import var
from textual.widgets import Static, Tree
from textual.widgets.tree import TreeNode

from agentbox.core.engine.records import ArtifactEntry
from agentbox.core.termtext import for_line, safe_text
from agentbox.tui import loaders
from agentbox.tui import messages as msg
from agentbox.tui.model import short_id
from agentbox.tui.widgets.tree import QuietTree


def display_path(entry: ArtifactEntry, root: Path) -> str:
    """The artifact's path relative to the project (run artifacts as `artifacts/...`)."""
    path = Path(str(entry.get("path") or "?"))
    parts = path.parts
    if "artifacts" in parts and ".agent-box" in parts:
        return str(Path("artifacts", *parts[parts.index("artifacts") + 1:]))
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def provenance(entry: ArtifactEntry) -> Text:
    """`by builder · session 4b4c4e84 · task greet`."""
    text = Text.assemble(("by ", "dim"), (for_line(entry.get("role") or "?"), "bold cyan"),
                         (" · session ", "dim"), for_line(short_id(str(entry.get("session") or ""))))
    if entry.get("task"):
        text.append(" · task ", style="dim")
        text.append(for_line(entry["task"]))
    return text


def highlighted(message: msg.TextLoaded) -> Group:
    """The highlighted text the worker made, with a note when it was cut."""
    parts: list[Any] = [message.highlighted if message.highlighted is not None else safe_text(message.text)]
    if message.truncated:
        parts.append(Text(f"… cut at {loaders.PREVIEW_BYTES // 1024} KiB; press e to open it", style="dim"))
    return Group(*parts)


MAX_TREE_DEPTH = 24
"""Directory levels the artifact tree draws; deeper ones share one node."""


class ArtifactTree(QuietTree[ArtifactEntry]):
    """Directories and files; a file node's data is its latest manifest entry."""


class ArtifactsPanel(Horizontal):
    """Tree of artifacts and a preview of the highlighted one."""

    manifest: var[tuple[ArtifactEntry, ...]] = var((), always_update=True)
    """The tree and the preview repaint what the new entries change."""

    def __init__(self, root: Path, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.root = root
        self._paths: dict[str, TreeNode[ArtifactEntry]] = {}
        self._dirs: dict[tuple[str, ...], TreeNode[ArtifactEntry]] = {}
        self._shown: str | None = None

    def compose(self) -> ComposeResult:
        tree = ArtifactTree("artifacts", id="artifact-tree")
        tree.show_root = False
        yield tree
        with VerticalScroll(id="artifact-preview"):
            yield Static(Text("no artifact yet", style="dim"), id="artifact-text")

    @property
    def tree(self) -> ArtifactTree:
        """The file tree."""
        return self.query_one(ArtifactTree)

    @property
    def selected_entry(self) -> ArtifactEntry | None:
        """The manifest entry of the highlighted file."""
        node = self.tree.cursor_node
        return node.data if node is not None and node.data else None

    def watch_manifest(self, manifest: tuple[ArtifactEntry, ...]) -> None:
        """Add new files, refresh changed ones (latest entry per path wins)."""
        tree = self.tree
        if not manifest:
            tree.clear()
            self._paths.clear()
            self._dirs.clear()
            self._shown = None
            self.query_one("#artifact-text", Static).update(Text("no artifact yet", style="dim"))
            return
        latest: dict[str, ArtifactEntry] = {}
        for entry in manifest:
            latest[display_path(entry, self.root)] = entry
        for shown, entry in sorted(latest.items()):
            label = Text.assemble(for_line(Path(shown).name), ("  " + for_line(entry.get("role") or ""), "dim cyan"))
            node = self._paths.get(shown)
            if node is None:
                parent = self._dir(Path(shown).parent.parts)  # absolute, `..` and deep paths too
                self._paths[shown] = parent.add_leaf(label, data=entry)
            elif node.data != entry:
                node.data = entry
                node.set_label(label)
                if self._shown == shown:
                    self._preview(shown, entry)
        if tree.cursor_node is None or tree.cursor_node.data is None:
            first = next(iter(sorted(self._paths)))
            self.call_after_refresh(tree.move_cursor, self._paths[first])

    def _dir(self, parts: tuple[str, ...]) -> TreeNode[ArtifactEntry]:
        """The node of the directory made of `parts`, with its missing parents (a loop: no depth limit of Python's)."""
        if len(parts) > MAX_TREE_DEPTH:  # one node holds the rest of a path too deep to draw as a tree
            parts = (*parts[:MAX_TREE_DEPTH - 1], "/".join(parts[MAX_TREE_DEPTH - 1:]))
        node = self.tree.root
        for depth in range(1, len(parts) + 1):
            child = self._dirs.get(parts[:depth])
            if child is None:
                name = parts[depth - 1]
                child = node.add(Text(for_line(name if name.endswith("/") else name + "/"), style="bold"), expand=True)
                self._dirs[parts[:depth]] = child
            node = child
        return node

    @on(Tree.NodeHighlighted, "#artifact-tree")
    def _highlighted(self, event: Tree.NodeHighlighted[ArtifactEntry]) -> None:
        entry = event.node.data
        if entry:
            self._preview(display_path(entry, self.root), entry)

    def _preview(self, shown: str, entry: ArtifactEntry) -> None:
        self._shown = shown
        path = str(entry["path"])
        self.run_worker(partial(self._read, path), thread=True, exclusive=True, group="preview", exit_on_error=False)

    def _read(self, path: str) -> None:
        self.post_message(loaders.read_text(path, self.root))

    def on_text_loaded(self, message: msg.TextLoaded) -> None:
        """Show the file that was read, under who made it."""
        message.stop()
        entry = self.selected_entry
        if entry is None or str(entry["path"]) != message.path:
            return
        head = Text.assemble((for_line(display_path(entry, self.root)), "bold"), "  ", provenance(entry))
        if message.error:
            body: Any = safe_text(f"cannot show it: {message.error}", style="red")
        else:
            body = highlighted(message)
        self.query_one("#artifact-text", Static).update(Group(head, body))
