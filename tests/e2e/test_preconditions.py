"""Optimistic concurrency and idempotent retries over HTTP: ETag, If-Match, Idempotency-Key."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from session_ledger.api.client import LedgerAPIError, LedgerClient
from session_ledger.api.schemas import WriteAnswer

from .conftest import Deployment

USER = {"role": "user", "content": "hi"}


def test_every_answer_about_a_session_carries_its_version_as_etag(
    deployment: Deployment, session_key: str
) -> None:
    with deployment.client("a_agent") as api, deployment.raw("a_agent") as http:
        version = api.put(session_key, USER).version
        for suffix in ("", "/messages", "/context"):
            url = f"/v1/sessions/{api_path(session_key)}{suffix}"
            assert http.get(url).headers["ETag"] == f'"{version}"'
        written = http.post(f"/v1/sessions/{api_path(session_key)}/messages",
                            json={"messages": [USER]})  # fmt: skip
        assert written.headers["ETag"] == f'"{written.json()["version"]}"'


def api_path(key: str) -> str:
    from session_ledger.api.client import session_path

    return session_path(key).removeprefix("/v1/sessions/")


@pytest.mark.parametrize(
    "write",
    [
        lambda api, key, v: api.put(key, USER, if_match=v),
        lambda api, key, v: api.put_messages(key, [USER, USER], if_match=v),
        lambda api, key, v: api.set(key, [USER], if_match=v),
        lambda api, key, v: api.reset(key, if_match=v),
        lambda api, key, v: api.delete_message(key, 0, if_match=v),
        lambda api, key, v: api.delete_last_message(key, if_match=v),
    ],
    ids=["put", "put_messages", "set", "reset", "delete_message", "delete_last_message"],
)
def test_stale_if_match_is_412_and_writes_nothing(
    deployment: Deployment, session_key: str, write: Callable[[LedgerClient, str, int], WriteAnswer]
) -> None:
    with deployment.client("a_agent") as api:
        stale = api.put(session_key, USER).version
        current = api.put(session_key, USER).version
        with pytest.raises(LedgerAPIError) as err:
            write(api, session_key, stale)
        assert (err.value.status, err.value.code) == (412, "version_conflict")
        assert err.value.details == {"expected_version": stale, "current_version": current}
        head = api.head(session_key)
        assert (head.version, head.message_count) == (current, 2)
        # The current ETag lets the same write through.
        assert write(api, session_key, current).version > current


def test_etag_strings_are_accepted_as_if_match(deployment: Deployment, session_key: str) -> None:
    with deployment.client("a_agent") as api:
        version = api.put(session_key, USER).version
        assert api.put(session_key, USER, if_match=f'"{version}"').version > version


def test_if_none_match_star_creates_only(deployment: Deployment, session_key: str) -> None:
    with deployment.client("a_agent") as api:
        assert api.put(session_key, USER, if_none_match=True).message_count == 1
        with pytest.raises(LedgerAPIError) as err:
            api.put(session_key, USER, if_none_match=True)
        assert err.value.status == 412
        assert api.head(session_key).message_count == 1


def test_if_match_star_needs_an_existing_session(deployment: Deployment, session_key: str) -> None:
    with deployment.client("a_agent") as api:
        with pytest.raises(LedgerAPIError) as err:
            api.put(session_key, USER, if_match="*")
        assert (err.value.status, err.value.code) == (412, "precondition_failed")
        with pytest.raises(LedgerAPIError):
            api.head(session_key)
        api.put(session_key, USER)
        assert api.put(session_key, USER, if_match="*").message_count == 2


def test_a_retried_write_is_applied_once(deployment: Deployment, session_key: str) -> None:
    token = uuid.uuid4().hex
    with deployment.client("a_agent") as api, deployment.raw("a_agent") as http:
        first = api.put_messages(session_key, [USER, USER], idempotency_key=token)
        again = api.put_messages(session_key, [USER, USER], idempotency_key=token)
        assert (again.version, again.message_count) == (first.version, first.message_count)
        assert (first.replayed, again.replayed) == (False, True)
        assert api.head(session_key).message_count == 2
        raw = http.post(
            f"/v1/sessions/{api_path(session_key)}/messages",
            json={"messages": [USER, USER]},
            headers={"Idempotency-Key": token},
        )
        assert raw.headers["Idempotent-Replayed"] == "true"
        assert raw.headers["ETag"] == f'"{first.version}"'


def test_a_retry_with_the_precondition_of_the_first_try_is_still_a_replay(
    deployment: Deployment, session_key: str
) -> None:
    token = uuid.uuid4().hex
    with deployment.client("a_agent") as api:
        version = api.put(session_key, USER).version
        first = api.put(session_key, USER, if_match=version, idempotency_key=token)
        again = api.put(session_key, USER, if_match=version, idempotency_key=token)
        assert again.replayed and again.version == first.version
        assert api.head(session_key).message_count == 2


def test_an_idempotency_key_reused_for_another_write_is_422(
    deployment: Deployment, session_key: str
) -> None:
    token = uuid.uuid4().hex
    with deployment.client("a_agent") as api:
        api.put(session_key, USER, idempotency_key=token)
        with pytest.raises(LedgerAPIError) as err:
            api.put(session_key, {"role": "user", "content": "other"}, idempotency_key=token)
        assert (err.value.status, err.value.code) == (422, "idempotency_key_reused")
        assert api.head(session_key).message_count == 1


@contextmanager
def writing(
    deployment: Deployment, session_key: str, step: Callable[[LedgerClient, int], None]
) -> Iterator[None]:
    """A writer in a thread of its own: `step(client, n)` for n = 1, 2, ... until the
    block ends. The session first gets version 2, holding the message "0"."""
    with deployment.client("a_agent") as api:
        api.put(session_key, {"role": "user", "content": "0"})
    stop = threading.Event()

    def write() -> None:
        with deployment.client("a_agent") as writer:
            n = 1
            while not stop.is_set():
                step(writer, n)
                n += 1

    thread = threading.Thread(target=write)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def test_a_read_answers_with_the_version_its_messages_are_of(
    deployment: Deployment, session_key: str
) -> None:
    """Under concurrent writes, a `/context` or `/messages` answer's ETag is the version of
    the messages in its body (one read gives both), and a past read's ETag is the version
    read, not the current one."""
    path = f"/v1/sessions/{api_path(session_key)}"

    def put(writer: LedgerClient, n: int) -> None:
        writer.put(session_key, {"role": "user", "content": str(n)})  # version n + 2: "n"

    with writing(deployment, session_key, put), deployment.raw("a_agent") as http:
        for _ in range(150):
            for suffix in ("/context?token_limit=1", "/messages"):
                answer = http.get(path + suffix)
                newest = answer.json()["messages"][-1]["blocks"][0]["text"]
                assert answer.headers["ETag"] == f'"{int(newest) + 2}"', suffix
    with deployment.raw("a_agent") as http:
        for suffix in ("/context", "/messages"):
            past = http.get(f"{path}{suffix}?as_of_version=3")
            assert past.headers["ETag"] == '"3"'
            assert past.json()["messages"][-1]["blocks"][0]["text"] == "1"


def test_an_answer_with_no_message_is_of_a_version_with_none(
    deployment: Deployment, session_key: str
) -> None:
    """Under a writer that empties the session and writes to it again, an answer with no
    message carries the version of an emptied state, and one with a message the version
    that wrote it: a read that finds no row never takes a version written after it."""
    path = f"/v1/sessions/{api_path(session_key)}"

    def reset_then_put(writer: LedgerClient, n: int) -> None:
        writer.reset(session_key)  # version 2n + 1: no message
        writer.put(session_key, {"role": "user", "content": str(n)})  # 2n + 2: "n"

    with writing(deployment, session_key, reset_then_put), deployment.raw("a_agent") as http:
        for _ in range(150):
            for suffix in ("/context?token_limit=1000", "/messages"):
                answer = http.get(path + suffix)
                version = int(answer.headers["ETag"].strip('"'))
                messages = answer.json()["messages"]
                if messages:
                    assert version == 2 * int(messages[-1]["blocks"][0]["text"]) + 2
                else:
                    assert version % 2 == 1, (suffix, version)
