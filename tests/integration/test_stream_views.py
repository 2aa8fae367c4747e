"""Streams in the derived views: rebuild reproduces them (the streams view included),
replay agrees with the history, and the export carries every stream event."""

from __future__ import annotations

import json

from session_ledger.api.settings import Settings
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.session import session_id
from session_ledger.projections.export import export_jsonl, plan_export
from session_ledger.projections.rebuild import check, rebuild
from tests.conftest import make_ledger
from tests.integration.test_rebuild import all_rows, views
from tests.reference_replay import replay


def write_streams(ledger: Ledger, key: str) -> None:
    ledger.put(key, {"role": "user", "content": "question"})
    done = ledger.open_stream(key, turn="t1")
    cut = ledger.open_stream(key, turn="t1")
    kept = ledger.open_stream(key, role="assistant", parent="m0")
    ledger.append_stream(key, done.stream_id, ["an ", "answer"])
    ledger.append_stream(key, cut.stream_id, ["cut "])
    ledger.abort_stream(key, cut.stream_id, "superseded", ["off"])
    ledger.complete_stream(key, done.stream_id, ["."], {"model": "m"})
    ledger.abort_stream(key, kept.stream_id, "client_gone", ["kept partial"], keep_partial=True)
    ledger.open_stream(key, stream_id="still open")
    ledger.append_stream(key, "still open", ["..."])


def test_rebuild_replay_and_export_hold_streams(own_store_settings: Settings) -> None:
    ledger = make_ledger(own_store_settings)
    try:
        write_streams(ledger, "s")
        before = all_rows(ledger)
        assert len(before["ledger_streams"]) == 4
        rebuild(views(ledger), ledger.mapper, ledger.tokenizer)
        assert all_rows(ledger) == before
        assert check(views(ledger), ledger.mapper, ledger.tokenizer) == []

        events = list(ledger.events.get(session_id(ledger.default_tenant, "s")))
        assert replay(events).messages == ledger.get_all("s")
        assert [m.content for m in ledger.get_all("s")] == ["question", "an answer.",
                                                            "kept partial"]  # fmt: skip

        lines = [json.loads(b) for b in export_jsonl(ledger, plan_export(ledger, "s"))]
        kinds = [x["type"] for x in lines if x["record"] == "event"]
        assert kinds.count("StreamChunksAppended") == 3 and kinds.count("StreamAborted") == 2
        aborted = [x["payload"] for x in lines if x.get("type") == "StreamAborted"]
        assert {a["cause"] for a in aborted} == {"superseded", "client_gone"}
    finally:
        ledger.close()
