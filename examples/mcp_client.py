"""An MCP client reading the ledger: the session's window, history, head, a replay and
its audit trail through `session-ledger mcp`, with an auditor's API key.

    .venv/bin/python examples/mcp_client.py [DATABASE_URL]

Any client that speaks the Model Context Protocol (an IDE, a desktop assistant, an
agent framework) can start `session-ledger mcp` the same way, with the key in
LEDGER_API_KEY: here the `mcp` SDK's own `ClientSession` does, over stdio. Every read is
in the tenant's access log, printed at the end (`session-ledger access-log`).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from session_ledger.api.bootstrap import open_ledger
from session_ledger.api.settings import Settings

SESSION = "user-42/support"
COMMAND = [sys.executable, "-c", "from session_ledger.api.cli import main; main()"]


def session_ledger(env: dict[str, str], *args: str) -> str:
    """What the `session-ledger` command prints."""
    done = subprocess.run([*COMMAND, *args], env=env, capture_output=True, text=True, check=True)
    return done.stdout


def auditor_key(env: dict[str, str]) -> str:
    """The store's tables and an auditor's API key (the admin key is the bootstrap one)."""
    session_ledger(env, "migrate")
    printed = session_ledger(env, "keys", "create", "--role", "auditor", "--name", "mcp reader")
    return dict(line.split(": ", 1) for line in printed.splitlines() if ": " in line)["key"]


def write_conversation(url: str) -> int:
    """An agent's conversation, corrected by a reviewer; the version before the fix."""
    ledger = open_ledger(Settings(database_url=url))
    try:
        done = ledger.put_messages(SESSION, [
            {"role": "user", "content": "My router drops Wi-Fi every hour."},
            {"role": "assistant", "content": "Try a factory reset."},
            {"role": "user", "content": "That did not help."},
            {"role": "assistant", "content": "Update the firmware to 2.4.1."},
        ], actor="agent")  # fmt: skip
        ledger.delete_message(SESSION, 1, actor="reviewer", reason="advice wiped user settings")
        return done.version
    finally:
        ledger.close()


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    if result.is_error or result.structured_content is None:
        raise RuntimeError(f"{tool}: {result.content}")
    return result.structured_content


def said(messages: list[dict[str, Any]]) -> list[str]:
    return [f"{m['role']}: {m['blocks'][0]['text']}" for m in messages]


async def read(env: dict[str, str], before: int) -> None:
    server = StdioServerParameters(command=COMMAND[0], args=[*COMMAND[1:], "mcp"], env=env)
    async with stdio_client(server) as streams, ClientSession(*streams) as session:
        await session.initialize()
        tools = await session.list_tools()
        print("tools:", ", ".join(tool.name for tool in tools.tools))
        head = await call(session, "session_head", session_key=SESSION)
        print(f"\nsession {SESSION!r}: version {head['version']}, "
              f"{head['message_count']} messages, last event {head['last_event']}")  # fmt: skip
        window = await call(session, "context_window", session_key=SESSION, token_limit=20)
        print("\ncontext window (20 tokens):", *said(window["messages"]), sep="\n  ")
        page = await call(session, "history", session_key=SESSION, limit=2)
        print(f"\nhistory, first page (next_cursor {page['next_cursor']}):",
              *said(page["messages"]), sep="\n  ")  # fmt: skip
        then = await call(session, "replay", session_key=SESSION, as_of_version=before)
        print(f"\nreplay at version {before}: the window the model was given then:",
              *said(then["window"]["messages"]), sep="\n  ")  # fmt: skip
        trail = await call(session, "audit_trail", session_key=SESSION)
        print("\naudit trail:")
        for event in trail["events"]:
            why = f"  ({event['reason']})" if event["reason"] else ""
            print(f"  v{event['version']} {event['event_type']:<16} by {event['actor']}{why}")
        found = await call(session, "search_audit", event_type="MessageRemoved")
        print("\nremovals in the tenant:", json.dumps(
            [(e["key"], e["version"], e["actor"]) for e in found["events"]]))  # fmt: skip


def main(url: str) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LEDGER_")}
    env = {**clean, "LEDGER_DATABASE_URL": url,
           "LEDGER_BOOTSTRAP_KEY": "sl_example_" + secrets.token_urlsafe(24)}  # fmt: skip
    key = auditor_key(env)
    before = write_conversation(url)
    asyncio.run(read({**env, "LEDGER_API_KEY": key}, before))
    print("\naccess log (the reads above, via mcp):")
    for line in session_ledger(env, "access-log").splitlines():
        seq, _, _, role, action, *rest = line.split("  ")
        print(f"  {seq} {role} {action} {'  '.join(rest)}")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        main(sys.argv[1] if len(sys.argv) > 1 else f"sqlite:///{Path(folder) / 'ledger.db'}")
