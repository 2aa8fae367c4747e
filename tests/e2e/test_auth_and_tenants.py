"""Auth over every route: 401 without a valid key, 403 for a role that may not,
and tenant isolation as a matrix: a session of tenant A does not exist for tenant B."""

from __future__ import annotations

from typing import Any

import pytest

from session_ledger.api.client import LedgerAPIError, session_path

from .conftest import Deployment

USER = {"role": "user", "content": "hi"}
# (method, path under the session, body, what it needs): every session route.
SESSION_ROUTES: list[tuple[str, str, Any, str]] = [
    ("POST", "/messages", {"messages": [USER]}, "write"),
    ("PUT", "/messages", {"messages": [USER]}, "write"),
    ("DELETE", "/messages", None, "write"),
    ("DELETE", "/messages/last", None, "write"),
    ("DELETE", "/messages/0", None, "write"),
    ("POST", "/archive", {"count": 1}, "write"),
    ("GET", "/messages", None, "read"),
    ("GET", "/context", None, "read"),
    ("GET", "/context?as_of_version=1", None, "read"),
    ("GET", "/messages?as_of_version=1", None, "read"),
    ("GET", "/events", None, "read"),
    ("GET", "", None, "read"),
    ("GET", "/export", None, "export"),
    ("GET", "/export?format=csv", None, "export"),
]
OTHER_ROUTES: list[tuple[str, str, Any, str]] = [
    ("GET", "/v1/sessions", None, "read"),
    ("POST", "/v1/keys", {"role": "agent", "name": "matrix"}, "keys"),
    ("GET", "/v1/keys", None, "keys"),
    ("DELETE", "/v1/keys/0000000000000000", None, "keys"),
]
ALLOWED = {
    "agent": {"read", "write"},
    "auditor": {"read", "export"},
    "admin": {"read", "write", "export", "keys"},
}


def all_routes(key: str) -> list[tuple[str, str, Any, str]]:
    return [(m, session_path(key, p), b, n) for m, p, b, n in SESSION_ROUTES] + OTHER_ROUTES


def route_id(route: tuple[str, str, Any, str]) -> str:
    return f"{route[0]} {route[1]}"


@pytest.fixture
def revoked_key(deployment: Deployment) -> str:
    with deployment.client("a_admin") as admin:
        created = admin.create_key("agent", "to revoke")
        admin.revoke_key(created.id)
    return created.key


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "",
        "Bearer",
        "Bearer  x y",
        "Basic dXNlcjpwYXNz",
        "Bearer not-a-key",
        "Token x",
        "REVOKED",
    ],
)
def test_without_a_valid_key_every_route_is_401(
    deployment: Deployment, session_key: str, revoked_key: str, authorization: str | None
) -> None:
    headers = {}
    if authorization == "REVOKED":
        headers["Authorization"] = f"Bearer {revoked_key}"
    elif authorization is not None:
        headers["Authorization"] = authorization
    with deployment.raw("a_agent") as http:
        http.post(session_path(session_key, "/messages"), json={"messages": [USER]})
    with deployment.raw() as http:
        for method, path, body, _ in all_routes(session_key):
            answer = http.request(method, path, json=body, headers=headers)
            assert answer.status_code == 401, (method, path, answer.text)
            assert answer.json()["error"]["code"] == "unauthenticated"
            assert answer.headers["WWW-Authenticate"].startswith("Bearer")
    with deployment.client("a_agent") as api:
        assert api.head(session_key).message_count == 1


@pytest.mark.parametrize("role", ["agent", "auditor", "admin"])
def test_each_role_may_do_exactly_what_it_is_for(
    deployment: Deployment, session_key: str, role: str
) -> None:
    with deployment.client("a_agent") as api:
        api.put_messages(session_key, [USER, USER, USER, USER])
    with deployment.raw(f"a_{role}") as http:
        for method, path, body, needs in all_routes(session_key):
            answer = http.request(method, path, json=body)
            if needs in ALLOWED[role]:
                assert answer.status_code in (200, 201, 404), (role, method, path, answer.text)
            else:
                assert answer.status_code == 403, (role, method, path, answer.text)
                error = answer.json()["error"]
                assert error["code"] == "forbidden"
                # It names the route refused and the roles that may (not a permission's
                # name, as "may not export sessions" for a search).
                assert error["message"].startswith(f"role '{role}' may not {method} /v1"), error
                may = error["message"].split(": it takes a key of role ")[1].split(" or ")
                assert may and role not in may and set(may) <= {"agent", "auditor", "admin"}


@pytest.mark.parametrize("intruder", ["b_agent", "b_admin"])
@pytest.mark.parametrize("route", SESSION_ROUTES, ids=route_id)
def test_a_session_of_tenant_a_does_not_exist_for_tenant_b(
    deployment: Deployment, session_key: str, intruder: str, route: tuple[str, str, Any, str]
) -> None:
    method, suffix, body, needs = route
    with deployment.client("a_agent") as owner:
        owner.put_messages(session_key, [USER, USER])
        before = owner.head(session_key)
    with deployment.raw(intruder) as http:
        answer = http.request(method, session_path(session_key, suffix), json=body)
    if (method, suffix) in (("POST", "/messages"), ("PUT", "/messages")):
        # These create a session: tenant B gets its own, brand new one under the same key.
        assert answer.status_code == 200, answer.text
        assert answer.json()["message_count"] == 1
    elif needs == "export" and intruder == "b_agent":
        assert answer.status_code == 403, answer.text  # the role is refused before any lookup
    else:
        assert answer.status_code == 404, answer.text
        assert answer.json()["error"]["code"] == "session_not_found"
    with deployment.client("a_agent") as owner:
        assert owner.head(session_key) == before
        assert len(owner.get_all(session_key)) == 2


def test_session_lists_are_per_tenant(deployment: Deployment, session_key: str) -> None:
    with deployment.client("a_agent") as a, deployment.client("b_agent") as b:
        a.put(session_key, USER)
        assert session_key in a.keys(prefix=session_key).keys
        assert b.keys(prefix=session_key).keys == []


def test_api_keys_are_per_tenant(deployment: Deployment) -> None:
    with deployment.client("a_admin") as a, deployment.client("b_admin") as b:
        a_ids = {k.id for k in a.list_keys()}
        b_ids = {k.id for k in b.list_keys()}
        assert deployment.key_ids["a_agent"] in a_ids and not a_ids & b_ids
        assert {k.tenant for k in b.list_keys()} == {"tenant-b"}
        with pytest.raises(LedgerAPIError) as err:
            b.revoke_key(deployment.key_ids["a_agent"])
        assert (err.value.status, err.value.code) == (404, "key_not_found")
        created = b.create_key("auditor")
        assert created.tenant == "tenant-b"
    with deployment.client("a_agent") as api:
        assert api.keys(limit=1) is not None  # the a_agent key still works


def test_a_revoked_key_stops_working_at_once(deployment: Deployment, session_key: str) -> None:
    with deployment.client("a_admin") as admin:
        created = admin.create_key("agent", "short-lived")
        from session_ledger.api.client import LedgerClient

        with LedgerClient(deployment.base_url, created.key) as api:
            api.put(session_key, USER)
            assert admin.revoke_key(created.id).revoked_at is not None
            with pytest.raises(LedgerAPIError) as err:
                api.head(session_key)
            assert err.value.status == 401
