"""Audit search across a tenant's sessions: by actor or by type, in a time range, under a
key prefix, paged by cursor, equal to what reading every session would give; and on
PostgreSQL the plan reads the timeline through its index, not session by session."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from session_ledger.api.settings import Settings
from session_ledger.domain.errors import InvalidInput
from session_ledger.domain.ledger import Ledger
from session_ledger.projections.audit_search import search_events
from session_ledger.projections.sql import INDEXED_TYPE
from session_ledger.projections.views import SQLViews
from tests.conftest import make_ledger


def everything(ledger: Ledger, tenant: str) -> list[tuple[str, int, str, datetime, str]]:
    """Brute force: every session's audit trail."""
    found = []
    for key in ledger.keys(tenant=tenant, limit=1000):
        for e in ledger.audit(key, tenant=tenant, limit=1000):
            found.append((key, e.version, e.event_type, e.recorded_at, e.actor))
    return found


def searched(views: SQLViews, tenant: str, page: int, **query: Any) -> list[tuple[Any, ...]]:
    found, cursor = [], None
    while True:
        events, cursor = search_events(views, tenant, cursor=cursor, limit=page, **query)
        found += [(e.key, e.version, e.event_type, e.recorded_at, e.actor) for e in events]
        if cursor is None:
            return found


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_search_equals_reading_every_session(own_store_settings: Settings, tmp_path: Path) -> None:
    ledger = make_ledger(own_store_settings)
    try:
        tenant = own_store_settings.default_tenant
        for i in range(12):
            key = f"{'team/' if i % 2 else 'solo/'}{i}"
            ledger.put(key, {"role": "user", "content": "hi"}, actor=f"key:{i % 3}")
            ledger.put(key, {"role": "assistant", "content": "yo"}, actor="key:bot")
            if i % 4 == 0:
                ledger.reset(key, actor=f"key:{i % 3}")
        ledger.put("x", {"role": "user", "content": "other tenant"}, actor="key:0", tenant="t2")
        views = ledger.views
        assert isinstance(views, SQLViews)
        every = everything(ledger, tenant)
        middle = sorted(e[3] for e in every)[len(every) // 2]

        def expect(**q: object) -> list[tuple[Any, ...]]:
            rows = [e for e in every
                    if q.get("actor") in (None, e[4]) and q.get("event_type") in (None, e[2])
                    and e[0].startswith(str(q.get("prefix", "")))
                    and e[3] >= q.get("start", datetime.min.replace(tzinfo=UTC))  # type: ignore[operator]
                    ]  # fmt: skip
            return sorted(rows, key=lambda e: (e[3], str(e[0])))

        for query in ({"actor": "key:0"}, {"event_type": "HistoryCleared"},
                      {"actor": "key:bot", "prefix": "team/"},
                      {"event_type": "MessagesAppended", "actor": "key:1"},
                      {"event_type": "MessagesAppended", "prefix": "team/"},
                      {"actor": "key:bot", "start": middle}):  # fmt: skip
            got = searched(views, tenant, 2, **query)
            want = expect(**query)
            assert len(got) == len(want) and got
            assert sorted(got, key=str) == sorted(want, key=str)
            assert [g[3] for g in got] == sorted(g[3] for g in got)
        other = searched(views, "t2", 5, actor="key:0")  # another tenant's own rows only
        assert [(k, v) for k, v, *_ in other] == [("x", 1), ("x", 2)]
        with pytest.raises(InvalidInput, match="names an actor or an event type"):
            search_events(views, tenant)
        with pytest.raises(InvalidInput, match="cursor"):
            search_events(views, tenant, actor="key:0", cursor="bm9wZQ==")
        # A forged cursor: a version no column holds, a moment outside years 1 to 9999
        _, real = search_events(views, tenant, actor="key:0", limit=1)
        assert real is not None
        moment, sid, _version = json.loads(base64.urlsafe_b64decode(real))
        for forged in ([moment, sid, 2**63], [moment, sid, -1], [moment, sid, 10**30],
                       ["0001-01-01T00:00:00+23:59", sid, 1], [5, sid, 1], [moment, "x", 1],
                       ["9999-12-31T23:59:59.999999-23:59", sid, 1]):  # fmt: skip
            cursor = base64.urlsafe_b64encode(json.dumps(forged).encode()).decode()
            with pytest.raises(InvalidInput, match="cursor is not one this search returned"):
                search_events(views, tenant, actor="key:0", cursor=cursor)
    finally:
        ledger.close()


def test_postgres_reads_the_search_from_the_index(fresh_postgres_url: str) -> None:
    from tests.conftest import make_settings

    settings = make_settings("postgres", Path("."))
    settings.database_url = fresh_postgres_url
    make_ledger(settings).close()
    with psycopg.connect(fresh_postgres_url) as conn:
        conn.execute("SET enable_seqscan = off")  # an empty table: ask whether an index serves
        for column in ("actor", "event_type"):
            # A search by type alone names the type index's terms (audit_search.py).
            terms = "" if column == "actor" else " AND " + INDEXED_TYPE.replace("event", "t.event")
            plan = "\n".join(r[0] for r in conn.execute(
                "EXPLAIN SELECT s.session_key FROM ledger_timeline t JOIN ledger_sessions s "
                f"ON s.session_id = t.session_id WHERE t.{column} = 'a'{terms} "
                "AND t.recorded_at >= now() "
                "AND (t.recorded_at, t.session_id, t.version) > (now(), gen_random_uuid(), 0) "
                "AND s.tenant = 'T' ORDER BY t.recorded_at, t.session_id, t.version LIMIT 10"
            ))  # fmt: skip
            index = "ledger_timeline_actor" if column == "actor" else "ledger_timeline_type"
            assert index in plan and "Seq Scan on ledger_timeline" not in plan, plan
            assert "Sort" not in plan.split("->")[1], plan  # read in index order, not sorted


def test_a_put_adds_no_entry_to_the_type_index(tmp_path: Path) -> None:
    """The type index leaves out the puts' type (sql.UNINDEXED_TYPES): puts write one
    b-tree fewer, and the events of the other types are in it."""
    from tests.conftest import make_settings

    settings = make_settings("sqlite", tmp_path)
    ledger = make_ledger(settings)
    try:
        for i in range(30):
            ledger.put(f"s{i % 3}", {"role": "user", "content": f"m{i}"}, actor="key:0")
        ledger.reset("s0", actor="key:0")
        views = ledger.views
        assert isinstance(views, SQLViews)
        with views.dialect.reading() as read:
            cells = read.tuples(
                "SELECT coalesce(sum(ncell), 0) FROM dbstat WHERE name = ? AND pagetype = 'leaf'",
                ("ledger_timeline_type",),
            )
        assert cells[0][0] == 4  # each session's start, and the reset
        found, _ = search_events(views, settings.default_tenant, event_type="HistoryCleared")
        assert [(e.key, e.event_type) for e in found] == [("s0", "HistoryCleared")]
    finally:
        ledger.close()
