"""Every session route through the client, against a real server on each store."""

from __future__ import annotations

import uuid

import pytest

from session_ledger.api.client import LedgerAPIError, session_path
from session_ledger.domain.messages import ChatMessage

from .conftest import Deployment

KEYS_THAT_NEED_ENCODING = [
    "a/b", "a//b/", "/leading", "with space", "ünïcødé/🙂", ".", "..", "./..", "%2F literally",
    "?query#fragment&x=1", "+plus+", "tab\u00a0nbsp", "a" * 512,
]  # fmt: skip


def msg(role: str, content: str) -> dict[str, str]:
    return {"role": role, "content": content}


def texts(messages: list) -> list[str]:  # type: ignore[type-arg]
    return [m.blocks[0]["text"] for m in messages]


@pytest.mark.parametrize("raw_key", KEYS_THAT_NEED_ENCODING)
def test_session_keys_round_trip(deployment: Deployment, raw_key: str) -> None:
    # A per-test tenant would need a key; a unique suffix keeps stores shared and clean.
    key = f"{raw_key}{uuid.uuid4().hex[:6]}" if len(raw_key) < 500 else raw_key[:-6] + "x" * 6
    key = raw_key if raw_key in (".", "..") else key
    with deployment.client("a_agent") as api:
        api.put(key, msg("user", "hello"))
        assert api.head(key).key == key
        assert texts(api.get_all(key)) == ["hello"]
        assert key in api.keys(prefix=key, limit=10).keys


def test_keys_can_leave_out_reset_sessions(deployment: Deployment) -> None:
    prefix = f"keys-{uuid.uuid4().hex[:6]}/"
    with deployment.client("a_agent") as api:
        for name in ("a", "b", "c"):
            api.put(prefix + name, msg("user", "x"))
        api.reset(prefix + "b")
        assert api.keys(prefix=prefix).keys == [prefix + n for n in ("a", "b", "c")]
        first = api.keys(prefix=prefix, exclude_cleared=True, limit=1)
        assert (first.keys, first.next_cursor) == ([prefix + "a"], prefix + "a")
        rest = api.keys(prefix=prefix, exclude_cleared=True, cursor=first.next_cursor)
        assert (rest.keys, rest.next_cursor) == ([prefix + "c"], None)


def test_every_write_and_read(deployment: Deployment, session_key: str) -> None:
    with deployment.client("a_agent") as api:
        first = api.put(session_key, msg("user", "one"))
        assert (first.message_count, first.replayed) == (1, False)
        second = api.put_messages(session_key, [msg("assistant", "two"), msg("user", "three")])
        assert second.version > first.version and second.message_count == 3
        assert texts(api.get_all(session_key)) == ["one", "two", "three"]
        assert texts(api.get_all(session_key, offset=1, limit=1)) == ["two"]
        assert texts(api.get(session_key, token_limit=2)) == ["three"]
        assert texts(api.get(session_key, token_limit=100)) == ["one", "two", "three"]

        removed = api.delete_message(session_key, 0)
        assert texts(removed.removed) == ["one"] and removed.message_count == 2
        last = api.delete_last_message(session_key)
        assert texts(last.removed) == ["three"]
        assert texts(api.get_all(session_key)) == ["two"]

        replaced = api.set(session_key, [msg("system", "fresh"), msg("user", "start")])
        assert replaced.message_count == 2
        assert texts(api.get_all(session_key)) == ["fresh", "start"]
        assert texts(api.delete_message(session_key, -1).removed) == ["start"]

        cleared = api.reset(session_key)
        assert cleared.message_count == 0 and api.get_all(session_key) == []
        head = api.head(session_key)
        assert (head.version, head.message_count) == (cleared.version, 0)
        assert api.get_all(session_key, status="archived") == []


def test_set_creates_and_may_be_empty(deployment: Deployment, session_key: str) -> None:
    with deployment.client("a_agent") as api:
        assert api.set(session_key, []).message_count == 0
        assert api.head(session_key).message_count == 0


def test_llamaindex_blocks_round_trip_exactly(deployment: Deployment, session_key: str) -> None:
    message = {
        "role": "assistant",
        "blocks": [{"block_type": "text", "text": "Calling a tool \u2603"}],
        "additional_kwargs": {"tool_calls": [{"id": "c1", "args": {"x": [1, 2.5, None]}}]},
    }
    with deployment.client("a_agent") as api:
        api.put(session_key, message)
        assert api.get_all(session_key)[0].to_dict() == message


def test_client_reads_are_the_ledgers_chat_messages(
    deployment: Deployment, session_key: str
) -> None:
    """One message type on every way in: what LedgerClient reads is what Ledger reads."""
    with deployment.client("a_agent") as api:
        api.put_messages(session_key, [msg("user", "hi"), msg("assistant", "hello")])
        history = api.get_all(session_key)
        window = api.get(session_key, token_limit=1)
    assert all(type(m) is ChatMessage for m in [*history, *window])
    assert history == [
        ChatMessage.parse(msg("user", "hi")),
        ChatMessage.parse(msg("assistant", "hello")),
    ]
    assert [(m.role, m.content) for m in history] == [("user", "hi"), ("assistant", "hello")]
    assert history[0].blocks == ({"block_type": "text", "text": "hi"},)
    assert window == history[1:]


def test_list_sessions_pages_with_a_cursor(deployment: Deployment) -> None:
    prefix = f"page-{uuid.uuid4().hex[:8]}/"
    keys = [f"{prefix}{i:02d}" for i in range(7)]
    with deployment.client("a_agent") as api:
        for key in reversed(keys):
            api.put(key, msg("user", key))
        seen, cursor = [], None
        while True:
            page = api.keys(prefix=prefix, cursor=cursor, limit=3)
            seen += page.keys
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert seen == keys


def test_list_sessions_in_the_order_they_were_made(deployment: Deployment) -> None:
    """`order=created` pages as key order does: the cursor is the last key of a page."""
    prefix = f"made-{uuid.uuid4().hex[:8]}/"
    made = [f"{prefix}{name}" for name in ("c", "a", "e", "b", "d")]
    with deployment.client("a_agent") as api:
        for key in made:
            api.put(key, msg("user", key))
        api.put(made[1], msg("user", "a later write keeps its place"))
        seen, cursor = [], None
        while True:
            page = api.keys(prefix=prefix, cursor=cursor, limit=2, order="created")
            seen += page.keys
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert seen == made
        assert api.keys(prefix=prefix).keys == sorted(made)
        with pytest.raises(LedgerAPIError) as refused:
            api.keys(prefix=prefix, order="newest")
        assert refused.value.status == 422


def test_unknown_session_is_404_on_every_route(deployment: Deployment, session_key: str) -> None:
    with deployment.client("a_agent") as api:
        for call in (
            lambda: api.head(session_key),
            lambda: api.get(session_key),
            lambda: api.get_all(session_key),
            lambda: api.reset(session_key),
            lambda: api.delete_last_message(session_key),
            lambda: api.delete_message(session_key, 0),
        ):
            with pytest.raises(LedgerAPIError) as err:
                call()
            assert (err.value.status, err.value.code) == (404, "session_not_found")


def test_message_index_out_of_range_is_404(deployment: Deployment, session_key: str) -> None:
    with deployment.client("a_agent") as api:
        api.put(session_key, msg("user", "only"))
        for index in (1, -2, 10**9):
            with pytest.raises(LedgerAPIError) as err:
                api.delete_message(session_key, index)
            assert (err.value.status, err.value.code) == (404, "message_not_found")
        api.reset(session_key)
        with pytest.raises(LedgerAPIError) as err:
            api.delete_last_message(session_key)
        assert err.value.code == "message_not_found"
        assert api.head(session_key).message_count == 0


def test_initial_token_count_over_the_limit_is_refused(
    deployment: Deployment, session_key: str
) -> None:
    with deployment.client("a_agent") as api:
        api.put(session_key, msg("user", "hi"))
        with pytest.raises(LedgerAPIError) as err:
            api.get(session_key, token_limit=5, initial_token_count=6)
        assert (err.value.status, err.value.code) == (422, "token_limit_exceeded")


@pytest.mark.anyio
async def test_async_client_covers_the_same_routes(
    deployment: Deployment, session_key: str
) -> None:
    from session_ledger.api.client_async import AsyncLedgerClient

    async with AsyncLedgerClient(deployment.base_url, deployment.keys["a_admin"]) as api:
        assert (await api.healthz()).status == "ok"
        assert (await api.readyz()).status == "ready"
        await api.put(session_key, msg("user", "a"))
        await api.put_messages(session_key, [msg("user", "b"), msg("user", "c")])
        assert texts(await api.get(session_key, token_limit=1)) == ["c"]
        assert texts((await api.delete_message(session_key, 1)).removed) == ["b"]
        assert texts((await api.delete_last_message(session_key)).removed) == ["c"]
        await api.set(session_key, [msg("user", "z")])
        assert texts(await api.get_all(session_key)) == ["z"]
        assert (await api.head(session_key)).message_count == 1
        assert session_key in (await api.keys(prefix=session_key)).keys
        assert (await api.reset(session_key)).message_count == 0
        created = await api.create_key("agent", "async")
        assert created.id in [k.id for k in await api.list_keys()]
        assert (await api.revoke_key(created.id)).revoked_at is not None
        assert "session_ledger_http_requests_total" in await api.metrics()


def test_message_reads_answer_the_stored_json_as_valid_json(
    deployment: Deployment, session_key: str
) -> None:
    # The window and history bodies are spliced from the stored canonical JSON: they
    # must still parse as one JSON document, equal what was written, with its headers.
    tricky = [
        msg("user", 'quotes " and \\ backslashes, \u2028 line sep, \x01 control, \u00e9 🙂'),
        {"role": "assistant", "blocks": [{"block_type": "text", "text": ""}],
         "additional_kwargs": {"nested": {"n": [1, 2.5, None, True], "s": "tab\there"}}},
        msg("user", "x" * 5000),
    ]  # fmt: skip
    with deployment.client("a_agent") as api:
        version = api.put_messages(session_key, tricky).version
        expected = [m.to_dict() for m in api.get_all(session_key)]
    assert [m["additional_kwargs"] for m in expected][1]["nested"]["s"] == "tab\there"
    with deployment.raw("a_agent") as http:
        for path, params in (("/context", {"token_limit": 100000}), ("/messages", {})):
            response = http.get(session_path(session_key, path), params=params)
            assert response.status_code == 200, response.text
            assert response.headers["content-type"] == "application/json"
            assert response.headers["etag"] == f'"{version}"'
            body = response.json()
            assert body["messages"] == expected and body.get("next_cursor") is None
            assert body["messages"][0]["blocks"][0]["text"].endswith("\u00e9 🙂")
        page = http.get(session_path(session_key, "/messages"), params={"offset": 1, "limit": 1})
        assert page.json()["messages"] == expected[1:2] and page.json()["next_cursor"]
        empty = http.get(session_path(session_key, "/messages"), params={"offset": 9})
        assert empty.json() == {"messages": [], "next_cursor": None}
