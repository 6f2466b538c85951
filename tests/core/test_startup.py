"""`agentbox.cli.startup`: what a process does not import at start, and that nothing breaks for it.

pydantic's plugin loader is a stub only when no distribution declares a `pydantic` entry
point; ssl and OpenSSL's hashes are held out of asyncio's and hashlib's own imports only, and
anything that imports ssl later gets it (asyncio included). Each case in a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from agentbox.cli import startup
from tests.conftest import REPO


def _probe(code: str, *, command: str = "run", env: dict[str, str] | None = None) -> dict[str, object]:
    body = textwrap.dedent(
        f"""
        import json, sys
        from agentbox.cli import startup
        finder = startup.install({command!r})
        """
    ) + textwrap.dedent(code) + "\nprint(json.dumps(out))\n"
    done = subprocess.run([sys.executable, "-c", body], capture_output=True, text=True, cwd=REPO, timeout=60,
                          env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def _dist(root: Path, name: str, entry_points: str) -> None:
    info = root / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "entry_points.txt").write_text(entry_points)


def test_plugins_are_declared_only_by_a_pydantic_group(tmp_path: Path) -> None:
    _dist(tmp_path, "other", "[console_scripts]\nx = y:z\n")
    assert startup.plugins_declared([str(tmp_path), str(tmp_path / "missing")]) is False
    _dist(tmp_path, "plug", "[console_scripts]\na = b:c\n\n[pydantic]\nmine = plug:plugin\n")
    assert startup.plugins_declared([str(tmp_path)]) is True
    zipped = tmp_path / "bundle.zip"
    zipped.write_bytes(b"PK")
    assert startup.plugins_declared([str(zipped)]) is True, "a zip on sys.path is left to pydantic's loader"


def test_without_plugins_pydantic_loads_no_package_metadata() -> None:
    out = _probe("""
        from pydantic import BaseModel
        class M(BaseModel):
            x: int
        ok = M(x=1).x == 1
        out = {"ok": ok, "metadata": "importlib.metadata" in sys.modules, "stubbed": sorted(finder.stubbed)}
    """)
    assert out == {"ok": True, "metadata": False, "stubbed": ["pydantic.plugin._loader"]}


def test_a_declared_plugin_is_loaded_by_pydantic_itself(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _dist(site, "plug", "[pydantic]\nmine = plugmod:plugin\n")
    (site / "plugmod.py").write_text(textwrap.dedent("""
        SEEN = []
        class _Plugin:
            def new_schema_validator(self, schema, schema_type, schema_type_path, schema_kind, config, plugin_settings):
                SEEN.append(schema_type.__name__)
                return None, None, None
        plugin = _Plugin()
    """))
    out = _probe("""
        from pydantic import BaseModel
        class Seen(BaseModel):
            x: int
        Seen(x=1)
        import plugmod
        out = {"seen": plugmod.SEEN, "stubbed": sorted(finder.stubbed)}
    """, env={"PYTHONPATH": str(site)})
    assert out == {"seen": ["Seen"], "stubbed": []}


def test_ssl_is_held_out_of_asyncio_and_given_to_it_when_imported() -> None:
    out = _probe("""
        import asyncio, asyncio.base_events, asyncio.sslproto, asyncio.selector_events
        before = "ssl" in sys.modules or asyncio.base_events.ssl is not None
        import ssl
        out = {"before": before, "held": sorted(finder.held),
               "given": all(m.ssl is ssl for m in (asyncio.base_events, asyncio.sslproto, asyncio.selector_events)),
               "again": asyncio.sslproto.SSLAgainErrors == (ssl.SSLWantReadError, ssl.SSLSyscallError),
               "context": type(ssl.create_default_context()).__name__}
    """)
    assert out == {"before": False, "held": ["ssl"], "given": True, "again": True, "context": "SSLContext"}


def test_hashlib_without_openssl_gives_the_same_digests() -> None:
    import hashlib
    import hmac

    out = _probe("""
        import hashlib, hmac
        out = {"openssl": "_hashlib" in sys.modules, "held": sorted(finder.held),
               "digests": [hashlib.sha256(b"x").hexdigest(), hashlib.blake2b(b"x").hexdigest(),
                           hashlib.new("sha1", b"x").hexdigest(), hmac.new(b"k", b"m", "sha256").hexdigest()]}
    """)
    assert out["openssl"] is False and out["held"] == ["_hashlib"]
    assert out["digests"] == [hashlib.sha256(b"x").hexdigest(), hashlib.blake2b(b"x").hexdigest(),
                              hashlib.new("sha1", b"x").hexdigest(), hmac.new(b"k", b"m", "sha256").hexdigest()]


def test_a_one_shot_command_holds_nothing_out() -> None:
    out = _probe("""
        import asyncio, hashlib
        out = {"held": sorted(finder.held), "ssl": asyncio.base_events.ssl is not None, "openssl": "_hashlib" in sys.modules}
    """, command="invoke")
    assert out == {"held": [], "ssl": True, "openssl": True}


def test_attrs_is_held_out_of_rich_pretty_only() -> None:
    out = _probe("""
        import rich.pretty
        pretty = rich.pretty.pretty_repr({"a": [1, 2]})
        import attr
        @attr.s
        class A:
            x = attr.ib()
        out = {"held": sorted(finder.held), "pretty": pretty, "has_attrs": rich.pretty._has_attrs, "a": A(1).x}
    """, command="tui")
    assert out == {"held": ["attr"], "pretty": "{'a': [1, 2]}", "has_attrs": False, "a": 1}
