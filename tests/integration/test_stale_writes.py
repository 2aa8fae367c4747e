"""A write from a session cached here that another process wrote to since: the store
refuses it on its first try, so nothing of it is stored and the ledger reloads and writes
again without looking for its id (one round trip fewer); a keyed write refused looks for
its key, as the same request sent again may have written it meanwhile. Lost answers, where the id
must be looked for, are tests/reliability/test_commit_faults.py's and
tests/unit/test_async_bridge.py's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from session_ledger.domain.ledger import Ledger
from tests.conftest import make_ledger, make_settings


def looked_for(ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> list[int | None]:
    """The `since` of each search for a write's id the ledger makes from now on."""
    searches: list[int | None] = []
    search = ledger.views.prior_write

    def prior_write(*args: Any, since: int | None = None) -> Any:
        searches.append(since)
        return search(*args, since=since)

    monkeypatch.setattr(ledger.views, "prior_write", prior_write)
    return searches


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_a_write_from_a_stale_copy_reloads_and_looks_for_its_id_only_when_keyed(
    store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = make_settings(store, tmp_path)
    if store == "postgres":
        settings.default_tenant += "-stale"
    this, other = make_ledger(settings), make_ledger(settings)  # two processes
    try:
        searches = looked_for(this, monkeypatch)
        this.put("chat", {"role": "user", "content": "one"})  # cached here at version 2
        other.put("chat", {"role": "user", "content": "two"})  # version 3
        assert this.put("chat", {"role": "user", "content": "three"}).version == 4
        assert searches == []
        other.put("chat", {"role": "user", "content": "four"})  # version 5
        keyed = this.put("chat", {"role": "user", "content": "five"}, idempotency_key="k-5")
        assert keyed.version == 6
        # Not looked for before it went; its refused try of version 5 was, by its key
        assert searches == [None]
        contents = [m.content for m in other.get_all("chat")]
        assert contents == ["one", "two", "three", "four", "five"]
    finally:
        this.close()
        other.close()


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_a_keyed_write_that_loses_to_its_own_retry_answers_what_the_retry_stored(
    store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two attempts of one keyed removal at once, one from a stale copy: the attempt whose
    store refuses it finds the other's write by the key and answers that write, as a
    retry does (its message, replayed), not what its own stale copy would have removed."""
    settings = make_settings(store, tmp_path)
    if store == "postgres":
        settings.default_tenant += "-race"
    this, other = make_ledger(settings), make_ledger(settings)  # two processes
    try:
        this.put_messages("chat", [{"role": "user", "content": f"m{i}"} for i in range(3)])
        other.delete_last_message("chat")  # version 3: this copy is stale
        search = this.views.prior_write
        raced: list[Any] = []

        def prior_write(*args: Any, since: int | None = None) -> Any:
            if not raced:  # the other attempt commits once this one's store refused it
                raced.append(other.delete_message("chat", 0, idempotency_key="k"))
            return search(*args, since=since)

        monkeypatch.setattr(this.views, "prior_write", prior_write)
        answer = this.delete_message("chat", 0, idempotency_key="k")
        assert [m.content for m in raced[0].removed] == ["m0"]
        assert (answer.version, answer.message_count, answer.replayed) == (4, 1, True)
        assert [m.content for m in answer.removed] == ["m0"]
        assert [m.content for m in other.get_all("chat")] == ["m1"]
    finally:
        this.close()
        other.close()
