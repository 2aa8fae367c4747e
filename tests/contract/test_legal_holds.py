"""Legal holds by reference, on every store: a session may be held for several matters at
once, each hold released by its own reference; erasure and retention wait for the last.
The audit trail and the export name each hold and release; a ledger that loads the
session from the store (replay), and a rebuild, give the same holds."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from eventsourcing.utils import get_topic

from session_ledger.api.settings import Settings
from session_ledger.domain.compliance import RetentionRule
from session_ledger.domain.errors import HoldConflict, HoldNotFound, LegalHold
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.session import Session, session_id
from session_ledger.projections.export import export_session
from session_ledger.projections.rebuild import check
from tests.conftest import make_ledger

KEY = "held"


@pytest.fixture
def sealed(own_store_settings: Settings) -> Iterator[Ledger]:
    """A ledger with a master key (erasure needs one), on a store of its own, each in turn."""
    settings = own_store_settings
    settings.master_key = base64.b64encode(os.urandom(32)).decode("ascii")
    ledger = make_ledger(settings)
    ledger.test_settings = settings  # type: ignore[attr-defined]
    yield ledger
    ledger.close()


def erase(ledger: Ledger) -> None:
    ledger.erase(KEY, reason="the user asked", basis="GDPR art. 17")


def reopened(ledger: Ledger) -> Ledger | None:
    """Another ledger on the same store (it loads the session from the events), or None
    for a store only this process holds."""
    settings = ledger.test_settings  # type: ignore[attr-defined]
    return None if settings.database_url.startswith("memory:") else make_ledger(settings)


def test_two_matters_hold_a_session_each_released_by_its_own_reference(sealed: Ledger) -> None:
    sealed.put(KEY, {"role": "user", "content": "evidence"})
    sealed.place_hold(KEY, reference="CASE-1", reason="litigation")
    sealed.place_hold(KEY, reference="CASE-2", reason="regulator")
    with pytest.raises(HoldConflict, match="CASE-1"):
        sealed.place_hold(KEY, reference="CASE-1", reason="again")
    version = sealed.head(KEY).version
    with pytest.raises(HoldNotFound) as wrong:
        sealed.release_hold(KEY, reference="WRONG", reason="not a matter of this session")
    assert "'WRONG'" in str(wrong.value) and "'CASE-1', 'CASE-2'" in str(wrong.value)
    assert sealed.head(KEY).version == version  # nothing written by the refusals
    with pytest.raises(LegalHold, match="'CASE-1', 'CASE-2'"):
        erase(sealed)

    sealed.release_hold(KEY, reference="CASE-1", reason="settled")
    with pytest.raises(LegalHold, match="'CASE-2'"):
        erase(sealed)
    with pytest.raises(HoldNotFound):
        sealed.release_hold(KEY, reference="CASE-1", reason="twice")
    other = reopened(sealed)  # the same holds, replayed from the store
    if other is not None:
        try:
            with pytest.raises(LegalHold, match="'CASE-2'"):
                erase(other)
            with pytest.raises(HoldNotFound, match="its holds: 'CASE-2'"):
                other.release_hold(KEY, reference="CASE-1", reason="replayed")
        finally:
            other.close()
    assert check(sealed.views, sealed.mapper, sealed.tokenizer) == []  # type: ignore[arg-type]

    sealed.release_hold(KEY, reference="CASE-2", reason="closed")
    with pytest.raises(HoldNotFound, match="its holds: none"):
        sealed.release_hold(KEY, reference="CASE-2", reason="none left")
    erase(sealed)

    trail = [(e.event_type, e.changes.get("reference")) for e in sealed.audit(KEY)]
    assert trail[2:] == [
        ("LegalHoldPlaced", "CASE-1"), ("LegalHoldPlaced", "CASE-2"),
        ("LegalHoldReleased", "CASE-1"), ("LegalHoldReleased", "CASE-2"),
        ("SessionErased", None),
    ]  # fmt: skip
    lines = [json.loads(line) for line in b"".join(export_session(sealed, KEY)).splitlines()]
    exported = [json.dumps(line) for line in lines if "Hold" in json.dumps(line)]
    assert len(exported) == 4
    assert [("CASE-1" in s, "CASE-2" in s) for s in exported] == [
        (True, False), (False, True), (True, False), (False, True)
    ]  # fmt: skip
    report = sealed.verify(KEY)
    assert report.intact and report.versions == len(trail)


def test_retention_keeps_a_session_while_any_hold_is_held(sealed: Ledger) -> None:
    sealed.put(KEY, {"role": "user", "content": "evidence"})
    for reference in ("CASE-1", "CASE-2"):
        sealed.place_hold(KEY, reference=reference, reason="litigation")
    rule = RetentionRule(sealed.default_tenant, "", 1)
    later = datetime.now(UTC) + timedelta(days=2)
    sealed.release_hold(KEY, reference="CASE-2", reason="closed")
    (kept,) = sealed.retention([rule], later, dry_run=False)
    assert kept.action == "held" and sealed.get(KEY)[0].content == "evidence"
    sealed.release_hold(KEY, reference="CASE-1", reason="closed")
    (done,) = sealed.retention([rule], later + timedelta(days=1), dry_run=False)
    assert done.action == "erased"


def test_a_session_snapshotted_under_its_one_hold_is_released_by_that_reference(
    sealed: Ledger,
) -> None:
    """A snapshot taken when a session could hold one hold records `held` and no
    references: its hold is still released by the reference it was placed under."""
    other = reopened(sealed)
    if other is None:
        pytest.skip("a snapshot is read by a ledger that has not the session cached")
    other.close()
    sealed.put(KEY, {"role": "user", "content": "evidence"})
    sealed.place_hold(KEY, reference="CASE-1", reason="litigation")
    session = sealed.repository.get(session_id(sealed.default_tenant, KEY))
    snapshot = Session.Snapshot.take(session)
    state = dict(snapshot.state)
    del state["holds"]  # as the snapshot was stored then
    object.__setattr__(snapshot, "state", state)
    assert get_topic(type(snapshot)).endswith("Snapshot")
    sealed.snapshots.put([snapshot])

    loaded = reopened(sealed)
    assert loaded is not None
    try:
        with pytest.raises(HoldNotFound, match="its holds: 'CASE-1'"):
            loaded.release_hold(KEY, reference="WRONG", reason="not this one")
        loaded.place_hold(KEY, reference="CASE-2", reason="another matter")
        loaded.release_hold(KEY, reference="CASE-1", reason="settled")
        with pytest.raises(LegalHold, match="'CASE-2'"):
            erase(loaded)
        loaded.release_hold(KEY, reference="CASE-2", reason="closed")
        erase(loaded)
    finally:
        loaded.close()
