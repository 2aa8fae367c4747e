"""`session-ledger mcp`: the ledger's reads as a Model Context Protocol server (the `mcp`
extra): reads.py holds the reads as plain calls, server.py the MCP server around them."""
