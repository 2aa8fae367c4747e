"""Reads that name a version they must see: `min_version` and `If-None-Match` on the
context, history and head routes, and the Python client's `min_version` (the replica
routing behind them: tests/e2e/test_read_replicas_http.py)."""

from __future__ import annotations

import pytest

from session_ledger.api.client import LedgerAPIError, session_path

from .conftest import Deployment

USER = {"role": "user", "content": "hi"}
ROUTES = ("", "/messages", "/context")


def test_min_version_reads_that_version_or_a_later_one(
    deployment: Deployment, session_key: str
) -> None:
    with deployment.client("a_agent") as api:
        first = api.put(session_key, USER).version
        version = api.put(session_key, {"role": "assistant", "content": "hello"}).version
        assert [m.content for m in api.get(session_key, min_version=version)] == ["hi", "hello"]
        assert len(api.get_all(session_key, min_version=first)) == 2
        assert api.head(session_key, min_version=version).version == version
        # A version the session never reached: the newest state there is.
        assert api.head(session_key, min_version=version + 5).version == version


def test_if_none_match_answers_304_while_the_session_is_at_a_held_version(
    deployment: Deployment, session_key: str
) -> None:
    path = session_path(session_key)
    with deployment.client("a_agent") as api, deployment.raw("a_agent") as http:
        version = api.put(session_key, USER).version
        for suffix in ROUTES:
            held = http.get(path + suffix, headers={"If-None-Match": f'"{version}"'})
            assert (held.status_code, held.headers["ETag"], held.content) == (
                304, f'"{version}"', b"",
            )  # fmt: skip
            older = http.get(path + suffix, headers={"If-None-Match": f'"{version - 1}", "1"'})
            assert older.status_code == 200 and older.headers["ETag"] == f'"{version}"'
        newer = api.put(session_key, USER).version
        changed = http.get(path + "/context", headers={"If-None-Match": f'W/"{version}"'})
        assert changed.status_code == 200 and changed.headers["ETag"] == f'"{newer}"'
        assert len(changed.json()["messages"]) == 2


@pytest.mark.parametrize(
    ("params", "headers"),
    [({"min_version": "-1"}, {}), ({"min_version": "x"}, {}), ({}, {"If-None-Match": "*"}),
     ({}, {"If-None-Match": '"3", nope'})],
)  # fmt: skip
def test_a_malformed_read_precondition_is_refused(
    deployment: Deployment, session_key: str, params: dict[str, str], headers: dict[str, str]
) -> None:
    with deployment.client("a_agent") as api, deployment.raw("a_agent") as http:
        api.put(session_key, USER)
        for suffix in ROUTES:
            answer = http.get(session_path(session_key) + suffix, params=params, headers=headers)
            assert answer.status_code == 422, answer.text


def test_min_version_of_a_session_that_does_not_exist_is_404(
    deployment: Deployment, session_key: str
) -> None:
    with deployment.client("a_agent") as api, pytest.raises(LedgerAPIError) as refused:
        api.get(session_key, min_version=1)
    assert refused.value.status == 404
