"""Signed checkpoints catch what the keyless chain cannot: on SQLite and PostgreSQL, each
tampering of the store (or of the checkpoint) is caught and named by
`session-ledger verify --checkpoint`, with only the public key."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from session_ledger.api.cli import cli
from session_ledger.api.settings import Settings
from session_ledger.domain.integrity import GENESIS
from session_ledger.domain.ledger import Ledger
from session_ledger.projections.access_log import (
    access_entries,
    access_head,
    next_hash,
    record_access,
    verify_access_log,
)
from session_ledger.projections.checkpoint import (
    Checkpoint,
    generate_keys,
    load_private_key,
    read_checkpoint,
    sign,
)
from session_ledger.projections.checkpoint_verify import (
    check_checkpoint,
    verify_access,
    verify_store,
)
from session_ledger.projections.views import SQLViews
from tests.conftest import fresh_postgres_database, make_ledger, make_settings

from .tampering import Database, flip

KEYS = ["a", "b/c", "d é", "e"]


@pytest.fixture(params=["sqlite", "postgres"])
def signed(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A store of the test's own with four sessions, a key pair, and one checkpoint."""
    generate_keys(tmp_path / "signing.pem", tmp_path / "public.pem")
    settings = make_settings(request.param, tmp_path, signing_key_file=tmp_path / "signing.pem",
                             checkpoint_dir=tmp_path / "checkpoints")  # fmt: skip
    with fresh_postgres_database() if request.param == "postgres" else _nothing() as url:
        if url:
            settings.database_url = url
        ledger = make_ledger(settings)
        try:
            for n, key in enumerate(KEYS):
                for i in range(3 + n):
                    ledger.put(key, {"role": "user", "content": f"{key} says {i}"})
            path = _invoke(settings, "checkpoint").strip()
            db = Database(settings)
            yield {"settings": settings, "ledger": ledger, "db": db,
                   "checkpoint": Path(path), "public": tmp_path / "public.pem"}  # fmt: skip
        finally:
            db.close()
            ledger.close()


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _invoke(settings: Settings, *args: str, code: int = 0) -> str:
    env = {"LEDGER_DATABASE_URL": settings.database_url,
           "LEDGER_DEFAULT_TENANT": settings.default_tenant, "LEDGER_TOKENIZER": "whitespace",
           "LEDGER_SIGNING_KEY_FILE": str(settings.signing_key_file),
           "LEDGER_CHECKPOINT_DIR": str(settings.checkpoint_dir)}  # fmt: skip
    result = CliRunner().invoke(cli, list(args), env=env)
    assert result.exit_code == code, result.output
    return result.stdout


def verify(s: dict[str, Any], *checkpoints: Path, code: int = 1) -> str:
    args = [a for c in checkpoints or (s["checkpoint"],) for a in ("--checkpoint", str(c))]
    return _invoke(s["settings"], "verify", *args, "--public-key", str(s["public"]), code=code)


def broken_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("BROKEN")]


def test_an_untouched_store_verifies_against_its_checkpoint(signed: dict[str, Any]) -> None:
    ledger: Ledger = signed["ledger"]
    ledger.put("a", {"role": "user", "content": "later"})  # growth is fine
    ledger.put("new", {"role": "user", "content": "made after the checkpoint"})
    output = verify(signed, code=0)
    assert len([line for line in output.splitlines() if line.startswith("ok")]) == 5 + 1
    assert "ok      access log of" in output


def tamper(s: dict[str, Any], kind: str) -> None:
    db: Database = s["db"]
    events = db.events("b/c")  # versions 1..5
    if kind == "byte":
        db.set_state("b/c", 3, flip(bytes(events[2]["state"]), 10, 0x20))
    elif kind == "deleted event":
        db.delete_event("b/c", 3)
    elif kind == "swapped":
        db.set_state("b/c", 2, bytes(events[3]["state"]), events[3]["topic"])
        db.set_state("b/c", 4, bytes(events[1]["state"]), events[1]["topic"])
    elif kind == "rollback":
        db.truncate("b/c", 3)
    elif kind == "rewrite":
        db.set_state("b/c", 3, bytes(events[2]["state"]).replace(b"says 1", b"said 9"))
        db.recompute_chain("b/c")
    elif kind == "deleted session":
        db.delete_session("b/c")


@pytest.mark.parametrize(
    ("kind", "says"),
    [
        ("byte", "at version 3: version 3: the stored hash is"),
        ("deleted event", "at version 3: the event of version 3 is missing"),
        ("swapped", "at version 2: version 2: the stored hash is"),
        ("rollback", "at version 4: rolled back: the events end at version 3; the checkpoint "
                     "recorded version 5"),
        ("rewrite", "at version 5: rewritten at or before version 5: the events give h_5 ="),
        ("deleted session", "missing from the store: the checkpoint recorded version 5"),
    ],
)  # fmt: skip
def test_each_tampering_of_the_store_is_caught_and_named(
    signed: dict[str, Any], kind: str, says: str
) -> None:
    tamper(signed, kind)
    broken = broken_lines(verify(signed))
    tenant = signed["settings"].default_tenant
    assert len(broken) == 1 and broken[0].startswith(f"BROKEN  {tenant}/b/c  "), broken
    assert says in broken[0]
    if kind in ("rollback", "rewrite", "deleted session"):
        # the keyless chain alone is content: only the checkpoint tells
        assert "BROKEN" not in _invoke(signed["settings"], "verify", "--tenant", tenant)


def test_an_altered_signature_is_caught(signed: dict[str, Any], tmp_path: Path) -> None:
    document = json.loads(signed["checkpoint"].read_bytes())
    document["signature"] = document["signature"].replace(document["signature"][5], "A", 1)
    if document["signature"] == json.loads(signed["checkpoint"].read_bytes())["signature"]:
        document["signature"] = "B" + document["signature"][1:]
    altered = tmp_path / "altered.json"
    altered.write_text(json.dumps(document))
    broken = broken_lines(verify(signed, altered))
    assert broken == [f"BROKEN  checkpoint {altered}: the signature does not verify: the tree "
                      "head or the signature was altered, or another key signed it"]  # fmt: skip


def test_a_checkpoint_signed_by_another_key_is_caught(
    signed: dict[str, Any], tmp_path: Path
) -> None:
    generate_keys(tmp_path / "other.pem", tmp_path / "other-public.pem")
    real = read_checkpoint(signed["checkpoint"])
    forged = sign(real.tenant, real.sessions, load_private_key(tmp_path / "other.pem"), None)
    path = tmp_path / "forged.json"
    path.write_bytes(forged.to_bytes())
    broken = broken_lines(verify(signed, path))
    assert [b.split(":")[1].strip() for b in broken] == [
        "signed by another key", "the signature does not verify"
    ]  # fmt: skip
    # and with the other key's identity kept as the real one's, the signature still fails
    kept = Checkpoint({**forged.tree_head, "key_id": real.tree_head["key_id"]}, forged.signature,
                      forged.sessions)  # fmt: skip
    path.write_bytes(kept.to_bytes())
    assert "the signature does not verify" in broken_lines(verify(signed, path))[0]


def test_two_checkpoints_say_every_session_only_grew(signed: dict[str, Any]) -> None:
    ledger: Ledger = signed["ledger"]
    ledger.put("a", {"role": "user", "content": "later"})
    second = Path(_invoke(signed["settings"], "checkpoint").strip())
    first = read_checkpoint(signed["checkpoint"])
    assert read_checkpoint(second).tree_head["previous"] == first.hash
    verify(signed, signed["checkpoint"], second, code=0)
    signed["db"].truncate("a", 4)  # back past the second checkpoint (v5), not the first (v4)
    broken = broken_lines(verify(signed, signed["checkpoint"], second))
    says = (
        "at version 5: rolled back: the events end at version 4; the checkpoint recorded version 5"
    )
    assert len(broken) == 1 and says in broken[0]


def test_a_thousand_seeded_random_tamperings_are_all_caught(signed: dict[str, Any]) -> None:
    ledger, db = signed["ledger"], signed["db"]
    checkpoints = [read_checkpoint(signed["checkpoint"])]
    saved = {key: db.save(key) for key in KEYS}
    rng = random.Random(30)
    kinds = ("byte", "deleted event", "swapped", "rollback", "rewrite", "deleted session", "hash")
    caught = {kind: 0 for kind in kinds}
    runs = 1000
    for _ in range(runs):
        kind, key = rng.choice(kinds), rng.choice(KEYS)
        events = db.events(key)
        v = rng.randrange(1, len(events) + 1)
        state = bytes(events[v - 1]["state"])
        with db.together():
            tamper_at_random(db, rng, kind, key, events, v, state)
        bad = [r for r in verify_store(ledger, checkpoints) if not r.intact]
        caught[kind] += [r.key for r in bad] == [key]
        db.restore(key, saved[key])
    assert sum(caught.values()) == runs, caught
    assert all(caught.values()), caught
    assert all(r.intact for r in verify_store(ledger, checkpoints))
    assert not check_checkpoint(checkpoints[0], _public(signed))


def tamper_at_random(
    db: Database, rng: random.Random, kind: str, key: str, events: list[dict[str, Any]],
    v: int, state: bytes,
) -> None:  # fmt: skip
    if kind in ("byte", "rewrite"):
        db.set_state(key, v, flip(state, rng.randrange(len(state)), rng.randrange(1, 256)))
        if kind == "rewrite":
            db.recompute_chain(key)
    elif kind == "deleted event":
        db.delete_event(key, v)
    elif kind == "swapped":
        w = rng.choice([x for x in range(1, len(events) + 1) if x != v])
        db.set_state(key, v, bytes(events[w - 1]["state"]), events[w - 1]["topic"])
        db.set_state(key, w, state, events[v - 1]["topic"])
    elif kind == "rollback":
        db.truncate(key, v - 1)
    elif kind == "deleted session":
        db.delete_session(key)
    else:
        db.set_stored_hash(key, v, flip(bytes(32), rng.randrange(32), rng.randrange(1, 256)))


def _public(s: dict[str, Any]) -> Any:
    from session_ledger.projections.checkpoint import load_public_key

    return load_public_key(s["public"])


@pytest.mark.parametrize("kind", ["cut short", "rewritten and rehashed"])
def test_the_access_log_is_signed_so_cutting_or_rewriting_it_is_caught(
    signed: dict[str, Any], kind: str
) -> None:
    ledger: Ledger = signed["ledger"]
    views = ledger.views
    assert isinstance(views, SQLViews)
    tenant = ledger.default_tenant
    for n in range(5):
        record_access(views, tenant, f"key:{n}", "auditor", "transcript", "a", {}, n)
    later = Path(_invoke(signed["settings"], "checkpoint").strip())
    assert read_checkpoint(later).access_log == access_head(views, tenant)
    assert read_checkpoint(later).access_log[0] == 5  # type: ignore[index]
    record_access(views, tenant, "key:9", "auditor", "window", "b", {}, 1)  # growth is fine
    verify(signed, signed["checkpoint"], later, code=0)

    db: Database = signed["db"]
    if kind == "cut short":  # the tail removed: what is left still chains from h_0
        db.run("DELETE FROM ledger_access_log WHERE tenant = ? AND seq >= 4", tenant)
        says = "cut short: the log ends at entry 3; the checkpoint recorded entry 5"
    else:  # an entry edited and every hash after it recomputed to match
        db.run("UPDATE ledger_access_log SET actor = 'key:nobody' WHERE tenant = ? AND seq = 2",
               tenant)  # fmt: skip
        h = GENESIS
        for entry in access_entries(views, tenant, 0, 100):
            h = next_hash(h, entry)
            db.run("UPDATE ledger_access_log SET chain = ? WHERE tenant = ? AND seq = ?",
                   h, tenant, entry.seq)  # fmt: skip
        says = "rewritten at or before entry 5"
    assert list(verify_access_log(views, tenant)) == []  # the keyless chain stays green
    output = verify(signed, signed["checkpoint"], later)
    [line] = broken_lines(output)
    assert line.startswith(f"BROKEN  access log of {tenant!r}: " + says), output


def test_seeded_random_tamperings_of_the_access_log_are_all_caught(
    signed: dict[str, Any],
) -> None:
    ledger: Ledger = signed["ledger"]
    views = ledger.views
    assert isinstance(views, SQLViews)
    tenant, db = ledger.default_tenant, signed["db"]
    for n in range(10):
        record_access(views, tenant, f"key:{n}", "auditor", "window", KEYS[n % 4], {"n": n}, n)
    checkpoint = read_checkpoint(Path(_invoke(signed["settings"], "checkpoint").strip()))
    rows = db.run("SELECT * FROM ledger_access_log WHERE tenant = ? ORDER BY seq", tenant)
    rng = random.Random(30)
    kinds = ("edited", "edited and rehashed", "tail cut", "entry deleted", "entries swapped")
    caught = dict.fromkeys(kinds, 0)
    for _ in range(200):
        kind, seq = rng.choice(kinds), rng.randrange(1, 11)
        with db.together():
            if kind.startswith("edited"):
                db.run("UPDATE ledger_access_log SET records = records + ? WHERE tenant = ? "
                       "AND seq = ?", rng.randrange(1, 100), tenant, seq)  # fmt: skip
            elif kind == "tail cut":
                db.run("DELETE FROM ledger_access_log WHERE tenant = ? AND seq >= ?", tenant, seq)
            elif kind == "entry deleted":
                db.run("DELETE FROM ledger_access_log WHERE tenant = ? AND seq = ?", tenant, seq)
            else:
                other = rng.choice([s for s in range(1, 11) if s != seq])
                swap = ("UPDATE ledger_access_log SET actor = ?, records = ? "
                        "WHERE tenant = ? AND seq = ?")  # fmt: skip
                for at, row in ((seq, rows[other - 1]), (other, rows[seq - 1])):
                    db.run(swap, row["actor"], row["records"], tenant, at)
        if kind == "edited and rehashed":
            h = GENESIS
            for entry in access_entries(views, tenant, 0, 100):
                h = next_hash(h, entry)
                db.run("UPDATE ledger_access_log SET chain = ? WHERE tenant = ? AND seq = ?",
                       h, tenant, entry.seq)  # fmt: skip
        caught[kind] += bool(verify_access(views, [checkpoint]))
        with db.together():
            db.run("DELETE FROM ledger_access_log WHERE tenant = ?", tenant)
            for row in rows:
                db.run(f"INSERT INTO ledger_access_log ({', '.join(row)}) VALUES "
                       f"({', '.join('?' * len(row))})", *row.values())  # fmt: skip
        assert verify_access(views, [checkpoint]) == []
    assert sum(caught.values()) == 200 and all(caught.values()), caught
