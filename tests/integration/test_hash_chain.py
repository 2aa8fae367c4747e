"""The hash chain kept at write time: `verify` recomputes it from the stored events,
passes on an untouched store and names the first altered record (invariant 5)."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from session_ledger.domain.errors import SessionNotFound
from session_ledger.domain.integrity import chain
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.session import session_id
from session_ledger.projections.rebuild import rebuild


def write_some(ledger: Ledger, key: str = "s") -> None:
    ledger.put(key, {"role": "user", "content": "hello 😀 \x00"})  # v1 started, v2 appended
    ledger.put_messages(key, [{"role": "assistant", "content": "hi"}] * 3)  # v3
    ledger.set(key, [{"role": "user", "content": "hello 😀 \x00"}])  # v4
    ledger.delete_last_message(key)  # v5
    ledger.put(key, {"role": "user", "content": "again"})  # v6
    ledger.archive_oldest(key, 1)  # v7
    ledger.reset(key)  # v8


def stored_records(ledger: Ledger, key: str) -> list[tuple[int, str, bytes]]:
    sid = session_id(ledger.default_tenant, key)
    return [(e.originator_version, e.topic, e.state) for e in ledger.recorder.select_events(sid)]


def test_every_write_stores_the_chain_over_its_stored_records(ledger: Ledger) -> None:
    write_some(ledger)
    report = ledger.verify("s")
    assert report.intact and report.problem is None
    assert report.versions == 8
    sid = session_id(ledger.default_tenant, "s")
    assert report.head == chain(sid, stored_records(ledger, "s")).hex()
    stored = ledger.views.stored_chain(sid, 0, 100)
    assert [v for v, _ in stored] == list(range(1, 9))
    assert stored[-1][1] == bytes.fromhex(report.head)


def test_verify_walks_long_sessions_a_page_at_a_time(ledger: Ledger) -> None:
    for i in range(1100):  # more than one page of events (VERIFY_PAGE)
        ledger.put("long", {"role": "user", "content": f"m{i}"})
    report = ledger.verify("long")
    assert report.intact and report.versions == 1101


def test_verify_all_reports_every_session_of_every_tenant(ledger: Ledger) -> None:
    # (the PostgreSQL database is shared by the run's tests: look at these tenants only)
    mine, other = ledger.default_tenant, ledger.default_tenant + "-other"
    write_some(ledger, "a")
    ledger.put("b", {"role": "user", "content": "x"}, tenant=other)
    reports = [r for r in ledger.verify_all() if r.tenant in (mine, other)]
    assert [(r.tenant, r.key, r.intact) for r in reports] == [(mine, "a", True), (other, "b", True)]


def test_verify_of_an_unknown_session_raises(ledger: Ledger) -> None:
    with pytest.raises(SessionNotFound):
        ledger.verify("nobody")


def test_rebuild_recomputes_the_same_chain(ledger: Ledger) -> None:
    write_some(ledger)
    sid = session_id(ledger.default_tenant, "s")
    before = ledger.views.stored_chain(sid, 0, 100)
    rebuild(ledger.views, ledger.mapper, ledger.tokenizer)  # type: ignore[arg-type]
    assert ledger.views.stored_chain(sid, 0, 100) == before
    assert ledger.verify("s").intact


# -- tampering, on a SQLite file (the test edits the database behind the ledger) ---------


@pytest.fixture
def sqlite_ledger(tmp_path: Any) -> Any:
    from session_ledger.api.bootstrap import migrate, open_ledger
    from session_ledger.api.settings import Settings

    settings = Settings(database_url=f"sqlite:///{tmp_path / 'ledger.db'}", tokenizer="whitespace")
    migrate(settings)
    ledger = open_ledger(settings)
    yield ledger, tmp_path / "ledger.db"
    ledger.close()


DELETE_EVENT = "DELETE FROM ledger_events WHERE originator_id = ? AND originator_version = ?"


def tamper(path: Any, sql: str, *params: Any) -> None:
    with sqlite3.connect(path) as conn:
        assert conn.execute(sql, params).rowcount == 1


EDIT_EVENT = (
    "UPDATE ledger_events SET state = CAST(replace(CAST(state AS TEXT), 'hi', 'HI') AS BLOB) "
    "WHERE originator_id = ? AND originator_version = ?"
)
EDIT_HASH = "UPDATE ledger_timeline SET chain = zeroblob(32) WHERE session_id = ? AND version = ?"


@pytest.mark.parametrize(
    ("sql", "version", "says"),
    [
        (EDIT_EVENT, 3, "the events give"),  # an edited message
        (DELETE_EVENT, 5, "missing"),  # a deleted event
        (DELETE_EVENT, 8, "the events end at version 7"),  # the last event deleted
        (EDIT_HASH, 6, "the stored hash is 0000"),  # an edited stored hash
    ],
)
def test_an_altered_record_is_named_by_its_version(
    sqlite_ledger: Any, sql: str, version: int, says: str
) -> None:
    ledger, path = sqlite_ledger
    write_some(ledger)
    tamper(path, sql, session_id(ledger.default_tenant, "s").hex, version)
    report = ledger.verify("s")
    assert not report.intact
    assert report.first_bad_version == version
    assert says in (report.problem or "")
    good = [r for r in stored_records(ledger, "s") if r[0] < version]
    assert report.versions == version - 1
    assert report.head == chain(session_id(ledger.default_tenant, "s"), good).hex()


def test_a_store_without_stored_hashes_says_to_rebuild(sqlite_ledger: Any) -> None:
    ledger, path = sqlite_ledger
    write_some(ledger)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE ledger_timeline SET chain = NULL")
    report = ledger.verify("s")
    assert report.first_bad_version == 1 and "derive the views again" in (report.problem or "")
    # writes go on unchained until a rebuild fills the chain in from the events
    ledger.put("s", {"role": "user", "content": "later"})
    rebuild(ledger.views, ledger.mapper, ledger.tokenizer)
    assert ledger.verify("s").intact


def test_two_processes_appending_to_one_session_keep_one_chain(tmp_path: Any) -> None:
    from session_ledger.api.bootstrap import migrate, open_ledger
    from session_ledger.api.settings import Settings

    settings = Settings(database_url=f"sqlite:///{tmp_path / 'ledger.db'}", tokenizer="whitespace")
    migrate(settings)
    a, b = open_ledger(settings), open_ledger(settings)
    try:
        # Each keeps the hash it last wrote; the other's writes make it stale, and its
        # next write must extend what is stored, not what it remembers.
        for i, writer in enumerate([a, b, a, a, b, b, a, b]):
            writer.put("s", {"role": "user", "content": f"m{i}"})
        for ledger in (a, b):
            report = ledger.verify("s")
            assert report.intact and report.versions == 9
        sid = session_id(a.default_tenant, "s")
        assert report.head == chain(sid, stored_records(a, "s")).hex()
    finally:
        a.close()
        b.close()


def test_after_a_rebuild_an_append_extends_the_rebuilt_chain(sqlite_ledger: Any) -> None:
    # A rebuild of altered events stores a different chain; the hash this process
    # remembers from before must not be extended.
    ledger, path = sqlite_ledger
    ledger.put("s", {"role": "user", "content": "hi"})
    ledger.put("s", {"role": "assistant", "content": "hi there"})  # v3, remembered
    tamper(path, EDIT_EVENT, session_id(ledger.default_tenant, "s").hex, 3)
    rebuild(ledger.views, ledger.mapper, ledger.tokenizer)
    ledger.put("s", {"role": "user", "content": "after"})
    report = ledger.verify("s")
    assert report.intact and report.versions == 4


def test_the_rebuild_command_keeps_the_evidence_of_an_altered_event(sqlite_ledger: Any) -> None:
    """`session-ledger rebuild` derives the stored hashes from the events: over an edited
    event it replaced the hash kept as it was written, and `verify` then found nothing.
    It refuses now, naming the session, unless told to replace them; views that merely
    lack hashes (a store written before they were kept) are still rebuilt."""
    from typer.testing import CliRunner

    from session_ledger.api.cli import cli

    ledger, path = sqlite_ledger
    write_some(ledger)
    ledger.put("clean", {"role": "user", "content": "untouched"})
    url = ["--database-url", f"sqlite:///{path}"]
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE ledger_timeline SET chain = NULL WHERE session_id = ?",
                     (session_id(ledger.default_tenant, "clean").hex,))  # fmt: skip
    assert CliRunner().invoke(cli, ["rebuild", *url]).exit_code == 0  # (derived, not broken)
    assert ledger.verify("clean").intact
    tamper(path, EDIT_EVENT, session_id(ledger.default_tenant, "s").hex, 3)
    refused = CliRunner().invoke(cli, ["rebuild", *url])
    assert refused.exit_code == 1, refused.output
    assert "BROKEN  default/s  at version 3" in refused.output
    assert "--replace-broken-chains" in refused.output
    assert ledger.verify("s").first_bad_version == 3  # the evidence is kept
    forced = CliRunner().invoke(cli, ["rebuild", "--replace-broken-chains", *url])
    assert forced.exit_code == 0, forced.output
    assert ledger.verify("s").intact  # (as asked: the events' own hashes)
