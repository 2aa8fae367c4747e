"""The ways in: HTTP API, CLI, Python client, framework adapters."""
