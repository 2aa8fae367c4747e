"""Legal hold and erasure on an ADK session written through LedgerSessionService: a
hold blocks the erasure, the erasure leaves ADK a clear error (not an empty session it
might fill again), and the hash chain still verifies."""

from __future__ import annotations

import asyncio
import base64
import os
from pathlib import Path

import pytest
from google.adk.events.event import Event
from google.genai import types

from session_ledger.api.google_adk import LedgerSessionService
from session_ledger.domain.errors import LegalHold, SessionErasedError
from tests.conftest import make_ledger, make_settings

KEY = "adk/bank/u-1/s-1"


@pytest.mark.parametrize("store", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_hold_then_erasure_of_an_adk_session(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    settings = make_settings(store, tmp_path)
    settings.master_key = base64.b64encode(os.urandom(32)).decode("ascii")
    if store == "postgres":  # sealed rows on a database of its own: a test that rebuilds
        # the shared one has no master key to open them
        settings.database_url = request.getfixturevalue("fresh_postgres_url")
    ledger = make_ledger(settings)
    sessions = LedgerSessionService(ledger=ledger)
    said = types.Content(role="user", parts=[types.Part(text="my account is 12345678")])

    async def write() -> None:
        made = await sessions.create_session(app_name="bank", user_id="u-1", session_id="s-1")
        await sessions.append_event(made, Event(author="user", content=said))

    try:
        asyncio.run(write())
        ledger.place_hold(KEY, reference="case-9", reason="litigation")
        with pytest.raises(LegalHold):
            ledger.erase(KEY, reason="request", basis="GDPR art. 17")
        ledger.release_hold(KEY, reference="case-9", reason="closed")
        ledger.erase(KEY, reason="request", basis="GDPR art. 17")

        async def after() -> None:
            with pytest.raises(SessionErasedError, match=r"GDPR art\. 17"):
                await sessions.get_session(app_name="bank", user_id="u-1", session_id="s-1")
            other = await sessions.get_session(app_name="bank", user_id="u-2", session_id="x")
            assert other is None
            await sessions.delete_session(app_name="bank", user_id="u-1", session_id="s-1")
            assert (await sessions.list_sessions(app_name="bank")).sessions == []
            with pytest.raises(SessionErasedError):  # (not "already exists")
                await sessions.create_session(app_name="bank", user_id="u-1", session_id="s-1")

        asyncio.run(after())
        report = ledger.verify(KEY)
        assert report.first_bad_version is None
        assert [e.event_type for e in ledger.audit(KEY)][-1] == "SessionErased"
    finally:
        ledger.close()
