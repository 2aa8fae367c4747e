"""Invariant 4: rebuild reproduces the views exactly; `check` finds altered rows."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from session_ledger.api.settings import Settings
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.session import session_id
from session_ledger.domain.tokens import NamedTokenizer, TokenCount
from session_ledger.projections.rebuild import check, rebuild
from session_ledger.projections.views import SQLViews
from tests.conftest import make_ledger, make_settings


def views(ledger: Ledger) -> SQLViews:
    assert isinstance(ledger.views, SQLViews)
    return ledger.views


def all_rows(ledger: Ledger) -> dict[str, list[tuple[object, ...]]]:
    return {
        t: [tuple(r.values()) for r in views(ledger).dump(t)] for t in views(ledger).view_tables
    }


def write_a_bit_of_everything(ledger: Ledger, key: str) -> None:
    ledger.put(key, {"role": "system", "content": "be brief"}, actor="alice", reason="setup")
    ledger.put_messages(key, [{"role": "user", "content": f"q{i}"} for i in range(5)])
    ledger.set(key, [{"role": "system", "content": "be brief"}, {"role": "user", "content": "new"}])
    ledger.put(key, {"role": "assistant", "content": "NUL\x00 😀"}, idempotency_key="once")
    ledger.delete_message(key, 1)
    ledger.archive_oldest(key, 1)
    ledger.put(key, {"role": "user", "content": "after archive"})
    ledger.reset(key, reason="user asked")
    ledger.put(key, {"role": "user", "content": "fresh start"})


@pytest.fixture
def busy_ledger(own_store_settings: Settings) -> Ledger:
    ledger = make_ledger(own_store_settings)  # rebuild reads the whole store
    for n in range(3):
        write_a_bit_of_everything(ledger, f"s{n}")
    return ledger


def test_rebuild_reproduces_the_views_exactly(store: str, busy_ledger: Ledger) -> None:
    before = all_rows(busy_ledger)
    processed: list[int] = []
    count = rebuild(
        views(busy_ledger), busy_ledger.mapper, busy_ledger.tokenizer, progress=processed.append
    )
    assert count == processed[-1] == 3 * 10
    assert all_rows(busy_ledger) == before
    busy_ledger.close()


@dataclass(frozen=True)
class CountingTokenizer(NamedTokenizer):
    counted: list[str | None] = field(default_factory=list)

    def count(self, content: str | None) -> TokenCount:
        self.counted.append(content)
        return super().count(content)


def test_rebuild_counts_each_message_an_event_adds_once(tmp_path: Path) -> None:
    ledger = make_ledger(make_settings("sqlite", tmp_path))
    write_a_bit_of_everything(ledger, "s")
    before = all_rows(ledger)
    used = ledger.tokenizer
    tokenizer = CountingTokenizer(used.name, used.encode, used.pretokenized, used.length)
    rebuild(views(ledger), ledger.mapper, tokenizer)
    assert all_rows(ledger) == before
    # what each write added: the replace keeps its first message, whose count it keeps
    added = ["be brief", *(f"q{i}" for i in range(5)), "new", "NUL\x00 😀", "after archive",
             "fresh start"]  # fmt: skip
    assert tokenizer.counted == added
    ledger.close()


def test_check_reports_no_difference_on_an_untouched_store(store: str, busy_ledger: Ledger) -> None:
    assert check(views(busy_ledger), busy_ledger.mapper, busy_ledger.tokenizer) == []
    busy_ledger.close()


def test_check_reports_a_row_altered_by_hand(tmp_path: Path) -> None:
    ledger = make_ledger(make_settings("sqlite", tmp_path))
    write_a_bit_of_everything(ledger, "s")
    with ledger.recorder.datastore.transaction(commit=True) as c:  # type: ignore[attr-defined]
        c.execute("UPDATE ledger_messages SET message = replace(message, 'fresh', 'forged')")
    differences = check(views(ledger), ledger.mapper, ledger.tokenizer)
    assert len(differences) == 1
    assert "ledger_messages" in differences[0] and "forged" in differences[0]
    assert "fresh start" in differences[0]
    ledger.close()


def test_rebuild_then_reads_and_writes_carry_on(tmp_path: Path) -> None:
    ledger = make_ledger(make_settings("sqlite", tmp_path))
    write_a_bit_of_everything(ledger, "s")
    rebuild(views(ledger), ledger.mapper, ledger.tokenizer)
    assert [m.content for m in ledger.get_all("s")] == ["fresh start"]
    retried = {"role": "assistant", "content": "NUL\x00 😀"}
    assert ledger.put("s", retried, idempotency_key="once").replayed  # the key survived
    assert ledger.put("s", {"role": "user", "content": "x"}).version == 11
    assert ledger.head("s").message_count == 2
    ledger.close()


# Each message row's body as stores kept it before plain texts were stored as a JSON
# string: its canonical JSON.
AS_BEFORE = (
    'UPDATE {table} SET message = \'{{"role":"\' || role || \'","blocks":'
    '[{{"block_type":"text","text":\' || message || \'}}],"additional_kwargs":{{}}}}\''
    " WHERE message LIKE '\"%'"
)


def plain_bodies(ledger: Ledger) -> int:
    with ledger.recorder.datastore.transaction(commit=False) as c:  # type: ignore[attr-defined]
        c.execute("SELECT count(*) AS n FROM ledger_ended_messages WHERE message LIKE '\"%'")
        ended = c.fetchone()
        c.execute("SELECT count(*) AS n FROM ledger_messages WHERE message LIKE '\"%'")
        live = c.fetchone()
    return int(ended["n"]) + int(live["n"])


def test_a_store_of_canonical_bodies_reads_alike_and_rebuild_makes_them_plain(
    store: str, own_store_settings: Settings
) -> None:
    ledger = make_ledger(own_store_settings)
    write_a_bit_of_everything(ledger, "s")
    ledger.put_messages("s", [{"role": "tool", "content": "t", "additional_kwargs": {"id": 1}}])
    ledger.put("s", {"role": "assistant", "content": '"quoted" {"json": "text"}'})
    rows, plain = all_rows(ledger), plain_bodies(ledger)
    assert plain > 10  # every message but the one with additional_kwargs, live and ended

    def reads() -> list[object]:
        past = [ledger.get_all("s", as_of_version=v) for v in range(1, 13)]
        past += [ledger.get("s", as_of_version=v, token_limit=3) for v in range(1, 13)]
        past += [ledger.get_all("s", status="archived", as_of_version=v) for v in (7, 9)]
        now = [ledger.get_all("s"), ledger.get("s", token_limit=3), ledger.window("s").json()]
        return [
            *past,
            *now,
            ledger.history("s").json(),
            ledger.history("s", as_of_version=7).json(),
        ]

    before = reads()
    with ledger.recorder.datastore.transaction(commit=True) as c:  # type: ignore[attr-defined]
        for table in ("ledger_messages", "ledger_ended_messages"):
            c.execute(AS_BEFORE.format(table=table))
    assert plain_bodies(ledger) == 0
    assert reads() == before
    assert all_rows(ledger) == rows  # bodies compared as their canonical JSON
    assert check(views(ledger), ledger.mapper, ledger.tokenizer) == []
    rebuild(views(ledger), ledger.mapper, ledger.tokenizer)
    assert plain_bodies(ledger) == plain
    assert reads() == before
    ledger.close()


@pytest.mark.parametrize("store", ["memory", "sqlite", "postgres"])
def test_check_names_only_the_rows_a_missing_one_concerns(
    store: str, own_store_settings: Settings
) -> None:
    """A row deleted by hand is reported missing; the rows after it, of that session and
    of the sessions after it, are not paired with the wrong rows and reported too."""
    ledger = make_ledger(own_store_settings)
    for key in ("a", "b", "c"):
        ledger.put_messages(key, [{"role": "user", "content": f"{key}{i}"} for i in range(4)])
    sid = views(ledger).dialect.sid(session_id(ledger.default_tenant, "a"))
    with ledger.recorder.datastore.transaction(commit=True) as c:  # type: ignore[attr-defined]
        views(ledger).dialect.execute(
            c, "DELETE FROM ledger_messages WHERE session_id = ? AND message_id = 1", (sid,)
        )
    (difference,) = check(views(ledger), ledger.mapper, ledger.tokenizer)
    assert difference.startswith("ledger_messages: stored None but the events give")
    assert '"a1"' in difference
    ledger.close()


def test_check_re_derives_what_a_replace_keeps_from_its_payload(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A store written when `set` compared messages with Python's `==` holds replaces whose
    payload keeps a message that differs from the stored one in JSON (`true` where `1`
    was): `check` names the event, and `rebuild` refuses rather than pick one."""
    from session_ledger.domain.ports import WriteBatch
    from session_ledger.domain.session import session_id
    from session_ledger.domain.tokens import TokenCount
    from session_ledger.projections.view_writes import EventsDisagree

    settings = make_settings(store, tmp_path)
    if store == "postgres":
        settings.database_url = request.getfixturevalue("fresh_postgres_url")
    ledger = make_ledger(settings)
    said = {"role": "user", "content": "x", "additional_kwargs": {"v": 1}}
    ledger.set("s", [said])
    # The replace that code would have written: it keeps message 0, whose payload says `true`.
    session = ledger.repository.get(session_id(ledger.default_tenant, "s"))
    first = session.next_message_id
    changed = {"role": "user", "blocks": [{"block_type": "text", "text": "x"}],
               "additional_kwargs": {"v": True}}  # fmt: skip
    session.replace(messages=[changed], kept=1, actor="old", reason=None,
                    idempotency_key=None, request_digest=None)  # fmt: skip
    batch = WriteBatch(session.id, ledger.default_tenant, "s", tuple(session.pending_events),
                       first, 1, 0, session.next_message_id, (TokenCount(1, 1),))  # fmt: skip
    ledger.save(session, ledger_batch=batch)
    assert ledger.get_all("s")[0].additional_kwargs == {"v": 1}  # the views kept the old one
    (difference,) = check(views(ledger), ledger.mapper, ledger.tokenizer)
    assert "the replace of version 3 keeps message 0" in difference
    with pytest.raises(EventsDisagree, match="version 3"):
        rebuild(views(ledger), ledger.mapper, ledger.tokenizer)
    assert ledger.get_all("s")[0].additional_kwargs == {"v": 1}  # nothing changed
    ledger.close()
