"""examples/openai_agents_session.py runs as it is, with no network, on SQLite and
PostgreSQL, and prints the conversation, the items after a correction, the audit
trail, and the popped turn replayed."""

from __future__ import annotations

import sys

from tests.examples.test_examples import EXAMPLES, database_url, run

__all__ = ["database_url"]  # the fixture: SQLite and PostgreSQL


def test_openai_agents_session(database_url: str) -> None:
    printed = run(sys.executable, str(EXAMPLES / "openai_agents_session.py"), database_url)
    assert "> Which cities did I ask about?\nYou asked about Zürich and Oslo.\n" in printed
    assert '  [1] function_call   weather({"city": "Zürich"})\n' in printed
    assert printed.count("MessageRemoved   by agent") == 2
    before = printed.split("before the correction (nothing was deleted):\n")[1]
    assert before.splitlines() == [
        "  user            Which cities did I ask about?",
        "  assistant       You asked about Zürich and Oslo.",
    ]
