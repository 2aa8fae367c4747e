"""The Merkle tree of a checkpoint: RFC 9162 (Certificate Transparency 2.0) hashing over
the heads of a tenant's sessions. Stdlib only, so any auditor can re-run it.

    leaf hash  = SHA-256(0x00 || data)
    node hash  = SHA-256(0x01 || left || right)
    MTH({})    = SHA-256()
    MTH(D[n])  = SHA-256(0x01 || MTH(D[0:k]) || MTH(D[k:n])), k the largest power of
                 two below n (RFC 9162, 2.1.1)

The 0x00 / 0x01 prefixes keep a leaf from ever being taken for a node (a second-preimage
of the tree). Built bottom-up, pairing left to right and lifting a level's last node
unpaired, which gives the RFC's tree for any n. A leaf's data is a session's head:

    data = session_id (16 bytes, `uuid.UUID.bytes`) || version (8 bytes, unsigned,
           big-endian) || chain head h_v (32 bytes, domain/integrity.py)
"""

from __future__ import annotations

import hashlib
import struct
import uuid
from collections.abc import Sequence

HASH_BYTES = 32


def leaf_data(session_id: uuid.UUID, version: int, head: bytes) -> bytes:
    """The 56 bytes a session contributes to a checkpoint's tree."""
    if len(head) != HASH_BYTES:
        raise ValueError(f"a chain head is {HASH_BYTES} bytes; got {len(head)}")
    return session_id.bytes + struct.pack(">Q", version) + head


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def levels(leaves: Sequence[bytes]) -> list[list[bytes]]:
    """Every level of the tree over these leaf hashes, leaves first, the root last."""
    tree = [list(leaves)]
    while len(tree[-1]) > 1:
        below = tree[-1]
        above = [node_hash(below[i], below[i + 1]) for i in range(0, len(below) - 1, 2)]
        if len(below) % 2:
            above.append(below[-1])  # the unpaired last node rises as it is
        tree.append(above)
    return tree


def root(leaves: Sequence[bytes]) -> bytes:
    """MTH over the leaf hashes (SHA-256 of nothing for an empty tree)."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    return levels(leaves)[-1][0]


def inclusion_path(tree: list[list[bytes]], index: int) -> list[bytes]:
    """PATH(index, D[n]) of RFC 9162 2.1.3.1, from the levels of `levels`."""
    if not 0 <= index < len(tree[0]):
        raise IndexError(f"leaf {index} is not in a tree of {len(tree[0])} leaves")
    path = []
    for level in tree[:-1]:
        sibling = index ^ 1
        if sibling < len(level):
            path.append(level[sibling])
        index >>= 1
    return path


def root_from_path(index: int, size: int, leaf: bytes, path: Sequence[bytes]) -> bytes | None:
    """The root that `path` leads to from leaf hash `leaf` at `index` of a tree of `size`
    leaves (RFC 9162 2.1.3.2), or None when the path cannot belong to such a tree."""
    if not 0 <= index < size:
        return None
    fn, sn, r = index, size - 1, leaf
    for p in path:
        if sn == 0:
            return None
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return r if sn == 0 else None
