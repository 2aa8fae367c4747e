"""Encryption at rest and erasure, on SQLite and PostgreSQL: a canary written everywhere
a message can go is nowhere in the store or its exports after its session is erased;
the chain still verifies; other sessions read as before; holds block erasure."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sqlite3
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from session_ledger.api.settings import Settings
from session_ledger.domain.compliance import RetentionRule
from session_ledger.domain.errors import (
    EncryptionRequired,
    IdempotencyKeyReused,
    InvalidInput,
    LegalHold,
    SessionErasedError,
    StoreNotReady,
)
from session_ledger.domain.inputs import parse_messages, request_digest
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.session import session_id
from session_ledger.projections import sealing
from session_ledger.projections.export import export_session
from session_ledger.projections.export_format import line as json_line
from session_ledger.projections.export_verify import verify_export
from session_ledger.projections.package import verify_package, write_package
from session_ledger.projections.rebuild import check
from tests.conftest import make_ledger, make_settings
from tests.integration.test_cost_does_not_grow import message, view_rows_during


def master_key() -> str:
    return base64.b64encode(os.urandom(32)).decode("ascii")


@pytest.fixture(params=("sqlite", "postgres"))
def sealed(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Ledger]:
    """A ledger with a master key, on a store of its own."""
    settings = make_settings(str(request.param), tmp_path, master_key=master_key())
    if request.param == "postgres":
        settings.database_url = request.getfixturevalue("fresh_postgres_url")
    ledger = make_ledger(settings)
    ledger.test_settings = settings  # type: ignore[attr-defined]
    yield ledger
    ledger.close()


def write_canary(ledger: Ledger, key: str, canary: str) -> None:
    """The canary in content, tool-call arguments, additional_kwargs, a `set`, an archived
    message and a removed one."""
    ledger.put(key, {"role": "user", "content": f"my name is {canary}"})
    ledger.put(key, {"role": "assistant", "content": "", "additional_kwargs": {
        "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "lookup", "arguments": json.dumps({"who": canary})}}]}})  # fmt: skip
    ledger.put(key, {"role": "user", "content": "note", "additional_kwargs": {"memo": canary}})
    ledger.set(key, [{"role": "user", "content": f"my name is {canary}"},
                     {"role": "assistant", "content": f"hello {canary}"},
                     {"role": "user", "content": f"bye {canary}"}])  # fmt: skip
    ledger.archive_oldest(key, 1)
    ledger.delete_last_message(key)


def exports(ledger: Ledger, key: str) -> bytes:
    return b"".join(
        b"".join(export_session(ledger, key, format=fmt, tenant=ledger.default_tenant))
        for fmt in ("jsonl", "csv")
    )


def store_bytes(ledger: Ledger) -> bytes:
    """Every value of every table, and the database's files (SQLite) or `pg_dump`."""
    settings: Settings = ledger.test_settings  # type: ignore[attr-defined]
    url = settings.database_url
    chunks: list[bytes] = []
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        with sqlite3.connect(path) as conn:
            tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE "
                                                  "type = 'table'")]  # fmt: skip
            for table in tables:
                for row in conn.execute(f"SELECT * FROM {table}"):
                    chunks += [v if isinstance(v, bytes) else str(v).encode() for v in row]
        for suffix in ("", "-wal", "-shm", "-journal"):
            file = Path(f"{path}{suffix}")
            if file.exists():
                chunks.append(file.read_bytes())
        return b"\n".join(chunks)
    with psycopg.connect(url) as conn:
        tables = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE "
                                              "schemaname = current_schema()")]  # fmt: skip
        for table in tables:
            for row in conn.execute(f"SELECT * FROM {table}"):
                chunks += [bytes(v) if isinstance(v, bytes | memoryview) else str(v).encode()
                           for v in row]  # fmt: skip
    dump = subprocess.run(["pg_dump", "--no-owner", url], capture_output=True, check=True)
    return b"\n".join([*chunks, dump.stdout])


def key_row(ledger: Ledger, key: str) -> bytes:
    """The session's wrapped data key, as its row holds it."""
    sid = session_id(ledger.default_tenant, key)
    row = ledger.views.content.data_keys.table.data_key_row(sid)  # type: ignore[attr-defined]
    assert row is not None
    return bytes(row[1])


def test_erased_canary_is_nowhere_and_the_chain_still_verifies(sealed: Ledger) -> None:
    canary, other = f"CANARY-{uuid.uuid4().hex}", f"KEPT-{uuid.uuid4().hex}"
    write_canary(sealed, "victim", canary)
    write_canary(sealed, "bystander", other)
    assert canary.encode() in exports(sealed, "victim")  # readable until erased
    # Sealed at rest: neither session's text is in the store, erased or not.
    raw = store_bytes(sealed)
    assert raw.count(canary.encode()) == 0 and raw.count(other.encode()) == 0
    assert raw.count(b"my name is") == 0

    wrapped = key_row(sealed, "victim")
    assert wrapped in store_bytes(sealed)

    sealed.erase("victim", reason="the user asked", basis="GDPR art. 17", actor="dpo")

    assert store_bytes(sealed).count(canary.encode()) == 0
    # Nor the deleted key: no WAL frame or freed space of the file keeps it (SQLite);
    # PostgreSQL's VACUUM frees its row version (its bytes may stay in the page's free
    # space until reused: docs/compliance.md).
    assert wrapped not in store_bytes(sealed)
    export = exports(sealed, "victim")
    assert export.count(canary.encode()) == 0
    jsonl = b"".join(export_session(sealed, "victim", tenant=sealed.default_tenant))
    assert verify_export(jsonl.splitlines(keepends=True)).ok
    assert sealed.verify("victim").intact and sealed.verify("bystander").intact
    assert sealed.keys() == ["bystander", "victim"]
    assert sealed.keys(exclude_cleared=True) == ["bystander"]  # reads as absent to LlamaIndex
    # The views derived again from the log are the live ones (the erased rows stay gone).
    assert check(sealed.views, sealed.mapper, sealed.tokenizer) == []  # type: ignore[arg-type]
    # The other session reads as before.
    assert other in sealed.get_all("bystander")[0].content  # type: ignore[operator]
    assert (
        b"".join(export_session(sealed, "bystander", tenant=sealed.default_tenant)).count(
            other.encode()
        )
        > 0
    )


def test_reads_and_writes_of_an_erased_session_are_refused(sealed: Ledger) -> None:
    write_canary(sealed, "victim", "x")
    sealed.open_stream("victim", stream_id="answer")  # its message's tokens counted apart
    sealed.complete_stream("victim", "answer", ["a streamed answer"])
    version = sealed.head("victim").version
    sealed.erase("victim", reason="the user asked", basis="GDPR art. 17")
    for read in (
        lambda: sealed.stream_state("victim", "any-stream"),
        lambda: sealed.get("victim"),
        lambda: sealed.get_all("victim"),
        lambda: sealed.get_all("victim", status="archived"),
        lambda: sealed.get("victim", as_of_version=2),
        lambda: sealed.get_all("victim", as_of_version=version),
        lambda: sealed.put("victim", {"role": "user", "content": "again"}),
        lambda: sealed.reset("victim"),
    ):
        with pytest.raises(SessionErasedError) as refused:
            read()
        assert refused.value.basis == "GDPR art. 17"
        assert refused.value.reason == "the user asked"
    # The head keeps no measure of the content: neither its messages nor their tokens.
    head = sealed.head("victim")
    assert (head.message_count, head.token_total) == (0, 0)
    # A process that never saw the session (no cached state, no cached key) refuses too.
    settings: Settings = sealed.test_settings  # type: ignore[attr-defined]
    other = make_ledger(settings)
    try:
        with pytest.raises(SessionErasedError):
            other.put("victim", {"role": "user", "content": "again"})
        trail = other.audit("victim")
    finally:
        other.close()
    assert [e.event_type for e in trail][-1] == "SessionErased"
    assert len(trail) == version + 1
    added = [m for e in trail for m in e.changes.get("added", [])]
    assert added and all(m.get("erased") for m in added)


def test_a_process_that_read_the_session_before_opens_nothing_after(sealed: Ledger) -> None:
    """Another process erases the session after this one cached its data key: this one's
    reads of the events that start after the erasure (audit trail, export, tenant feed)
    open no content; the key is looked up again before each read of the events."""
    canary = f"CANARY-{uuid.uuid4().hex}"
    start = sealed.feed_position()  # (before the session's events)
    write_canary(sealed, "victim", canary)

    def feed() -> str:
        """The feed's entries since `start`, read on while it holds some back (PostgreSQL:
        an older transaction may still commit before them)."""
        entries, after = [], start
        for _ in range(100):
            page = sealed.tenant_events(after=after, limit=1000)
            entries += page.entries
            after = page.position
            if not (page.more or page.held_back):
                break
            time.sleep(0.05)
        return json.dumps([vars(e.entry) for e in entries], default=str)

    assert canary in feed()
    assert canary in json.dumps([vars(e) for e in sealed.audit("victim")], default=str)
    assert canary.encode() in exports(sealed, "victim")  # the key is cached here now
    settings: Settings = sealed.test_settings  # type: ignore[attr-defined]
    eraser = make_ledger(settings)
    try:
        eraser.erase("victim", reason="the user asked", basis="GDPR art. 17")
    finally:
        eraser.close()
    trail = sealed.audit("victim")
    assert trail[-1].event_type == "SessionErased"
    assert canary not in json.dumps([vars(e) for e in trail], default=str)
    assert exports(sealed, "victim").count(canary.encode()) == 0
    assert canary not in feed()
    with pytest.raises(SessionErasedError):
        sealed.get_all("victim")


def test_a_request_digest_confirms_no_guess_of_the_content(sealed: Ledger) -> None:
    """With a master key, a keyed write's request digest is stored as an HMAC under a key
    derived from it: the plain SHA-256 of the request (which would confirm a guessed
    message to anyone holding the database) is nowhere; retries still replay, another
    write under the key is still refused, an erasure retried with its key replays, and
    the views derived again agree."""
    secret = {"role": "user", "content": "my PIN is 0619"}
    sealed.put("pin", {"role": "user", "content": "hello"})
    sealed.put("pin", secret, idempotency_key="write-1")
    parsed = parse_messages([secret], sealed.limits, allow_empty=False)
    plain = request_digest("append", {"messages": parsed.dicts})
    prior = sealed.views.prior_write(session_id(sealed.default_tenant, "pin"), "write-1")
    assert prior is not None and prior.request_digest.startswith("m:")
    raw = store_bytes(sealed)
    assert plain.encode() not in raw and prior.request_digest.encode() in raw
    again = sealed.put("pin", secret, idempotency_key="write-1")
    assert again.replayed and again.version == prior.version
    with pytest.raises(IdempotencyKeyReused):
        sealed.put("pin", {"role": "user", "content": "my PIN is 0620"}, idempotency_key="write-1")
    assert check(sealed.views, sealed.mapper, sealed.tokenizer) == []  # type: ignore[arg-type]
    erase = {"reason": "the user asked", "basis": "GDPR art. 17", "idempotency_key": "erase-1"}
    first = sealed.erase("pin", **erase)
    assert sealed.erase("pin", **erase).replayed  # (its answer lost: sent again)
    assert first.version == sealed.head("pin").version
    assert plain.encode() not in store_bytes(sealed)


def test_a_keyed_retry_of_a_write_to_an_erased_session_is_refused_whatever_it_holds(
    sealed: Ledger,
) -> None:
    """After the erasure a write's retry under its key is refused as any write is (410):
    answering it replayed for the same content and refused for other content would
    confirm guesses of the erased message to anyone with a writer's key. The erasure's
    own retry still replays."""
    secret = {"role": "user", "content": "my PIN is 0619"}
    sealed.put("pin", secret, idempotency_key="write-1")
    sealed.delete_last_message("pin", idempotency_key="pop-1")
    erase = {"reason": "the user asked", "basis": "GDPR art. 17", "idempotency_key": "erase-1"}
    sealed.erase("pin", **erase)
    for guess in ("my PIN is 0619", "my PIN is 0620"):
        with pytest.raises(SessionErasedError):
            sealed.put("pin", {"role": "user", "content": guess}, idempotency_key="write-1")
    with pytest.raises(SessionErasedError):
        sealed.delete_last_message("pin", idempotency_key="pop-1")
    assert sealed.erase("pin", **erase).replayed


def test_an_export_of_a_sealed_session_with_aborted_streams_verifies(
    sealed: Ledger, tmp_path: Path
) -> None:
    """A stream aborted without keeping its text stores no message: sealed, that `null`
    is a sealed field too, which the export shows opened (`null`) and the check takes."""
    sealed.put("streams", {"role": "user", "content": "hello"})
    for stream, keep in (("dropped", False), ("kept", True)):
        sealed.open_stream("streams", stream_id=stream)
        sealed.append_stream("streams", stream, ["partial ", "answer"])
        sealed.abort_stream("streams", stream, "client_gone", keep_partial=keep)
    jsonl = b"".join(export_session(sealed, "streams", tenant=sealed.default_tenant))
    report = verify_export(jsonl.splitlines(keepends=True))
    assert report.ok, report
    assert report.sealed == 0  # (every sealed field proven by its opening)
    folder = tmp_path / "package"
    write_package(sealed, sealed.default_tenant, folder, exported_by="test", prefix="streams")
    assert verify_package(folder) == []


def test_an_erased_session_reads_as_many_messages_as_it_had_and_no_tokens(
    sealed: Ledger,
) -> None:
    """Erased, a stream aborted without keeping its text still added no message (its
    `null` is not content: it read as one erased message, and `rebuild --check` derived
    one message too many); the token total is 0 on every store (on SQLite the erasure's
    row took the total noted before it); a lone surrogate in a delta is InvalidInput."""
    sealed.put("shape", {"role": "user", "content": "hello"})
    sealed.open_stream("shape", stream_id="dropped")
    sealed.append_stream("shape", "dropped", ["partial"])
    with pytest.raises(InvalidInput, match="lone surrogate"):
        sealed.append_stream("shape", "dropped", ["\ud800"])
    sealed.abort_stream("shape", "dropped", "client_gone")
    sealed.put("shape", {"role": "user", "content": "more"})  # (its total noted in process)
    assert sealed.head("shape").token_total > 0
    sealed.erase("shape", reason="asked", basis="GDPR art. 17")
    aborted = [e for e in sealed.audit("shape") if e.event_type == "StreamAborted"]
    assert aborted[0].changes["added"] == []
    assert sealed.head("shape", latest=True).token_total == 0
    assert check(sealed.views, sealed.mapper, sealed.tokenizer) == []  # type: ignore[arg-type]


def test_a_null_sealed_by_an_earlier_release_reads_as_null_once_erased() -> None:
    """Before 2026-12-07 a field's `null` was sealed too: once erased it reads as null,
    not as an erased message (its sealed JSON is the one of 4 bytes)."""
    key, sid = AESGCM(os.urandom(32)), uuid.uuid4()
    for value, erased in ((None, None), ({"role": "user"}, sealing.ERASED_MESSAGE)):
        state: dict[str, Any] = {"message": value}
        data = sealing.field_json(value)
        salt = os.urandom(sealing.SALT_BYTES)
        state["message"] = {"sealed": sealing.seal(key, sid, salt + data), "c": "-"}
        assert sealing.erased_value("message", state["message"]) == erased
        unsalted = {"sealed": sealing.seal(key, sid, data)}  # (before commitments)
        assert sealing.erased_value("message", unsalted) == erased
    assert sealing.seal_fields({"message": None}, key, sid) is False  # (no longer sealed)


def test_a_sealed_export_proves_its_content_and_a_forged_one_is_broken(sealed: Ledger) -> None:
    """A sealed field's commitment, SHA-256(salt | JSON), is stored in the clear and so
    covered by the chain; the export opens the field and gives its salt. A forger who
    changes a message (its role, its text) and recomputes the keyless digest is caught
    at that line, with or without the salt; once erased, the content reads as erased and
    is reported unproven, not broken."""
    sealed.put("forged", {"role": "user", "content": "pay 10 EUR to Alice"})
    sealed.put("forged", {"role": "assistant", "content": "done"})
    lines = b"".join(export_session(sealed, "forged", tenant=sealed.default_tenant)).split(b"\n")
    report = verify_export(line + b"\n" for line in lines if line)
    assert report.ok and report.sealed == 0, report

    def forged(change: Callable[[dict[str, Any]], None]) -> Any:
        records = [json.loads(line) for line in lines if line]
        at = next(i for i, r in enumerate(records) if r.get("version") == 2)
        change(records[at])
        body = b"".join(json_line(r) for r in records[:-1])
        records[-1]["sha256"] = hashlib.sha256(body).hexdigest()  # (the keyless digest)
        return verify_export([*body.splitlines(keepends=True), json_line(records[-1])])

    def text(record: dict[str, Any]) -> None:
        record["payload"]["messages"][0]["blocks"][0]["text"] = "pay 10,000 EUR to Mallory"

    def role(record: dict[str, Any]) -> None:
        record["payload"]["messages"][0]["role"] = "system"

    def unopened(record: dict[str, Any]) -> None:
        text(record)
        del record["openings"]

    for change in (text, role, unopened):
        report = forged(change)
        assert not report.ok and report.broken_line is not None, (change.__name__, report)
    assert "commitment" in forged(text).problem
    sealed.erase("forged", reason="the user asked", basis="GDPR art. 17")
    erased = b"".join(export_session(sealed, "forged", tenant=sealed.default_tenant))
    report = verify_export(erased.splitlines(keepends=True))
    assert report.ok and report.sealed == 2, report
    assert "the sealed content of 2 events is not proven" in report.summary()


def test_a_held_session_cannot_be_erased_until_released(sealed: Ledger) -> None:
    sealed.put("held", {"role": "user", "content": "evidence"})
    sealed.place_hold("held", reference="CASE-7", reason="litigation")
    with pytest.raises(LegalHold):
        sealed.erase("held", reason="asked", basis="GDPR art. 17")
    assert sealed.get("held")[0].content == "evidence"
    assert sealed.head("held").version == 3  # nothing written by the refusal
    sealed.release_hold("held", reference="CASE-7", reason="case closed")
    sealed.erase("held", reason="asked", basis="GDPR art. 17")
    events = [e.event_type for e in sealed.audit("held")]
    assert events[-3:] == ["LegalHoldPlaced", "LegalHoldReleased", "SessionErased"]


def test_a_get_at_10000_messages_reads_the_window_only_when_sealed(sealed: Ledger) -> None:
    sealed.put_messages("small", [message(i) for i in range(100)])
    for start in range(0, 10_000, 2_000):
        sealed.put_messages("large", [message(i) for i in range(start, start + 2_000)])
    for limit in (100, 1_000, 3_000):
        window = sealed.get("large", token_limit=limit)
        small = view_rows_during(sealed, lambda limit=limit: sealed.get("small", token_limit=limit))
        large = view_rows_during(sealed, lambda limit=limit: sealed.get("large", token_limit=limit))
        assert small <= large <= 2 * (len(window) + 1) + 64, (limit, small, large)
        assert window[-1].content == message(9_999)["content"]


def test_without_a_master_key_erasure_is_refused_and_nothing_changes(tmp_path: Path) -> None:
    ledger = make_ledger(make_settings("sqlite", tmp_path))
    try:
        ledger.put("clear", {"role": "user", "content": "kept"})
        with pytest.raises(EncryptionRequired):
            ledger.erase("clear", reason="asked", basis="GDPR art. 17")
        assert ledger.head("clear").version == 2
        # Retention lists such a session as kept ("clear"), erases nothing, goes on.
        rule = RetentionRule(ledger.default_tenant, "", 1)
        later = datetime.now(UTC) + timedelta(days=2)
        (action,) = ledger.retention([rule], later, dry_run=False)
        assert (action.key, action.action) == ("clear", "clear")
        assert ledger.head("clear").version == 2
        assert ledger.get("clear")[0].content == "kept"
    finally:
        ledger.close()


def test_a_process_without_the_master_key_refuses_sealed_content_saying_so(
    sealed: Ledger,
) -> None:
    """Opened without LEDGER_MASTER_KEY, a store of sealed sessions read their stored
    envelopes as clear content: tracebacks (`unhashable type: 'slice'`) and answers that
    are not JSON. Their content is refused now with the setting named; a session stored
    clear still reads, and `verify` needs no key."""
    sealed.put("secret", {"role": "user", "content": "sealed words"})
    settings: Settings = sealed.test_settings  # type: ignore[attr-defined]
    keyless = make_ledger(settings.model_copy(update={"master_key": None}))
    try:
        for read in (
            lambda: keyless.get_all("secret"),
            lambda: keyless.get("secret"),
            lambda: keyless.audit("secret"),
            lambda: keyless.put("secret", {"role": "user", "content": "more"}),
        ):
            with pytest.raises(StoreNotReady, match="LEDGER_MASTER_KEY"):
                read()
        assert keyless.verify("secret").intact
        keyless.put("plain", {"role": "user", "content": "clear words"})
        assert [m.content for m in keyless.get_all("plain")] == ["clear words"]
    finally:
        keyless.close()
    from typer.testing import CliRunner

    from session_ledger.api.cli import cli

    url = ["--database-url", settings.database_url]
    tenant = ["--tenant", settings.default_tenant]
    for command in (["show", "secret", *tenant], ["audit", "secret", *tenant],
                    ["rebuild", "--check"]):  # fmt: skip
        done = CliRunner().invoke(cli, [*command, *url], env={"LEDGER_MASTER_KEY": ""})
        assert done.exit_code == 1 and "set LEDGER_MASTER_KEY" in done.output, done.output
        assert "Traceback" not in done.output


def test_an_erasure_retried_from_a_copy_from_before_it_answers_as_it_did(sealed: Ledger) -> None:
    """Another process erased the session under a key; this one, whose cached copy is
    from before (and whose data key a read has since dropped), sends the same erasure
    again: it answers the first (replayed), not `EncryptionRequired`; without the key,
    and any other write, it is refused as erased."""
    sealed.put("victim", {"role": "user", "content": "hello"})  # cached here
    settings: Settings = sealed.test_settings  # type: ignore[attr-defined]
    eraser = make_ledger(settings)
    try:
        first = eraser.erase("victim", reason="asked", basis="GDPR art. 17", idempotency_key="e1")
    finally:
        eraser.close()
    with pytest.raises(SessionErasedError):
        sealed.get_all("victim")  # (drops this process's data key of the session)
    again = sealed.erase("victim", reason="asked", basis="GDPR art. 17", idempotency_key="e1")
    assert (again.version, again.replayed) == (first.version, True)
    with pytest.raises(SessionErasedError):
        sealed.erase("victim", reason="asked", basis="GDPR art. 17")
    with pytest.raises(SessionErasedError):
        sealed.place_hold("victim", reference="case-1", reason="late")
    assert [e.event_type for e in sealed.audit("victim")][-1] == "SessionErased"
    assert len(sealed.audit("victim")) == 3 and sealed.verify("victim").intact
