"""A session key is checked once per process, not at each write: a put's checks of its
key (two regular-expression searches, an encode) cost about as much as its row's SQL.
A refused key is refused again each time."""

from __future__ import annotations

import pytest

from session_ledger.api.bootstrap import open_ledger
from session_ledger.api.settings import Settings
from session_ledger.domain import inputs
from session_ledger.domain.errors import InvalidSessionKey


def test_a_key_is_checked_once_and_a_bad_key_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[object] = []
    check_text = inputs.check_text

    def counted(value: object, what: str, *args: object, **kwargs: object) -> str:
        if what == "session key":
            checked.append(value)
        return check_text(value, what, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(inputs, "check_text", counted)
    inputs._checked_key.cache_clear()
    ledger = open_ledger(Settings(database_url="memory://"))
    try:
        for text in ("one", "two", "three"):
            ledger.put("checked-once", {"role": "user", "content": text})
        assert checked == ["checked-once"]
        for _ in range(2):
            with pytest.raises(InvalidSessionKey, match="control characters"):
                ledger.put("bad\x07key", {"role": "user", "content": "x"})
        with pytest.raises(InvalidSessionKey, match="bidirectional"):
            ledger.put("new\u202ekey", {"role": "user", "content": "x"})
        assert checked.count("bad\x07key") == 2
    finally:
        ledger.close()
