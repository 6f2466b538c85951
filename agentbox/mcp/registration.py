"""`agentbox mcp --print-config CLIENT [--http PORT]`: the snippet that registers this server with an MCP client.

With `--http PORT` the snippet points the client at the running HTTP server and carries its
bearer token. Otherwise each client starts the server itself, over stdio: the snippet names this Python
interpreter (`python -m agentbox`, so it works whether or not `agentbox` is on the
client's PATH), the project, and AGENT_BOX_HOME when it is set (so the client's server
sees the same profiles and config.yaml).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Literal

from agentbox.core.paths import ProjectPaths

Client = Literal["claude", "codex", "opencode"]
SERVER_NAME = "agentbox"
"""The name the server is registered under: claude calls its tools `mcp__agentbox__<tool>`."""


def server_argv(project: ProjectPaths | None) -> list[str]:
    """The command line that starts this server for `project` (the client's cwd's when None)."""
    return [sys.executable, "-m", "agentbox", *(["--project", str(project.root)] if project else []), "mcp"]


def server_env() -> dict[str, str]:
    """The environment the server needs beyond the client's own."""
    home = os.environ.get("AGENT_BOX_HOME")
    return {"AGENT_BOX_HOME": home} if home else {}


def _toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def http_snippet(client: Client, port: int) -> tuple[str, str]:
    """The registration of a running `agentbox mcp --http PORT` for `client`, with its bearer token."""
    from agentbox.mcp.auth import http_token

    url = f"http://127.0.0.1:{port}/mcp"
    headers = {"Authorization": f"Bearer {http_token()}"}
    secret = "it holds the server's token: keep it to yourself (mode 600)"
    if client == "claude":
        entry = {"type": "http", "url": url, "headers": headers}
        return (json.dumps({"mcpServers": {SERVER_NAME: entry}}, indent=2) + "\n",
                f"put it in a file passed as `claude --mcp-config FILE`; {secret}")
    if client == "codex":
        lines = [f"[mcp_servers.{SERVER_NAME}]", f"url = {_toml_string(url)}",
                 "http_headers = { " + ", ".join(f"{_toml_string(k)} = {_toml_string(v)}" for k, v in headers.items())
                 + " }"]
        return "\n".join(lines) + "\n", f"add it to ~/.codex/config.toml (or $CODEX_HOME/config.toml); {secret}"
    remote = {"type": "remote", "url": url, "enabled": True, "headers": headers}
    return (json.dumps({"$schema": "https://opencode.ai/config.json", "mcp": {SERVER_NAME: remote}}, indent=2) + "\n",
            f"merge it into ~/.config/opencode/opencode.json; {secret}")


def snippet(client: Client, project: ProjectPaths | None, *, http_port: int | None = None) -> tuple[str, str]:
    """The registration for `client` (text to paste, valid as it is) and where it goes: a server the
    client starts over stdio, or (`http_port`) the running HTTP server, with its token."""
    if http_port is not None:
        return http_snippet(client, http_port)
    argv, env = server_argv(project), server_env()
    if client == "claude":
        entry: dict[str, object] = {"type": "stdio", "command": argv[0], "args": argv[1:]}
        if env:
            entry["env"] = env
        return (json.dumps({"mcpServers": {SERVER_NAME: entry}}, indent=2) + "\n",
                "put it in the project's .mcp.json, or in a file passed as `claude --mcp-config FILE`; "
                f"or run: claude mcp add {SERVER_NAME} -- {' '.join(argv)}")
    if client == "codex":
        lines = [f"[mcp_servers.{SERVER_NAME}]", f"command = {_toml_string(argv[0])}",
                 f"args = [{', '.join(_toml_string(a) for a in argv[1:])}]"]
        if env:
            lines.append("env = { " + ", ".join(f"{k} = {_toml_string(v)}" for k, v in env.items()) + " }")
        return "\n".join(lines) + "\n", "add it to ~/.codex/config.toml (or $CODEX_HOME/config.toml)"
    local: dict[str, object] = {"type": "local", "command": argv, "enabled": True}
    if env:
        local["environment"] = env
    return (json.dumps({"$schema": "https://opencode.ai/config.json", "mcp": {SERVER_NAME: local}}, indent=2) + "\n",
            "merge it into the project's opencode.json (or ~/.config/opencode/opencode.json)")
