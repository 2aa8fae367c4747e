"""Large writes go through whole; acknowledged writes survive a restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import make_ledger, make_settings


@pytest.mark.slow
@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_a_ten_thousand_message_set_and_put_messages(store: str, tmp_path: Path) -> None:
    ledger = make_ledger(make_settings(store, tmp_path))
    try:
        history = [{"role": "user", "content": f"message {i} " + "x" * 600} for i in range(10_000)]
        assert ledger.set("big", history).message_count == 10_000
        assert ledger.put_messages("big", history).message_count == 20_000
        assert len(ledger.get_all("big")) == 20_000
        assert ledger.get_all("big", offset=19_999)[0].content == history[-1]["content"]
        assert ledger.set("big", history[:3]).message_count == 3
        assert ledger.head("big").token_total == 3 * 3
    finally:
        ledger.close()


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_writes_are_readable_after_a_restart(store: str, tmp_path: Path) -> None:
    settings = make_settings(store, tmp_path)
    first = make_ledger(settings)
    acknowledged = [first.put("s", {"role": "user", "content": str(i)}) for i in range(20)]
    first.delete_message("s", 0)
    first.close()

    second = make_ledger(settings)
    try:
        assert [m.content for m in second.get_all("s")] == [str(i) for i in range(1, 20)]
        assert second.head("s").version == acknowledged[-1].version + 1
        assert second.put("s", {"role": "user", "content": "after"}).version == 23
    finally:
        second.close()
