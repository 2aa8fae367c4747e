"""The past over HTTP: point-in-time reads (as_of_version, as_of), the audit trail, and
the archive, through the client against a real server on each store."""

from __future__ import annotations

import uuid
from datetime import UTC

import pytest

from session_ledger.api.client import LedgerAPIError, session_path

from .conftest import Deployment


def msg(text: str, role: str = "user") -> dict[str, str]:
    return {"role": role, "content": text}


def texts(messages: list) -> list[str]:  # type: ignore[type-arg]
    return [m.blocks[0]["text"] for m in messages]


def test_every_past_version_reads_as_it_was(deployment: Deployment, session_key: str) -> None:
    with deployment.client("a_agent") as api:
        expected: dict[int, list[str]] = {}
        steps = [
            lambda: api.put(session_key, msg("one")),
            lambda: api.put_messages(session_key, [msg("two", "assistant"), msg("three")]),
            lambda: api.delete_message(session_key, 1),
            lambda: api.set(session_key, [msg("one"), msg("four")]),
            lambda: api.reset(session_key),
            lambda: api.put(session_key, msg("five")),
        ]
        for step in steps:
            version = step().version
            expected[version] = texts(api.get_all(session_key))
        assert list(expected.values())[:3] == [["one"], ["one", "two", "three"], ["one", "three"]]
        for version, history in expected.items():
            assert texts(api.get_all(session_key, as_of_version=version)) == history
            window = api.get(session_key, token_limit=1, as_of_version=version)
            assert texts(window) == history[-1:]
        assert texts(api.get_all(session_key)) == ["five"]


def test_a_time_reads_the_version_current_then(deployment: Deployment, session_key: str) -> None:
    with deployment.client("a_agent") as api:
        api.put(session_key, msg("before"))
        then = api.head(session_key).updated_at  # the server's clock, not ours
        api.put(session_key, msg("after"))
        assert texts(api.get_all(session_key, as_of=then)) == ["before"]
        assert texts(api.get(session_key, as_of=then)) == ["before"]
        naive_utc = then.replace(tzinfo=None)
        assert texts(api.get_all(session_key, as_of=naive_utc)) == ["before"]


def test_points_without_state_are_404_and_both_at_once_422(
    deployment: Deployment, session_key: str
) -> None:
    with deployment.client("a_agent") as api:
        api.put(session_key, msg("x"))
        head = api.head(session_key)
        for call in (
            lambda: api.get_all(session_key, as_of_version=head.version + 1),
            lambda: api.get(session_key, as_of_version=head.version + 1),
            lambda: api.get_all(session_key, as_of=head.created_at.replace(year=2000)),
        ):
            with pytest.raises(LedgerAPIError) as err:
                call()
            assert (err.value.status, err.value.code) == (404, "state_not_found")
        with pytest.raises(LedgerAPIError) as err:
            api.get_all(session_key, as_of_version=1, as_of=head.updated_at)
        assert err.value.status == 422
    with deployment.raw("a_agent") as http:
        path = f"/v1/sessions/{uuid.uuid4().hex}/messages?as_of=not-a-time"
        assert http.get(path).status_code == 422


def test_a_time_whose_plus_arrived_as_a_space_says_to_encode_it(
    deployment: Deployment, session_key: str
) -> None:
    with deployment.client("a_agent") as api:
        api.put(session_key, msg("x"))
        then = api.head(session_key).updated_at.astimezone(UTC)
    typed = then.strftime("%Y-%m-%dT%H:%M:%S.%f") + "+00:00"  # as a person types it
    with deployment.raw("a_agent") as http:
        path = session_path(session_key, "/messages")
        answer = http.get(f"{path}?as_of={typed}")
        assert answer.status_code == 422
        assert "%2B" in answer.json()["error"]["message"], answer.text
        encoded = http.get(f"{path}?as_of={typed.replace('+', '%2B')}")
        assert encoded.status_code == 200 and len(encoded.json()["messages"]) == 1


def test_the_audit_trail_names_who_why_and_what(deployment: Deployment, session_key: str) -> None:
    token = uuid.uuid4().hex
    with deployment.client("a_agent") as api:
        api.put(session_key, msg("hello"), reason="first contact", idempotency_key=token)
        api.set(session_key, [msg("replaced")], reason="compaction")
        api.delete_last_message(session_key)
        trail = api.events(session_key)
    events = trail.events
    assert [e.event_type for e in events][-3:] == [
        "MessagesAppended", "HistoryReplaced", "MessageRemoved",
    ]  # fmt: skip
    assert {e.actor for e in events} == {f"key:{deployment.key_ids['a_agent']}"}
    appended, replaced, removed = events[-3:]
    assert (appended.reason, appended.idempotency_key) == ("first contact", token)
    assert appended.changes["added"][0]["blocks"][0]["text"] == "hello"
    assert replaced.reason == "compaction"
    assert replaced.changes["removed"][0]["blocks"][0]["text"] == "hello"
    assert removed.changes["removed"]["blocks"][0]["text"] == "replaced"
    assert [e.version for e in events] == sorted(e.version for e in events)
    assert trail.next_after is None


def test_the_audit_trail_pages_and_auditors_may_read_it(
    deployment: Deployment, session_key: str
) -> None:
    with deployment.client("a_agent") as api:
        for n in range(5):
            api.put(session_key, msg(str(n)))
        final = api.head(session_key).version
    with deployment.client("a_auditor") as auditor:
        seen, after = [], 0
        while True:
            page = auditor.events(session_key, after=after, limit=2)
            seen += [e.version for e in page.events]
            if page.next_after is None:
                break
            after = page.next_after
        assert seen == list(range(1, final + 1))
        with pytest.raises(LedgerAPIError) as err:
            auditor.put(session_key, msg("nope"))
        assert err.value.status == 403


def test_archive_moves_the_oldest_messages(deployment: Deployment, session_key: str) -> None:
    with deployment.client("a_agent") as api:
        api.put_messages(session_key, [msg("a"), msg("b"), msg("c")])
        result = api.archive_oldest(session_key, 2, reason="window full")
        assert result.message_count == 1
        assert texts(api.get_all(session_key)) == ["c"]
        assert texts(api.get_all(session_key, status="archived")) == ["a", "b"]
        assert api.head(session_key).archived_count == 2
        assert api.events(session_key).events[-1].changes == {"archived": 2}
        with pytest.raises(LedgerAPIError) as err:
            api.archive_oldest(session_key, 1, if_match=result.version - 1)
        assert err.value.status == 412
    with deployment.raw("a_agent") as http:
        path = f"/v1/sessions/{uuid.uuid4().hex}/archive"
        for body in ({"count": 0}, {"count": "x"}, {}):
            assert http.post(path, json=body).status_code == 422
        # A count is a JSON integer: not a string of digits, a boolean or a float.
        path = session_path(session_key, "/archive")
        for body in ({"count": "1"}, {"count": True}, {"count": 1.0}, {"count": None}):
            answer = http.post(path, json=body)
            assert answer.status_code == 422, body
            assert answer.json()["error"]["message"].startswith("body.count: ")
        assert http.get(session_path(session_key)).json()["message_count"] == 1
