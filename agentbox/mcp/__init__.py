"""The MCP face: `agentbox mcp` serves one project to MCP clients (headless, never imports Textual)."""
