"""What a command's process does not import at start: one import finder, installed by `main()`.

Four imports cost a long-lived process (the engine, the TUI) memory and do nothing for it:

- **pydantic's plugin loader** imports `importlib.metadata` (with `email`, `zipfile`, `csv`)
  to scan every installed distribution's entry points for a `pydantic` group, at the
  first model's validator. When no distribution on `sys.path` declares that group (one
  read of each `entry_points.txt`) or `PYDANTIC_DISABLE_PLUGINS` turns plugins off, the
  loader is a stub that answers "no plugins"; a declared plugin loads through pydantic's
  own loader, as before. Every command gets this.
- **ssl**, which asyncio imports for TLS transports (libssl and libcrypto mapped, ~1.6 MB):
  the engine and the TUI open no TLS connection through asyncio. asyncio's three modules
  that try it are answered "no ssl" at their import, and as soon as anything else imports
  ssl (a webhook over https, a Ray node) those modules are handed the real one.
- **`_hashlib`** (OpenSSL's hashes, ~3 MB with libcrypto), which `hashlib` and `hmac` try at
  import: without it they use Python's built-in sha1/sha2/sha3/blake2/md5 (the same
  digests). Only the run and tui commands hold it out; a later direct import still works.
- **attrs**, which rich's pretty printer tries so as to print attrs classes field by field
  (~0.9 MB in the TUI, which shows none): the run and tui commands hold it out of
  `rich.pretty` (such an object would print as its repr); anything else imports it as usual.

Held out by importer, not by time: only the named importers are answered "missing", so
no other module ever sees an import fail.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from importlib.machinery import ModuleSpec, PathFinder
from types import ModuleType
from typing import Any

PLUGIN_LOADER = "pydantic.plugin._loader"
SSL_IMPORTERS = frozenset({"asyncio.base_events", "asyncio.selector_events", "asyncio.sslproto"})
HASHLIB_IMPORTERS = frozenset({"hashlib", "hmac"})
ATTRS_IMPORTERS = frozenset({"rich.pretty"})
"""rich's pretty printer tries `attrs` to print attrs classes field by field (~0.9 MB); the TUI has none."""
LONG_LIVED = frozenset({"run", "tui", ""})
"""Commands whose process stays (the engine, the TUI; "" is the bare `agentbox`, the TUI)."""


def plugins_declared(paths: Sequence[str]) -> bool:
    """True when a distribution on `paths` may declare a `pydantic` entry point (a zip entry may)."""
    for entry in paths:
        base = entry or "."
        if not os.path.isdir(base):
            if os.path.exists(base):
                return True  # a zip or an odd entry: let pydantic's loader look
            continue
        try:
            names = os.listdir(base)
        except OSError:
            continue
        for name in names:
            if not name.endswith((".dist-info", ".egg-info")):
                continue
            try:
                with open(os.path.join(base, name, "entry_points.txt"), encoding="utf-8", errors="replace") as handle:
                    if any(line.strip() == "[pydantic]" for line in handle):
                        return True
            except OSError:
                continue
    return False


def plugins_off() -> bool:
    """True when pydantic would load no plugin: turned off, or none declared."""
    if os.environ.get("PYDANTIC_DISABLE_PLUGINS") in ("__all__", "1", "true"):
        return True
    return not plugins_declared(sys.path)


class _NoPluginsLoader:
    """Makes `pydantic.plugin._loader` with pydantic's API and no plugins."""

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        vars(module).update(PYDANTIC_ENTRY_POINT_GROUP="pydantic", _plugins={}, _loading_plugins=False,
                            get_plugins=_no_plugins)


def _no_plugins() -> Iterable[Any]:
    return ()


class _ThenPatch:
    """The real loader of ssl; once ssl is loaded, asyncio's modules that went without it get it."""

    def __init__(self, real: Any) -> None:
        self.real = real

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        made: ModuleType | None = self.real.create_module(spec)
        return made

    def exec_module(self, module: ModuleType) -> None:
        self.real.exec_module(module)
        give_asyncio_ssl(module)


def give_asyncio_ssl(ssl: ModuleType) -> None:
    """Hand `ssl` to asyncio's modules that were imported without it."""
    for name in SSL_IMPORTERS:
        held = sys.modules.get(name)
        if held is not None and getattr(held, "ssl", "") is None:
            held.ssl = ssl  # type: ignore[attr-defined]
            if name == "asyncio.sslproto":
                held.SSLAgainErrors = (ssl.SSLWantReadError, ssl.SSLSyscallError)  # type: ignore[attr-defined]


def _importer() -> str:
    """The module whose `import` statement is being answered (the first frame outside the import system)."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if not (name.startswith("importlib") or name == __name__):
            return str(name)
        frame = frame.f_back  # type: ignore[assignment]
    return ""


class StartFinder:
    """A meta path finder: the plugin loader stubbed; ssl, `_hashlib` and attrs held out of their named importers."""

    def __init__(self, *, hold_ssl: bool, hold_hashlib: bool) -> None:
        self.hold_ssl = hold_ssl
        self.hold_hashlib = hold_hashlib
        self.held: set[str] = set()
        """What was answered "missing" (for tests and the bench)."""
        self.stubbed: set[str] = set()

    def find_spec(self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None) -> ModuleSpec | None:
        if name == PLUGIN_LOADER:
            if plugins_off():
                self.stubbed.add(name)
                return ModuleSpec(name, _NoPluginsLoader())  # type: ignore[arg-type]
            return None
        if name == "ssl":
            if self.hold_ssl and _importer() in SSL_IMPORTERS:
                self.held.add(name)
                raise ModuleNotFoundError("ssl is held out of asyncio at start (agentbox.cli.startup)", name=name)
            if "ssl" in self.held:
                spec = PathFinder.find_spec(name, path)
                if spec is not None and spec.loader is not None:
                    spec.loader = _ThenPatch(spec.loader)  # type: ignore[assignment]
                return spec
            return None
        if name == "_hashlib" and self.hold_hashlib and _importer() in HASHLIB_IMPORTERS:
            self.held.add(name)
            raise ModuleNotFoundError("_hashlib is held out of hashlib at start (agentbox.cli.startup)", name=name)
        if name == "attr" and self.hold_hashlib and _importer() in ATTRS_IMPORTERS:
            self.held.add(name)
            raise ModuleNotFoundError("attrs is held out of rich.pretty (agentbox.cli.startup)", name=name)
        return None


def install(command: str | None) -> StartFinder:
    """Put the finder first on `sys.meta_path` for `command` (None: the bare `agentbox`); idempotent."""
    for finder in sys.meta_path:
        if isinstance(finder, StartFinder):
            return finder
    long_lived = (command or "") in LONG_LIVED
    finder = StartFinder(hold_ssl=long_lived, hold_hashlib=long_lived)
    sys.meta_path.insert(0, finder)
    return finder
