"""`verify_export` passes an untouched export and names the first line of a tampered one."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from session_ledger.domain.integrity import GENESIS, chain_step
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.session import session_id
from session_ledger.projections.export import export_session
from session_ledger.projections.export_verify import verify_export
from tests.conftest import make_ledger, make_settings

Lines = list[bytes]


@pytest.fixture
def exported(tmp_path: Path) -> Iterator[Lines]:
    """A 7-line export: header, 5 events (versions 1-5), trailer."""
    ledger: Ledger = make_ledger(make_settings("memory", tmp_path))
    ledger.put("s", {"role": "user", "content": "hello"})
    ledger.put("s", {"role": "assistant", "content": "the account number is 1234"})
    ledger.delete_last_message("s", reason="pii")
    ledger.put("s", {"role": "user", "content": "bye"})
    lines = b"".join(export_session(ledger, "s")).split(b"\n")[:-1]
    assert len(lines) == 7
    yield lines
    ledger.close()


def edited(lines: Lines, number: int, change: Callable[[dict[str, Any]], None]) -> Lines:
    record = json.loads(lines[number - 1])
    change(record)
    out = list(lines)
    out[number - 1] = json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode()
    return out


def broken_at(lines: Lines) -> tuple[int | None, str]:
    report = verify_export(lines)
    assert not report.ok
    assert report.summary() == f"broken at line {report.broken_line}: {report.problem}"
    return report.broken_line, report.problem or ""


def test_an_untouched_export_verifies(exported: Lines) -> None:
    report = verify_export(exported)
    assert report.ok and report.events == 5 and report.lines == 7
    assert report.chain_head == json.loads(exported[-1])["chain_head"]
    assert verify_export(line + b"\n" for line in exported).ok  # a file's own lines


def test_an_edited_message_is_named(exported: Lines) -> None:
    def change(record: dict[str, Any]) -> None:
        record["payload"]["messages"][0]["blocks"][0]["text"] = "the account number is 9999"

    line, problem = broken_at(edited(exported, 4, change))
    assert line == 4 and "payload" in problem


def test_an_edited_stored_state_breaks_the_chain_there(exported: Lines) -> None:
    def change(record: dict[str, Any]) -> None:
        state = base64.b64decode(record["state"]).replace(b"1234", b"9999")
        record["state"] = base64.b64encode(state).decode()
        record["state_sha256"] = hashlib.sha256(state).hexdigest()
        record["payload"]["messages"][0]["blocks"][0]["text"] = "the account number is 9999"

    line, problem = broken_at(edited(exported, 4, change))
    assert line == 4 and "chain breaks" in problem


def test_a_forged_line_with_a_recomputed_chain_still_fails_on_the_next_line(
    exported: Lines,
) -> None:
    sid = session_id(json.loads(exported[0])["tenant"], "s")
    previous = bytes.fromhex(json.loads(exported[2])["chain"])

    def change(record: dict[str, Any]) -> None:
        state = base64.b64decode(record["state"]).replace(b"1234", b"9999")
        record["state"] = base64.b64encode(state).decode()
        record["state_sha256"] = hashlib.sha256(state).hexdigest()
        record["payload"]["messages"][0]["blocks"][0]["text"] = "the account number is 9999"
        record["chain"] = chain_step(previous, sid, 3, record["topic"], state).hex()

    line, problem = broken_at(edited(exported, 4, change))
    assert line == 5 and "chain breaks" in problem


def test_a_deleted_line_is_named(exported: Lines) -> None:
    line, problem = broken_at(exported[:3] + exported[4:])
    assert line == 4 and "version 4 where version 3 was due" in problem


def test_reordered_lines_are_named(exported: Lines) -> None:
    swapped = [*exported[:2], exported[3], exported[2], *exported[4:]]
    line, problem = broken_at(swapped)
    assert line == 3 and "out of order" in problem


def test_a_truncated_file_is_named(exported: Lines) -> None:
    line, problem = broken_at(exported[:-1])  # cut at a line boundary
    assert line == 6 and "cut short" in problem
    cut = b"\n".join(exported)[:-40]  # cut inside the trailer
    line, problem = broken_at(cut.split(b"\n"))
    assert line == 7 and "JSON" in problem
    assert broken_at([]) == (1, "the file is empty")


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("events", 4, "counts 4 events"),
        ("chain_head", "00" * 32, "chain_head"),
        ("sha256", "00" * 32, "sha256"),
    ],
)
def test_an_edited_trailer_is_named(exported: Lines, field: str, value: Any, words: str) -> None:
    line, problem = broken_at(edited(exported, 7, lambda r: r.update({field: value})))
    assert line == 7 and words in problem


def test_an_edited_header_or_dropped_last_event_is_named(exported: Lines) -> None:
    line, problem = broken_at(edited(exported, 1, lambda r: r.update({"key": "other"})))
    assert line == 1 and "session_id" in problem
    line, problem = broken_at(edited(exported, 1, lambda r: r.update({"as_of_version": 2})))
    assert line == 7 and "sha256" in problem  # any header byte is in the trailer's digest
    # The last event dropped and the trailer rewritten to match: the header's to_version
    # still says what the file must hold.
    shortened = exported[:5] + exported[6:]
    shortened = edited(shortened, 6, lambda r: r.update(
        {"events": 4, "chain_head": json.loads(exported[4])["chain"]}))  # fmt: skip
    line, problem = broken_at(shortened)
    assert line == 6 and "promised versions 1 to 5" in problem
    # A header's to_version is a JSON integer: `true` is not version 1.
    for wrong in (True, 5.0, "5"):
        header = edited(exported, 1, lambda r, v=wrong: r.update({"to_version": v}))
        line, problem = broken_at(header)
        assert line == 1 and f"to_version must be a positive integer; got {wrong!r}" in problem


def test_extra_lines_and_garbage_are_named(exported: Lines) -> None:
    assert broken_at([*exported, exported[1]])[0] == 8
    assert broken_at([b"not json", *exported[1:]])[0] == 1
    assert broken_at(edited(exported, 2, lambda r: r.update({"record": "note"})))[0] == 2
    assert broken_at(edited(exported, 2, lambda r: r.update({"version": True})))[0] == 2
    genesis_free = edited(exported, 2, lambda r: r.update({"chain": GENESIS.hex()}))
    assert broken_at(genesis_free)[0] == 2


def resealed(lines: Lines) -> Lines:
    """`lines` with the trailer's digest made again over the lines before it: what a
    forger redoes at no cost (the chain and a signed head are what it cannot)."""
    *body, trailer = lines
    record = json.loads(trailer)
    record["sha256"] = hashlib.sha256(b"".join(line + b"\n" for line in body)).hexdigest()
    return [*body, json.dumps(record, separators=(",", ":")).encode()]


FORGED = b'{"messages":[{"role":"assistant","blocks":[{"block_type":"text","text":"wire $1M"}]}]}'


@pytest.mark.parametrize(
    ("number", "old", "new", "repeated"),
    [
        (3, b'"payload":', b'"payload":' + FORGED + b',"payload":', "payload"),  # first kept
        (3, b'"payload":{', b'"payload":' + FORGED + b',"payload":{', "payload"),
        (4, b'"actor":"local"', b'"actor":"mallory","actor":"local"', "actor"),
        (4, b'"text":"the', b'"text":"wire $1M","text":"the', "text"),  # nested
        (1, b'"key":"s"', b'"key":"other","key":"s"', "key"),
    ],
)
def test_a_key_repeated_in_one_object_is_named(
    exported: Lines, number: int, old: bytes, new: bytes, repeated: str
) -> None:
    """A reader that keeps a repeated key's first value would read what the forger wrote;
    Python's keeps the last (the real one): so a line that repeats one is refused."""
    out = list(exported)
    assert old in out[number - 1]
    out[number - 1] = out[number - 1].replace(old, new, 1)
    line, problem = broken_at(resealed(out))
    assert line == number and f"the key {repeated!r} is repeated" in problem


@pytest.mark.parametrize(
    ("number", "old", "new", "words"),
    [
        (5, b'"position":1', b'"position":1.0', "payload does not match"),
        (5, b'"position":1', b'"position":true', "payload does not match"),
        (1, b'"format_version":1', b'"format_version":1.0', "format version"),
        (7, b'"events":5', b'"events":5.0', "counts 5.0 events"),
    ],
)
def test_a_number_written_as_another_json_value_is_named(
    exported: Lines, number: int, old: bytes, new: bytes, words: str
) -> None:
    """1, 1.0 and true are equal to Python, not as JSON: the line must hold the value the
    stored state holds."""
    out = list(exported)
    assert old in out[number - 1]
    out[number - 1] = out[number - 1].replace(old, new, 1)
    line, problem = broken_at(resealed(out) if number < 7 else out)
    assert line == number and words in problem
