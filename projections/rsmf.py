"""A tenant's sessions as one RSMF 2.0 file (Relativity Short Message Format), the format
review tools load chat into: an RFC 5322 message (`.rsmf`) whose headers carry
`X-RSMF-Version: 2.0.0` and a roll-up (generator, first and last event time, event
count), and whose one attachment, `rsmf.zip` (base64, `Content-Disposition: attachment`),
holds `rsmf_manifest.json`:

    {"version": "2.0.0",
     "participants":  [{"id", "display", "custom"}]   roles ("role:user") and actors
                                                      ("key:...") met in the sessions
     "conversations": [{"id", "display", "platform", "type": "direct", "participants",
                        "custom"}]                    one a session: id its session id,
                                                      display its key
     "events": [{"id", "type", "conversation", "participant", "timestamp", "body",
                 "custom"}]}                          a message ("message", from its role)
                                                      or a change of the history ("history":
                                                      a set, reset, removal..., from its actor)

The sessions are those the package's query selects (package.selected_keys), read through
their JSONL export (so sealed content is opened and erased content shows as erased).
Events and conversations are written to files as they are read and copied into the zip,
and the zip into the message in base64 lines: memory holds a page of events and the
participants, never the tenant. RSMF carries no proof: the package (package.py) is the
evidence, RSMF the reviewers' copy.
"""

from __future__ import annotations

import base64
import json
import shutil
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from email.header import Header
from email.utils import format_datetime, make_msgid
from pathlib import Path
from typing import IO, Any

from session_ledger.domain.event_handlers import EventHandlers
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.session import Session

from .export import export_jsonl, plan_export
from .package import selected_keys

VERSION = "2.0.0"
PLATFORM = "session-ledger"
MANIFEST = "rsmf_manifest.json"
BOUNDARY = "=_session-ledger-rsmf"  # cannot occur in base64 or in the summary text
B64_LINE = 57  # bytes per base64 line: 76 characters, as RFC 2045 asks
COPY_BYTES = 1 << 20


def write_rsmf(
    ledger: Ledger, tenant: str, output: Path, *, exported_by: str, prefix: str = "",
    start: datetime | None = None, end: datetime | None = None, actor: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Write the RSMF file of the sessions the query selects to `output` (written aside,
    renamed when whole); its roll-up: conversations, events, first and last time."""
    views = ledger.views
    with tempfile.TemporaryDirectory(prefix="ledger-rsmf-") as tmp:
        folder = Path(tmp)
        parts = _Parts(folder)
        try:  # (its files closed whatever fails, before the folder is removed)
            for key in selected_keys(views, ledger, tenant, prefix, start, end, actor):
                plan = plan_export(ledger, key, tenant=tenant)
                parts.conversation(key, str(plan.session_id), export_jsonl(ledger, plan))
        finally:
            parts.close()
        with (
            zipfile.ZipFile(folder / "rsmf.zip", "w", zipfile.ZIP_DEFLATED) as archive,
            archive.open(_entry(), "w", force_zip64=True) as manifest,
        ):
            parts.manifest(manifest)
        summary = parts.summary(tenant, exported_by)
        partial = output.with_name(output.name + ".partial")
        with partial.open("wb") as out:
            _message(out, summary, folder / "rsmf.zip")
        partial.replace(output)
    return summary


def _entry() -> zipfile.ZipInfo:
    """The manifest's zip entry, dated now (its size is not known ahead: zip64 sizes)."""
    info = zipfile.ZipInfo(MANIFEST, datetime.now(UTC).timetuple()[:6])
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


class _Parts:
    """The manifest's arrays, written to files as the sessions are read."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.events = (folder / "events.json").open("w", encoding="utf-8")
        self.conversations = (folder / "conversations.json").open("w", encoding="utf-8")
        self.participants: dict[str, dict[str, Any]] = {}
        self.counts = {"conversations": 0, "events": 0}
        self.first: str | None = None
        self.last: str | None = None

    def _write(self, out: IO[str], count: str, item: dict[str, Any]) -> None:
        out.write(("," if self.counts[count] else "") + json.dumps(item, ensure_ascii=False))
        self.counts[count] += 1

    def _participant(self, pid: str, kind: str) -> str:
        if pid not in self.participants:
            display = pid.removeprefix("role:")
            self.participants[pid] = {"id": pid, "display": display,
                                      "custom": [{"name": "kind", "value": kind}]}  # fmt: skip
        return pid

    def conversation(self, key: str, sid: str, lines: Iterator[bytes]) -> None:
        members: dict[str, None] = {}
        for raw in lines:
            record = json.loads(raw)
            if record["record"] != "event":
                continue
            for event in _events(sid, record):
                kind = "role" if event["participant"].startswith("role:") else "actor"
                members[self._participant(event["participant"], kind)] = None
                self.first = min(self.first or event["timestamp"], event["timestamp"])
                self.last = max(self.last or event["timestamp"], event["timestamp"])
                self._write(self.events, "events", event)
        self._write(self.conversations, "conversations", {
            "id": sid, "display": key, "platform": PLATFORM, "type": "direct",
            "participants": list(members), "custom": [{"name": "session_key", "value": key}],
        })  # fmt: skip

    def close(self) -> None:
        self.events.close()
        self.conversations.close()

    def manifest(self, out: IO[bytes]) -> None:
        head = {"version": VERSION, "participants": list(self.participants.values())}
        out.write(json.dumps(head, ensure_ascii=False)[:-1].encode())
        for name in ("conversations", "events"):
            out.write(f', "{name}": ['.encode())
            with (self.folder / f"{name}.json").open("rb") as part:
                shutil.copyfileobj(part, out, COPY_BYTES)
            out.write(b"]")
        out.write(b"}")

    def summary(self, tenant: str, exported_by: str) -> dict[str, Any]:
        return {"tenant": tenant, "exported_by": exported_by, **self.counts,
                "begin": self.first, "end": self.last}  # fmt: skip


# The RSMF events of one ledger event (a line of its JSONL export): its messages, and a
# note of any other change of the history.
RSMFHandler = Callable[[str, dict[str, Any]], Iterator[dict[str, Any]]]
RSMF_EVENTS: EventHandlers[RSMFHandler] = EventHandlers("RSMF export")


def _events(sid: str, record: dict[str, Any]) -> Iterator[dict[str, Any]]:
    return RSMF_EVENTS.by_name(record["type"])(sid, record)


@RSMF_EVENTS.on(Session.SessionStarted)
def _started(sid: str, record: dict[str, Any]) -> Iterator[dict[str, Any]]:
    return iter(())  # the conversation itself


@RSMF_EVENTS.on(Session.MessagesAppended)
def _appended(sid: str, record: dict[str, Any]) -> Iterator[dict[str, Any]]:
    return _messages(sid, record)


@RSMF_EVENTS.on(Session.HistoryReplaced)
def _replaced(sid: str, record: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield _note(sid, record)
    yield from _messages(sid, record)


@RSMF_EVENTS.on(
    Session.HistoryCleared,
    Session.MessageRemoved,
    Session.MessagesArchived,
    Session.LegalHoldPlaced,
    Session.LegalHoldReleased,
    Session.SessionErased,
    Session.SessionEncrypted,
    Session.StreamStarted,
    Session.StreamChunksAppended,
    Session.StreamCompleted,
    Session.StreamAborted,
)
def _noted(sid: str, record: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield _note(sid, record)


def _custom(record: dict[str, Any]) -> list[dict[str, str]]:
    custom = [{"name": "version", "value": str(record["version"])},
              {"name": "actor", "value": str(record["actor"])}]  # fmt: skip
    if record["reason"]:
        custom.append({"name": "reason", "value": record["reason"]})
    return custom


def _note(sid: str, record: dict[str, Any]) -> dict[str, Any]:
    """A change of the history, from its actor: its type and its fields but messages."""
    kind, actor, reason = record["type"], record["actor"], record["reason"]
    note = {k: v for k, v in record["payload"].items() if k != "messages"}
    body = f"{kind} by {actor}" + (f": {reason}" if reason else "")
    if note:
        body += " " + json.dumps(note, ensure_ascii=False, sort_keys=True)
    return {"id": f"{sid}/{record['version']}", "type": "history", "conversation": sid,
            "participant": str(actor), "timestamp": _timestamp(record["recorded_at"]),
            "body": body, "custom": _custom(record)}  # fmt: skip


def _messages(sid: str, record: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The messages the event carries, each from its role."""
    version, when, custom = record["version"], _timestamp(record["recorded_at"]), _custom(record)
    messages = record["payload"].get("messages")
    for n, message in enumerate(messages if isinstance(messages, list) else []):
        yield {"id": f"{sid}/{version}/{n}", "type": "message", "conversation": sid,
               "participant": f"role:{message.get('role', 'unknown')}", "timestamp": when,
               "body": _body(message), "custom": custom}  # fmt: skip


def _body(message: dict[str, Any]) -> str:
    if message.get("erased"):
        return "[erased]"
    parts = [b["text"] if b.get("block_type") == "text" else f"[{b.get('block_type')}]"
             for b in message.get("blocks", [])]  # fmt: skip
    return "\n".join(parts)


def _timestamp(text: str) -> str:
    return datetime.fromisoformat(text).astimezone(UTC).isoformat().replace("+00:00", "Z")


def _message(out: IO[bytes], summary: dict[str, Any], archive: Path) -> None:
    """The RFC 5322 message: RSMF headers, a text part that says what it holds, and the
    zip as its one base64 attachment."""
    now = datetime.now(UTC)
    text = (f"{summary['conversations']} conversations, {summary['events']} events of tenant "
            f"{summary['tenant']}, exported by {summary['exported_by']}.\r\n")  # fmt: skip
    headers = [
        ("From", "session-ledger <export@session-ledger.invalid>"),
        ("To", "review <review@session-ledger.invalid>"),
        ("Date", format_datetime(now)), ("Message-ID", make_msgid("rsmf")),
        ("Subject", f"session-ledger export: {summary['conversations']} conversations"),
        ("MIME-Version", "1.0"), ("X-RSMF-Version", VERSION), ("X-RSMF-Generator", PLATFORM),
        *([("X-RSMF-BeginDate", summary["begin"]), ("X-RSMF-EndDate", summary["end"])]
          if summary["begin"] else []),
        ("X-RSMF-EventCount", str(summary["events"])),
        ("Content-Type", f'multipart/mixed; boundary="{BOUNDARY}"'),
    ]  # fmt: skip
    head = "".join(f"{name}: {_header_text(value)}\r\n" for name, value in headers)
    out.write(head.encode("ascii") + b"\r\n")
    out.write(f"--{BOUNDARY}\r\nContent-Type: text/plain; charset=utf-8\r\n"
              "Content-Transfer-Encoding: base64\r\n\r\n".encode())  # fmt: skip
    out.write(base64.encodebytes(text.encode()).replace(b"\n", b"\r\n"))
    out.write(f'--{BOUNDARY}\r\nContent-Type: application/zip; name="rsmf.zip"\r\n'
              "Content-Transfer-Encoding: base64\r\n"
              'Content-Disposition: attachment; filename="rsmf.zip"\r\n\r\n'.encode())  # fmt: skip
    with archive.open("rb") as data:
        while chunk := data.read(B64_LINE * 1024):
            out.write(base64.encodebytes(chunk).replace(b"\n", b"\r\n"))
    out.write(f"--{BOUNDARY}--\r\n".encode())


def _header_text(value: str) -> str:
    """A header value in ASCII (RFC 2047 encoded-words where it is not)."""
    return value if value.isascii() else Header(value, "utf-8").encode()
