"""Exports carry the access log's entries about their session when asked: who read or
exported it, each line checked offline against its hash and its predecessor's, and a
package of such exports verifies whole."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from session_ledger.domain.ledger import Ledger
from session_ledger.projections.access_log import access_entries, record_access
from session_ledger.projections.export import export_session
from session_ledger.projections.export_format import line
from session_ledger.projections.export_verify import verify_export
from session_ledger.projections.package import verify_package, write_package
from session_ledger.projections.views import SQLViews


def reads(ledger: Ledger) -> SQLViews:
    """Two sessions, and five entries in the access log: three about `a`, one about `b`,
    one a search (about no session)."""
    for key in ("a", "b"):
        ledger.put(key, {"role": "user", "content": f"hello {key}"}, actor="key:agent")
    views = ledger.views
    assert isinstance(views, SQLViews)
    tenant = ledger.default_tenant
    for n, key in enumerate(["a", "b", None, "a", "a"]):
        action = "search" if key is None else "transcript"
        record_access(views, tenant, f"key:auditor{n}", "auditor", action, key, {"n": n}, n)
    return views


def resealed(lines: list[bytes]) -> bytes:
    """The lines with the trailer's digest recomputed: what a forger without the signing
    key can always do, so only what the lines prove of themselves is left."""
    trailer = json.loads(lines[-1])
    trailer["sha256"] = hashlib.sha256(b"".join(lines[:-1])).hexdigest()
    return b"".join(lines[:-1]) + line(trailer)


def test_an_export_carries_the_sessions_access_entries_and_each_is_checked(
    ledger: Ledger,
) -> None:
    reads(ledger)
    data = b"".join(export_session(ledger, "a", access_log=True))
    lines = data.splitlines(keepends=True)
    access = [json.loads(x) for x in lines if b'"record":"access"' in x]
    assert [(e["seq"], e["actor"]) for e in access] == [
        (1, "key:auditor0"), (4, "key:auditor3"), (5, "key:auditor4")
    ]  # fmt: skip
    assert json.loads(lines[0])["access_log_entries"] == 5
    assert json.loads(lines[-1])["access_entries"] == 3
    report = verify_export(lines)
    assert report.ok, report.summary()
    # Without asking, the export is as before: no access line, no count.
    plain = b"".join(export_session(ledger, "a")).splitlines(keepends=True)
    assert not any(b'"record":"access"' in x for x in plain)
    assert "access_entries" not in json.loads(plain[-1])

    first = lines.index(next(x for x in lines if b'"record":"access"' in x))
    for field, value in [("actor", "key:somebody"), ("records", 99), ("session_key", "b"),
                         ("seq", 9), ("previous", "11" * 32)]:  # fmt: skip
        forged = json.loads(lines[first])
        forged[field] = value
        forged_file = resealed([*lines[:first], line(forged), *lines[first + 1 :]])
        report = verify_export(forged_file.splitlines(keepends=True))
        assert not report.ok and report.broken_line == first + 1, (field, report.summary())
    dropped = verify_export([*lines[:first], *lines[first + 1 :]])
    assert dropped.problem == "the trailer counts 3 access entries; the file has 2"


def test_a_package_carries_them_and_verifies_whole(ledger: Ledger, tmp_path: Path) -> None:
    views = reads(ledger)
    manifest = write_package(ledger, ledger.default_tenant, tmp_path / "p", exported_by="t",
                             access_log=True)  # fmt: skip
    assert manifest["query"]["access_log"] is True
    assert verify_package(tmp_path / "p") == []
    texts = [(tmp_path / "p" / s["file"]).read_text() for s in manifest["sessions"]]
    assert [t.count('"record":"access"') for t in texts] == [3, 1]
    entries = {e.seq: e for e in access_entries(views, ledger.default_tenant, 0, 100)}
    b_line = next(json.loads(x) for x in texts[1].splitlines() if '"record":"access"' in x)
    assert (b_line["seq"], b_line["chain"]) == (2, entries[2].chain)
    assert b_line["previous"] == entries[1].chain  # the link to the entry before it
