"""Acceptance: the window at every version of a long session equals ChatMemoryBuffer's,
on every store. A session grows to `size` messages while writes of every kind end its
rows at random positions; every version is read, then the session is replaced and
cleared, so that all rows of every version were ended later, and every version is read
again. `make test` runs sessions of 300 messages; `make test-reliability` of 1,000."""

from __future__ import annotations

import random

import pytest

from session_ledger.domain.ledger import Ledger
from tests.integration.test_past_windows_match_llamaindex import (
    ROLES,
    Replayed,
    Write,
    check_every_version,
)

SHAPES = range(3 * len(ROLES))


def ending_write(rng: random.Random, size: int) -> Write:
    """A write that ends rows of a long session: at any position, the newest, the
    oldest, or all after a prefix kept."""
    shapes = rng.choices(SHAPES, k=rng.randint(0, 8))
    return rng.choice(
        [
            ("delete", rng.randrange(2 * size)),
            ("delete", rng.randrange(2 * size)),
            ("delete_last",),
            ("archive", rng.randint(1, size // 10)),
            ("set_keeping", rng.randrange(2 * size), shapes),
        ]
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "size",
    [pytest.param(300, id="300"), pytest.param(1_000, id="1000", marks=pytest.mark.long_run)],
)
def test_every_version_of_a_long_session(ledger: Ledger, size: int) -> None:
    rng = random.Random(size)
    replayed = Replayed(ledger)
    while len(replayed.history) < size:
        replayed.apply(("put", rng.choices(SHAPES, k=rng.randint(1, size // 4))))
        for _ in range(rng.randint(0, 3)):
            replayed.apply(ending_write(rng, size))
    check_every_version(replayed)  # each version's rows: some live still, some ended
    replayed.apply(("set", rng.choices(SHAPES, k=size // 3)))  # no message kept
    replayed.apply(("put", rng.choices(SHAPES, k=size // 3)))
    replayed.apply(("reset",))
    replayed.apply(("put", rng.choices(SHAPES, k=3)))
    check_every_version(replayed)
