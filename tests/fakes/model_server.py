"""A fake model server for driving the real agent CLIs in tests (stdlib only, loopback only).

One port speaks the three wire protocols the agent CLIs use:

* Anthropic Messages  (claude):          POST .../v1/messages[?beta=true]     (+ .../count_tokens)
* OpenAI Responses    (codex):           POST .../responses
* OpenAI Chat Compl.  (opencode, hermes): POST .../chat/completions, GET .../models

Streaming (``"stream": true``) answers are SSE, non-streaming answers are one JSON object.
Any other GET/HEAD/POST gets a 404 with a small JSON body.

Default reply: ``echo: <text of the last user message>`` -- where a tool result is the
newest thing in the conversation (anthropic ``tool_result`` block, responses
``function_call_output`` / ``custom_tool_call_output``, chat ``role: "tool"``), the echo is
of the tool output instead, so a tool round-trip ends with ``echo: <tool output>``.

A *script* of canned replies is consumed in order (falling back to echo when empty). A reply
spec is a dict:

    {"text": "hello"}                                        plain text answer
    {"tool_use": {"name": "Bash", "input": {"command": "touch f"}}}
                                                             a tool call (alias "tool_call");
                                                             a list gives several calls
    {"text": "...", "tool_use": {...}}                       text first, then the call(s)
    {"error": {"status": 400, "message": "boom"}}           HTTP error, protocol-shaped body

    optional keys on any spec:
      "usage": {...}     per-reply override, merged over the server's usage (keys below)
      "times": n         serve this spec n times (default 1; -1 = forever)
      "delay": seconds   sleep before answering (for timeout tests)
      "match": {...}     only use this spec for a request that matches all of:
                           "protocol": "anthropic" | "responses" | "chat"
                           "contains": substring of the raw request body
                           "not_contains": substring absent from the raw request body
                           "has_tools": true/false (the request declares tools)
                         A request that matches no queued spec gets the echo reply, and the
                         queue is left as it is (e.g. opencode's title-generation call
                         declares no tools, so ``"match": {"has_tools": true}`` skips it).

Tool calls per protocol: anthropic -> ``tool_use`` block (input_json_delta deltas,
stop_reason "tool_use"); responses -> ``function_call`` item (``arguments`` = JSON of
``input``), or with ``"type": "custom"`` a ``custom_tool_call`` whose ``input`` is a raw
string (codex's freeform ``apply_patch``); chat -> ``tool_calls`` (finish_reason
"tool_calls"). The tool name is sent as given: pick the name the CLI declares in the
request's ``tools``. Verified (see tests/fakes/NOTES.md):
    claude   {"name": "Bash", "input": {"command": "...", "description": "..."}}
    codex    {"name": "exec_command", "input": {"cmd": "..."}}
    opencode {"name": "bash", "input": {"command": "...", "description": "..."}}
             (+ "match": {"has_tools": true} to skip its title-generation call)
    hermes   {"name": "terminal", "input": {"command": "..."}}

Usage numbers (``usage=`` / ``--usage``), with *uncached* input semantics:
    {"input_tokens": 9, "cached_tokens": 4, "cache_write_tokens": 2,
     "output_tokens": 6, "reasoning_tokens": 0}
  anthropic: input_tokens=9, cache_read_input_tokens=4, cache_creation_input_tokens=2,
             output_tokens=6
  responses: input_tokens=13 (OpenAI counts include cached), input_tokens_details.cached_tokens=4,
             output_tokens=6, output_tokens_details.reasoning_tokens=0, total_tokens=19
  chat:      prompt_tokens=13, prompt_tokens_details.cached_tokens=4, completion_tokens=6,
             total_tokens=19

Every request is appended as one JSON line to the log file:
    {"n", "ts", "method", "path", "query", "headers", "protocol", "body", "reply"}
``body`` is the parsed JSON (or the raw text); ``reply`` summarises the answer sent
(``{"kind": "text"|"tool_use"|"error"|"models"|"not_found"|..., ...}``).

Python API::

    with FakeModelServer(log_path, script=[{"text": "hi"}]) as srv:
        srv.base_url            # http://127.0.0.1:PORT
        srv.requests()          # the log read back as a list of dicts
        srv.enqueue({"text": "more"})

Command line::

    python tests/fakes/model_server.py --port 0 --log FILE [--script FILE] [--usage JSON]
        prints "PORT <n>" once listening; serves until SIGTERM/SIGINT
    python tests/fakes/model_server.py --self-test
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import os
import signal
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

__all__ = ["FakeModelServer", "DEFAULT_USAGE", "MODEL_ID"]

MODEL_ID = "fake-model"

DEFAULT_USAGE: dict[str, int] = {
    "input_tokens": 9,  # uncached input
    "cached_tokens": 4,  # cache read
    "cache_write_tokens": 2,  # anthropic cache_creation_input_tokens
    "output_tokens": 6,
    "reasoning_tokens": 0,
}

_REMINDER_PREFIXES = ("<system-reminder>",)


# ----------------------------------------------------------------------------- helpers


def _chunks(text: str, size: int = 12) -> list[str]:
    """Split text into a few deltas (at least one, even for "")."""
    if not text:
        return [""]
    return [text[i : i + size] for i in range(0, len(text), size)]


def _content_text(content: Any) -> str:
    """Text of a message content that is a string or a list of blocks/parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        content = [content]
    if not isinstance(content, list):
        return str(content)
    texts = []
    for block in content:
        if isinstance(block, str):
            texts.append(block)
        elif isinstance(block, dict):
            if block.get("type") in ("text", "input_text", "output_text") or (
                "text" in block and "type" not in block
            ):
                texts.append(str(block.get("text", "")))
            elif block.get("type") == "tool_result":
                texts.append(_content_text(block.get("content")))
    return "\n".join(texts)


def _user_text_blocks(content: Any) -> str:
    """Last-user-message text, ignoring injected <system-reminder> blocks."""
    if isinstance(content, list):
        parts = [
            b
            for b in content
            if not (
                isinstance(b, dict)
                and isinstance(b.get("text"), str)
                and b["text"].lstrip().startswith(_REMINDER_PREFIXES)
            )
        ]
        if parts:
            content = parts
    return _content_text(content)


def extract_prompt(protocol: str, body: Any) -> str:
    """The text the default reply echoes (see module docstring)."""
    if not isinstance(body, dict):
        return ""
    if protocol == "anthropic":
        for msg in reversed(body.get("messages") or []):
            if not isinstance(msg, dict) or msg.get("role") != "user":
                continue
            content = msg.get("content")
            if isinstance(content, list):
                results = [
                    b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"
                ]
                if results:
                    return "\n".join(_content_text(b.get("content")) for b in results)
            return _user_text_blocks(content)
        return ""
    if protocol == "responses":
        items = body.get("input")
        if isinstance(items, str):
            return items
        for item in reversed(items or []):
            if not isinstance(item, dict):
                continue
            typ = item.get("type", "message")
            if typ in (
                "function_call_output",
                "custom_tool_call_output",
                "local_shell_call_output",
            ):
                out = item.get("output")
                if isinstance(out, dict):  # {"content": ..., "success": ...} variants
                    out = out.get("content", json.dumps(out))
                return _content_text(out)
            if typ == "message" and item.get("role") == "user":
                return _content_text(item.get("content"))
        return ""
    if protocol == "chat":
        for msg in reversed(body.get("messages") or []):
            if not isinstance(msg, dict):
                continue
            if msg.get("role") in ("user", "tool"):
                return _content_text(msg.get("content"))
        return ""
    return ""


def _normalize_calls(spec: dict) -> list[dict]:
    calls = spec.get("tool_use", spec.get("tool_call"))
    if calls is None:
        return []
    if isinstance(calls, dict):
        calls = [calls]
    return [dict(c) for c in calls]


def _sse(event: str | None, data: Any) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


# ----------------------------------------------------------------------------- server


class FakeModelServer:
    """See the module docstring."""

    def __init__(
        self,
        log_path: str | os.PathLike,
        script: list[dict] | str | os.PathLike | None = None,
        usage: dict[str, int] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError("FakeModelServer only listens on loopback")
        self.log_path = os.fspath(log_path)
        self.host = host
        self.requested_port = port
        self.usage = {**DEFAULT_USAGE, **(usage or {})}
        if isinstance(script, (str, os.PathLike)):
            with open(script, encoding="utf-8") as f:
                script = json.load(f)
        self._script: list[dict] = [copy.deepcopy(s) for s in (script or [])]
        self._lock = threading.Lock()
        self._counter = 0
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port: int | None = None
        self.base_url: str | None = None

    # -- lifecycle
    def start(self) -> FakeModelServer:
        handler = type("_BoundHandler", (_Handler,), {"fake": self})
        httpd = ThreadingHTTPServer((self.host, self.requested_port), handler)
        httpd.daemon_threads = True
        self._httpd = httpd
        self.port = httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        d = os.path.dirname(os.path.abspath(self.log_path))
        os.makedirs(d, exist_ok=True)
        open(self.log_path, "a").close()
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="fake-model-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- script / log
    def enqueue(self, *specs: dict) -> None:
        with self._lock:
            self._script.extend(copy.deepcopy(s) for s in specs)

    def pending(self) -> list[dict]:
        with self._lock:
            return copy.deepcopy(self._script)

    def requests(self) -> list[dict]:
        out = []
        try:
            with open(self.log_path, encoding="utf-8") as f:
                for line in f:
                    line = line.strip()
                    if line:
                        out.append(json.loads(line))
        except FileNotFoundError:
            pass
        return out

    def model_requests(self, protocol: str | None = None) -> list[dict]:
        """Only the POSTs that asked for a model answer (optionally of one protocol)."""
        return [
            r
            for r in self.requests()
            if r.get("protocol") in ("anthropic", "responses", "chat")
            and (protocol is None or r["protocol"] == protocol)
        ]

    # -- internals used by the handler
    def _next_n(self) -> int:
        with self._lock:
            self._counter += 1
            return self._counter

    def _take_spec(self, protocol: str, body: Any, raw: str) -> dict | None:
        has_tools = bool(isinstance(body, dict) and body.get("tools"))
        with self._lock:
            for i, spec in enumerate(self._script):
                m = spec.get("match") or {}
                if "protocol" in m and m["protocol"] != protocol:
                    continue
                if "contains" in m and m["contains"] not in raw:
                    continue
                if "not_contains" in m and m["not_contains"] in raw:
                    continue
                if "has_tools" in m and bool(m["has_tools"]) != has_tools:
                    continue
                times = spec.get("times", 1)
                if times == 1:
                    self._script.pop(i)
                elif times > 1:
                    spec["times"] = times - 1
                return copy.deepcopy(spec)
        return None

    def _log(self, entry: dict) -> None:
        line = json.dumps(entry, ensure_ascii=False, default=str)
        with self._lock, open(self.log_path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


class _Handler(BaseHTTPRequestHandler):
    fake: FakeModelServer  # set on the bound subclass
    protocol_version = "HTTP/1.1"
    server_version = "FakeModelServer/1"
    timeout = 60  # idle keep-alive connections are dropped after this

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        pass

    # -- request plumbing
    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            data = b""
            while True:
                size_line = self.rfile.readline()
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                data += self.rfile.read(size)
                self.rfile.readline()
        else:
            length = int(self.headers.get("Content-Length") or 0)
            data = self.rfile.read(length) if length else b""
        enc = (self.headers.get("Content-Encoding") or "").lower()
        if enc == "gzip":
            data = gzip.decompress(data)
        elif enc == "deflate":
            data = zlib.decompress(data)
        elif enc == "zstd":
            try:  # not in the stdlib before 3.14
                from compression import zstd  # type: ignore

                data = zstd.decompress(data)
            except ImportError:
                pass
        return data

    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        if ctype.startswith("text/event-stream"):
            self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
            self.wfile.flush()

    def _json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj).encode(), "application/json")

    def _route(self, method: str, path: str) -> str:
        p = path.rstrip("/")
        if method == "POST":
            if p.endswith("/messages/count_tokens"):
                return "anthropic_count"
            if p.endswith("/messages"):
                return "anthropic"
            if p.endswith("/responses"):
                return "responses"
            if p.endswith("/chat/completions"):
                return "chat"
        if method == "GET" and p.endswith("/models") and not p.startswith("/api/"):
            return "models"
        return "other"

    def _handle(self) -> None:
        fake = self.fake
        n = fake._next_n()
        parts = urlsplit(self.path)
        raw_bytes = self._read_body() if self.command in ("POST", "PUT", "PATCH") else b""
        raw = raw_bytes.decode("utf-8", errors="replace")
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        protocol = self._route(self.command, parts.path)
        entry: dict[str, Any] = {
            "n": n,
            "ts": time.time(),
            "method": self.command,
            "path": parts.path,
            "query": parts.query,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "protocol": protocol,
            "body": body,
        }
        try:
            if protocol in ("anthropic", "responses", "chat"):
                self._answer_model(n, protocol, body, raw, entry)
            elif protocol == "anthropic_count":
                entry["reply"] = {"kind": "count_tokens"}
                fake._log(entry)
                self._json(200, {"input_tokens": fake.usage["input_tokens"]})
            elif protocol == "models":
                entry["reply"] = {"kind": "models"}
                fake._log(entry)
                self._json(
                    200,
                    {
                        "object": "list",
                        "data": [
                            {"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "fake"}
                        ],
                    },
                )
            else:
                entry["reply"] = {"kind": "not_found", "status": 404}
                fake._log(entry)
                self._json(
                    404, {"error": {"message": f"not found: {parts.path}", "type": "not_found"}}
                )
        except (BrokenPipeError, ConnectionResetError):
            pass

    do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = do_PATCH = _handle

    # -- model answers
    def _answer_model(self, n: int, protocol: str, body: Any, raw: str, entry: dict) -> None:
        fake = self.fake
        spec = fake._take_spec(protocol, body, raw)
        scripted = spec is not None
        if spec is None:
            spec = {"text": "echo: " + extract_prompt(protocol, body)}
        usage = {**fake.usage, **(spec.get("usage") or {})}
        stream = bool(isinstance(body, dict) and body.get("stream"))
        model = (body.get("model") if isinstance(body, dict) else None) or MODEL_ID

        if spec.get("delay"):
            time.sleep(float(spec["delay"]))

        if "error" in spec:
            err = (
                spec["error"]
                if isinstance(spec["error"], dict)
                else {"message": str(spec["error"])}
            )
            status = int(err.get("status", 400))
            msg = err.get("message", "fake error")
            entry["reply"] = {"kind": "error", "status": status, "message": msg, "scripted": True}
            fake._log(entry)
            if protocol == "anthropic":
                etype = err.get("type", "invalid_request_error")
                self._json(status, {"type": "error", "error": {"type": etype, "message": msg}})
            else:
                etype = err.get("type", "invalid_request_error")
                self._json(
                    status, {"error": {"message": msg, "type": etype, "code": err.get("code")}}
                )
            return

        text = spec.get("text")
        calls = _normalize_calls(spec)
        for i, c in enumerate(calls):
            c.setdefault("id", f"{'toolu' if protocol == 'anthropic' else 'call'}_fake_{n}_{i}")
            c.setdefault("input", {})
        entry["reply"] = {
            "kind": "tool_use" if calls else "text",
            "text": text,
            "tool_calls": calls or None,
            "scripted": scripted,
            "stream": stream,
        }
        fake._log(entry)
        builder = {"anthropic": self._anthropic, "responses": self._responses, "chat": self._chat}[
            protocol
        ]
        builder(n, model, text, calls, usage, stream)

    def _anthropic(self, n, model, text, calls, usage, stream) -> None:
        u = {
            "input_tokens": usage["input_tokens"],
            "cache_creation_input_tokens": usage["cache_write_tokens"],
            "cache_read_input_tokens": usage["cached_tokens"],
            "output_tokens": usage["output_tokens"],
        }
        stop = "tool_use" if calls else "end_turn"
        blocks: list[dict] = []
        if text is not None or not calls:
            blocks.append({"type": "text", "text": text or ""})
        for c in calls:
            blocks.append(
                {"type": "tool_use", "id": c["id"], "name": c["name"], "input": c["input"]}
            )
        msg = {
            "id": f"msg_fake_{n}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": blocks,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": u,
        }
        if not stream:
            self._json(200, msg)
            return
        out = [
            _sse(
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        **msg,
                        "content": [],
                        "stop_reason": None,
                        "usage": {**u, "output_tokens": 1},
                    },
                },
            ),
            _sse("ping", {"type": "ping"}),
        ]
        for idx, b in enumerate(blocks):
            if b["type"] == "text":
                out.append(
                    _sse(
                        "content_block_start",
                        {
                            "type": "content_block_start",
                            "index": idx,
                            "content_block": {"type": "text", "text": ""},
                        },
                    )
                )
                for piece in _chunks(b["text"]):
                    out.append(
                        _sse(
                            "content_block_delta",
                            {
                                "type": "content_block_delta",
                                "index": idx,
                                "delta": {"type": "text_delta", "text": piece},
                            },
                        )
                    )
            else:
                out.append(
                    _sse(
                        "content_block_start",
                        {
                            "type": "content_block_start",
                            "index": idx,
                            "content_block": {
                                "type": "tool_use",
                                "id": b["id"],
                                "name": b["name"],
                                "input": {},
                            },
                        },
                    )
                )
                for piece in _chunks(json.dumps(b["input"]), 20):
                    out.append(
                        _sse(
                            "content_block_delta",
                            {
                                "type": "content_block_delta",
                                "index": idx,
                                "delta": {"type": "input_json_delta", "partial_json": piece},
                            },
                        )
                    )
            out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": idx}))
        out.append(
            _sse(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {"output_tokens": u["output_tokens"]},
                },
            )
        )
        out.append(_sse("message_stop", {"type": "message_stop"}))
        self._send(200, b"".join(out), "text/event-stream; charset=utf-8")

    def _responses(self, n, model, text, calls, usage, stream) -> None:
        inp = usage["input_tokens"] + usage["cached_tokens"]
        u = {
            "input_tokens": inp,
            "input_tokens_details": {"cached_tokens": usage["cached_tokens"]},
            "output_tokens": usage["output_tokens"],
            "output_tokens_details": {"reasoning_tokens": usage["reasoning_tokens"]},
            "total_tokens": inp + usage["output_tokens"],
        }
        items: list[dict] = []
        if text is not None or not calls:
            items.append(
                {
                    "id": f"msg_fake_{n}",
                    "type": "message",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": text or "", "annotations": []}],
                }
            )
        for i, c in enumerate(calls):
            if c.get("type") == "custom":
                items.append(
                    {
                        "id": f"ctc_fake_{n}_{i}",
                        "type": "custom_tool_call",
                        "status": "completed",
                        "call_id": c["id"],
                        "name": c["name"],
                        "input": c["input"]
                        if isinstance(c["input"], str)
                        else json.dumps(c["input"]),
                    }
                )
            else:
                args = c["input"] if isinstance(c["input"], str) else json.dumps(c["input"])
                items.append(
                    {
                        "id": f"fc_fake_{n}_{i}",
                        "type": "function_call",
                        "status": "completed",
                        "call_id": c["id"],
                        "name": c["name"],
                        "arguments": args,
                    }
                )
        resp = {
            "id": f"resp_fake_{n}",
            "object": "response",
            "created_at": int(time.time()),
            "status": "completed",
            "model": model,
            "output": items,
            "usage": u,
        }
        if not stream:
            self._json(200, resp)
            return
        seq = iter(range(1_000_000))
        out = []

        def ev(typ: str, **data: Any) -> None:
            out.append(_sse(typ, {"type": typ, "sequence_number": next(seq), **data}))

        ev(
            "response.created",
            response={**resp, "status": "in_progress", "output": [], "usage": None},
        )
        ev(
            "response.in_progress",
            response={**resp, "status": "in_progress", "output": [], "usage": None},
        )
        for oi, item in enumerate(items):
            if item["type"] == "message":
                t = item["content"][0]["text"]
                ev(
                    "response.output_item.added",
                    output_index=oi,
                    item={**item, "status": "in_progress", "content": []},
                )
                ev(
                    "response.content_part.added",
                    item_id=item["id"],
                    output_index=oi,
                    content_index=0,
                    part={"type": "output_text", "text": "", "annotations": []},
                )
                for piece in _chunks(t):
                    ev(
                        "response.output_text.delta",
                        item_id=item["id"],
                        output_index=oi,
                        content_index=0,
                        delta=piece,
                    )
                ev(
                    "response.output_text.done",
                    item_id=item["id"],
                    output_index=oi,
                    content_index=0,
                    text=t,
                )
                ev(
                    "response.content_part.done",
                    item_id=item["id"],
                    output_index=oi,
                    content_index=0,
                    part=item["content"][0],
                )
            elif item["type"] == "function_call":
                ev(
                    "response.output_item.added",
                    output_index=oi,
                    item={**item, "status": "in_progress", "arguments": ""},
                )
                for piece in _chunks(item["arguments"], 20):
                    ev(
                        "response.function_call_arguments.delta",
                        item_id=item["id"],
                        output_index=oi,
                        delta=piece,
                    )
                ev(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=oi,
                    arguments=item["arguments"],
                )
            else:  # custom_tool_call
                ev(
                    "response.output_item.added",
                    output_index=oi,
                    item={**item, "status": "in_progress", "input": ""},
                )
                for piece in _chunks(item["input"], 20):
                    ev(
                        "response.custom_tool_call_input.delta",
                        item_id=item["id"],
                        output_index=oi,
                        delta=piece,
                    )
                ev(
                    "response.custom_tool_call_input.done",
                    item_id=item["id"],
                    output_index=oi,
                    input=item["input"],
                )
            ev("response.output_item.done", output_index=oi, item=item)
        ev("response.completed", response=resp)
        self._send(200, b"".join(out), "text/event-stream; charset=utf-8")

    def _chat(self, n, model, text, calls, usage, stream) -> None:
        inp = usage["input_tokens"] + usage["cached_tokens"]
        u = {
            "prompt_tokens": inp,
            "completion_tokens": usage["output_tokens"],
            "total_tokens": inp + usage["output_tokens"],
            "prompt_tokens_details": {"cached_tokens": usage["cached_tokens"]},
            "completion_tokens_details": {"reasoning_tokens": usage["reasoning_tokens"]},
        }
        finish = "tool_calls" if calls else "stop"
        tool_calls = [
            {
                "id": c["id"],
                "type": "function",
                "function": {
                    "name": c["name"],
                    "arguments": c["input"]
                    if isinstance(c["input"], str)
                    else json.dumps(c["input"]),
                },
            }
            for c in calls
        ]
        cid = f"chatcmpl-fake-{n}"
        created = int(time.time())
        if not stream:
            message: dict[str, Any] = {
                "role": "assistant",
                "content": text if (text is not None or not calls) else None,
            }
            if message["content"] is None and not calls:
                message["content"] = ""
            if tool_calls:
                message["tool_calls"] = tool_calls
            self._json(
                200,
                {
                    "id": cid,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": u,
                },
            )
            return

        def chunk(choices: list, **extra: Any) -> bytes:
            return _sse(
                None,
                {
                    "id": cid,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": choices,
                    **extra,
                },
            )

        out = [
            chunk(
                [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]
            )
        ]
        if text is not None or not calls:
            for piece in _chunks(text or ""):
                out.append(
                    chunk([{"index": 0, "delta": {"content": piece}, "finish_reason": None}])
                )
        for i, tc in enumerate(tool_calls):
            out.append(
                chunk(
                    [
                        {
                            "index": 0,
                            "delta": {
                                "tool_calls": [
                                    {
                                        "index": i,
                                        "id": tc["id"],
                                        "type": "function",
                                        "function": {
                                            "name": tc["function"]["name"],
                                            "arguments": "",
                                        },
                                    }
                                ]
                            },
                            "finish_reason": None,
                        }
                    ]
                )
            )
            for piece in _chunks(tc["function"]["arguments"], 20):
                out.append(
                    chunk(
                        [
                            {
                                "index": 0,
                                "delta": {
                                    "tool_calls": [{"index": i, "function": {"arguments": piece}}]
                                },
                                "finish_reason": None,
                            }
                        ]
                    )
                )
        out.append(chunk([{"index": 0, "delta": {}, "finish_reason": finish}]))
        out.append(chunk([], usage=u))
        out.append(b"data: [DONE]\n\n")
        self._send(200, b"".join(out), "text/event-stream; charset=utf-8")


# ----------------------------------------------------------------------------- self-test


def _self_test() -> None:
    """Exercise every protocol with urllib; raises AssertionError on a mismatch."""
    import tempfile
    import urllib.error
    import urllib.request

    def post(url: str, obj: Any) -> tuple[int, str]:
        req = urllib.request.Request(
            url, data=json.dumps(obj).encode(), headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def sse_data(text: str) -> list[Any]:
        out = []
        for frame in text.split("\n\n"):
            for line in frame.splitlines():
                if line.startswith("data: "):
                    d = line[6:]
                    out.append(d if d == "[DONE]" else json.loads(d))
        return out

    with tempfile.TemporaryDirectory() as td:
        log = os.path.join(td, "log.jsonl")
        script = [
            {
                "tool_use": {"name": "Bash", "input": {"command": "echo hi"}},
                "match": {"protocol": "anthropic"},
            },
            {
                "tool_use": {"name": "shell", "input": {"command": ["echo", "hi"]}},
                "match": {"protocol": "responses"},
            },
            {"text": "scripted chat", "match": {"protocol": "chat", "has_tools": True}},
            {"error": {"status": 400, "message": "boom"}, "match": {"contains": "please fail"}},
        ]
        with FakeModelServer(log, script=script) as srv:
            b = srv.base_url
            # anthropic: tool_use then echo of the tool_result
            st, txt = post(
                b + "/v1/messages?beta=true",
                {
                    "model": "m",
                    "stream": True,
                    "messages": [
                        {
                            "role": "user",
                            "content": [
                                {"type": "text", "text": "<system-reminder>x</system-reminder>"},
                                {"type": "text", "text": "hi there"},
                            ],
                        }
                    ],
                },
            )
            ev = sse_data(txt)
            assert st == 200 and ev[0]["type"] == "message_start", txt
            assert ev[0]["message"]["usage"]["cache_read_input_tokens"] == 4
            assert any(e.get("delta", {}).get("type") == "input_json_delta" for e in ev)
            assert ev[-2]["delta"]["stop_reason"] == "tool_use"
            st, txt = post(
                b + "/v1/messages",
                {
                    "model": "m",
                    "stream": False,
                    "messages": [
                        {"role": "user", "content": "hi"},
                        {
                            "role": "user",
                            "content": [
                                {"type": "tool_result", "tool_use_id": "t", "content": "hi\n"}
                            ],
                        },
                    ],
                },
            )
            assert json.loads(txt)["content"][0]["text"] == "echo: hi\n", txt
            st, txt = post(
                b + "/v1/messages",
                {
                    "model": "m",
                    "stream": True,
                    "messages": [
                        {"role": "system", "content": "sys"},
                        {"role": "user", "content": "plain"},
                    ],
                },
            )
            ev = sse_data(txt)
            assert (
                "".join(e["delta"]["text"] for e in ev if e["type"] == "content_block_delta")
                == "echo: plain"
            )
            assert ev[-2]["usage"]["output_tokens"] == 6 and ev[-1]["type"] == "message_stop"
            # responses: function_call, then text echo
            st, txt = post(
                b + "/v1/responses",
                {
                    "model": "m",
                    "stream": True,
                    "input": [
                        {
                            "type": "message",
                            "role": "user",
                            "content": [{"type": "input_text", "text": "r1"}],
                        }
                    ],
                },
            )
            ev = sse_data(txt)
            assert (
                ev[-1]["type"] == "response.completed"
                and ev[-1]["response"]["output"][0]["type"] == "function_call"
            ), txt
            st, txt = post(
                b + "/v1/responses",
                {
                    "model": "m",
                    "stream": True,
                    "input": [
                        {
                            "type": "message",
                            "role": "user",
                            "content": [{"type": "input_text", "text": "r2"}],
                        }
                    ],
                },
            )
            ev = sse_data(txt)
            assert (
                "".join(e["delta"] for e in ev if e["type"] == "response.output_text.delta")
                == "echo: r2"
            )
            assert (
                ev[-1]["response"]["usage"]["input_tokens"] == 13
                and ev[-1]["response"]["usage"]["input_tokens_details"]["cached_tokens"] == 4
            )
            # chat: a request without tools skips the scripted spec
            st, txt = post(
                b + "/v1/chat/completions",
                {
                    "model": "m",
                    "stream": True,
                    "messages": [
                        {"role": "system", "content": "s"},
                        {"role": "user", "content": "c1"},
                    ],
                },
            )
            ev = sse_data(txt)
            assert (
                ev[-1] == "[DONE]"
                and ev[-2]["choices"] == []
                and ev[-2]["usage"]["prompt_tokens"] == 13
            )
            assert (
                "".join(e["choices"][0]["delta"].get("content", "") for e in ev[:-2]) == "echo: c1"
            )
            st, txt = post(
                b + "/v1/chat/completions",
                {
                    "model": "m",
                    "stream": False,
                    "tools": [{"type": "function"}],
                    "messages": [{"role": "user", "content": "c2"}],
                },
            )
            assert json.loads(txt)["choices"][0]["message"]["content"] == "scripted chat"
            st, txt = post(
                b + "/v1/chat/completions",
                {"model": "m", "messages": [{"role": "user", "content": "please fail"}]},
            )
            assert st == 400 and json.loads(txt)["error"]["message"] == "boom"
            with urllib.request.urlopen(b + "/v1/models", timeout=10) as r:
                assert json.loads(r.read())["data"][0]["id"] == MODEL_ID
            try:
                urllib.request.urlopen(urllib.request.Request(b + "/", method="HEAD"), timeout=10)
                raise AssertionError("HEAD / should 404")
            except urllib.error.HTTPError as e:
                assert e.code == 404
            reqs = srv.requests()
            assert [r["protocol"] for r in reqs] == ["anthropic"] * 3 + ["responses"] * 2 + [
                "chat"
            ] * 3 + ["models", "other"], reqs
            assert reqs[0]["query"] == "beta=true" and reqs[0]["reply"]["kind"] == "tool_use"
            assert srv.pending() == []
    print("self-test ok")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="Fake Anthropic/OpenAI model server for tests (loopback only)."
    )
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--log", help="JSON-lines request log")
    ap.add_argument("--script", help="JSON file: a list of reply specs")
    ap.add_argument("--usage", help='JSON object, e.g. {"input_tokens": 9, "output_tokens": 6}')
    ap.add_argument("--self-test", action="store_true", help="exercise all protocols and exit")
    args = ap.parse_args(argv)
    if args.self_test:
        _self_test()
        return 0
    if not args.log:
        ap.error("--log is required")
    srv = FakeModelServer(
        args.log,
        script=args.script,
        usage=json.loads(args.usage) if args.usage else None,
        port=args.port,
    )
    srv.start()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(f"PORT {srv.port}", flush=True)
    while not stop.wait(3600):
        pass
    srv.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
