"""An export carries the newest checkpoint and its session's Merkle path: the file alone
(and the public key) proves the session belongs to the signed state, and a forger who
recomputes the keyless chain and digest is still caught."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from session_ledger.domain.integrity import GENESIS, chain_step
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.session import session_id
from session_ledger.projections.checkpoint import (
    generate_keys,
    load_private_key,
    load_public_key,
    make_checkpoint,
)
from session_ledger.projections.export import export_session
from session_ledger.projections.export_format import line
from session_ledger.projections.export_verify import verify_export
from session_ledger.projections.views import SQLViews


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, Any]:
    generate_keys(tmp_path / "signing.pem", tmp_path / "public.pem")
    generate_keys(tmp_path / "other.pem", tmp_path / "other-public.pem")
    return {
        "private": load_private_key(tmp_path / "signing.pem"),
        "public": load_public_key(tmp_path / "public.pem"),
        "other": load_public_key(tmp_path / "other-public.pem"),
        "dir": tmp_path / "checkpoints",
    }


def checkpointed(ledger: Ledger, keys: dict[str, Any]) -> None:
    for n in range(7):
        for i in range(n + 1):
            ledger.put(f"s{n}", {"role": "user", "content": f"message {i} of s{n}"})
    assert isinstance(ledger.views, SQLViews)
    make_checkpoint(ledger.views, ledger.default_tenant, keys["private"], keys["dir"])


def export(ledger: Ledger, keys: dict[str, Any], key: str, **kw: Any) -> bytes:
    return b"".join(export_session(ledger, key, checkpoint_dir=keys["dir"], **kw))


def test_an_export_proves_its_session_is_in_the_signed_state(
    ledger: Ledger, keys: dict[str, Any]
) -> None:
    checkpointed(ledger, keys)
    ledger.put("s4", {"role": "user", "content": "after the checkpoint"})
    data = export(ledger, keys, "s4")
    proof = json.loads(data.split(b"\n")[1])
    assert proof["record"] == "checkpoint" and proof["version"] == 6
    report = verify_export(data.split(b"\n"), keys["public"])
    assert report.ok, report.summary()
    assert report.checkpoint and "signature verified" in report.checkpoint
    assert "leaf 4 of the 7-session checkpoint" in report.summary()
    # without the key: the path to the root is still checked, the signature is not
    unkeyed = verify_export(data.split(b"\n"))
    assert unkeyed.ok and "signature not checked" in (unkeyed.checkpoint or "")
    wrong = verify_export(data.split(b"\n"), keys["other"])
    assert (wrong.broken_line, wrong.problem) == (2, "the checkpoint was signed by another key")


def test_an_export_the_checkpoint_does_not_reach_carries_none(
    ledger: Ledger, keys: dict[str, Any]
) -> None:
    checkpointed(ledger, keys)
    ledger.put("new", {"role": "user", "content": "made after the checkpoint"})
    for key, kw in (("new", {}), ("s4", {"as_of_version": 3})):
        data = export(ledger, keys, key, **kw)
        assert b'"record":"checkpoint"' not in data
        assert verify_export(data.split(b"\n")).ok
        refused = verify_export(data.split(b"\n"), keys["public"])
        assert refused.problem == "the export carries no checkpoint to check the public key against"


def test_every_byte_altered_is_red(ledger: Ledger, keys: dict[str, Any]) -> None:
    checkpointed(ledger, keys)
    data = export(ledger, keys, "s1")
    missed = [
        i for i in range(len(data))
        if verify_export((data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1 :]).split(b"\n"),
                         keys["public"]).ok
    ]  # fmt: skip
    assert missed == []


def forge(records: list[dict[str, Any]], tenant: str, key: str) -> list[bytes]:
    """The export with "message 1" edited, every hash and the trailer's digest recomputed
    (all keyless), as a forger holding the file would."""
    sid, head, digest, out = session_id(tenant, key), GENESIS, hashlib.sha256(), []
    for record in records[:-1]:
        if record["record"] == "event":
            state = base64.b64decode(record["state"]).replace(b"message 1", b"message X")
            record["payload"] = json.loads(
                json.dumps(record["payload"]).replace("message 1", "message X")
            )
            head = chain_step(head, sid, record["version"], record["topic"], state)
            record.update(state=base64.b64encode(state).decode(), chain=head.hex(),
                          state_sha256=hashlib.sha256(state).hexdigest())  # fmt: skip
        out.append(line(record))
        digest.update(out[-1])
    events = sum(r["record"] == "event" for r in records)
    out.append(line({"record": "trailer", "events": events, "chain_head": head.hex(),
                     "sha256": digest.hexdigest()}))  # fmt: skip
    return out


def test_a_forged_export_with_its_chain_and_digest_recomputed_is_caught(
    ledger: Ledger, keys: dict[str, Any]
) -> None:
    checkpointed(ledger, keys)
    records = [json.loads(x) for x in export(ledger, keys, "s3").splitlines()]
    tenant = ledger.default_tenant
    # Without its checkpoint line, the keyless checks alone are fooled; the key is not.
    unsigned = forge([r for r in records if r["record"] != "checkpoint"], tenant, "s3")
    assert verify_export(unsigned).ok
    assert not verify_export(unsigned, keys["public"]).ok
    # Keeping the checkpoint line, the signed head no longer matches the chain.
    report = verify_export(forge(records, tenant, "s3"), keys["public"])
    assert report.broken_line == 2 + 5  # the event of version 5, the head signed
    assert "the signed checkpoint recorded" in (report.problem or "")
