"""The hash of one access-log entry, standard library only, so the offline export checker
(export_verify.py) recomputes what the log (access_log.py) stored:

    entry_bytes = canonical JSON (sorted keys, no spaces, UTF-8) of {tenant, seq,
                  recorded_at, actor, role, action, session_key, parameters, records}
    h_seq       = SHA-256(h_{seq-1} || entry_bytes)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

ENTRY_FIELDS = ("tenant", "seq", "recorded_at", "actor", "role", "action", "session_key",
                "parameters", "records")  # fmt: skip


def entry_bytes(entry: Mapping[str, Any]) -> bytes:
    fields = {name: entry[name] for name in ENTRY_FIELDS}
    return json.dumps(fields, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()


def access_step(previous: bytes, entry: Mapping[str, Any]) -> bytes:
    """h_seq from h_{seq-1} and the entry's fields."""
    return hashlib.sha256(previous + entry_bytes(entry)).digest()


ACCESS_LINE = (
    *ENTRY_FIELDS[1:],
    "previous",
    "chain",
)  # an export's line: the header names the tenant


def check_access_line(record: Mapping[str, Any], tenant: str, key: str, after: int,
                      up_to: object) -> str | None:  # fmt: skip
    """What is wrong with an export's access line (None: nothing): its fields, that it is
    about the export's session, numbered after the line before it and within the log's
    length the header gave, and that its hash is its predecessor's hash and its fields."""
    if set(record) != {"record", *ACCESS_LINE}:
        return f"an access line has exactly the fields {sorted(ACCESS_LINE)}"
    seq = record["seq"]
    if type(seq) is not int or type(up_to) is not int or not after < seq <= up_to:
        return (f"access entry {seq!r} is out of order or past the {up_to!r} entries the "
                "header gave")  # fmt: skip
    if record["session_key"] != key:
        return f"access entry {seq} is about another session"
    try:
        previous = bytes.fromhex(record["previous"])
        computed = access_step(previous, {**record, "tenant": tenant})
    except (TypeError, ValueError, AttributeError):
        return f"access entry {seq} does not have the documented shape"
    if len(previous) != 32 or computed.hex() != record["chain"]:
        return (f"access entry {seq}: its hash is not SHA-256(previous || entry): an entry "
                "was altered")  # fmt: skip
    return None
