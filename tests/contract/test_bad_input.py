"""Bad input is refused whole with a typed error; nothing is stored or lost."""

from __future__ import annotations

import enum
import re
from typing import Any

import pytest

from session_ledger.domain import inputs
from session_ledger.domain.errors import (
    InvalidInput,
    InvalidMessage,
    InvalidSessionKey,
    PayloadTooLarge,
)
from session_ledger.domain.ledger import Ledger

GOOD = {"role": "user", "content": "fine"}


@pytest.fixture
def seeded(ledger: Ledger) -> Ledger:
    ledger.put("s", GOOD)
    return ledger


def assert_untouched(ledger: Ledger) -> None:
    head = ledger.head("s")
    assert (head.version, head.message_count) == (2, 1)
    assert [m.content for m in ledger.get_all("s")] == ["fine"]


BAD_MESSAGES = [
    ({"role": "wizard", "content": "x"}, "role must be one of"),
    ({"role": "USER", "content": "x"}, "role must be one of"),
    ({"content": "no role"}, "role must be one of"),
    ({"role": "user", "content": "\ud800 lone"}, "lone surrogate"),
    ({"role": "user", "content": "ok", "additional_kwargs": {"k": "\udfff"}}, "lone surrogate"),
    ({"role": "user", "content": 42}, "'content' must be a string"),
    ({"role": "user", "blocks": "text"}, "'blocks' must be a list"),
    ({"role": "user", "blocks": [{"block_type": "hologram"}]}, "block_type must be one of"),
    ({"role": "user", "blocks": [{"block_type": "text", "text": 1}]}, "text must be a string"),
    ({"role": "user", "blocks": [{"block_type": "text"}]}, "text must be a string"),
    ({"role": "user", "content": "x", "blocks": []}, "either 'content' or 'blocks'"),
    ({"role": "user", "content": "x", "extra": 1}, "unknown message fields"),
    ({"role": "user", "content": "x", "additional_kwargs": []}, "must be an object"),
    ({"role": "user", "content": "x", "additional_kwargs": {"n": float("nan")}}, "JSON"),
    ({"role": "user", "content": "x", "additional_kwargs": {1: "x"}}, "non-string key"),
    ({"role": "user", "content": "x", "additional_kwargs": {"b": b"raw"}}, "not JSON"),
    ("just a string", "must be an object"),
    (None, "must be an object"),
]


@pytest.mark.parametrize(("bad", "why"), BAD_MESSAGES)
def test_bad_messages_are_refused_in_every_write(seeded: Ledger, bad: object, why: str) -> None:
    for call in (
        lambda: seeded.put("s", bad),  # type: ignore[arg-type]
        lambda: seeded.put_messages("s", [GOOD, bad]),  # type: ignore[list-item]
        lambda: seeded.set("s", [bad]),  # type: ignore[list-item]
    ):
        with pytest.raises(InvalidMessage, match=why):
            call()
    assert_untouched(seeded)


def test_deep_nesting_is_refused(seeded: Ledger) -> None:
    deep: dict[str, object] = {}
    node = deep
    for _ in range(100):
        node["n"] = {}
        node = node["n"]  # type: ignore[assignment]
    with pytest.raises(InvalidMessage, match="nested deeper"):
        seeded.put("s", {"role": "user", "content": "x", "additional_kwargs": deep})
    assert_untouched(seeded)


@pytest.mark.parametrize(
    "key", ["", "x" * 513, "tab\tkey", "nul\x00key", "del\x7fkey", "\ud800", 7, None]
)
def test_bad_session_keys(seeded: Ledger, key: object) -> None:
    with pytest.raises(InvalidSessionKey):
        seeded.put(key, GOOD)  # type: ignore[arg-type]
    with pytest.raises(InvalidSessionKey):
        seeded.get_all(key)  # type: ignore[arg-type]
    assert_untouched(seeded)


# The bidirectional controls: each changes the order a key is shown in, so one key can be
# made to look like another.
BIDI_CONTROLS = ["\u202a", "\u202b", "\u202c", "\u202d", "\u202e",
                 "\u2066", "\u2067", "\u2068", "\u2069", "\u200e", "\u200f", "\u061c"]  # fmt: skip


@pytest.mark.parametrize("control", BIDI_CONTROLS)
def test_a_new_session_key_with_a_bidi_control_is_refused(seeded: Ledger, control: str) -> None:
    key = f"invoice{control}txt.exe"
    for call in (
        lambda: seeded.put(key, GOOD),
        lambda: seeded.put_messages(key, [GOOD]),
        lambda: seeded.set(key, [GOOD]),
        lambda: seeded.open_stream(key),
    ):
        with pytest.raises(InvalidSessionKey, match="bidirectional"):
            call()
    assert seeded.keys() == ["s"]
    assert_untouched(seeded)


def test_a_session_whose_key_holds_a_bidi_control_already_stays_usable(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stored before the refusal: read, written and erasable as before (refusing its key
    now would lock its owner, and an erasure, out of it)."""
    key = "old\u202ekey"
    with monkeypatch.context() as before:
        before.setattr(inputs, "BIDI_CONTROLS", re.compile("(?!)"))
        ledger.put(key, GOOD)
    assert [m.content for m in ledger.get_all(key)] == ["fine"]
    ledger.put(key, {"role": "assistant", "content": "more"})
    ledger.set(key, [GOOD])
    assert ledger.head(key).message_count == 1
    assert ledger.keys() == [key]


def test_empty_writes(seeded: Ledger) -> None:
    with pytest.raises(InvalidInput, match="at least one message"):
        seeded.put_messages("s", [])
    with pytest.raises(InvalidInput, match="list of messages"):
        seeded.put_messages("s", GOOD)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="list of messages"):
        seeded.set("s", "text")  # type: ignore[arg-type]
    assert_untouched(seeded)


def test_huge_payloads_are_refused(store: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tests.conftest import make_ledger, make_settings

    ledger = make_ledger(
        make_settings(
            store, tmp_path, max_message_bytes=1000, max_messages_per_write=5, max_write_bytes=3000
        )
    )
    try:
        ledger.put("s", GOOD)
        with pytest.raises(PayloadTooLarge, match=r"message 0 is .* bytes; the limit is 1000"):
            ledger.put("s", {"role": "user", "content": "x" * 1000})
        with pytest.raises(PayloadTooLarge, match="6 messages in one write; the limit is 5"):
            ledger.put_messages("s", [GOOD] * 6)
        with pytest.raises(PayloadTooLarge, match=r"the write is .* bytes; the limit is 3000"):
            ledger.set("s", [{"role": "user", "content": "y" * 900}] * 4)
        assert_untouched(ledger)
    finally:
        ledger.close()


# As LlamaIndex's MessageRole, which `model_dump()` leaves in a message's dict: its str()
# is "Role.ASSISTANT" (a StrEnum's would be its value, hiding the case).
class Role(str, enum.Enum):  # noqa: UP042
    ASSISTANT = "assistant"
    WIZARD = "wizard"


def test_a_role_given_as_a_str_enum_is_stored_as_its_value(ledger: Ledger) -> None:
    ledger.put("enum-role", {"role": Role.ASSISTANT, "content": "hi"})
    ledger.put_messages("enum-role", [{"role": Role.ASSISTANT, "blocks": [
        {"block_type": "text", "text": "a"}, {"block_type": "text", "text": "b"}]}])  # fmt: skip
    stored = ledger.get_all("enum-role")
    assert [type(m.role) for m in stored] == [str, str]
    assert [m.to_dict()["role"] for m in stored] == ["assistant", "assistant"]
    assert [m.role for m in ledger.get("enum-role", token_limit=100)] == ["assistant"] * 2
    with pytest.raises(InvalidMessage, match="role must be one of"):
        ledger.put("enum-role", {"role": Role.WIZARD, "content": "x"})
    assert len(ledger.get_all("enum-role")) == 2


def test_unicode_is_stored_exactly(ledger: Ledger) -> None:
    texts = [
        "emoji 😀👩‍👩‍👧 and flags 🇳🇱",
        "RTL: שלום עולם مرحبا بالعالم",
        "NUL\x00inside and at the end\x00",
        "controls \x01\x1f\x7f and \u2028 line separator",
        "combining e\u0301 vs \u00e9, zero width \u200b",
        "",
    ]
    ledger.put_messages("u", [{"role": "user", "content": t} for t in texts])
    assert [m.content for m in ledger.get_all("u")] == texts
    assert [m.content for m in ledger.get("u", token_limit=10_000)] == texts
    key = "user/42 ünïcode 🔑 spaces & ?query#frag"
    ledger.put(key, {"role": "user", "content": "k"})
    assert ledger.keys(prefix="user/") == [key]
    assert ledger.head(key).key == key


@pytest.mark.parametrize(
    ("options", "why"),
    [
        ({"actor": ""}, "actor must be a non-empty string"),
        ({"actor": "a\nb"}, "actor must not contain control characters"),
        ({"idempotency_key": "k" * 257}, "idempotency key is 257 characters"),
        ({"idempotency_key": "\udc00"}, "idempotency key contains a lone surrogate"),
        ({"reason": "r" * 4097}, "reason is 4097 characters"),
        ({"reason": 5}, "reason must be a non-empty string"),
        # Control characters are allowed in a reason, NUL is not: PostgreSQL's text columns
        # refuse it, and a store must not answer differently from the others.
        ({"reason": "why\x00"}, "reason must not contain NUL"),
        ({"actor": "a\x00b"}, "actor must not contain control characters"),
    ],
)
def test_bad_write_options_are_invalid_input_not_bad_keys(
    seeded: Ledger, options: dict[str, object], why: str
) -> None:
    with pytest.raises(InvalidInput, match=why) as caught:
        seeded.put("s", GOOD, **options)
    assert not isinstance(caught.value, InvalidSessionKey)
    assert_untouched(seeded)


def test_a_reason_may_span_lines(seeded: Ledger) -> None:
    seeded.put("s", GOOD, reason="line one\nline two")
    assert seeded.audit("s")[-1].reason == "line one\nline two"


@pytest.mark.parametrize("prefix", ["a\x00", "\ud800"])
def test_bad_key_prefixes(seeded: Ledger, prefix: str) -> None:
    with pytest.raises(InvalidInput):
        seeded.keys(prefix=prefix)


INTEGER_ARGUMENTS = [
    ("n", lambda ledger, v: ledger.archive_oldest("s", v)),
    ("index", lambda ledger, v: ledger.delete_message("s", v)),
    ("expected_version", lambda ledger, v: ledger.put("s", GOOD, expected_version=v)),
    ("token_limit", lambda ledger, v: ledger.get("s", token_limit=v)),
    ("initial_token_count", lambda ledger, v: ledger.get("s", initial_token_count=v)),
    ("offset", lambda ledger, v: ledger.get_all("s", offset=v)),
    ("offset", lambda ledger, v: ledger.history("s", offset=v)),
    ("last", lambda ledger, v: ledger.history("s", last=v)),
    ("limit", lambda ledger, v: ledger.get_all("s", limit=v)),
    ("as_of_version", lambda ledger, v: ledger.get_all("s", as_of_version=v)),
    ("after_version", lambda ledger, v: ledger.audit("s", after_version=v)),
    ("limit", lambda ledger, v: ledger.audit("s", limit=v)),
    ("limit", lambda ledger, v: ledger.keys(limit=v)),
]
# Counts, versions and positions: bounded (token counts are not; a version past the head
# is a version the session does not have).
POSITIONS = [(n, c) for n, c in INTEGER_ARGUMENTS
             if n not in ("token_limit", "initial_token_count", "as_of_version")]  # fmt: skip


@pytest.mark.parametrize("wrong", [True, False, 1.0, "1", None], ids=repr)
@pytest.mark.parametrize(("name", "call"), INTEGER_ARGUMENTS)
def test_integer_arguments_take_integers_only(
    seeded: Ledger, name: str, call: Any, wrong: object
) -> None:
    # A bool is an int to Python, so `limit=True` read one message and `archive_oldest(k,
    # True)` would archive one: every integer argument refuses it, as it does 1.0 and "1".
    if wrong is None and name in (
        "expected_version",
        "token_limit",
        "limit",
        "as_of_version",
        "last",
    ):
        return  # None means "not given" for these
    with pytest.raises(InvalidInput, match=rf"{name} must be .*; got {re.escape(repr(wrong))}"):
        call(seeded, wrong)
    assert_untouched(seeded)


@pytest.mark.parametrize("huge", [2**62 + 1, 10**20, -(10**20)], ids=repr)
@pytest.mark.parametrize(("name", "call"), POSITIONS)
def test_numbers_past_any_store_column_are_invalid_input(
    seeded: Ledger, name: str, call: Any, huge: int
) -> None:
    """Past 2**62 (the HTTP API's bound) a count, version or position is refused with
    InvalidInput, not the store's OverflowError; below 0, as any negative count."""
    with pytest.raises(InvalidInput, match=rf"{name} must be"):
        call(seeded, huge)
    assert_untouched(seeded)
    assert seeded.audit("s", after_version=2**62) == []  # (the bound itself is taken)
