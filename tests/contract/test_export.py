"""The compliance export on every store: it is the audit trail and the stored records,
replays to the history at every version, verifies, and refuses what does not exist."""

from __future__ import annotations

import base64
import csv
import io
import json
import threading
from datetime import UTC
from typing import Any

import pytest
from eventsourcing.persistence import StoredEvent

from session_ledger.domain.errors import InvalidInput, SessionNotFound, StateNotFound
from session_ledger.domain.integrity import chain
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.session import session_id
from session_ledger.projections.export import export_jsonl, export_session, plan_export
from session_ledger.projections.export_verify import verify_export
from tests.reference_replay import replay

HARD_TEXT = "emoji 🧪👩🏽‍🔬, NUL \x00 inside, RTL שלום עליכם / مرحبا, LS \u2028 PS \u2029 NEL \x85"


def msg(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "content": text}


def lines_of(ledger: Ledger, key: str, **kw: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in export_session(ledger, key, **kw)]


def csv_rows(ledger: Ledger, key: str, **kw: Any) -> list[list[str]]:
    text = b"".join(export_session(ledger, key, format="csv", **kw)).decode("utf-8")
    return list(csv.reader(io.StringIO(text, newline="")))


def busy_session(ledger: Ledger, key: str = "s") -> None:
    """Every kind of event, with reasons and an idempotency key."""
    ledger.put(key, msg("user", "one"), reason="first", idempotency_key="k-1")
    ledger.put_messages(key, [msg("assistant", "two"), msg("user", "three")])
    ledger.set(key, [msg("user", "one"), msg("assistant", "two"), msg("user", "four")],
               reason="compaction")  # fmt: skip
    ledger.delete_message(key, 1, actor="moderator", reason="pii")
    ledger.archive_oldest(key, 1)
    ledger.put(key, msg("assistant", HARD_TEXT))
    ledger.reset(key)
    ledger.put_messages(key, [msg("user", "five"), msg("assistant", "six")])


def test_the_export_is_the_audit_trail(ledger: Ledger) -> None:
    busy_session(ledger)
    lines = lines_of(ledger, "s")
    header, events, trailer = lines[0], lines[1:-1], lines[-1]
    audit = ledger.audit("s", limit=1000)
    assert header["record"] == "header" and header["format"] == "session-ledger-export"
    assert (header["tenant"], header["key"]) == (ledger.default_tenant, "s")
    assert header["session_id"] == str(session_id(ledger.default_tenant, "s"))
    assert header["to_version"] == ledger.head("s").version == len(events) == len(audit)
    assert header["as_of_version"] is None
    for line, entry in zip(events, audit, strict=True):
        assert line["record"] == "event"
        assert (line["version"], line["type"], line["actor"], line["reason"],
                line["idempotency_key"]) == (entry.version, entry.event_type, entry.actor,
                                             entry.reason, entry.idempotency_key)  # fmt: skip
        assert line["recorded_at"] == entry.recorded_at.astimezone(UTC).isoformat()
        payload, changes = line["payload"], entry.changes
        if entry.event_type == "MessagesAppended":
            assert payload == {"messages": changes["added"]}
        elif entry.event_type == "HistoryReplaced":
            assert payload["kept"] == changes["kept"]
            assert payload["messages"][payload["kept"] :] == changes["added"]
        elif entry.event_type == "MessageRemoved":
            assert payload["message"] == changes["removed"]
            assert payload["position"] == changes["position"] == 1
        elif entry.event_type == "MessagesArchived":
            assert payload == {"count": changes["archived"]}
        elif entry.event_type == "HistoryCleared":
            assert payload == {}
        else:
            assert payload == changes  # SessionStarted: tenant and key
    assert trailer == {"record": "trailer", "events": len(events),
                       "chain_head": events[-1]["chain"], "sha256": trailer["sha256"]}  # fmt: skip


def test_the_export_carries_the_stored_records_and_their_chain(ledger: Ledger) -> None:
    busy_session(ledger)
    sid = session_id(ledger.default_tenant, "s")
    stored = ledger.recorder.select_events(sid)
    events = lines_of(ledger, "s")[1:-1]
    assert [(e["version"], e["topic"], base64.b64decode(e["state"])) for e in events] == [
        (s.originator_version, s.topic, bytes(s.state)) for s in stored
    ]
    records = [(s.originator_version, s.topic, bytes(s.state)) for s in stored]
    assert events[-1]["chain"] == chain(sid, records).hex()


def test_the_exported_records_replay_to_the_history_at_every_version(ledger: Ledger) -> None:
    busy_session(ledger)
    sid = session_id(ledger.default_tenant, "s")
    events = [
        ledger.mapper.to_domain_event(
            StoredEvent(sid, e["version"], e["topic"], base64.b64decode(e["state"]))
        )
        for e in lines_of(ledger, "s")[1:-1]
    ]
    for version in range(1, len(events) + 1):
        history = ledger.get_all("s", as_of_version=version)
        assert replay(events, version).messages == history
        rows = csv_rows(ledger, "s", as_of_version=version)
        assert rows[0] == ["position", "role", "content", "blocks", "additional_kwargs"]
        assert [(int(r[0]), r[1], r[2], json.loads(r[3])) for r in rows[1:]] == [
            (i, m.role, m.content or "", list(m.blocks)) for i, m in enumerate(history)
        ]


def test_as_of_version_bounds_the_export(ledger: Ledger) -> None:
    busy_session(ledger)
    full = lines_of(ledger, "s")
    for version in (1, 4, len(full) - 2):
        lines = lines_of(ledger, "s", as_of_version=version)
        assert (lines[0]["as_of_version"], lines[0]["to_version"]) == (version, version)
        assert lines[1:-1] == full[1 : version + 1]
        assert lines[-1]["chain_head"] == full[version]["chain"]
        assert verify_export(export_session(ledger, "s", as_of_version=version)).ok


def test_an_untouched_export_verifies(ledger: Ledger) -> None:
    busy_session(ledger)
    report = verify_export(export_session(ledger, "s"))
    assert report.ok, report.summary()
    assert (report.events, report.key, report.tenant) == (9, "s", ledger.default_tenant)
    assert report.summary().startswith("intact: session 's'")


def test_text_round_trips_exactly(ledger: Ledger) -> None:
    ledger.put("s", msg("user", HARD_TEXT))
    ledger.put("s", {"role": "assistant", "blocks": [{"block_type": "text", "text": HARD_TEXT}],
                     "additional_kwargs": {"note": HARD_TEXT}})  # fmt: skip
    raw = b"".join(export_session(ledger, "s"))
    assert raw.count(b"\n") == 5 and "\u2028".encode() not in raw  # one line per record
    events = [json.loads(line) for line in raw.split(b"\n")[1:-2]]
    assert events[1]["payload"]["messages"][0]["blocks"][0]["text"] == HARD_TEXT
    assert events[2]["payload"]["messages"][0]["additional_kwargs"] == {"note": HARD_TEXT}
    assert verify_export(raw.split(b"\n")).ok
    assert verify_export(raw.decode("utf-8").split("\n")).ok
    rows = csv_rows(ledger, "s")
    assert [r[2] for r in rows[1:]] == [HARD_TEXT, HARD_TEXT]
    assert json.loads(rows[2][4]) == {"note": HARD_TEXT}


def test_unknown_sessions_versions_and_formats_are_refused_before_any_output(
    ledger: Ledger,
) -> None:
    with pytest.raises(SessionNotFound):
        export_session(ledger, "nobody")
    ledger.put("s", msg("user", "x"))
    with pytest.raises(SessionNotFound):
        export_session(ledger, "s", tenant="another-tenant")
    for version in (0, 3):
        with pytest.raises(StateNotFound):
            export_session(ledger, "s", as_of_version=version)
    with pytest.raises(InvalidInput):
        export_session(ledger, "s", format="xml")
    with pytest.raises(InvalidInput):
        export_session(ledger, "s", as_of_version="2")  # type: ignore[arg-type]


def test_events_are_read_a_page_at_a_time(ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(10):
        ledger.put("s", msg("user", str(i)))
    limits: list[int | None] = []
    select = ledger.recorder.select_events

    def spy(*args: Any, **kwargs: Any) -> Any:
        limits.append(kwargs.get("limit"))
        return select(*args, **kwargs)

    monkeypatch.setattr(ledger.recorder, "select_events", spy)
    plan = plan_export(ledger, "s")
    assert verify_export(export_jsonl(ledger, plan, page=3)).ok
    assert limits == [3, 3, 3, 3]  # 11 events: 3 + 3 + 3 + 2


def test_writes_during_an_export_do_not_change_it(ledger: Ledger) -> None:
    for i in range(7):
        ledger.put("s", msg("user", str(i)))
    chunks = export_jsonl(ledger, plan_export(ledger, "s"), page=2)
    started = [next(chunks), next(chunks)]  # the header and the first event
    writer = threading.Thread(target=lambda: ledger.put("s", msg("user", "later")))
    writer.start()
    writer.join()
    lines = started + list(chunks)
    report = verify_export(lines)
    assert report.ok and report.events == 8 and ledger.head("s").version == 9


def test_the_exported_chain_is_the_one_kept_at_write_time(ledger: Ledger) -> None:
    busy_session(ledger)
    kept = ledger.verify("s")
    assert kept.first_bad_version is None
    assert lines_of(ledger, "s")[-1]["chain_head"] == kept.head
