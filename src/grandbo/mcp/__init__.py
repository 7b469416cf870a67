"""The agent tools: an MCP server over stdio or streamable HTTP, and the same tools as function schemas."""
