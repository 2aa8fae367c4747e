"""JSON read as a verifier must read it: an object that names one key twice is refused.

`json.loads` keeps a repeated key's last value, other readers its first: a file that
repeats one shows each reader what it chooses, so a verifier that checked one value has
not checked what another reader sees (an export, a package's manifest, a checkpoint).
"""

from __future__ import annotations

import json
from typing import Any


class RepeatedKey(ValueError):
    """A JSON object names `key` twice."""

    def __init__(self, key: str) -> None:
        super().__init__(f"the key {key!r} is repeated in one object: readers differ on "
                         "which value it holds")  # fmt: skip
        self.key = key


def loads(data: str | bytes) -> Any:
    """`json.loads`, refusing (RepeatedKey) an object that repeats a key at any depth."""
    return json.loads(data, object_pairs_hook=unique_object)


def unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A decoder's `object_pairs_hook`: the object, or RepeatedKey."""
    made: dict[str, Any] = {}
    for key, value in pairs:
        if key in made:
            raise RepeatedKey(key)
        made[key] = value
    return made
