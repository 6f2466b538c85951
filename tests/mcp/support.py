"""Helpers of the MCP tests: `agentbox mcp` as a real process, driven by the SDK's own client."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import CallToolResult

from agentbox.core.paths import ProjectPaths


@dataclass
class Progress:
    """The progress notifications one tool call received."""

    seen: list[tuple[float, float | None, str | None]] = field(default_factory=list)

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.seen.append((progress, total, message))

    @property
    def messages(self) -> list[str]:
        return [m or "" for _, _, m in self.seen]


class Client:
    """An MCP client session with a few conveniences for the tests."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session

    async def call(self, tool: str, progress: Progress | None = None, **arguments: Any) -> CallToolResult:
        return await self.session.call_tool(tool, arguments, progress_callback=progress)

    async def ok(self, tool: str, progress: Progress | None = None, **arguments: Any) -> dict[str, Any]:
        """Call a tool that must succeed; its structured result."""
        result = await self.call(tool, progress, **arguments)
        assert not result.is_error, f"{tool} failed: {result.content[0].text}"  # type: ignore[union-attr]
        assert result.structured_content is not None
        return result.structured_content

    async def error(self, tool: str, **arguments: Any) -> str:
        """Call a tool that must fail cleanly; the error text."""
        result = await self.call(tool, **arguments)
        assert result.is_error, f"{tool}({arguments}) did not fail: {result.structured_content}"
        return result.content[0].text  # type: ignore[union-attr]

    async def read(self, uri: str) -> Any:
        """A resource's contents, parsed when they are JSON."""
        contents = (await self.session.read_resource(uri)).contents
        text = contents[0].text  # type: ignore[union-attr]
        return json.loads(text) if contents[0].mime_type == "application/json" else text


def server_params(project: ProjectPaths | Path) -> StdioServerParameters:
    root = project.root if isinstance(project, ProjectPaths) else project
    return StdioServerParameters(
        command=sys.executable, args=["-m", "agentbox", "--project", str(root), "mcp"], cwd=str(root),
        env={"AGENT_BOX_HOME": os.environ["AGENT_BOX_HOME"], "PATH": os.environ.get("PATH", "/usr/bin:/bin")})


@contextlib.asynccontextmanager
async def connected(project: ProjectPaths | Path) -> AsyncIterator[Client]:
    """`agentbox mcp` over stdio, initialised."""
    with open(os.devnull, "w") as quiet:
        async with stdio_client(server_params(project), errlog=quiet) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            yield Client(session)
