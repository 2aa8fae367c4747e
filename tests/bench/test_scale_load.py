"""The scale run's bulk load stores what live writes store: `rebuild --check` finds the
views equal to those derived from its events, `verify` finds every chain intact, reads
answer what was written, and live writes go on after it."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from bench.scale_load import LOADED_TABLES, SECONDARY_INDEXES, load, load_parallel, plan
from session_ledger.domain.ledger import Ledger
from session_ledger.projections.rebuild import check
from session_ledger.projections.views import SQLViews
from tests.conftest import make_ledger, make_settings

pytestmark = pytest.mark.bench


def secondary_indexes(url: str) -> list[tuple[str, str]]:
    with psycopg.connect(url) as conn:
        return conn.execute(SECONDARY_INDEXES, (list(LOADED_TABLES),)).fetchall()


@pytest.mark.parametrize(("partitions", "workers"), [(None, 0), (4, 0), (4, 2)])
def test_a_bulk_load_equals_live_writes(
    fresh_postgres_url: str, tmp_path: Path, partitions: int | None, workers: int
) -> None:
    """workers=0: one process on the caller's connection; else `load_parallel`."""
    settings = make_settings("postgres", tmp_path, partitions=partitions)
    settings.database_url = fresh_postgres_url
    ledger: Ledger = make_ledger(settings)
    the_plan = plan(3_000, sessions=30)
    indexes = secondary_indexes(fresh_postgres_url)
    if workers:
        raw = load_parallel(settings, the_plan, workers)
    else:
        with psycopg.connect(fresh_postgres_url) as conn:
            raw = load(ledger, conn, the_plan)
    assert len(indexes) >= 5 and secondary_indexes(fresh_postgres_url) == indexes
    assert raw > 3_000 * 400
    assert the_plan.giants and sum(n for _, _, n in the_plan.sessions) + 30 == 3_000
    views = ledger.views
    assert isinstance(views, SQLViews)
    assert check(views, ledger.mapper, ledger.tokenizer) == []
    reports = list(ledger.verify_all())
    assert len(reports) == 30 and all(r.intact for r in reports)
    tenant, key, messages = the_plan.sessions[5]
    history = ledger.get_all(key, tenant=tenant)
    assert len(history) == messages and history[-1].content.startswith(f"{messages - 1}: ")
    assert ledger.head(key, tenant=tenant).version == messages + 1
    ledger.put(key, {"role": "user", "content": "live"}, tenant=tenant)
    assert ledger.get(key, tenant=tenant, token_limit=10)[-1].content == "live"
    assert ledger.verify(key, tenant=tenant).intact
    ledger.close()
