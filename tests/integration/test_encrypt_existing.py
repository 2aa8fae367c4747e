"""`encrypt-existing` on SQLite and PostgreSQL: a store written clear is sealed in place,
session by session; afterwards no content is in the store, the chain verifies, the
views match the events, erasure works, and a run stopped half-way (between sessions, or
killed inside one) leaves no session half-sealed and finishes when run again."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time
import uuid
from pathlib import Path

import psycopg
import pytest

from session_ledger.api.settings import Settings
from session_ledger.domain.errors import EncryptionRequired, SessionErasedError
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.session import session_id
from session_ledger.projections.export import export_session
from session_ledger.projections.export_verify import verify_export
from session_ledger.projections.rebuild import check
from session_ledger.projections.views import SQLViews
from tests.conftest import make_ledger, make_settings
from tests.e2e.conftest import CLI
from tests.integration.test_erasure import exports, master_key, store_bytes, write_canary


@pytest.fixture(params=("sqlite", "postgres"))
def clear_settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    """Settings of a store of the test's own, with no master key yet."""
    settings = make_settings(str(request.param), tmp_path)
    if request.param == "postgres":
        settings.database_url = request.getfixturevalue("fresh_postgres_url")
    return settings


def with_master_key(settings: Settings) -> Settings:
    return settings.model_copy(update={"master_key": master_key()})


def opened(settings: Settings) -> Ledger:
    ledger = make_ledger(settings)
    ledger.test_settings = settings  # type: ignore[attr-defined]
    return ledger


def views_of(ledger: Ledger) -> SQLViews:
    views = ledger.views
    assert isinstance(views, SQLViews)
    return views


def test_a_clear_store_is_sealed_in_place_and_can_then_be_erased(
    clear_settings: Settings,
) -> None:
    canary, other = f"CANARY-{uuid.uuid4().hex}", f"KEPT-{uuid.uuid4().hex}"
    clear = opened(clear_settings)
    try:
        write_canary(clear, "victim", canary)
        write_canary(clear, "bystander", other)
        with clear.stream("victim") as streamed:  # a completed stream: its row and message
            streamed.write(f"streamed {canary}")
        opened_stream = clear.open_stream("victim")  # left open: its text so far
        clear.append_stream("victim", opened_stream.stream_id, [f"partial {canary} "])
        with pytest.raises(EncryptionRequired):
            clear.erase("victim", reason="asked", basis="GDPR art. 17")
        before = {k: clear.get_all(k) for k in ("victim", "bystander")}
        heads = {k: clear.verify(k).head for k in ("victim", "bystander")}
        assert canary.encode() in store_bytes(clear)
    finally:
        clear.close()

    ledger = opened(with_master_key(clear_settings))
    try:
        with pytest.raises(EncryptionRequired):  # configured, but this session is clear
            ledger.erase("victim", reason="asked", basis="GDPR art. 17")
        done = list(ledger.encrypt_all(actor="operator"))
        assert sorted((k, now) for _, k, now in done) == [("bystander", True), ("victim", True)]
        views_of(ledger).drop_old_bytes()

        raw = store_bytes(ledger)  # every table's values, the files, the WAL / a pg_dump
        assert raw.count(canary.encode()) == 0 and raw.count(other.encode()) == 0
        assert raw.count(b"my name is") == 0
        for key in ("victim", "bystander"):
            assert ledger.get_all(key) == before[key]  # reads as before, opened
            report = ledger.verify(key)
            assert report.intact, report.problem
            last = ledger.audit(key)[-1]
            assert (last.event_type, last.actor) == ("SessionEncrypted", "operator")
            assert last.changes == {"previous_head": heads[key]}
            jsonl = b"".join(export_session(ledger, key, tenant=ledger.default_tenant))
            assert verify_export(jsonl.splitlines(keepends=True)).ok
        stream = ledger.stream_state("victim", opened_stream.stream_id)
        assert stream.text == f"partial {canary} "
        ledger.append_stream("victim", opened_stream.stream_id, ["more"])  # sealed from now on
        assert ledger.stream_state("victim", opened_stream.stream_id).text.endswith(" more")
        assert check(ledger.views, ledger.mapper, ledger.tokenizer) == []  # type: ignore[arg-type]
        assert list(ledger.encrypt_all()) == [
            (ledger.default_tenant, "bystander", False), (ledger.default_tenant, "victim", False)
        ]  # fmt: skip

        ledger.put("bystander", {"role": "user", "content": f"later {other}"})
        ledger.erase("victim", reason="the user asked", basis="GDPR art. 17")
        views_of(ledger).drop_old_bytes()
        raw = store_bytes(ledger)
        assert raw.count(canary.encode()) == 0 and raw.count(other.encode()) == 0
        assert exports(ledger, "victim").count(canary.encode()) == 0
        with pytest.raises(SessionErasedError):
            ledger.get_all("victim")
        assert ledger.verify("victim").intact and ledger.verify("bystander").intact
        assert ledger.get_all("bystander")[-1].content == f"later {other}"
    finally:
        ledger.close()


def test_a_process_that_wrote_the_session_clear_writes_it_sealed_after(
    clear_settings: Settings,
) -> None:
    clear = opened(clear_settings)
    try:
        clear.put("raced", {"role": "user", "content": "first"})
    finally:
        clear.close()
    sealed = with_master_key(clear_settings)
    writer, sealer = opened(sealed), opened(sealed)  # two processes, as it were
    canary = f"RACE-{uuid.uuid4().hex}"
    try:
        writer.put("raced", {"role": "user", "content": "warm"})  # its caches: a clear session
        assert sealer.encrypt("raced") is not None
        for n in range(3):  # its cached state is behind: the write meets the new version
            writer.put("raced", {"role": "user", "content": f"{canary} {n}"})
        views_of(sealer).drop_old_bytes()  # (the clear bytes before the sealing: VACUUM)
        assert store_bytes(sealer).count(canary.encode()) == 0
        assert [m.content for m in sealer.get_all("raced")][-1] == f"{canary} 2"
        assert sealer.verify("raced").intact
    finally:
        writer.close()
        sealer.close()


def query(settings: Settings, sql: str, params: tuple[object, ...]) -> list[tuple[object, ...]]:
    """Rows of `sql` (`?` marks) straight from the store's database."""
    url = settings.database_url
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            return conn.execute(sql, params).fetchall()
    with psycopg.connect(url) as conn:
        return conn.execute(sql.replace("?", "%s"), params).fetchall()  # type: ignore[arg-type]


def half_sealed(ledger: Ledger, keys: list[str], canaries: dict[str, str]) -> tuple[int, int]:
    """(sessions sealed, sessions clear); fails if any session is partly either."""
    settings: Settings = ledger.test_settings  # type: ignore[attr-defined]
    sealed = 0
    for key in keys:
        sid = session_id(ledger.default_tenant, key)
        param = sid.hex if settings.database_url.startswith("sqlite") else sid
        has_key = query(settings, "SELECT count(*) FROM ledger_data_keys WHERE session_id = ?",
                        (param,))[0][0] == 1  # fmt: skip
        stored = [
            bytes(r[0])
            for r in query(  # type: ignore[arg-type]
                settings, "SELECT state FROM ledger_events WHERE originator_id = ?", (param,)
            )
        ]
        stored += [
            str(r[0]).encode()
            for r in query(
                settings, "SELECT message FROM ledger_messages WHERE session_id = ?", (param,)
            )
        ]
        encrypted = query(settings, "SELECT count(*) FROM ledger_timeline WHERE session_id = ? "
                          "AND event_type = 'SessionEncrypted'", (param,))[0][0]  # fmt: skip
        clear_text = canaries[key].encode() in b"\n".join(stored)
        if has_key:
            assert not clear_text and encrypted == 1, key
            sealed += 1
        else:
            assert clear_text and encrypted == 0, key
    return sealed, len(keys) - sealed


def fill(settings: Settings, sessions: int) -> tuple[list[str], dict[str, str]]:
    clear = opened(settings)
    try:
        keys = [f"s{n:04d}" for n in range(sessions)]
        canaries = {k: f"C-{k}-{uuid.uuid4().hex}" for k in keys}
        for key in keys:
            clear.put_messages(key, [{"role": "user", "content": f"{canaries[key]} {i}"}
                                     for i in range(10)])  # fmt: skip
        return keys, canaries
    finally:
        clear.close()


def test_a_run_stopped_between_sessions_finishes_when_run_again(
    clear_settings: Settings,
) -> None:
    keys, canaries = fill(clear_settings, 12)
    ledger = opened(with_master_key(clear_settings))
    try:
        run = ledger.encrypt_all()
        for _ in range(5):
            next(run)
        run.close()  # stopped: five sessions sealed, the rest clear
        assert half_sealed(ledger, keys, canaries) == (5, 7)
        assert sum(now for _, _, now in ledger.encrypt_all()) == 7
        assert half_sealed(ledger, keys, canaries) == (12, 0)
        assert all(ledger.verify(k).intact for k in keys)
    finally:
        ledger.close()


def test_the_command_killed_inside_a_session_leaves_none_half_sealed(
    clear_settings: Settings,
) -> None:
    keys, canaries = fill(clear_settings, 300)
    settings = with_master_key(clear_settings)
    ledger = opened(settings)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGER_")}
    env |= {"LEDGER_DATABASE_URL": settings.database_url, "LEDGER_MASTER_KEY": str(
        settings.master_key), "LEDGER_TOKENIZER": "whitespace",
        "LEDGER_DEFAULT_TENANT": settings.default_tenant}  # fmt: skip
    try:
        command = subprocess.Popen([*CLI, "encrypt-existing"], env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        while command.poll() is None and _key_rows(settings) < 20:
            time.sleep(0.005)
        command.send_signal(signal.SIGKILL)
        command.wait()
        sealed, clear = half_sealed(ledger, keys, canaries)
        assert sealed >= 20 and clear > 0, "the command ended before it was killed"
        again = subprocess.run([*CLI, "encrypt-existing"], env=env, capture_output=True,
                               text=True, timeout=600, check=False)  # fmt: skip
        assert again.returncode == 0, again.stderr
        assert "sealing sessions" in again.stderr  # the progress bar, on stderr
        assert f"sealed {clear} sessions stored clear; the other {sealed}" in again.stderr
        assert half_sealed(ledger, keys, canaries) == (300, 0)
        assert all(report.intact for report in ledger.verify_all())
    finally:
        ledger.close()


def _key_rows(settings: Settings) -> int:
    return int(query(settings, "SELECT count(*) FROM ledger_data_keys", ())[0][0])  # type: ignore[call-overload]


def test_sealing_in_place_is_no_write_to_retention_or_to_the_cleared_filter(
    tmp_path: Path,
) -> None:
    from datetime import UTC, datetime, timedelta

    from session_ledger.domain.compliance import RetentionRule
    from session_ledger.projections.sql import utc_text

    settings = make_settings("sqlite", tmp_path)
    clear = opened(settings)
    try:
        clear.put("old", {"role": "user", "content": "written long ago"})
        clear.put("reset", {"role": "user", "content": "gone"})
        clear.reset("reset")
    finally:
        clear.close()
    # The clear writes are backdated ten days; encrypt-existing runs now.
    then = utc_text(datetime.now(UTC) - timedelta(days=10))
    with sqlite3.connect(settings.database_url.removeprefix("sqlite:///")) as conn:
        conn.execute("UPDATE ledger_timeline SET recorded_at = ?", (then,))
    ledger = opened(with_master_key(settings))
    try:
        assert sum(now for _, _, now in ledger.encrypt_all()) == 2
        assert ledger.keys(exclude_cleared=True) == ["old"]  # "reset" still reads as cleared
        rule = RetentionRule(ledger.default_tenant, "old", 5)
        (action,) = ledger.retention([rule], datetime.now(UTC), dry_run=True)
        assert (action.key, action.action) == ("old", "erase")  # ten days old, not zero
    finally:
        ledger.close()


def test_the_command_without_a_master_key_says_so_and_changes_nothing(tmp_path: Path) -> None:
    settings = make_settings("sqlite", tmp_path)
    clear = opened(settings)
    try:
        clear.put("kept", {"role": "user", "content": "clear"})
    finally:
        clear.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGER_")}
    env["LEDGER_DATABASE_URL"] = settings.database_url
    refused = subprocess.run([*CLI, "encrypt-existing"], env=env, capture_output=True,
                             text=True, timeout=120, check=False)  # fmt: skip
    assert refused.returncode != 0 and "LEDGER_MASTER_KEY" in refused.stderr
    assert query(settings, "SELECT count(*) FROM ledger_data_keys", ()) == [(0,)]
    assert query(settings, "SELECT count(*) FROM ledger_timeline", ()) == [(2,)]
