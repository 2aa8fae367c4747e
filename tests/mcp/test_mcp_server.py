"""`session-ledger mcp` from the mcp SDK's own client (`ClientSession`), over stdio and
streamable HTTP, on SQLite and PostgreSQL: each tool answers what the Ledger on the same
store holds, each read is in the access log as the HTTP API's are, a wrong or revoked
key is refused with an MCP error, roles and tenants are kept as over HTTP, and bad
input is refused with the HTTP API's reasons."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import anyio
import pytest
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError

from session_ledger.api.mcp_server.server import FORBIDDEN, UNAUTHENTICATED
from session_ledger.domain.ledger import Ledger

from .conftest import TENANT, Mcp

TOOLS = [
    "context_window",
    "history",
    "session_head",
    "replay",
    "audit_trail",
    "search_audit",
    "list_sessions",
]


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """The tool's structured answer; its text content is the same JSON."""
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    text = result.content[0]
    assert json.loads(getattr(text, "text", "")) == result.structured_content
    return result.structured_content


async def refused(session: ClientSession, tool: str, **arguments: Any) -> str:
    """The message of the tool's error result."""
    result = await session.call_tool(tool, arguments)
    assert result.is_error
    return str(getattr(result.content[0], "text", ""))


def mcp_error(error: BaseException) -> MCPError:
    """The MCPError an exception group (the SDK's task groups) holds."""
    if isinstance(error, MCPError):
        return error
    for inner in getattr(error, "exceptions", ()):
        with_it = mcp_error(inner)
        if with_it is not None:
            return with_it
    raise AssertionError(f"no MCPError in {error!r}")


def run(scenario: Callable[[], Awaitable[Any]]) -> Any:
    return anyio.run(scenario)


def written(server: Mcp, key: str) -> tuple[int, datetime]:
    """A session with history to read: appends, a removal, an archive, more appends;
    returns a version and a moment in the middle of it."""
    with server.deployment.client("a_agent") as agent:
        agent.put_messages(
            key, [{"role": "user", "content": f"question {i} " + "word " * i} for i in range(6)]
        )
        agent.delete_message(key, 1, reason="a mistaken turn")
        middle = agent.archive_oldest(key, 1).version
        moment = datetime.now(UTC)
        agent.put_messages(
            key,
            [
                {"role": "assistant", "content": "answer ✓"},
                {
                    "role": "tool",
                    "content": "21 °C",
                    "additional_kwargs": {"tool_call_id": "call-1"},
                },
            ],
        )
    return middle, moment


def canonical(messages: Any) -> list[dict[str, Any]]:
    return [json.loads(m.to_json()) for m in messages]


def test_the_tools_answer_what_the_ledger_holds(mcp_server: Mcp, session_key: str) -> None:
    key, ledger = session_key, mcp_server.ledger
    middle, moment = written(mcp_server, key)
    agent_id = mcp_server.deployment.key_ids["a_agent"]

    async def scenario() -> dict[str, Any]:
        async with mcp_server.session("a_auditor") as session:
            listed = await session.list_tools()
            assert sorted(t.name for t in listed.tools) == sorted(TOOLS)
            pages, cursor = [], None
            while True:
                page = await call(
                    session,
                    "history",
                    session_key=key,
                    limit=2,
                    **({"cursor": cursor} if cursor else {}),
                )
                pages.append(page)
                if (cursor := page["next_cursor"]) is None:
                    break
            return {
                "window": await call(session, "context_window", session_key=key, token_limit=6),
                "window then": await call(
                    session, "context_window", session_key=key, as_of_version=middle
                ),
                "pages": pages,
                "archived": await call(session, "history", session_key=key, status="archived"),
                "newest": await call(session, "history", session_key=key, last=3),
                "history then": await call(
                    session, "history", session_key=key, as_of_version=middle
                ),
                "head": await call(session, "session_head", session_key=key),
                "replay": await call(
                    session, "replay", session_key=key, as_of_version=middle, token_limit=8
                ),
                "replay at": await call(
                    session, "replay", session_key=key, as_of=moment.isoformat()
                ),
                "audit": await call(session, "audit_trail", session_key=key, limit=3),
                "audit rest": await call(session, "audit_trail", session_key=key, after=3),
                "search": await call(session, "search_audit", actor=f"key:{agent_id}", prefix=key),
                "removals": await call(
                    session, "search_audit", event_type="MessageRemoved", prefix=key
                ),
                "sessions": await call(session, "list_sessions", prefix=key),
            }

    got = run(scenario)
    head = ledger.head(key, tenant=TENANT)
    window = ledger.window(key, tenant=TENANT, token_limit=6)
    assert got["window"] == {
        "key": key,
        "version": head.version,
        "messages": [json.loads(t) for t in window.json()],
    }
    assert 0 < len(got["window"]["messages"]) < head.message_count  # the limit cut it
    assert got["window then"]["version"] == middle
    assert got["window then"]["messages"] == canonical(
        ledger.get(key, tenant=TENANT, as_of_version=middle)
    )
    assert [len(p["messages"]) for p in got["pages"]] == [2, 2, 2, 0][: len(got["pages"])]
    paged = [m for page in got["pages"] for m in page["messages"]]
    assert paged == canonical(ledger.get_all(key, tenant=TENANT))
    assert {p["version"] for p in got["pages"]} == {head.version}
    assert got["archived"]["messages"] == canonical(
        ledger.get_all(key, tenant=TENANT, status="archived")
    )
    assert got["newest"]["messages"] == canonical(ledger.get_all(key, tenant=TENANT)[-3:])
    assert got["history then"]["messages"] == canonical(
        ledger.get_all(key, tenant=TENANT, as_of_version=middle)
    )
    assert got["head"] == {
        "key": key,
        "version": head.version,
        "message_count": head.message_count,
        "archived_count": head.archived_count,
        "token_total": head.token_total,
        "created_at": got["head"]["created_at"],
        "updated_at": got["head"]["updated_at"],
        "last_event": head.last_event,
    }
    assert datetime.fromisoformat(got["head"]["updated_at"]) == head.updated_at
    replay = got["replay"]
    assert replay["session"]["version"] == middle
    assert replay["window"]["token_limit"] == 8
    assert replay["window"]["messages"] == canonical(
        ledger.get(key, tenant=TENANT, token_limit=8, as_of_version=middle)
    )
    assert got["replay at"]["session"]["version"] == middle
    trail = ledger.audit(key, tenant=TENANT, limit=100)
    assert [e["version"] for e in got["audit"]["events"]] == [1, 2, 3]
    assert got["audit"]["next_after"] == 3
    audited = got["audit"]["events"] + got["audit rest"]["events"]
    assert [(e["version"], e["event_type"], e["actor"], e["reason"]) for e in audited] == [
        (e.version, e.event_type, e.actor, e.reason) for e in trail
    ]
    assert [e["version"] for e in got["search"]["events"]] == [
        e.version for e in trail if e.actor == f"key:{agent_id}"
    ]
    assert [(e["key"], e["event_type"]) for e in got["removals"]["events"]] == [
        (key, "MessageRemoved")
    ]
    assert got["sessions"] == {"keys": [key], "next_cursor": None}


def entries_after(ledger: Ledger, seq: int) -> list[Any]:
    return ledger.views.evidence.access_entries(TENANT, seq, 1000)


def last_seq(ledger: Ledger) -> int:
    entries = entries_after(ledger, 0)
    while len(entries) == 1000:
        entries = entries_after(ledger, entries[-1].seq)
    return entries[-1].seq if entries else 0


def test_each_read_is_in_the_access_log(mcp_server: Mcp, session_key: str) -> None:
    """An auditor's every read: one entry each, under the HTTP route's action, with the
    inputs given (the route's names), `via: mcp` and the records the answer held."""
    key, ledger = session_key, mcp_server.ledger
    middle, _ = written(mcp_server, key)
    auditor = f"key:{mcp_server.deployment.key_ids['a_auditor']}"
    reads: list[tuple[str, dict[str, Any], str, str | None, dict[str, Any], int]] = [
        (
            "context_window",
            {"session_key": key, "token_limit": 6},
            "window",
            key,
            {"token_limit": 6},
            0,
        ),
        ("history", {"session_key": key, "limit": 2}, "transcript", key, {"limit": 2}, 2),
        ("session_head", {"session_key": key}, "head", key, {}, 1),
        (
            "replay",
            {"session_key": key, "as_of_version": middle},
            "replay",
            key,
            {"as_of_version": middle},
            4,
        ),
        ("audit_trail", {"session_key": key}, "audit", key, {}, 5),
        (
            "search_audit",
            {"event_type": "MessagesArchived", "prefix": key},
            "search",
            None,
            {"type": "MessagesArchived", "prefix": key},
            1,
        ),
        ("list_sessions", {"prefix": key}, "sessions", None, {"prefix": key}, 1),
    ]
    before = last_seq(ledger)

    async def scenario() -> list[list[Any]]:
        logged = []
        async with mcp_server.session("a_auditor") as session:
            for tool, arguments, *_ in reads:
                seq = last_seq(ledger)
                await call(session, tool, **arguments)
                logged.append([e for e in entries_after(ledger, seq) if e.actor == auditor])
        return logged

    logged = run(scenario)
    window_size = len(ledger.window(key, tenant=TENANT, token_limit=6))
    for (tool, _, action, logged_key, parameters, records), entries in zip(
        reads, logged, strict=True
    ):
        assert len(entries) == 1, tool
        entry = entries[0]
        assert (entry.action, entry.session_key, entry.role) == (action, logged_key, "auditor")
        assert entry.parameters == {**parameters, "via": "mcp"}, tool
        assert entry.records == (window_size if action == "window" else records), tool
    assert last_seq(ledger) >= before + len(reads)


@pytest.mark.parametrize("transport", ["stdio"])  # a setting of the server's process
def test_agent_reads_are_logged_as_over_http(mcp_server: Mcp, session_key: str) -> None:
    """An agent's reads are logged only with LEDGER_LOG_AGENT_READS, as the HTTP API's."""
    key, ledger = session_key, mcp_server.ledger
    written(mcp_server, key)
    agent = f"key:{mcp_server.deployment.key_ids['a_agent']}"

    async def reads(**env: str) -> list[str]:
        seq = last_seq(ledger)
        async with mcp_server.session("a_agent", **env) as session:
            await call(session, "context_window", session_key=key)
            await call(session, "history", session_key=key)
        return [e.action for e in entries_after(ledger, seq) if e.actor == agent]

    assert run(reads) == []
    assert run(lambda: reads(LEDGER_LOG_AGENT_READS="true")) == ["window", "transcript"]


def test_a_wrong_key_is_refused(mcp_server: Mcp) -> None:
    async def scenario() -> None:
        async with mcp_server.session(secret="sl_not_a_key"):
            raise AssertionError("a session opened with a wrong key")

    with pytest.raises(BaseException) as caught:
        run(scenario)
    error = mcp_error(caught.value)
    if mcp_server.transport == "stdio":  # refused at the handshake, by this server
        assert (error.code, error.message) == (UNAUTHENTICATED, "the API key is unknown or revoked")
    else:  # refused by HTTP, before MCP: the SDK's client says so
        assert "error response" in error.message


def test_a_revoked_key_is_refused_at_its_next_call(mcp_server: Mcp, session_key: str) -> None:
    written(mcp_server, session_key)
    with mcp_server.deployment.client("a_admin") as admin:
        created = admin.create_key("agent", name="revoked in the middle")

        async def scenario() -> MCPError:
            async with mcp_server.session(secret=created.key) as session:
                await call(session, "session_head", session_key=session_key)
                admin.revoke_key(created.id)
                for _ in range(100):  # PostgreSQL: until the key table's notice arrives
                    try:
                        await call(session, "session_head", session_key=session_key)
                    except BaseException as error:
                        return mcp_error(error)
                    await anyio.sleep(0.1)
            raise AssertionError("the revoked key still reads")

        error = run(scenario)
    if mcp_server.transport == "stdio":
        assert error.code == UNAUTHENTICATED


def test_roles_and_tenants_are_kept(mcp_server: Mcp, session_key: str) -> None:
    """An agent may not search the audit (an auditor's read, as over HTTP); another
    tenant's key finds no session of this one."""
    written(mcp_server, session_key)

    async def searched_by_agent() -> None:
        async with mcp_server.session("a_agent") as session:
            await session.call_tool("search_audit", {"event_type": "MessagesAppended"})

    with pytest.raises(BaseException) as caught:
        run(searched_by_agent)
    error = mcp_error(caught.value)
    assert (error.code, error.message) == (
        FORBIDDEN,
        "role 'agent' may not search the events: it takes a key of role auditor or admin",
    )

    async def other_tenant() -> tuple[str, dict[str, Any]]:
        async with mcp_server.session("b_admin") as session:
            return (
                await refused(session, "context_window", session_key=session_key),
                await call(session, "list_sessions", prefix=session_key),
            )

    missing, listed = run(other_tenant)
    assert "not found in tenant 'tenant-b'" in missing
    assert listed == {"keys": [], "next_cursor": None}


def test_bad_input_is_refused_as_over_http(mcp_server: Mcp, session_key: str) -> None:
    written(mcp_server, session_key)
    key = session_key

    async def scenario() -> list[str]:
        async with mcp_server.session("a_agent") as session:
            first = await call(session, "history", session_key=key, limit=2)
            return [
                await refused(
                    session, "history", session_key=key, offset=1, cursor=first["next_cursor"]
                ),
                await refused(session, "history", session_key=key, cursor="not-a-cursor"),
                await refused(session, "history", session_key=key, limit=-1),
                await refused(session, "context_window", session_key=key, as_of_version=0),
                await refused(session, "replay", session_key=key, as_of_version=10**6),
                await refused(session, "session_head", session_key="bad\x00key"),
                await refused(session, "context_window", session_key="nobody/ever"),
                # true and false are no numbers (`?limit=true` is a 422 over HTTP)
                *[
                    await refused(session, tool, session_key=key, **{name: flag})
                    for tool, name in (
                        ("history", "limit"),
                        ("history", "offset"),
                        ("history", "last"),
                        ("history", "as_of_version"),
                        ("context_window", "token_limit"),
                        ("context_window", "initial_token_count"),
                        ("audit_trail", "after"),
                        ("audit_trail", "limit"),
                    )
                    for flag in (True, False)
                ],
                await refused(session, "list_sessions", limit=True),
            ]

    reasons = run(scenario)
    assert all("not a boolean" in reason for reason in reasons[7:]), reasons[7:]
    assert "give no offset, last, as_of_version or as_of" in reasons[0]
    assert "cursor is not one this history returned" in reasons[1]
    assert "limit: Input should be greater than or equal to 0" in reasons[2]
    # The bound is in the tool's input schema (the route's own `AsOfVersion`): the SDK
    # refuses the argument before the route's model sees it.
    assert "as_of_version\n  Input should be greater than or equal to 1" in reasons[3]
    assert all(reason.startswith("Error executing tool ") for reason in reasons)
    assert "not found" in reasons[6]


def test_string_arguments_are_taken_as_given(mcp_server: Mcp, session_key: str) -> None:
    """A string that is also JSON text ("null", "[1]") is the string, as over HTTP: the
    SDK decodes such strings for parameters declared `str | None`, which made a prefix
    "null" no prefix and an actor "null" any actor."""
    written(mcp_server, session_key)
    for key in (f"null/{session_key}", f"[1]/{session_key}"):
        mcp_server.ledger.put(key, {"role": "user", "content": "hello"}, tenant=TENANT)

    async def scenario() -> None:
        async with mcp_server.session("a_auditor") as session:
            nulls = (await call(session, "list_sessions", prefix="null", limit=1000))["keys"]
            assert f"null/{session_key}" in nulls and all(k.startswith("null") for k in nulls)
            listed = (await call(session, "list_sessions", prefix="[1]", limit=1000))["keys"]
            assert f"[1]/{session_key}" in listed and all(k.startswith("[1]") for k in listed)
            assert (await call(session, "list_sessions", prefix=None))["keys"]  # null: none
            found = await call(session, "search_audit", event_type="MessagesAppended",
                               actor="null")  # fmt: skip
            assert found["events"] == []
            assert "status: Input should be 'active' or 'archived'" in await refused(
                session, "history", session_key=session_key, status="null"
            )
            assert "as_of: Input should be a valid datetime" in await refused(
                session, "context_window", session_key=session_key, as_of="null"
            )

    run(scenario)
