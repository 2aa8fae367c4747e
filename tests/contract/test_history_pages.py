"""A read answers a bounded page: the history a page at a time (at most
`max_page_messages`, ending before `max_answer_bytes`), each page after the first read at
the first one's version; a context window over `max_answer_bytes` is refused. On memory,
SQLite and PostgreSQL alike."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from session_ledger.domain.errors import AnswerTooLarge, InvalidInput
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.messages import ChatMessage
from session_ledger.domain.ports import MessagesRead
from tests.conftest import make_ledger, make_settings

PAGE = 4
ANSWER = 64 * 1024  # bytes: above a page's and the first tail batch's inline share


@pytest.fixture
def small(store: str, tmp_path: Path) -> Iterator[Ledger]:
    """A ledger whose answers are small: pages of PAGE messages, ANSWER bytes."""
    ledger = make_ledger(
        make_settings(store, tmp_path, max_page_messages=PAGE, max_answer_bytes=ANSWER)
    )
    yield ledger
    ledger.close()


def msg(text: str, role: str = "user") -> dict[str, str]:
    return {"role": role, "content": text}


def texts(messages: list[ChatMessage]) -> list[str | None]:
    return [m.content for m in messages]


def pages(ledger: Ledger, key: str, **kw: object) -> Iterator[MessagesRead]:
    """Every page of a history read, following each page's `next_after`."""
    page = ledger.page(key, **kw)  # type: ignore[arg-type]
    yield page
    status = kw.get("status", "active")
    while page.next_after is not None:
        page = ledger.page(key, status=status, after=page.next_after,  # type: ignore[arg-type]
                           as_of_version=page.version, limit=kw.get("limit"))  # fmt: skip
        yield page


def test_pages_hold_the_whole_history_in_order(small: Ledger) -> None:
    small.put_messages("s", [msg(f"m{i}") for i in range(10)])
    found = list(pages(small, "s"))
    assert [len(p) for p in found] == [4, 4, 2]
    assert [m for p in found for m in texts(p.messages())] == [f"m{i}" for i in range(10)]
    assert found[-1].next_after is None and {p.version for p in found} == {2}


def test_a_last_page_that_is_full_says_no_page_follows(small: Ledger) -> None:
    small.put_messages("s", [msg(f"m{i}") for i in range(8)])
    assert [len(p) for p in pages(small, "s")] == [4, 4]


def test_a_limit_over_the_most_gets_the_most_and_the_rest_follows(small: Ledger) -> None:
    small.put_messages("s", [msg(f"m{i}") for i in range(6)])
    first = small.page("s", limit=1000)
    assert len(first) == PAGE and first.next_after is not None
    assert [len(p) for p in pages(small, "s", limit=3)] == [3, 3]
    assert len(small.page("s", limit=0)) == 0 and small.page("s", limit=0).next_after is None


def test_pages_after_the_first_are_of_its_version_whatever_is_written_between(
    small: Ledger,
) -> None:
    small.put_messages("s", [msg(f"m{i}") for i in range(10)])
    first = small.page("s")
    small.delete_message("s", 5)
    small.put_messages("s", [msg("later")])
    small.archive_oldest("s", 6)
    rest = list(pages_after(small, first))
    assert {p.version for p in rest} == {first.version}
    read = texts(first.messages()) + [m for p in rest for m in texts(p.messages())]
    assert read == [f"m{i}" for i in range(10)]
    small.set("s", [msg("new")])
    assert [m for p in pages_after(small, first) for m in texts(p.messages())] == read[4:]


def pages_after(ledger: Ledger, first: MessagesRead) -> Iterator[MessagesRead]:
    page = first
    while page.next_after is not None:
        page = ledger.page("s", after=page.next_after, as_of_version=first.version)
        yield page


def test_pages_end_before_the_answer_bytes_and_keep_large_bodies_whole(small: Ledger) -> None:
    large = ["a" * (ANSWER - 100), "b" * 20_000, "c" * 30_000, "d" * (3 * ANSWER)]
    small.put_messages("s", [msg(large[0]), msg("x"), msg(large[1]), msg(large[2]),
                             msg(large[3]), msg("y")])  # fmt: skip
    found = [texts(p.messages()) for p in pages(small, "s")]
    assert found == [[large[0], "x"], [large[1], large[2]], [large[3]], ["y"]]


def test_the_archive_is_paged_too(small: Ledger) -> None:
    small.put_messages("s", [msg(f"m{i}") for i in range(7)])
    small.archive_oldest("s", 6)
    found = [texts(p.messages()) for p in pages(small, "s", status="archived")]
    assert found == [["m0", "m1", "m2", "m3"], ["m4", "m5"]]


def test_a_past_version_is_paged_from_an_offset(small: Ledger) -> None:
    small.put_messages("s", [msg(f"m{i}") for i in range(9)])
    small.reset("s")
    found = [texts(p.messages()) for p in pages(small, "s", offset=2, as_of_version=2)]
    assert found == [["m2", "m3", "m4", "m5"], ["m6", "m7", "m8"]]


def test_a_past_version_far_into_the_history_reads_no_body_before_its_page(
    small: Ledger,
) -> None:
    """A past version's rows are merged in the process: up to the offset, ids alone."""
    text = "w " * 2000  # 4 KB: under a page's inline share, so read with its row
    small.put_messages("s", [msg(f"{i} {text}") for i in range(600)])
    small.put("s", msg("later"))
    tracemalloc.start()
    try:
        page = small.page("s", offset=595, as_of_version=2)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [m.content.split()[0] for m in page.messages()] == ["595", "596", "597", "598"]
    assert peak < 100 * len(text), peak  # the session holds 600


def test_a_page_after_another_names_its_version(small: Ledger) -> None:
    small.put_messages("s", [msg(f"m{i}") for i in range(6)])
    first = small.page("s")
    with pytest.raises(InvalidInput, match="as_of_version"):
        small.page("s", after=first.next_after)
    with pytest.raises(InvalidInput, match="offset"):
        small.page("s", after=first.next_after, as_of_version=first.version, offset=1)


def test_a_cursor_the_history_never_gave_is_refused(small: Ledger) -> None:
    """A page's cursor is given only where messages follow it at its version: one naming
    a place past the last message (a made-up `6-99`) is refused, not answered empty as
    if the history had ended there."""
    small.put_messages("s", [msg(f"m{i}") for i in range(6)])
    first = small.page("s")
    assert first.next_after is not None
    second = small.page("s", after=first.next_after, as_of_version=first.version)
    assert texts(second.messages()) == ["m4", "m5"] and second.next_after is None
    for after in (99, 6):  # (message ids count from 0: m5 is 5)
        with pytest.raises(InvalidInput, match="cursor is not one this history returned"):
            small.page("s", after=after, as_of_version=first.version)
    assert len(small.page("s", after=first.next_after, as_of_version=first.version, limit=0)) == 0


def test_a_window_over_the_answer_bytes_is_refused(small: Ledger) -> None:
    small.put_messages("s", [msg("w " * 10_000, role) for role in ("user", "assistant") * 4])
    assert len(small.get("s", token_limit=30_000)) == 2  # 40 KB
    with pytest.raises(AnswerTooLarge, match="token_limit"):
        small.get("s", token_limit=10**9)
    with pytest.raises(AnswerTooLarge):
        small.get("s", token_limit=10**9, as_of_version=2)


def test_a_long_window_over_the_answer_bytes_stops_reading_early(small: Ledger) -> None:
    """Refused before the tail's next batch once the window reaches past the bytes: not
    read to the start of the session."""
    text = "w " * 500  # 1 KB: 64 of them pass ANSWER
    for _ in range(4):
        small.put_messages("s", [msg(text, role) for role in ("user", "assistant") * 250])
    before = small.views.rows_read  # type: ignore[attr-defined]
    with pytest.raises(AnswerTooLarge):
        small.get("s", token_limit=10**9)
    assert small.views.rows_read - before < 64 + 128 + 256 + 1  # type: ignore[attr-defined]
    assert len(small.get("s", token_limit=500 * 40)) == 40


def test_windows_under_the_answer_bytes_are_read_whole(store: str, tmp_path: Path) -> None:
    """Bodies over a tail batch's share are read after the window is known: the window is
    the same, now and at a past version, with the stored counts or a caller's tokenizer."""
    ledger = make_ledger(make_settings(store, tmp_path))
    try:
        history = [msg(f"{i} " + ("z" * (70_000 if i % 5 == 0 else i)), role)
                   for i, role in enumerate(("user", "assistant", "tool") * 50)]  # fmt: skip
        ledger.put_messages("s", history[:100])
        ledger.put_messages("s", history[100:])
        assert texts(ledger.get("s", token_limit=10**9, as_of_version=2)) == texts(
            ledger.get_all("s", as_of_version=2)
        )
        ledger.delete_message("s", 3)
        every = ledger.get_all("s")
        assert ledger.get("s", token_limit=10**9) == every
        words = ledger.get("s", token_limit=10**9, tokenizer=str.split)
        assert words == every
        assert ledger.get("s", token_limit=40) == every[-len(ledger.get("s", token_limit=40)) :]
    finally:
        ledger.close()
