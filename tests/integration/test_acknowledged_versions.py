"""A write's answer names the version that holds it, whatever another thread does with the
session's cached state after the write has committed.

A committed write hands its session to the repository's cache. A writer of another
thread whose own copy turned out stale takes the cached one out (evicting it) and catches
it up in place with the events written since, then runs its command on it. If that
object is the very one the first write still holds (it takes a snapshot every
`snapshot_interval` events, a store round trip, before it reads its version for its
answer), the first write answers with the other write's version. This test makes that
interleaving happen: the other writer runs while the first write takes its snapshot.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from session_ledger.domain.session import session_id
from tests.conftest import make_ledger, make_settings


def message(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_a_write_answers_its_own_version_while_another_thread_catches_up_its_cached_state(
    store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = make_settings(store, tmp_path, snapshot_interval=4)
    this, other = make_ledger(settings), make_ledger(settings)  # two processes, one store
    try:
        this.put("chat", message("m0"))  # versions 1 (started) and 2, cached here
        this.put("chat", message("m1"))  # version 3
        snapshots = this.snapshots
        take = snapshots.put
        answers: dict[str, Any] = {}

        def other_writes_meanwhile(*args: Any, **kwargs: Any) -> Any:
            # While the write of version 4 takes its snapshot: another process writes
            # version 5, so this process's next writer loses with the copy it loaded (at
            # 4), evicts the cached state and catches it up to 5, and writes version 6.
            monkeypatch.setattr(snapshots, "put", take)
            other.put("chat", message("by the other process"))
            writer = threading.Thread(
                target=lambda: answers.update(
                    b=this.put("chat", message("b"), idempotency_key="client-b-1")
                ),
                daemon=True,
            )
            writer.start()
            writer.join(timeout=30)
            assert not writer.is_alive()
            return take(*args, **kwargs)

        monkeypatch.setattr(snapshots, "put", other_writes_meanwhile)
        a = this.put("chat", message("a"), idempotency_key="client-a-1")
        b = answers["b"]

        entries = {e.version: e for e in other.audit("chat")}
        assert entries[a.version].idempotency_key == "client-a-1"
        assert entries[b.version].idempotency_key == "client-b-1"
        assert (a.version, b.version) == (4, 6)
        # The snapshot due at version 4 is of version 4, not of a state another writer
        # had moved on meanwhile.
        sid = session_id(settings.default_tenant, "chat")
        assert [s.originator_version for s in other.snapshots.get(sid)] == [4]
        # Its next write goes on from the state the cache holds, not from a mixed one.
        assert this.put("chat", message("c")).version == 7
        assert [m.content for m in other.get_all("chat")] == [
            "m0",
            "m1",
            "a",
            "by the other process",
            "b",
            "c",
        ]
    finally:
        this.close()
        other.close()
