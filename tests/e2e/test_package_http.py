"""The tenant-wide package over HTTP: streamed as a tar that the offline checker passes,
selecting what the CLI's package selects, entered in the access log as an export; and an
export that carries the access log's entries about its session."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from urllib.parse import quote

from session_ledger.projections.export_verify import verify_export
from session_ledger.projections.package import verify_package

from ..integration.test_rsmf import rsmf_manifest
from .conftest import Deployment
from .test_access_log import entries_of


def test_an_auditor_streams_a_package_that_verifies_and_is_logged(
    deployment: Deployment, session_key: str, tmp_path: Path
) -> None:
    with deployment.client("a_agent") as agent:
        for n in range(3):
            messages = [{"role": "user", "content": f"m{i}"} for i in range(n + 1)]
            agent.put_messages(f"{session_key}/{n}", messages)
    package = tmp_path / "package.tar"
    with deployment.raw("a_auditor") as auditor:
        with auditor.stream("GET", "/v1/package", params={"prefix": session_key}) as answer:
            assert answer.status_code == 200, answer.read()
            assert answer.headers["content-type"] == "application/x-tar"
            with package.open("wb") as out:
                for chunk in answer.iter_bytes():
                    out.write(chunk)
        bad = auditor.get("/v1/package", params={"from": "2026-02-01", "to": "2026-01-01"})
        assert (bad.status_code, bad.json()["error"]["code"]) == (422, "invalid_input")
    with deployment.raw("a_agent") as agent:
        assert agent.get("/v1/package").status_code == 403

    assert verify_package(package) == []
    with tarfile.open(package) as tar:
        names = tar.getnames()
        manifest = tar.extractfile("manifest.json").read()  # type: ignore[union-attr]
        rows = tar.extractfile("events.csv").read().decode().splitlines()  # type: ignore[union-attr]
    assert names == ["sessions/000000.jsonl", "sessions/000001.jsonl", "sessions/000002.jsonl",
                     "events.csv", "manifest.json", "manifest.sha256"]  # fmt: skip
    auditor_id = f"key:{deployment.key_ids['a_auditor']}"
    assert f'"exported_by": "{auditor_id}"'.encode() in manifest
    [entry] = entries_of(deployment, None, prefix=session_key)
    assert len(rows) == 1 + 6  # a header, then SessionStarted and one append a session
    assert (entry["actor"], entry["action"], entry["records"]) == (auditor_id, "export", 6)


def test_a_package_from_or_to_the_first_or_last_moment(
    deployment: Deployment, session_key: str
) -> None:
    """The first and the last moment a time can hold select every session or none (the
    moment before year 1's first microsecond is no time at all: it broke the stream)."""
    with deployment.client("a_agent") as agent:
        for n in range(2):
            agent.put(f"{session_key}/{n}", {"role": "user", "content": "hello"})
    with deployment.raw("a_auditor") as auditor:
        first, last = "0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999Z"
        for query, sessions in (({"from": first}, 2), ({"to": first}, 0), ({"to": last}, 2),
                                ({"from": first, "format": "rsmf"}, 2)):  # fmt: skip
            with auditor.stream("GET", "/v1/package",
                                params={"prefix": session_key, **query}) as answer:  # fmt: skip
                assert answer.status_code == 200, answer.read()
                body = answer.read()
            if query.get("format") == "rsmf":
                continue
            with tarfile.open(fileobj=io.BytesIO(body)) as tar:
                found = [n for n in tar.getnames() if n.startswith("sessions/")]
            assert len(found) == sessions, query


def test_an_export_asked_for_it_carries_who_read_the_session(
    deployment: Deployment, session_key: str
) -> None:
    path = f"/v1/sessions/{quote(session_key, safe='')}"
    with deployment.client("a_agent") as agent:
        agent.put(session_key, {"role": "user", "content": "hello"})
    with deployment.raw("a_auditor") as auditor:
        assert auditor.get(f"{path}/messages").status_code == 200
        assert auditor.get(f"{path}/export").status_code == 200
        data = auditor.get(f"{path}/export", params={"access_log": "true"}).content
    lines = data.splitlines(keepends=True)
    report = verify_export(lines)
    assert report.ok, report.summary()
    access = [json.loads(x) for x in lines if b'"record":"access"' in x]
    auditor_id = f"key:{deployment.key_ids['a_auditor']}"
    assert [(e["actor"], e["action"]) for e in access] == [
        (auditor_id, "transcript"), (auditor_id, "export")
    ]  # fmt: skip


def test_the_same_sessions_as_rsmf_over_http(deployment: Deployment, session_key: str) -> None:
    with deployment.client("a_agent") as agent:
        agent.put_messages(session_key, [{"role": "user", "content": "q"},
                                         {"role": "assistant", "content": "a"}])  # fmt: skip
    with deployment.raw("a_auditor") as auditor:
        answer = auditor.get("/v1/package", params={"prefix": session_key, "format": "rsmf"})
    assert answer.status_code == 200 and answer.headers["content-type"] == "message/rfc822"
    _, manifest = rsmf_manifest(answer.content)
    assert [(e["participant"], e["body"]) for e in manifest["events"]] == [
        ("role:user", "q"), ("role:assistant", "a")
    ]  # fmt: skip
    [entry] = entries_of(deployment, None, prefix=session_key, format="rsmf")
    assert (entry["action"], entry["records"]) == ("export", 2)
