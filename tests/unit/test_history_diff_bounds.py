"""The diff's comparison is difflib's, with its steps counted: the runs are difflib's
opcodes for any histories it compares, and histories whose comparison would take more
than `MAX_DIFF_STEPS` steps (quadratic ones, e.g. every neighbouring pair swapped) are
refused before the search that would pass it."""

from __future__ import annotations

import random
from difflib import SequenceMatcher

import pytest
from hypothesis import given
from hypothesis import strategies as st

from session_ledger.api.routes import diff
from session_ledger.domain.errors import AnswerTooLarge

items = st.lists(st.integers(0, 5), max_size=300)


def opcodes(old: list[int], new: list[int]) -> list[tuple[str, int, int, int, int]]:
    return [op for op in SequenceMatcher(None, old, new).get_opcodes() if op[0] != "equal"]


@given(items, items)
def test_the_runs_are_difflibs(old: list[int], new: list[int]) -> None:
    runs = diff.changed_runs(old, new)
    # (the common head and tail are matched first: difflib finds them too, or runs of
    # the same changes where equal items repeat; both turn old into new)
    rebuilt, at = [], 0
    for _, i1, i2, j1, j2 in runs:
        rebuilt += old[at:i1] + new[j1:j2]
        at = i2
    assert rebuilt + old[at:] == new
    if not old or not new or (old[0] != new[0] and old[-1] != new[-1]):
        assert runs == opcodes(old, new)


def test_ordinary_changes_of_the_largest_histories_are_compared() -> None:
    random.seed(3)
    old = [random.random() for _ in range(diff.MAX_DIFF_MESSAGES)]
    new = old[:]
    for at in random.sample(range(len(old)), len(old) // 3):
        new[at] = random.random()
    assert len(diff.changed_runs(old, new)) > 1000
    # two random orders of ~100 texts, each under 1% of them (difflib's junk threshold)
    texts = [hash(f"m{i}") for i in range(105)]
    assert diff.changed_runs(random.choices(texts, k=10_000), random.choices(texts, k=10_000))


def test_swapped_pairs_are_refused_within_the_steps() -> None:
    old = list(range(diff.MAX_DIFF_MESSAGES))
    swapped = [x for i in range(0, len(old), 2) for x in (old[i + 1], old[i])]
    searched: list[int] = []
    search = diff._Matcher.find_longest_match

    def counted(self: diff._Matcher, *args: int) -> object:
        searched.append(1)
        return search(self, *args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(diff._Matcher, "find_longest_match", counted)
        with pytest.raises(AnswerTooLarge, match="too many places"):
            diff.changed_runs(old, swapped)
    # difflib would search 10,000 times, each to the end (the first over 10,000 items,
    # 50,000 steps): refused after about 200 of those searches
    assert 0 < len(searched) < 1000
    assert diff.changed_runs(old[:200], swapped[:200], steps=10**6)
    with pytest.raises(AnswerTooLarge):
        diff.changed_runs(old[:200], swapped[:200], steps=10_000)
