"""Session keys over the whole code-point range are listed, with and without a prefix."""

from __future__ import annotations

import pytest

from session_ledger.domain.ledger import Ledger
from session_ledger.projections.sql import prefix_upper_bound

TOP = "\U0010ffff"
KEYS = ["a", f"a{TOP}", f"a{TOP}b", f"a{TOP}{TOP}", "b", "\ud7ffz", "\ue000", TOP, f"{TOP}x"]


@pytest.mark.parametrize(
    ("prefix", "bound"),
    [("", None), (TOP, None), (TOP * 3, None), ("a", "b"), (f"a{TOP}", "b"),
     (f"a{TOP}{TOP}", "b"), ("\ud7ff", "\ue000"), (f"x{TOP}\ud7ff", f"x{TOP}\ue000")],
)  # fmt: skip
def test_the_upper_bound_of_a_prefix(prefix: str, bound: str | None) -> None:
    assert prefix_upper_bound(prefix) == bound


def test_keys_with_the_highest_code_point_are_listed(ledger: Ledger) -> None:
    for key in KEYS:
        ledger.put(key, {"role": "user", "content": "hi"})
    assert ledger.keys(limit=100) == sorted(KEYS)
    for prefix in ("", "a", f"a{TOP}", TOP, "\ud7ff", "\ue000"):
        assert ledger.keys(prefix=prefix, limit=100) == sorted(
            k for k in KEYS if k.startswith(prefix)
        ), prefix
    assert ledger.keys(after="a", limit=100) == sorted(KEYS)[1:]
