"""Blocks that take turns: how an A/B run compares two revisions at one machine speed.

This machine's CPU and fsync speed drift several-fold within minutes, so two things
compared are measured in alternating blocks, seconds apart: each round runs one block of
each, the one that goes first changing every round. A figure is the median of its blocks,
and a ratio is taken block by block within each round, then its median reported, so a
slow or fast moment falls on both sides of every ratio. How far that median can be
trusted is an interval that assumes nothing of the noise's shape (`median_interval`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

K = TypeVar("K")


def turn_orders(names: Sequence[K], rounds: int) -> list[list[K]]:
    """The order of each round: every name once, starting with the next name each round
    (for two: a b, b a, a b, ...), so that neither side always runs right after the other."""
    n = len(names)
    return [[names[(r + i) % n] for i in range(n)] for r in range(rounds)]


@dataclass(frozen=True)
class Comparison:
    """Two sides' blocks of one workload: each block's figure is a time per call."""

    base_blocks: tuple[float, ...]
    head_blocks: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.base_blocks or len(self.base_blocks) != len(self.head_blocks):
            raise ValueError("a comparison needs one block of each side per round")

    @property
    def base(self) -> float:
        return statistics.median(self.base_blocks)

    @property
    def head(self) -> float:
        return statistics.median(self.head_blocks)

    @property
    def block_ratios(self) -> list[float]:
        """head / base within each round: above 1, the head took longer."""
        return [h / b for b, h in zip(self.base_blocks, self.head_blocks, strict=True)]

    @property
    def ratio(self) -> float:
        """The median of the ratios of the rounds (not the ratio of the medians)."""
        return statistics.median(self.block_ratios)

    @property
    def ratio_interval(self) -> tuple[float, float]:
        """Where the rounds' median ratio lies, with 95% confidence."""
        return median_interval(self.block_ratios)


def median_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """A confidence interval for the median of what `values` sample, whatever the
    distribution: from the k-th smallest to the k-th largest value, k as large as the
    binomial tails allow. At 95%, eight values or fewer give their whole range."""
    n, ordered = len(values), sorted(values)
    tail = (1 - confidence) / 2
    k, below = 0, 0.0  # below: the chance that fewer than k values fall under the median
    while k < n and below + math.comb(n, k) / 2**n <= tail:
        below += math.comb(n, k) / 2**n
        k += 1
    k = max(k, 1)  # too few values for the confidence asked: all of them
    return ordered[k - 1], ordered[n - k]
