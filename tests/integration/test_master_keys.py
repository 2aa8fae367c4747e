"""Master keys: their syntax, rotation (old sessions open under their own key, new ones
are wrapped by the newest), and clear refusals of a wrong or missing key."""

from __future__ import annotations

import base64
import os
import sqlite3
from pathlib import Path

import pytest

from session_ledger.api.bootstrap import open_ledger
from session_ledger.domain.errors import StoreNotReady
from session_ledger.domain.session import session_id
from session_ledger.projections.sealing import MasterKeys
from tests.conftest import make_ledger, make_settings


def key() -> str:
    return base64.b64encode(os.urandom(32)).decode("ascii")


@pytest.mark.parametrize(
    ("text", "problem"),
    [("not base64!", "not base64"), (base64.b64encode(b"short").decode(), "5 bytes"),
     ("", "no master key")],
)  # fmt: skip
def test_a_bad_master_key_is_refused_with_what_is_wrong(text: str, problem: str) -> None:
    with pytest.raises(StoreNotReady, match=problem):
        MasterKeys.parse(text)


def test_rotation_wraps_new_sessions_with_the_newest_key(tmp_path: Path) -> None:
    old, new = key(), key()
    settings = make_settings("sqlite", tmp_path, master_key=f"k1:{old}")
    ledger = make_ledger(settings)
    ledger.put("before", {"role": "user", "content": "under k1"})
    ledger.close()

    rotated = settings.model_copy(update={"master_key": f"k1:{old},k2:{new}"})
    ledger = open_ledger(rotated)
    ledger.put("after", {"role": "user", "content": "under k2"})
    assert ledger.get("before")[0].content == "under k1"
    assert ledger.get("after")[0].content == "under k2"
    ledger.close()
    path = settings.database_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        ids = sorted(r[0] for r in conn.execute("SELECT master_key_id FROM ledger_data_keys"))
    assert ids == ["k1", "k2"]

    dropped = settings.model_copy(update={"master_key": f"k2:{new}"})
    ledger = open_ledger(dropped)
    try:
        assert ledger.get("after")[0].content == "under k2"
        with pytest.raises(StoreNotReady, match="master key 'k1', which is not configured"):
            ledger.get("before")
    finally:
        ledger.close()


def test_a_master_key_file_is_read(tmp_path: Path) -> None:
    file = tmp_path / "master.key"
    file.write_text(f"k1:{key()}\n", encoding="ascii")
    ledger = make_ledger(make_settings("sqlite", tmp_path, master_key_file=str(file)))
    try:
        ledger.put("s", {"role": "user", "content": "sealed"})
        assert ledger.views.sealed(session_id(ledger.default_tenant, "s"))
    finally:
        ledger.close()
