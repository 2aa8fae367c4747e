"""A put of one message makes no generator expression in the ledger's code: each is a
function object, a generator and its frames made per write, where a loop, a list or a
`map` over a C function does the same work (the instructions of a put: docs/performance.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import FrameType
from typing import Any

from session_ledger.api.bootstrap import migrate, open_ledger
from session_ledger.api.settings import Settings

OURS = tuple(str(Path(__file__).parents[2] / part) for part in ("domain", "projections"))


def test_a_put_runs_no_generator_expression_of_the_ledger(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'ledger.db'}")
    migrate(settings)
    ledger = open_ledger(settings)
    ran: list[str] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        code = frame.f_code
        if event == "call" and code.co_name == "<genexpr>" and code.co_filename.startswith(OURS):
            ran.append(f"{code.co_filename}:{code.co_firstlineno}")

    try:
        ledger.put("k", {"role": "user", "content": "first"})
        sys.setprofile(profile)
        try:
            ledger.put("k", {"role": "user", "content": "second"})
        finally:
            sys.setprofile(None)
        assert ran == []
        assert [m.content for m in ledger.get_all("k")] == ["first", "second"]
    finally:
        ledger.close()
