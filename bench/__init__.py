"""Benchmarks of session-ledger against the stores its users would pick instead (issue #6)."""
