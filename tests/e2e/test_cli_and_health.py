"""The operator's side: `serve` on a fresh store prints the admin key once, the `keys`,
`show`, `audit` and `verify` commands, and the health, readiness and metrics routes."""

from __future__ import annotations

import re
import sqlite3
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest

from session_ledger.api.client import LedgerAPIError, LedgerClient
from tests.conftest import fresh_postgres_database, postgres_server_url

from .conftest import (
    Deployment,
    Server,
    run_cli,
    server_env,
)

KEY = re.compile(r"^\s+(sl_[A-Za-z0-9_-]{40,})$", re.MULTILINE)


def test_first_start_prints_an_admin_key_once(tmp_path: Path) -> None:
    env = server_env(f"sqlite:///{tmp_path / 'fresh' / 'ledger.db'}")
    first = Server(env).start()
    try:
        # The banner comes before uvicorn starts, so it is complete by now.
        with httpx.Client(base_url=first.base_url) as http:
            assert http.get("/v1/sessions").status_code == 401  # no anonymous access
    finally:
        printed = first.stop()
    keys = KEY.findall(printed)
    assert len(keys) == 1, printed
    assert "Authorization: Bearer" in printed and first.base_url in printed
    second = Server({**env}).start()
    try:
        with LedgerClient(second.base_url, keys[0]) as admin:
            assert [k.role for k in admin.list_keys()] == ["admin"]
            admin.put("hello/world", {"role": "user", "content": "hi"})
    finally:
        printed_again = second.stop()
    assert KEY.findall(printed_again) == []


def test_migrate_then_keys_and_show_commands(tmp_path: Path) -> None:
    env = server_env(f"sqlite:///{tmp_path / 'ledger.db'}", LEDGER_DEFAULT_TENANT="acme")
    done = run_cli(env, "keys", "list")
    assert done.returncode == 1 and "migrate" in done.stderr  # no tables yet: a clear hint
    done = run_cli(env, "migrate")
    assert done.returncode == 0 and len(KEY.findall(done.stdout)) == 1, done.stdout
    assert run_cli(env, "migrate").stdout.count("sl_") == 0  # the admin key only once

    created = run_cli(env, "keys", "create", "--role", "auditor", "--name", "audit bot")
    fields = dict(line.split(": ", 1) for line in created.stdout.splitlines())
    assert fields["tenant"] == "acme" and fields["role"] == "auditor"
    assert run_cli(env, "keys", "create", "--role", "root").returncode == 1
    listed = run_cli(env, "keys", "list", "--tenant", "acme").stdout
    assert fields["id"] in listed and "audit bot" in listed and "active" in listed
    assert run_cli(env, "keys", "revoke", fields["id"]).returncode == 0
    assert "revoked" in run_cli(env, "keys", "list").stdout
    assert run_cli(env, "keys", "revoke", "no-such-id").returncode == 1

    server = Server(env).start()
    try:
        agent = run_cli(env, "keys", "create", "--role", "agent").stdout.split("key: ")[1].strip()
        with LedgerClient(server.base_url, agent) as api:
            api.put_messages("support/ticket 7", [
                {"role": "user", "content": "Where is my order?"},
                {"role": "assistant", "content": "On its way."},
            ])  # fmt: skip
            before_thanks = api.head("support/ticket 7").version
            api.put("support/ticket 7", {"role": "user", "content": "Thanks"}, reason="polite")
    finally:
        server.stop()
    past = run_cli(env, "show", "support/ticket 7", "--as-of-version", str(before_thanks))
    assert past.returncode == 0, past.stderr
    assert "[1] assistant: On its way." in past.stdout and "Thanks" not in past.stdout
    trail = run_cli(env, "audit", "support/ticket 7")
    assert trail.returncode == 0, trail.stderr
    assert "MessagesAppended" in trail.stdout and "reason: polite" in trail.stdout
    shown = run_cli(env, "show", "support/ticket 7")
    assert shown.returncode == 0, shown.stderr
    assert "[0] user: Where is my order?" in shown.stdout
    assert "[1] assistant: On its way." in shown.stdout
    as_json = run_cli(env, "show", "support/ticket 7", "--json").stdout
    assert '"text": "On its way."' in as_json
    missing = run_cli(env, "show", "nope")
    assert missing.returncode == 1 and "not found" in missing.stderr

    # verify: the hash chain kept at write time against the stored events
    verified = run_cli(env, "verify")
    assert verified.returncode == 0, verified.stderr
    assert "ok      acme/support/ticket 7  3 events  head " in verified.stdout
    assert "1 session checked, 0 broken" in verified.stderr
    assert run_cli(env, "verify", "support/ticket 7").returncode == 0
    assert run_cli(env, "verify", "nope").returncode == 1
    with sqlite3.connect(tmp_path / "ledger.db") as db:
        db.execute("UPDATE ledger_events SET state = CAST(replace(CAST(state AS TEXT), "
                   "'On its way', 'Never sent') AS BLOB) WHERE originator_version = 2")  # fmt: skip
    tampered = run_cli(env, "verify")
    assert tampered.returncode == 1
    assert "BROKEN  acme/support/ticket 7  at version 2" in tampered.stdout


def test_health_readiness_and_metrics(deployment: Deployment) -> None:
    with deployment.raw() as http:
        assert http.get("/healthz").json() == {"status": "ok"}
        assert http.get("/readyz").json() == {"status": "ready"}
        assert http.get("/openapi.json").json()["info"]["title"] == "session-ledger"
    with deployment.client("a_agent") as api:
        with pytest.raises(LedgerAPIError):
            api.head("metrics/probe")
        text = api.metrics()
    assert 'route="/v1/sessions/{key}",status="404"' in text
    assert "session_ledger_http_request_duration_seconds_bucket" in text
    assert "metrics/probe" not in text  # label values are route templates, not keys


@pytest.mark.parametrize("access_log", ["true", "false"])
def test_the_access_log_follows_its_setting(tmp_path: Path, access_log: str) -> None:
    env = server_env(f"sqlite:///{tmp_path / 'ledger.db'}", LEDGER_ACCESS_LOG=access_log)
    server = Server(env).start()
    try:
        with httpx.Client(base_url=server.base_url) as http:
            assert http.get("/v1/sessions").status_code == 401
    finally:
        printed = server.stop()
    assert "Uvicorn running on" in printed  # the server's own lines stay either way
    assert ('"GET /v1/sessions HTTP/1.1" 401' in printed) is (access_log == "true"), printed


def test_serve_refuses_to_start_on_a_store_without_tables(tmp_path: Path) -> None:
    env = server_env(f"sqlite:///{tmp_path / 'ledger.db'}", LEDGER_MIGRATE_ON_START="false")
    with pytest.raises(RuntimeError, match="session-ledger migrate"):
        Server(env).start()


@pytest.mark.postgres
def test_readyz_and_requests_are_503_when_the_store_goes_away() -> None:
    admin_key = "sl_test_" + uuid.uuid4().hex
    with fresh_postgres_database("ledger_gone") as url:
        env = server_env(url, LEDGER_BOOTSTRAP_KEY=admin_key, LEDGER_LOCK_TIMEOUT_SECONDS="2")
        server = Server(env).start()
        try:
            with LedgerClient(server.base_url, admin_key) as api:
                api.put("k", {"role": "user", "content": "hi"})
                name = urlsplit(url).path.lstrip("/")
                with psycopg.connect(postgres_server_url(), autocommit=True) as conn:
                    conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
                with httpx.Client(base_url=server.base_url) as http:
                    answer = http.get("/readyz")
                assert answer.status_code == 503, answer.text
                assert answer.json()["error"]["code"] == "store_not_ready"
                for call in (lambda: api.head("k"), lambda: api.put("k", {"role": "user"})):
                    with pytest.raises(LedgerAPIError) as err:
                        call()
                    assert err.value.status == 503, err.value
        finally:
            server.stop()
