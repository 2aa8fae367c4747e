"""The compliance export over HTTP and the CLI, against a real server on each store:
who may export, streaming, the same transcript the audit trail shows, and verify."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import uuid
from pathlib import Path

import pytest

from session_ledger.api.client import LedgerAPIError, session_path
from session_ledger.api.client_async import AsyncLedgerClient
from session_ledger.projections.export_verify import verify_export

from .conftest import Deployment, run_cli

HARD_TEXT = "emoji 🧪, NUL \x00, RTL שלום / مرحبا, LS \u2028"


def msg(text: str, role: str = "user") -> dict[str, str]:
    return {"role": role, "content": text}


def written(deployment: Deployment, key: str) -> int:
    with deployment.client("a_agent") as api:
        api.put(key, msg("hello"), reason="first contact")
        api.put_messages(key, [msg("hi there", "assistant"), msg(HARD_TEXT)])
        api.delete_message(key, 0, reason="pii")
        return api.head(key).version


@pytest.mark.parametrize("who", ["a_auditor", "a_admin"])
def test_auditors_and_admins_export_the_audit_trail(
    deployment: Deployment, session_key: str, who: str
) -> None:
    version = written(deployment, session_key)
    with deployment.client(who) as api:
        raw = b"".join(api.export(session_key))
        trail = api.events(session_key).events
    report = verify_export(raw.split(b"\n"))
    assert report.ok, report.summary()
    assert (report.key, report.tenant, report.events) == (session_key, "default", version)
    events = [json.loads(line) for line in raw.split(b"\n")[1:-2]]
    assert [(e["version"], e["type"], e["actor"], e["reason"]) for e in events] == [
        (t.version, t.event_type, t.actor, t.reason) for t in trail
    ]
    assert events[2]["payload"]["messages"][1]["blocks"][0]["text"] == HARD_TEXT


def test_the_export_streams_and_says_what_it_is(deployment: Deployment, session_key: str) -> None:
    with deployment.client("a_agent") as api:
        for n in range(40):  # ~0.5 MB of export: several chunks
            api.put_messages(session_key, [msg(f"{n}-{i} " + "x" * 80) for i in range(50)])
    with deployment.raw("a_auditor") as http:
        path = session_path(session_key, "/export")
        with http.stream("GET", path) as answer:
            assert answer.status_code == 200
            assert answer.headers["content-type"] == "application/x-ndjson"
            assert "content-length" not in answer.headers  # chunked: streamed, not buffered
            assert answer.headers["content-disposition"].startswith("attachment; filename=")
            chunks = list(answer.iter_raw())
        assert len(chunks) > 1
        assert verify_export(b"".join(chunks).split(b"\n")).ok
        csv_answer = http.get(path, params={"format": "csv", "as_of_version": 3})
    assert csv_answer.headers["content-type"] == "text/csv; charset=utf-8"
    rows = list(csv.reader(io.StringIO(csv_answer.text, newline="")))
    assert [r[2] for r in rows[1:]] == [f"0-{i} " + "x" * 80 for i in range(50)] + [
        f"1-{i} " + "x" * 80 for i in range(50)
    ]


def test_who_may_not_export_and_what_does_not_exist(
    deployment: Deployment, session_key: str
) -> None:
    version = written(deployment, session_key)
    path = session_path(session_key, "/export")
    cases = [
        ("a_agent", path, {}, 403, "forbidden"),
        ("b_admin", path, {}, 404, "session_not_found"),  # another tenant's session
        ("a_auditor", session_path(uuid.uuid4().hex, "/export"), {}, 404, "session_not_found"),
        ("a_auditor", path, {"as_of_version": version + 1}, 404, "state_not_found"),
        ("a_auditor", path, {"format": "xml"}, 422, "invalid_request"),
        ("a_auditor", path, {"as_of_version": 0}, 422, "invalid_request"),
    ]
    for who, where, params, status, code in cases:
        with deployment.raw(who) as http:
            answer = http.get(where, params=params)
        assert answer.status_code == status, (who, params, answer.text)
        error = answer.json()["error"]
        assert error["code"] == code and set(error) == {"code", "message", "details"}
    with deployment.raw() as http:
        assert http.get(path).status_code == 401
    with deployment.client("a_agent") as api, pytest.raises(LedgerAPIError) as err:
        api.export(session_key)
    assert err.value.status == 403


def test_the_async_client_exports(deployment: Deployment, session_key: str) -> None:
    version = written(deployment, session_key)

    async def export() -> bytes:
        async with AsyncLedgerClient(deployment.base_url, deployment.keys["a_auditor"]) as api:
            with pytest.raises(LedgerAPIError) as err:
                await api.export(uuid.uuid4().hex)
            assert err.value.status == 404
            return b"".join([c async for c in await api.export(session_key, as_of_version=2)])

    raw = asyncio.run(export())
    report = verify_export(raw.split(b"\n"))
    assert report.ok and report.events == 2 and version > 2


def test_the_cli_exports_and_verifies(
    deployment: Deployment, session_key: str, tmp_path: Path
) -> None:
    version = written(deployment, session_key)
    env = deployment.server.env
    out = tmp_path / "export.jsonl"
    done = run_cli(env, "export", session_key, "--output", str(out))
    assert done.returncode == 0, done.stderr
    checked = run_cli(env, "verify-export", str(out))
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.startswith("intact: ") and f"{version} events" in checked.stdout
    assert len(checked.stdout.strip().splitlines()) == 1

    lines = out.read_bytes().split(b"\n")
    lines[3] = lines[3].replace(b"hi there", b"hi THERE")
    out.write_bytes(b"\n".join(lines))
    checked = run_cli(env, "verify-export", str(out))
    assert checked.returncode == 1 and "broken at line 4" in checked.stderr, checked.stderr

    printed = run_cli(env, "export", session_key, "--format", "csv", "--as-of-version", "3")
    rows = list(csv.reader(io.StringIO(printed.stdout, newline="")))
    assert [r[2] for r in rows[1:]] == ["hello", "hi there", HARD_TEXT]
    missing = run_cli(env, "export", "no such session")
    assert missing.returncode == 1 and "not found" in missing.stderr
    assert run_cli(env, "export", session_key, "--format", "xml").returncode == 2
    assert run_cli(env, "verify-export", str(tmp_path / "absent.jsonl")).returncode == 2
    # An export that fails writes no file: not an empty one, not a partial one.
    csv_out = str(tmp_path / "chat-1.csv")
    beyond = str(version + 9)
    past_the_end = run_cli(env, "export", session_key, "--as-of-version", beyond, "-o", csv_out)
    assert past_the_end.returncode == 1 and "version" in past_the_end.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export.jsonl"]
