"""Point-in-time replay: what the model saw at an earlier version and time, and a diff.

    .venv/bin/python examples/replay.py [DATABASE_URL]

A support conversation is written, then trimmed and corrected the way an agent's memory
is (a message deleted, the history replaced). Every change is an event, so the session
can be read as it stood at any version or moment: the context window the model was
given then, the whole history then, and what changed between two versions.
"""

from __future__ import annotations

import difflib
import sys
import tempfile
from pathlib import Path

from session_ledger.api.bootstrap import open_ledger
from session_ledger.api.settings import Settings
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.messages import ChatMessage

SESSION = "user-42/support"


def lines(messages: list[ChatMessage]) -> list[str]:
    return [f"{m.role}: {m.content}" for m in messages]


def show(title: str, messages: list[ChatMessage]) -> None:
    print(f"{title}:")
    for line in lines(messages):
        print(f"  {line}")


def write_conversation(ledger: Ledger) -> int:
    """The conversation and its corrections; the version before the corrections."""
    ledger.put_messages(SESSION, [
        {"role": "system", "content": "You are a support agent for Acme routers."},
        {"role": "user", "content": "My router drops Wi-Fi every hour."},
        {"role": "assistant", "content": "Try a factory reset."},
    ], actor="agent")  # fmt: skip
    done = ledger.put_messages(SESSION, [
        {"role": "user", "content": "That did not help."},
        {"role": "assistant", "content": "Update the firmware to 2.4.1."},
    ], actor="agent")  # fmt: skip
    # A reviewer removes the bad advice, then the agent's memory is rewritten with a summary.
    ledger.delete_message(SESSION, 2, actor="reviewer", reason="advice wiped user settings")
    kept = ledger.get_all(SESSION)
    summary = {"role": "system", "content": "Summary: Wi-Fi drops; firmware 2.4.1 suggested."}
    ledger.set(SESSION, [kept[0], summary, kept[-1]], actor="agent", reason="compacted")
    return done.version


def main(url: str) -> None:
    ledger = open_ledger(Settings(database_url=url))
    try:
        before = write_conversation(ledger)
        now = ledger.head(SESSION)
        print(f"session {SESSION!r} is at version {now.version}\n")
        show("Now", ledger.get_all(SESSION))
        show(
            f"\nThe whole history at version {before}",
            ledger.get_all(SESSION, as_of_version=before),
        )
        window = ledger.get(SESSION, token_limit=25, as_of_version=before)
        show(f"\nWhat the model saw at version {before} (a 25-token window)", window)

        # A time maps to the last version at or before it: here, the first write's.
        at_time = ledger.audit(SESSION, after_version=1, limit=1)[0].recorded_at
        show(f"\nThe history at {at_time.isoformat()}", ledger.get_all(SESSION, as_of=at_time))

        print(f"\nFrom version {before} to version {now.version}:")
        diff = difflib.unified_diff(
            lines(ledger.get_all(SESSION, as_of_version=before)),
            lines(ledger.get_all(SESSION, as_of_version=now.version)),
            f"version {before}", f"version {now.version}", lineterm="", n=0,
        )  # fmt: skip
        for line in diff:
            print(f"  {line}")
        print("\nWho changed it:")
        for e in ledger.audit(SESSION, after_version=before):
            print(f"  v{e.version} {e.event_type:<16} by {e.actor}: {e.reason}")
    finally:
        ledger.close()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        main(sys.argv[1] if len(sys.argv) > 1 else f"sqlite:///{Path(folder) / 'ledger.db'}")
