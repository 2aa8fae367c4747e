"""The view writer applies each kind of row change `view_changes` makes, and refuses one
it does not know rather than storing the write without its rows."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from session_ledger.projections.changes import SessionRow, ViewChanges
from tests.conftest import make_ledger, make_settings


class Unknown(NamedTuple):
    version: int


def test_a_row_change_of_no_known_kind_is_an_error(tmp_path: Path) -> None:
    ledger = make_ledger(make_settings("sqlite", tmp_path))
    try:
        views: Any = ledger.views
        session = SessionRow("t", "k", datetime.now(UTC))
        vc = ViewChanges(uuid.uuid4(), False, session, (Unknown(2),), ())
        with (
            pytest.raises(TypeError, match="no row writer for Unknown"),
            views.dialect.write_transaction() as cursor,
        ):
            views.writer.apply_changes(cursor, vc, ())
    finally:
        ledger.close()
