"""Diagnostics: single questions about where a write's time goes, run by hand (bench/README.md)."""
