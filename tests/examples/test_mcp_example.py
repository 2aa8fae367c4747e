"""examples/mcp_client.py runs as it is (the mcp SDK's client starting `session-ledger
mcp` over stdio), on SQLite and PostgreSQL, and prints what it says."""

from __future__ import annotations

import sys

import pytest

from tests.examples.test_examples import EXAMPLES, database_url, run

pytest.importorskip("mcp", reason="the example needs the mcp extra")
__all__ = ["database_url"]  # the fixture: a new SQLite file, or a fresh PostgreSQL database

ACCESS_LOG = """\
access log (the reads above, via mcp):
  1 auditor head 'user-42/support'  1 record  {"via": "mcp"}
  2 auditor window 'user-42/support'  2 records  {"token_limit": 20, "via": "mcp"}
  3 auditor transcript 'user-42/support'  2 records  {"limit": 2, "via": "mcp"}
  4 auditor replay 'user-42/support'  4 records  {"as_of_version": 2, "via": "mcp"}
  5 auditor audit 'user-42/support'  3 records  {"via": "mcp"}
  6 auditor search None  1 record  {"type": "MessageRemoved", "via": "mcp"}
"""


def test_mcp_client(database_url: str) -> None:
    printed = run(sys.executable, str(EXAMPLES / "mcp_client.py"), database_url)
    assert "session 'user-42/support': version 3, 3 messages, last event MessageRemoved" in printed
    assert "replay at version 2: the window the model was given then:\n" in printed
    assert "  assistant: Try a factory reset.\n" in printed  # removed since, replayed
    assert "  v3 MessageRemoved   by reviewer  (advice wiped user settings)\n" in printed
    assert '[["user-42/support", 3, "reviewer"]]' in printed
    assert printed.endswith(ACCESS_LOG)
