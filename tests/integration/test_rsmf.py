"""RSMF 2.0 output: the file has the structure the specification requires (an RFC 5322
message with X-RSMF-Version, exactly one base64 attachment named rsmf.zip holding
rsmf_manifest.json, whose participants, conversations and events refer to one another),
and says what the ledger holds: a conversation per session, its messages in order."""

from __future__ import annotations

import email
import email.policy
import io
import json
import zipfile
from datetime import datetime
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from session_ledger.api.cli import cli
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.session import session_id
from session_ledger.projections.rsmf import write_rsmf
from tests.conftest import make_ledger, make_settings
from tests.integration.test_erasure import master_key

EVENT_TYPES = {"message", "disclaimer", "join", "leave", "history", "unknown"}
CONVERSATION_TYPES = {"direct", "channel"}


def rsmf_manifest(data: bytes) -> tuple[EmailMessage, dict[str, Any]]:
    """The message and its manifest, asserting each structural rule of RSMF 2.0 on the way."""
    message = email.message_from_bytes(data, policy=email.policy.default)
    assert isinstance(message, EmailMessage)
    assert message["X-RSMF-Version"] == "2.0.0"
    assert message["From"] and message["Date"]  # RFC 5322's two required fields
    attachments = list(message.iter_attachments())
    assert len(attachments) == 1  # exactly one attachment...
    [zip_part] = attachments
    assert zip_part["Content-Transfer-Encoding"] == "base64"  # ...in base64 (RFC 2045)
    assert zip_part.get_content_disposition() == "attachment"  # ...named rsmf.zip (RFC 6266)
    assert zip_part.get_filename() == "rsmf.zip"
    with zipfile.ZipFile(io.BytesIO(zip_part.get_payload(decode=True))) as archive:
        assert "rsmf_manifest.json" in archive.namelist()  # at the zip's root
        manifest: dict[str, Any] = json.loads(archive.read("rsmf_manifest.json"))
    assert manifest["version"] == "2.0.0"
    people = [p["id"] for p in manifest["participants"]]
    assert len(set(people)) == len(people)
    assert all(isinstance(p["display"], str) for p in manifest["participants"])
    conversations = [c["id"] for c in manifest["conversations"]]
    assert len(set(conversations)) == len(conversations)
    for c in manifest["conversations"]:
        assert c["type"] in CONVERSATION_TYPES and isinstance(c["platform"], str)
        assert set(c["participants"]) <= set(people)
    ids = [e["id"] for e in manifest["events"]]
    assert len(set(ids)) == len(ids)
    times = []
    for e in manifest["events"]:
        assert e["type"] in EVENT_TYPES
        assert e["conversation"] in conversations and e["participant"] in people
        assert isinstance(e["body"], str)
        times.append(datetime.fromisoformat(e["timestamp"]))
    assert message["X-RSMF-EventCount"] == str(len(ids))
    if times:
        assert datetime.fromisoformat(message["X-RSMF-BeginDate"]) == min(times)
        assert datetime.fromisoformat(message["X-RSMF-EndDate"]) == max(times)
    return message, manifest


def test_an_rsmf_file_has_the_required_structure_and_the_ledgers_messages(
    ledger: Ledger, tmp_path: Path
) -> None:
    ledger.put("chat/1", {"role": "user", "content": "hello ünï ✓"}, actor="key:alice")
    ledger.put_messages("chat/1", [{"role": "assistant", "content": "hi"},
                                   {"role": "tool", "content": "42"}], actor="key:bot")  # fmt: skip
    ledger.set("chat/1", [{"role": "user", "content": "again"}], actor="key:alice")
    ledger.reset("chat/1", actor="key:admin", reason="ticket 7")
    ledger.put("chat/2", {"role": "user", "content": "second"}, actor="key:bob")
    ledger.put("other", {"role": "user", "content": "not selected"}, actor="key:bob")

    summary = write_rsmf(ledger, ledger.default_tenant, tmp_path / "out.rsmf",
                         exported_by="test", prefix="chat/")  # fmt: skip
    _, manifest = rsmf_manifest((tmp_path / "out.rsmf").read_bytes())
    assert (summary["conversations"], summary["events"]) == (2, 7)
    sid = str(session_id(ledger.default_tenant, "chat/1"))
    assert [c["display"] for c in manifest["conversations"]] == ["chat/1", "chat/2"]
    first = [(e["type"], e["participant"], e["body"]) for e in manifest["events"]
             if e["conversation"] == sid]  # fmt: skip
    assert first == [
        ("message", "role:user", "hello ünï ✓"),
        ("message", "role:assistant", "hi"),
        ("message", "role:tool", "42"),
        ("history", "key:alice", 'HistoryReplaced by key:alice {"kept": 0}'),
        ("message", "role:user", "again"),
        ("history", "key:admin", "HistoryCleared by key:admin: ticket 7"),
    ]
    [conversation] = [c for c in manifest["conversations"] if c["id"] == sid]
    assert conversation["participants"] == ["role:user", "role:assistant", "role:tool",
                                            "key:alice", "key:admin"]  # fmt: skip
    actors = {e["id"]: dict((c["name"], c["value"]) for c in e["custom"])["actor"]
              for e in manifest["events"]}  # fmt: skip
    assert actors[f"{sid}/3/1"] == "key:bot"  # who wrote each message, beside its role


def test_the_cli_writes_rsmf_for_an_output_named_so(tmp_path: Path) -> None:
    env = {"LEDGER_DATABASE_URL": f"sqlite:///{tmp_path / 'l.db'}",
           "LEDGER_TOKENIZER": "whitespace"}  # fmt: skip
    runner = CliRunner()
    assert runner.invoke(cli, ["migrate"], env=env).exit_code == 0
    from session_ledger.api.bootstrap import open_ledger
    from session_ledger.api.settings import Settings

    ledger = open_ledger(Settings(database_url=env["LEDGER_DATABASE_URL"], tokenizer="whitespace"))
    try:
        ledger.put("a", {"role": "user", "content": "one"})
    finally:
        ledger.close()
    done = runner.invoke(cli, ["export", "--output", str(tmp_path / "x.rsmf")], env=env)
    assert done.exit_code == 0, done.output
    _, manifest = rsmf_manifest((tmp_path / "x.rsmf").read_bytes())
    assert [e["body"] for e in manifest["events"]] == ["one"]
    empty = runner.invoke(cli, ["export", "--prefix", "none/", "--output",
                                str(tmp_path / "empty.rsmf")], env=env)  # fmt: skip
    assert empty.exit_code == 0, empty.output
    message, manifest = rsmf_manifest((tmp_path / "empty.rsmf").read_bytes())
    assert manifest["events"] == [] and message["X-RSMF-EventCount"] == "0"


def test_an_erased_sessions_messages_read_erased_and_its_content_is_nowhere(
    tmp_path: Path,
) -> None:
    ledger = make_ledger(make_settings("memory", tmp_path, master_key=master_key()))
    try:
        canary = "canary-" + "7f3a9c"
        ledger.put("gone", {"role": "user", "content": f"my name is {canary}"})
        ledger.put("kept", {"role": "user", "content": "stays"})
        ledger.erase("gone", reason="asked", basis="GDPR art. 17")
        write_rsmf(ledger, ledger.default_tenant, tmp_path / "x.rsmf", exported_by="test")
        data = (tmp_path / "x.rsmf").read_bytes()
        _, manifest = rsmf_manifest(data)
        assert canary.encode() not in json.dumps(manifest).encode()
        bodies = [(e["type"], e["body"].split(":")[0]) for e in manifest["events"]]
        assert bodies == [("message", "[erased]"), ("history", "SessionErased by local"),
                          ("message", "stays")]  # fmt: skip
    finally:
        ledger.close()
