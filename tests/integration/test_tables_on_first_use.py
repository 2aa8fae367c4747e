"""An embedded store makes its tables on first use, as LlamaIndex's chat stores do,
unless LEDGER_AUTO_MIGRATE=false asks for an explicit `migrate`; the server and the
operator's commands never make them on their own."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from llama_index.core.base.llms.types import ChatMessage as LlamaMessage

from session_ledger.api.bootstrap import open_ledger
from session_ledger.api.llamaindex import LedgerMemory
from session_ledger.api.settings import Settings
from session_ledger.domain.errors import StoreNotReady
from tests.conftest import fresh_postgres_database


def test_a_new_sqlite_file_gets_its_tables_on_first_use(tmp_path: Path) -> None:
    path = tmp_path / "not" / "yet" / "ledger.db"
    ledger = open_ledger(Settings(database_url=f"sqlite:///{path}", tokenizer="whitespace"))
    try:
        assert ledger.put("k", {"role": "user", "content": "hi"}).version == 2
        assert [m.content for m in ledger.get_all("k")] == ["hi"]
    finally:
        ledger.close()
    assert path.exists()


def test_auto_migrate_off_requires_migrate(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    settings = Settings(database_url=f"sqlite:///{path}", auto_migrate=False)
    with pytest.raises(StoreNotReady, match="run `session-ledger migrate` first"):
        open_ledger(settings)
    assert not path.exists()  # nothing made


def test_ledger_memory_on_a_new_sqlite_file(tmp_path: Path) -> None:
    """The README's one-line switch on a file that does not exist yet."""
    url = f"sqlite:///{tmp_path / 'var' / 'ledger.db'}"
    memory = LedgerMemory.from_defaults(chat_store_key="user-42", url=url)
    memory.put(LlamaMessage(role="user", content="Hello"))
    assert [m.content for m in memory.get()] == ["Hello"]


@pytest.mark.postgres
def test_processes_racing_on_a_new_postgres_database_make_the_tables_once() -> None:
    with fresh_postgres_database("ledger_first_use") as url:
        settings = Settings(database_url=url, tokenizer="whitespace", pool_size=1)

        def first_write(i: int) -> int:
            ledger = open_ledger(settings)
            try:
                return ledger.put(f"k{i}", {"role": "user", "content": "hi"}).version
            finally:
                ledger.close()

        with ThreadPoolExecutor(4) as pool:
            assert list(pool.map(first_write, range(4))) == [2] * 4
