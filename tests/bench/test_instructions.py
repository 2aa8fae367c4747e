"""`make bench-instructions` (bench/instructions.py): every subject writes through its
system's own call, and callgrind's count of a write is read from its output."""

from __future__ import annotations

import shutil

import pytest

from bench import instructions
from bench.instructions import SUBJECTS, WARM, count, worker

pytestmark = pytest.mark.bench


@pytest.mark.parametrize("subject", sorted(SUBJECTS))
def test_each_subject_writes_through_its_own_call(subject: str) -> None:
    worker(subject, 2, WARM + 2)  # raises if the system's call fails


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_a_write_is_the_difference_of_two_counts() -> None:
    warm, more = count("raw-sqlite3", 0, WARM + 20), count("raw-sqlite3", 20, WARM + 20)
    per_write = (more - warm) / 20
    assert 20_000 < per_write < 1_000_000, per_write  # an INSERT and a COMMIT
    assert instructions.SCRATCH is None or instructions.SCRATCH.is_dir()
