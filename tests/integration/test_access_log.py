"""The access log is append-only and hash-chained per tenant: appends racing from many
threads never fork it, and an edited, deleted or reordered entry is named."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from session_ledger.api.settings import Settings
from session_ledger.projections.access_log import access_entries, record_access, verify_access_log
from session_ledger.projections.views import SQLViews
from tests.conftest import make_ledger

from .tampering import Database


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_racing_appends_keep_one_chain_and_tampering_is_named(
    own_store_settings: Settings, tmp_path: Path
) -> None:
    ledger = make_ledger(own_store_settings)
    try:
        views = ledger.views
        assert isinstance(views, SQLViews)
        tenant, other = own_store_settings.default_tenant, "other"

        def read(n: int) -> None:
            record_access(views, tenant if n % 3 else other, f"key:{n}", "auditor", "window",
                          f"s{n}", {"token_limit": str(n)}, n)  # fmt: skip

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(read, range(60)))
        entries = access_entries(views, tenant, 0, 1000)
        assert [e.seq for e in entries] == list(range(1, 41))
        assert sorted(e.records for e in entries) == [n for n in range(60) if n % 3]
        assert len(access_entries(views, other, 0, 1000)) == 20
        assert list(verify_access_log(views, tenant)) == []

        db = Database(own_store_settings)
        try:
            db.run("UPDATE ledger_access_log SET records = 999 WHERE tenant = ? AND seq = 7",
                   tenant)  # fmt: skip
            problems = list(verify_access_log(views, tenant))
            assert len(problems) == 1 and problems[0].startswith("entry 7: the stored hash is")
            db.run("DELETE FROM ledger_access_log WHERE tenant = ? AND seq = 7", tenant)
            assert list(verify_access_log(views, tenant)) == ["entry 7 is missing"]
            assert list(verify_access_log(views, other)) == []
        finally:
            db.close()
    finally:
        ledger.close()
