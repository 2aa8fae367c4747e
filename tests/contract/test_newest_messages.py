"""`last`: the newest messages of a history, read newest first (as many rows as asked,
however long the history), put in order. Equal to the tail of `get_all` at every version
of a session longer than a read batch, for both statuses, with and without `limit`, as
one read and as pages; on memory, SQLite and PostgreSQL alike."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from session_ledger.domain.errors import InvalidInput
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.messages import ChatMessage
from session_ledger.projections.sql import TAIL_BATCH
from tests.conftest import make_ledger, make_settings

PAGE = 7  # messages a page holds: the newest 100 are many pages


def texts(messages: list[ChatMessage]) -> list[str | None]:
    return [m.content for m in messages]


def newest(history: list[str | None], last: int, limit: int | None = None) -> list[str | None]:
    found = history[max(0, len(history) - last) :] if last else []
    return found if limit is None else found[:limit]


def churned(ledger: Ledger, key: str, seed: int = 7) -> int:
    """A session of appends, removals, archives, a reset and a set, longer than one read
    batch; its head version."""
    rnd = random.Random(seed)
    version = 0
    for i in range(45):
        step = rnd.random()
        if step < 0.7 or version == 0:
            size = rnd.randint(1, 2 * TAIL_BATCH // 3)
            done = ledger.put_messages(key, [
                {"role": ("user", "assistant")[j % 2], "content": f"m{i}.{j}"} for j in range(size)
            ])  # fmt: skip
        elif step < 0.8 and ledger.head(key).message_count > 9:
            done = ledger.delete_message(key, rnd.randint(0, 9))
        elif step < 0.9 and ledger.head(key).message_count > 20:
            done = ledger.archive_oldest(key, rnd.randint(1, 20))
        elif 0.9 <= step < 0.95:
            done = ledger.reset(key)
        elif step >= 0.95:
            done = ledger.set(key, [{"role": "user", "content": f"set {i}"}])
        else:
            continue
        version = done.version
    return version


@pytest.fixture
def paged(store: str, tmp_path: Path) -> Ledger:
    ledger = make_ledger(make_settings(store, tmp_path, max_page_messages=PAGE))
    yield ledger  # type: ignore[misc]
    ledger.close()


def test_the_newest_equal_the_tail_of_the_history_at_every_version(paged: Ledger) -> None:
    head = churned(paged, "s")
    assert paged.head("s").message_count > TAIL_BATCH
    for version in range(1, head + 1):
        for status in ("active", "archived"):
            history = texts(paged.get_all("s", status=status, as_of_version=version))
            for last in (0, 1, 5, TAIL_BATCH + 6, 10**6):
                for limit in (None, 3):
                    read = paged.history(
                        "s", status=status, as_of_version=version, last=last, limit=limit
                    )
                    assert texts(read.messages()) == newest(history, last, limit), (
                        version, status, last, limit,
                    )  # fmt: skip
                    assert read.version == version


def test_the_newest_now_are_of_the_head_version(paged: Ledger) -> None:
    head = churned(paged, "s", seed=11)
    paged.put_messages("s", [{"role": "user", "content": f"n{i}"} for i in range(150)])
    head += 1
    history = texts(paged.get_all("s"))
    for last in (1, 50, 149, 150, 151, 10**6):
        read = paged.history("s", last=last)
        assert (texts(read.messages()), read.version) == (newest(history, last), head)
        assert texts(paged.get_all("s", last=last)) == newest(history, last)


def test_pages_from_the_newest_hold_them_all_in_order(paged: Ledger) -> None:
    head = churned(paged, "s", seed=3)
    for version in (head // 3, head // 2, None):
        history = texts(paged.get_all("s", as_of_version=version))
        for last in (1, PAGE, PAGE + 1, 100, 10**6):
            page = paged.page("s", last=last, as_of_version=version)
            found = texts(page.messages())
            assert len(found) <= PAGE
            while page.next_after is not None:
                page = paged.page("s", after=page.next_after, as_of_version=page.version)
                found += texts(page.messages())
            assert found == newest(history, last), (version, last)
            assert page.version == (version or paged.head("s").version)


def test_a_newest_read_reads_as_many_rows_as_asked(store: str, tmp_path: Path) -> None:
    """Counted, not timed: the newest 50 of 2,000 messages read 50 rows, not 2,000."""
    ledger = make_ledger(make_settings(store, tmp_path))
    try:
        for start in range(0, 2000, 500):
            ledger.put_messages("s", [{"role": "user", "content": f"m{i}"}
                                      for i in range(start, start + 500)])  # fmt: skip
        views = ledger.views
        for read in (
            lambda: ledger.history("s", last=50),
            lambda: ledger.history("s", last=50, as_of_version=3),
            lambda: ledger.page("s", last=50),
        ):
            before = views.rows_read  # type: ignore[attr-defined]
            assert len(read()) == 50
            assert views.rows_read - before <= 50 + 2  # type: ignore[attr-defined]
    finally:
        ledger.close()


def test_bad_or_unknown(ledger: Ledger) -> None:
    assert ledger.get_all("nobody", last=5) == [] and ledger.history("nobody", last=5).version == 0
    assert len(ledger.page("nobody", last=5)) == 0
    ledger.put_messages("s", [{"role": "user", "content": "only"}])
    assert texts(ledger.get_all("s", last=5)) == ["only"]
    for call, match in (
        (lambda: ledger.get_all("s", last=-1), "last"),
        (lambda: ledger.get_all("s", last="3"), "last"),  # type: ignore[arg-type]
        (lambda: ledger.get_all("s", last=True), "last"),  # type: ignore[arg-type]
        (lambda: ledger.get_all("s", last=2, offset=1), "offset or last"),
        (lambda: ledger.page("s", last=2, offset=1), "offset or last"),
        (lambda: ledger.page("s", last=2, after=1, as_of_version=1), "last or after"),
    ):
        with pytest.raises(InvalidInput, match=match):
            call()
