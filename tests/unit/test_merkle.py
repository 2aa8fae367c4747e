"""The checkpoint tree is RFC 9162's: the same root and inclusion paths as the RFC's
recursive definitions, for every size, and a path proves only its own leaf."""

from __future__ import annotations

import hashlib

import pytest

from session_ledger.domain import merkle


def mth(data: list[bytes]) -> bytes:
    """RFC 9162 2.1.1, as written: the recursive split at the largest power of two."""
    n = len(data)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return hashlib.sha256(b"\x00" + data[0]).digest()
    k = 1 << ((n - 1).bit_length() - 1)
    return hashlib.sha256(b"\x01" + mth(data[:k]) + mth(data[k:])).digest()


def path(m: int, data: list[bytes]) -> list[bytes]:
    """RFC 9162 2.1.3.1, as written."""
    n = len(data)
    if n <= 1:
        return []
    k = 1 << ((n - 1).bit_length() - 1)
    if m < k:
        return [*path(m, data[:k]), mth(data[k:])]
    return [*path(m - k, data[k:]), mth(data[:k])]


def test_an_empty_tree_is_the_hash_of_nothing() -> None:
    assert merkle.root([]).hex() == (
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )


@pytest.mark.parametrize("size", [*range(1, 34), 100, 127, 128, 129])
def test_root_and_paths_are_the_rfcs(size: int) -> None:
    data = [f"leaf {i}".encode() for i in range(size)]
    leaves = [merkle.leaf_hash(d) for d in data]
    tree = merkle.levels(leaves)
    assert merkle.root(leaves) == mth(data)
    for m in range(size):
        proof = merkle.inclusion_path(tree, m)
        assert proof == path(m, data)
        assert merkle.root_from_path(m, size, leaves[m], proof) == mth(data)


def test_a_path_proves_only_its_own_leaf_place_and_size() -> None:
    data = [bytes([i]) * 56 for i in range(11)]
    leaves = [merkle.leaf_hash(d) for d in data]
    root, proof = merkle.root(leaves), merkle.inclusion_path(merkle.levels(leaves), 6)
    assert merkle.root_from_path(6, 11, leaves[6], proof) == root
    assert merkle.root_from_path(6, 11, leaves[5], proof) != root
    assert merkle.root_from_path(5, 11, leaves[6], proof) != root
    assert merkle.root_from_path(6, 20, leaves[6], proof) != root  # (the size is signed)
    assert merkle.root_from_path(6, 11, leaves[6], proof[:-1]) != root
    assert merkle.root_from_path(11, 11, leaves[6], proof) is None


def test_a_leaf_is_never_taken_for_a_node() -> None:
    left, right = merkle.leaf_hash(b"a"), merkle.leaf_hash(b"b")
    # the two children's bytes as one leaf's data do not give their parent
    assert merkle.leaf_hash(left + right) != merkle.node_hash(left, right)
