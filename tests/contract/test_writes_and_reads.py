"""The ledger contract: every method on memory, SQLite and PostgreSQL alike."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from session_ledger.domain.errors import (
    InvalidInput,
    MessageNotFound,
    SessionNotFound,
    TokenLimitExceeded,
)
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.messages import ChatMessage
from session_ledger.domain.tokens import NamedTokenizer


def msg(role: str, text: str) -> dict[str, object]:
    return {"role": role, "content": text}


def texts(messages: list[ChatMessage]) -> list[str | None]:
    return [m.content for m in messages]


def test_put_then_get_all_keeps_order_and_counts(ledger: Ledger) -> None:
    r1 = ledger.put("s", msg("user", "one"))
    r2 = ledger.put_messages("s", [msg("assistant", "two"), msg("user", "three")])
    assert (r1.version, r1.message_count) == (2, 1)  # SessionStarted + MessagesAppended
    assert (r2.version, r2.message_count) == (3, 3)
    assert texts(ledger.get_all("s")) == ["one", "two", "three"]
    assert [m.role for m in ledger.get_all("s")] == ["user", "assistant", "user"]


def test_head_reports_version_counts_and_tokens(ledger: Ledger) -> None:
    ledger.put_messages("s", [msg("user", "a b c"), msg("assistant", "d e")])
    head = ledger.head("s")
    assert (head.version, head.message_count, head.archived_count, head.token_total) == (2, 2, 0, 5)
    assert head.key == "s" and head.tenant == ledger.default_tenant
    assert head.created_at <= head.updated_at and head.created_at.tzinfo is not None


def test_set_replaces_the_history_and_can_empty_it(ledger: Ledger) -> None:
    ledger.put_messages("s", [msg("user", "old"), msg("assistant", "older")])
    ledger.set("s", [msg("system", "new")])
    assert texts(ledger.get_all("s")) == ["new"]
    assert ledger.head("s").token_total == 1
    ledger.set("s", [])
    assert ledger.get_all("s") == [] and ledger.head("s").message_count == 0


def test_set_creates_a_session(ledger: Ledger) -> None:
    assert ledger.set("new", [msg("user", "hi")]).version == 2
    assert texts(ledger.get_all("new")) == ["hi"]


def test_reset_clears_active_and_archived(ledger: Ledger) -> None:
    ledger.put_messages("s", [msg("user", "a"), msg("user", "b")])
    ledger.archive_oldest("s", 1)
    result = ledger.reset("s")
    assert result.message_count == 0
    assert ledger.get_all("s") == [] and ledger.get_all("s", status="archived") == []
    head = ledger.head("s")
    assert (head.message_count, head.archived_count, head.token_total) == (0, 0, 0)


def test_delete_message_by_index_and_negative_index(ledger: Ledger) -> None:
    ledger.put_messages("s", [msg("user", w) for w in ["a", "b", "c", "d"]])
    assert texts(list(ledger.delete_message("s", 1).removed)) == ["b"]
    assert texts(list(ledger.delete_message("s", -1).removed)) == ["d"]
    assert texts(ledger.get_all("s")) == ["a", "c"]
    assert texts(list(ledger.delete_last_message("s").removed)) == ["c"]
    assert texts(ledger.get_all("s")) == ["a"]
    assert ledger.head("s").token_total == 1


@pytest.mark.parametrize("index", [1, -2, 99])
def test_delete_message_with_a_bad_index_changes_nothing(ledger: Ledger, index: int) -> None:
    ledger.put("s", msg("user", "only"))
    with pytest.raises(MessageNotFound, match=rf"no message at index {index} .*\(1 message\)"):
        ledger.delete_message("s", index)
    assert ledger.head("s").version == 2
    ledger.put("s", msg("user", "second"))
    with pytest.raises(MessageNotFound, match=r"\(2 messages\)"):
        ledger.delete_message("s", 99)


def test_delete_last_message_of_an_empty_session(ledger: Ledger) -> None:
    ledger.set("s", [])
    with pytest.raises(MessageNotFound):
        ledger.delete_last_message("s")


def test_archive_oldest_moves_messages_to_the_archive(ledger: Ledger) -> None:
    ledger.put_messages("s", [msg("user", w) for w in ["a", "b", "c"]])
    result = ledger.archive_oldest("s", 2)
    assert result.message_count == 1
    assert texts(ledger.get_all("s")) == ["c"]
    assert texts(ledger.get_all("s", status="archived")) == ["a", "b"]
    ledger.archive_oldest("s", 5)  # more than there are: archives the rest
    assert ledger.get_all("s") == []
    head = ledger.head("s")
    assert (head.message_count, head.archived_count, head.token_total) == (0, 3, 0)


def test_get_all_pages(ledger: Ledger) -> None:
    ledger.put_messages("s", [msg("user", str(i)) for i in range(10)])
    assert texts(ledger.get_all("s", offset=3, limit=4)) == ["3", "4", "5", "6"]
    assert texts(ledger.get_all("s", offset=8)) == ["8", "9"]
    assert ledger.get_all("s", offset=20) == []


def test_unknown_sessions(ledger: Ledger) -> None:
    assert ledger.get("nobody") == [] and ledger.get_all("nobody") == []
    for call in (
        lambda: ledger.head("nobody"),
        lambda: ledger.reset("nobody"),
        lambda: ledger.delete_message("nobody", 0),
        lambda: ledger.delete_last_message("nobody"),
        lambda: ledger.archive_oldest("nobody", 1),
    ):
        with pytest.raises(SessionNotFound, match="'nobody' not found"):
            call()
    assert ledger.keys() == []


def test_keys_are_sorted_paged_and_filtered_by_prefix(ledger: Ledger) -> None:
    for key in ["b/2", "a", "b/1", "c", "b/10", "bz"]:
        ledger.put(key, msg("user", "x"))
    assert ledger.keys() == ["a", "b/1", "b/10", "b/2", "bz", "c"]
    assert ledger.keys(prefix="b/") == ["b/1", "b/10", "b/2"]
    assert ledger.keys(after="b/10", limit=2) == ["b/2", "bz"]
    assert ledger.keys(prefix="b", after="b/2") == ["bz"]


def test_keys_can_leave_out_sessions_whose_last_change_was_a_reset(ledger: Ledger) -> None:
    for key in ["a", "b", "c", "d", "e"]:
        ledger.put(key, msg("user", "x"))
    ledger.reset("b")
    ledger.reset("d")
    ledger.put("d", msg("user", "back"))  # written again after its reset: listed
    ledger.put("e", msg("user", "y"))
    ledger.delete_last_message("e")
    ledger.delete_last_message("e")  # emptied by deletes, not reset: listed, as in LlamaIndex
    assert ledger.keys(exclude_cleared=True) == ["a", "c", "d", "e"]
    assert ledger.keys() == ["a", "b", "c", "d", "e"]
    # pages count listed keys only: a full page means more may follow
    assert ledger.keys(exclude_cleared=True, limit=2) == ["a", "c"]
    assert ledger.keys(exclude_cleared=True, after="a", limit=1) == ["c"]
    assert ledger.keys(exclude_cleared=True, after="d") == ["e"]


def test_tenants_do_not_see_each_other(ledger: Ledger) -> None:
    acme, globex = ledger.default_tenant + "-acme", ledger.default_tenant + "-globex"
    ledger.put("shared-key", msg("user", "mine"), tenant=acme)
    ledger.put("shared-key", msg("user", "theirs"), tenant=globex)
    assert texts(ledger.get_all("shared-key", tenant=acme)) == ["mine"]
    assert texts(ledger.get_all("shared-key", tenant=globex)) == ["theirs"]
    assert ledger.get_all("shared-key") == []  # the default tenant has no such session
    assert ledger.keys(tenant=acme) == ["shared-key"]


def test_get_is_the_token_window(ledger: Ledger) -> None:
    ledger.put_messages(
        "s",
        [msg("user", "q1 q1"), msg("assistant", "a1 a1 a1"), msg("user", "q2"), msg("tool", "t")],
    )
    assert texts(ledger.get("s", token_limit=100)) == ["q1 q1", "a1 a1 a1", "q2", "t"]
    assert texts(ledger.get("s", token_limit=2)) == ["q2", "t"]
    assert texts(ledger.get("s", token_limit=1)) == ["t"]  # a window never opens on a tool
    assert texts(ledger.get("s", token_limit=5, initial_token_count=3)) == ["q2", "t"]
    with pytest.raises(TokenLimitExceeded, match="Initial token count exceeds token limit"):
        ledger.get("s", token_limit=5, initial_token_count=6)


def test_get_with_a_callers_tokenizer(ledger: Ledger) -> None:
    ledger.put_messages("s", [msg("user", "abcdef"), msg("user", "abc")])

    def per_char(text: str) -> list[str]:
        return list(text)

    assert texts(ledger.get("s", token_limit=4, tokenizer=per_char)) == ["abc"]
    assert texts(ledger.get("s", token_limit=4)) == ["abcdef", "abc"]


def test_default_tokenizer_counts_cl100k_tokens(store: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tests.conftest import make_ledger, make_settings

    ledger = make_ledger(make_settings(store, tmp_path, tokenizer="cl100k_base"))
    try:
        ledger.put("s", msg("user", "hello world"))
        assert ledger.head("s").token_total == 2
    finally:
        ledger.close()


def test_async_twins(ledger: Ledger) -> None:
    async def scenario() -> list[str | None]:
        await ledger.aput("s", msg("user", "a"))
        await ledger.aput_messages("s", [msg("assistant", "b"), msg("user", "c")])
        await ledger.adelete_message("s", 0)
        await ledger.adelete_last_message("s")
        await ledger.aarchive_oldest("s", 1)
        await ledger.aset("s", [msg("user", "x"), msg("user", "y")])
        assert (await ledger.ahead("s")).message_count == 2
        assert await ledger.akeys() == ["s"]
        assert texts(await ledger.aget("s", token_limit=1)) == ["y"]
        result = texts(await ledger.aget_all("s"))
        await ledger.areset("s")
        return result

    assert asyncio.run(scenario()) == ["x", "y"]
    assert ledger.get_all("s") == []


def test_messages_round_trip_losslessly(ledger: Ledger) -> None:
    rich = {
        "role": "assistant",
        "blocks": [
            {"block_type": "text", "text": "calling a tool"},
            {"block_type": "tool_call", "tool_call_id": "c1", "tool_name": "search",
             "tool_kwargs": {"q": "weather", "n": 3, "deep": {"x": [1, 2.5, None, True]}}},
            {"block_type": "image", "url": "https://example.com/cat.png", "image_mimetype": None},
            {"block_type": "thinking", "content": "hmm", "num_tokens": 4},
        ],
        "additional_kwargs": {"tool_calls": [{"id": "c1", "type": "function"}]},
    }  # fmt: skip
    ledger.put("s", rich)
    assert ledger.get_all("s")[0].to_dict() == rich


def test_a_one_mebibyte_message(ledger: Ledger) -> None:
    big = "x" * (1024 * 1024)
    ledger.put("s", msg("user", big))
    assert ledger.get_all("s")[0].content == big
    assert ledger.get("s", token_limit=10)[0].content == big  # one oversized message: itself


def test_invalid_arguments_are_refused(ledger: Ledger) -> None:
    ledger.put("s", msg("user", "x"))
    bad_calls = [
        lambda: ledger.get("s", token_limit=0),
        lambda: ledger.get("s", token_limit="10"),  # type: ignore[arg-type]
        lambda: ledger.get("s", initial_token_count="1"),  # type: ignore[arg-type]
        lambda: ledger.get_all("s", status="deleted"),
        lambda: ledger.get_all("s", offset=-1),
        lambda: ledger.keys(limit=0),
        lambda: ledger.delete_message("s", "0"),  # type: ignore[arg-type]
        lambda: ledger.archive_oldest("s", 0),
        lambda: ledger.put("s", msg("user", "x"), expected_version=-1),
        lambda: ledger.put("s", msg("user", "x"), actor=""),
        lambda: ledger.put("s", msg("user", "x"), tenant="bad\ntenant"),
    ]
    for call in bad_calls:
        with pytest.raises(InvalidInput):
            call()
    assert ledger.head("s").version == 2


def test_head_names_the_latest_event(ledger: Ledger) -> None:
    ledger.put("s", msg("user", "x"))
    assert ledger.head("s").last_event == "MessagesAppended"
    ledger.reset("s")
    assert ledger.head("s").last_event == "HistoryCleared"
    ledger.set("s", [])
    assert ledger.head("s").last_event == "HistoryReplaced"


def test_json_reads_are_the_stored_canonical_json_of_the_decoded_reads(ledger: Ledger) -> None:
    ledger.put_messages("s", [msg("user", 'a "quoted" \\ \u00e9 🙂 \x01'), msg("assistant", "b")])
    ledger.put("s", {"role": "tool", "blocks": [{"block_type": "text", "text": "c"}],
                     "additional_kwargs": {"k": [1, 2.5, None, {"z": "y"}]}})  # fmt: skip
    ledger.archive_oldest("s", 1)
    for version in (None, 2, 3):
        window = ledger.window("s", token_limit=50, as_of_version=version)
        assert window.json() == [m.to_json() for m in window.messages()]
        assert window.version == (version or 4)
        for status, offset, limit in (("active", 0, None), ("active", 1, 1), ("archived", 0, 5)):
            found = ledger.history("s", status=status, offset=offset, limit=limit,
                                   as_of_version=version)  # fmt: skip
            assert found.json() == [m.to_json() for m in found.messages()]
            assert found.version == (version or 4)
    for read in (ledger.window("nobody"), ledger.history("nobody")):
        assert (read.version, read.json()) == (0, [])
    with pytest.raises(InvalidInput):
        ledger.window("s", token_limit=0)
    with pytest.raises(InvalidInput):
        ledger.history("s", status="gone")


def test_delete_message_at_every_index_is_list_pop(ledger: Ledger) -> None:
    # Positions in the later half are found from the end, the others from the start.
    names = [f"m{i}" for i in range(7)]
    for index in range(-7, 7):
        key = f"s{index}"
        ledger.put_messages(key, [msg("user", n) for n in names])
        ledger.put(key, msg("user", "gone"))
        ledger.delete_last_message(key)  # an ended row after the live ones
        expected = list(names)
        removed = expected.pop(index)
        result = ledger.delete_message(key, index)
        assert texts(list(result.removed)) == [removed], index
        assert texts(ledger.get_all(key)) == expected, index


def test_a_replace_counts_only_the_tokens_of_what_it_adds(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    history = [msg("user", f"kept message {i} with some words") for i in range(30)]
    ledger.put_messages("s", history)
    total = ledger.head("s").token_total
    real = ledger.tokenizer
    encoded: list[str] = []

    def encode(text: str) -> Any:
        encoded.append(text)
        return real.encode(text)

    monkeypatch.setattr(ledger, "tokenizer", NamedTokenizer(real.name, encode, real.pretokenized))
    ledger.set("s", [*history, msg("assistant", "the one new reply")])
    assert not any("kept message" in text for text in encoded), encoded
    assert any("new reply" in text for text in encoded)
    added = real.count("the one new reply").alone
    assert ledger.head("s").token_total == total + added
    assert texts(ledger.get_all("s"))[-1] == "the one new reply"
    # the window's counts of the kept messages are still the stored ones
    assert ledger.get("s", token_limit=10_000) == ledger.get_all("s")


@pytest.mark.parametrize(
    ("old", "new"),
    [(True, 1), (1, 1.0), (-0.0, 0), (0, False), ({"a": 1, "b": 2}, {"b": 2, "a": 1})],
)
def test_set_keeps_a_message_only_when_it_is_the_same_json(
    ledger: Ledger, old: object, new: object
) -> None:
    """Values equal in Python but not in JSON are different messages: after the set, every
    read, now and at the version it made, and the audit show the new payload."""
    import json

    def said(value: object) -> dict[str, object]:
        return {"role": "user", "content": "x", "additional_kwargs": {"v": value}}

    ledger.set("s", [said(old), msg("assistant", "y")])
    result = ledger.set("s", [said(new), msg("assistant", "y")])
    for read in (ledger.get_all("s"), ledger.get_all("s", as_of_version=result.version),
                 ledger.get("s")):  # fmt: skip
        assert json.dumps(read[0].additional_kwargs["v"]) == json.dumps(new)
    (entry,) = ledger.audit("s", after_version=result.version - 1)
    assert entry.changes["kept"] == 0
    assert len(entry.changes["removed"]) == 2
    assert json.dumps(entry.changes["removed"][0]["additional_kwargs"]["v"]) == json.dumps(old)
    assert json.dumps(entry.changes["added"][0]["additional_kwargs"]["v"]) == json.dumps(new)
    # identical bytes keep the message (and its id): nothing removed
    same = ledger.set("s", [said(new), msg("assistant", "y")])
    (entry,) = ledger.audit("s", after_version=same.version - 1)
    assert entry.changes["kept"] == 2 and entry.changes["removed"] == []
