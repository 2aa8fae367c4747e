"""Erasure, legal hold and retention through a real server and the real CLI, with a
master key configured (SQLite: the store file is read back byte for byte)."""

from __future__ import annotations

import base64
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from tests.e2e.conftest import Server, run_cli, server_env


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str, Path]]:
    path = tmp_path_factory.mktemp("erasure") / "ledger.db"
    admin = "sl_test_" + secrets.token_urlsafe(24)
    key = base64.b64encode(os.urandom(32)).decode("ascii")
    env = server_env(f"sqlite:///{path}", LEDGER_BOOTSTRAP_KEY=admin,
                     LEDGER_MASTER_KEY=f"k1:{key}")  # fmt: skip
    running = Server(env).start()
    try:
        yield running, admin, path
    finally:
        running.stop()


def client(server: tuple[Server, str, Path], key: str | None = None) -> httpx.Client:
    running, admin, _ = server
    headers = {"Authorization": f"Bearer {key or admin}"}
    return httpx.Client(base_url=running.base_url, headers=headers, timeout=60)


def test_http_erase_answers_410_after_and_holds_answer_409(
    server: tuple[Server, str, Path],
) -> None:
    canary = f"CANARY-{secrets.token_hex(8)}"
    with client(server) as http:
        agent = http.post("/v1/keys", json={"role": "agent", "name": "agent"}).json()["key"]
        assert http.post("/v1/sessions/u1/messages", json={"messages": [
            {"role": "user", "content": canary}]}).status_code == 200  # fmt: skip
        with client(server, agent) as as_agent:
            refused = as_agent.post("/v1/sessions/u1/erase", json={"reason": "r", "basis": "b"})
        assert refused.status_code == 403
        hold = {"reference": "CASE-1", "reason": "litigation"}
        assert http.post("/v1/sessions/u1/hold", json=hold).status_code == 200
        assert http.post("/v1/sessions/u1/hold", json=hold).json()["error"]["code"] == (
            "hold_conflict"
        )
        held = http.post("/v1/sessions/u1/erase", json={"reason": "asked", "basis": "art. 17"})
        assert (held.status_code, held.json()["error"]["code"]) == (409, "legal_hold")
        assert canary in http.get("/v1/sessions/u1/context").text  # the refusal changed nothing
        assert http.post("/v1/sessions/u1/hold/release", json=hold).status_code == 200
        done = http.post("/v1/sessions/u1/erase", json={"reason": "asked", "basis": "art. 17"})
        assert done.status_code == 200, done.text
        for path in ("/v1/sessions/u1/context", "/v1/sessions/u1/messages",
                     "/v1/sessions/u1/messages?as_of_version=2"):  # fmt: skip
            gone = http.get(path)
            assert gone.status_code == 410, (path, gone.text)
            error = gone.json()["error"]
            assert error["code"] == "session_erased"
            assert error["details"]["basis"] == "art. 17" and error["details"]["reason"] == "asked"
        again = http.post("/v1/sessions/u1/messages", json={"messages": [
            {"role": "user", "content": "again"}]})  # fmt: skip
        assert again.status_code == 410
        export = http.get("/v1/sessions/u1/export")
        assert export.status_code == 200 and canary not in export.text
    _, _, path = server
    assert run_cli(server[0].env, "verify", "u1").returncode == 0
    stored = b"".join(Path(f"{path}{s}").read_bytes() for s in ("", "-wal")
                      if Path(f"{path}{s}").exists())  # fmt: skip
    assert canary.encode() not in stored


def test_cli_erase_and_retention_with_a_fixed_clock(server: tuple[Server, str, Path]) -> None:
    with client(server) as http:
        for key in ("request/1", "request/2", "user/1"):
            written = http.post(
                f"/v1/sessions/{quote(key, safe='')}/messages",
                json={"messages": [{"role": "user", "content": key}]},
            )
            assert written.status_code == 200, written.text
        held = http.post("/v1/sessions/request%2F2/hold", json={"reference": "C-2", "reason": "k"})
        assert held.status_code == 200, held.text
    env = {**server[0].env, "LEDGER_RETENTION": "default:request/:1"}
    later = "2100-01-01T00:00:00"
    dry = run_cli(env, "retention", "apply", "--dry-run", "--now", later)
    assert dry.returncode == 0, dry.stderr
    lines = sorted(dry.stdout.splitlines())
    assert [line.split()[:2] for line in lines] == [
        ["erase", "default/request/1"], ["held", "default/request/2"],
    ]  # fmt: skip
    soon = run_cli(env, "retention", "apply", "--dry-run")  # now: nothing is a day old
    assert soon.stdout == ""
    applied = run_cli(env, "retention", "apply", "--now", later)
    assert applied.returncode == 0, applied.stderr
    assert sorted(line.split()[0] for line in applied.stdout.splitlines()) == ["erased", "held"]
    with client(server) as http:
        assert http.get("/v1/sessions/request%2F1/context").status_code == 410
        assert http.get("/v1/sessions/request%2F2/context").status_code == 200
        assert http.get("/v1/sessions/user%2F1/context").status_code == 200
        trail = http.get("/v1/sessions/request%2F1/events").json()
    last = trail["events"][-1]
    assert last["event_type"] == "SessionErased"
    assert last["reason"].startswith("retention policy")
    erased = run_cli(server[0].env, "erase", "user/1", "--reason", "asked", "--basis", "art. 17")
    assert erased.returncode == 0, erased.stderr
    again = run_cli(server[0].env, "erase", "user/1", "--reason", "asked", "--basis", "art. 17")
    assert again.returncode == 1 and "was erased" in again.stderr


def test_delete_with_erase_is_erase_for_admins_only(server: tuple[Server, str, Path]) -> None:
    canary = f"CANARY-{secrets.token_hex(8)}"
    with client(server) as http:
        agent = http.post("/v1/keys", json={"role": "agent", "name": "agent-d"}).json()["key"]
        for key in ("d1", "d2"):
            written = http.post(
                f"/v1/sessions/{key}/messages",
                json={"messages": [{"role": "user", "content": canary}]},
            )
            assert written.status_code == 200, written.text  # fmt: skip
        query = {"erase": "true", "reason": "asked", "basis": "art. 17"}
        with client(server, agent) as as_agent:
            refused = as_agent.delete("/v1/sessions/d1", params=query)
        assert (refused.status_code, refused.json()["error"]["code"]) == (403, "forbidden")
        for params, body in (
            ({"reason": "asked", "basis": "art. 17"}, None),  # no erase=true: never deleted
            ({"erase": "true", "reason": "asked"}, None),  # no basis
            (query, {"reason": "asked", "basis": "art. 17"}),  # both query and body
        ):
            bad = http.request("DELETE", "/v1/sessions/d1", params=params, json=body)
            assert (bad.status_code, bad.json()["error"]["code"]) == (422, "invalid_input"), bad
        assert canary in http.get("/v1/sessions/d1/context").text  # nothing changed
        by_query = http.delete("/v1/sessions/d1", params=query)
        assert by_query.status_code == 200, by_query.text
        by_body = http.request(
            "DELETE",
            "/v1/sessions/d2",
            params={"erase": "true"},
            json={"reason": "ticket 9", "basis": "GDPR art. 17"},
        )
        assert by_body.status_code == 200, by_body.text  # fmt: skip
        for key, reason, basis in (("d1", "asked", "art. 17"), ("d2", "ticket 9", "GDPR art. 17")):
            gone = http.get(f"/v1/sessions/{key}/context")
            assert gone.status_code == 410
            assert gone.json()["error"]["details"]["reason"] == reason
            assert gone.json()["error"]["details"]["basis"] == basis
            trail = http.get(f"/v1/sessions/{key}/events").json()["events"]
            assert trail[-1]["event_type"] == "SessionErased"
        missing = http.delete("/v1/sessions/nobody", params=query)
        assert (missing.status_code, missing.json()["error"]["code"]) == (404, "session_not_found")


def test_http_holds_are_released_each_by_its_reference(
    server: tuple[Server, str, Path],
) -> None:
    def hold(http: httpx.Client, action: str, reference: str) -> httpx.Response:
        path = "/v1/sessions/m2/hold" + ("/release" if action == "release" else "")
        return http.post(path, json={"reference": reference, "reason": action})

    with client(server) as http:
        assert http.post("/v1/sessions/m2/messages", json={"messages": [
            {"role": "user", "content": "evidence"}]}).status_code == 200  # fmt: skip
        for reference in ("CASE-1", "CASE-2"):
            placed = hold(http, "place", reference)
            assert placed.status_code == 200, placed.text
        again = hold(http, "place", "CASE-2")
        assert (again.status_code, again.json()["error"]["code"]) == (409, "hold_conflict")
        wrong = hold(http, "release", "WRONG")
        assert (wrong.status_code, wrong.json()["error"]["code"]) == (404, "hold_not_found")
        error = wrong.json()["error"]
        assert "'WRONG'" in error["message"]
        assert error["details"] == {"reference": "WRONG", "holds": ["CASE-1", "CASE-2"]}
        cli = run_cli(server[0].env, "hold", "release", "m2", "--reference", "WRONG",
                      "--reason", "closed")  # fmt: skip
        assert cli.returncode == 1 and "no legal hold with reference 'WRONG'" in cli.stderr
        assert hold(http, "release", "CASE-1").status_code == 200
        erase = {"reason": "asked", "basis": "art. 17"}
        held = http.post("/v1/sessions/m2/erase", json=erase)
        assert (held.status_code, held.json()["error"]["code"]) == (409, "legal_hold")
        assert "CASE-2" in held.json()["error"]["message"]
        assert hold(http, "release", "CASE-2").status_code == 200
        assert http.post("/v1/sessions/m2/erase", json=erase).status_code == 200
        trail = http.get("/v1/sessions/m2/events").json()["events"]
    holds = [(e["event_type"], e["changes"]["reference"]) for e in trail[2:-1]]
    assert holds == [
        ("LegalHoldPlaced", "CASE-1"), ("LegalHoldPlaced", "CASE-2"),
        ("LegalHoldReleased", "CASE-1"), ("LegalHoldReleased", "CASE-2"),
    ]  # fmt: skip


def test_erasure_and_holds_take_the_write_headers_as_every_write(
    server: tuple[Server, str, Path],
) -> None:
    """Idempotency-Key: a retry answers the first write (Idempotent-Replayed), the key
    with another body 422; If-Match: a stale version 412, nothing written; also through
    `DELETE ...?erase=true`."""
    erase = {"reason": "asked", "basis": "art. 17"}
    hold = {"reference": "CASE-7", "reason": "litigation"}
    with client(server) as http:
        http.post("/v1/sessions/u7/messages", json={"messages": [{"role": "user", "content": "x"}]})
        placed = http.post("/v1/sessions/u7/hold", json=hold, headers={"Idempotency-Key": "h1"})
        again = http.post("/v1/sessions/u7/hold", json=hold, headers={"Idempotency-Key": "h1"})
        assert (placed.status_code, again.status_code) == (200, 200), again.text
        assert again.json()["version"] == placed.json()["version"]
        assert again.headers["Idempotent-Replayed"] == "true" and again.json()["replayed"]
        other = http.post("/v1/sessions/u7/hold", json={**hold, "reference": "CASE-8"},
                          headers={"Idempotency-Key": "h1"})  # fmt: skip
        assert (other.status_code, other.json()["error"]["code"]) == (422, "idempotency_key_reused")
        version = placed.json()["version"]
        stale = http.post("/v1/sessions/u7/hold/release", json=hold,
                          headers={"If-Match": f'"{version - 1}"'})  # fmt: skip
        assert stale.status_code == 412, stale.text
        released = http.post("/v1/sessions/u7/hold/release", json=hold,
                             headers={"If-Match": f'"{version}"'})  # fmt: skip
        assert released.status_code == 200 and released.headers["ETag"] == f'"{version + 1}"'
        stale = http.post("/v1/sessions/u7/erase", json=erase, headers={"If-Match": '"1"'})
        assert stale.status_code == 412 and http.get("/v1/sessions/u7/context").status_code == 200
        done = http.post("/v1/sessions/u7/erase", json=erase, headers={"Idempotency-Key": "e1"})
        assert done.status_code == 200 and "Idempotent-Replayed" not in done.headers
        for retry in (
            http.post("/v1/sessions/u7/erase", json=erase, headers={"Idempotency-Key": "e1"}),
            http.delete("/v1/sessions/u7", params={"erase": "true", **erase},
                        headers={"Idempotency-Key": "e1"}),
        ):  # fmt: skip
            assert retry.status_code == 200, retry.text
            assert retry.json()["version"] == done.json()["version"]
            assert retry.headers["Idempotent-Replayed"] == "true"
        unkeyed = http.post("/v1/sessions/u7/erase", json=erase)
        assert unkeyed.status_code == 410
        trail = http.get("/v1/sessions/u7/events").json()["events"]
        assert [e["event_type"] for e in trail][-3:] == ["LegalHoldPlaced", "LegalHoldReleased",
                                                         "SessionErased"]  # fmt: skip
        assert trail[-1]["idempotency_key"] == "e1"
