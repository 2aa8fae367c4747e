"""Encryption at rest, per session: each session's content sealed under its own data key.

With a master key configured, a session gets a random AES-256-GCM data key when it
starts, kept in `ledger_data_keys` wrapped by the newest master key (several master
keys by id: a rotation adds one; every key a stored data key names must stay
configured). What is sealed is the content: the `messages` / `message` fields of an
event's stored state (`SealingMapper`, at the stored-event boundary) and the body of
every view row (`seal_body`, from `view_writes`). Ids, versions, topics, times, actors,
counts and the hash chain stay clear, so a window still reads O(window) rows (opened
after the read) and `verify` needs no key. Erasure deletes the data key in the
transaction that records it: what was sealed can no longer be opened.

Stored forms: an event field `{"sealed": base64(nonce | ciphertext), "n": messages, "c":
commitment}`, a view body `~` + the same base64. Both are bound to their session
(associated data). An event field seals a random salt before the field's JSON, and `c`
is SHA-256(salt | JSON), in the clear: the chain, and so a signed checkpoint, covers it,
and an export that opens the field gives the salt (`openings`), so `verify-export` proves
the readable content with no key. Erased, the salt is gone with the key: `c` confirms no
guess. (Fields sealed before commitments have no `c`: checked by their shape only.)

A keyed write's request digest (what tells a retry from another write under the same
idempotency key) is stored as `m:<master key id>:` + an HMAC of the request's SHA-256
under a key derived from that master key (`MasterKeys.keyed_digest`): the plain SHA-256
would confirm a guess of the request's content to anyone holding the database.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from eventsourcing.persistence import Mapper, StoredEvent
from eventsourcing.utils import get_topic

from session_ledger.domain.errors import LedgerError, StoreNotReady
from session_ledger.domain.event_mapper import event_state

SEALED_BODY = "~"  # a clear body starts with `"` or `{`
SEALED_FIELDS = ("messages", "message", "deltas")  # the event fields that hold content
NONCE_BYTES = 12
SEALED_OVERHEAD = NONCE_BYTES + 16  # a sealed value's nonce and AES-GCM tag
KEY_BYTES = 32
SALT_BYTES = 16  # of an event field's commitment
KEYED_DIGEST = "m:"  # a request digest stored as an HMAC under a master key's digest key
_DIGEST_KEY_LABEL = b"session-ledger request digest"
# What an erased message reads as in the audit trail and the export (its content gone).
ERASED_MESSAGE: dict[str, Any] = {"role": "system", "blocks": [], "additional_kwargs": {},
                                  "erased": True}  # fmt: skip


class SealError(LedgerError):
    """Sealed content that does not open: a wrong or missing key, or altered bytes."""

    code = "seal_error"


class MasterKeys:
    """The configured master keys by id; the last one given wraps new data keys."""

    def __init__(self, keys: Mapping[str, bytes]) -> None:
        if not keys:
            raise StoreNotReady("no master key given")
        self.keys = {kid: AESGCM(key) for kid, key in keys.items()}
        self.newest = list(keys)[-1]
        self._digest_keys = {
            kid: hmac.digest(key, _DIGEST_KEY_LABEL, hashlib.sha256) for kid, key in keys.items()
        }

    @classmethod
    def parse(cls, text: str) -> MasterKeys:
        """`base64` (one key, id "1") or `id:base64,id:base64,...` (oldest first), each
        32 bytes; StoreNotReady with what is wrong otherwise."""
        keys: dict[str, bytes] = {}
        for n, item in enumerate(part.strip() for part in text.replace("\n", ",").split(",")):
            if not item:
                continue
            kid, _, encoded = item.rpartition(":")
            kid = kid or str(n + 1)
            try:
                key = base64.b64decode(encoded, validate=True)
            except binascii.Error:
                raise StoreNotReady(f"master key {kid!r} is not base64") from None
            if len(key) != KEY_BYTES:
                raise StoreNotReady(
                    f"master key {kid!r} is {len(key)} bytes; AES-256 needs {KEY_BYTES}"
                )
            keys[kid] = key
        return cls(keys)

    def keyed_digest(self, digest: str, kid: str | None = None) -> str:
        """A request's digest as stored: an HMAC under master key `kid`'s digest key (by
        default the newest's), which names the key."""
        kid = self.newest if kid is None else kid
        mac = hmac.new(self._digest_keys[kid], digest.encode(), hashlib.sha256).hexdigest()
        return f"{KEYED_DIGEST}{kid}:{mac}"

    def same_request(self, stored: str | None, digest: str) -> bool:
        """Whether `stored` is the digest of the request whose SHA-256 is `digest`: keyed
        under the master key it names (one rotated out since no longer answers for it),
        or plain (stored before digests were keyed)."""
        if stored is None or not stored.startswith(KEYED_DIGEST):
            return stored == digest
        kid = stored[len(KEYED_DIGEST) :].rpartition(":")[0]
        return kid in self._digest_keys and hmac.compare_digest(
            stored, self.keyed_digest(digest, kid)
        )

    def wrap(self, session_id: uuid.UUID, data_key: bytes) -> tuple[str, bytes]:
        nonce = os.urandom(NONCE_BYTES)
        return self.newest, nonce + self.keys[self.newest].encrypt(
            nonce, data_key, session_id.bytes
        )

    def unwrap(self, session_id: uuid.UUID, kid: str, wrapped: bytes) -> bytes:
        if kid not in self.keys:
            raise StoreNotReady(f"the data key of session {session_id} is wrapped by master "
                                f"key {kid!r}, which is not configured")  # fmt: skip
        try:
            return self.keys[kid].decrypt(wrapped[:NONCE_BYTES], wrapped[NONCE_BYTES:],
                                          session_id.bytes)  # fmt: skip
        except InvalidTag:
            raise SealError(f"master key {kid!r} does not open session {session_id}'s data "
                            "key") from None  # fmt: skip


class DataKeyStore(Protocol):
    """Where wrapped data keys are kept (`key_rows.DataKeyTable`)."""

    def data_key_row(self, session_id: uuid.UUID) -> tuple[str, bytes] | None: ...

    def add_data_key_row(
        self, session_id: uuid.UUID, kid: str, wrapped: bytes, created: datetime
    ) -> None: ...

    def holds_keys(self) -> bool: ...


class DataKeys:
    """Each session's data key: made when it starts, found in the key table after, kept
    in memory per process (a bounded cache)."""

    cache_size = 10_000

    def __init__(self, master: MasterKeys, table: DataKeyStore, transcoder: Any) -> None:
        self.master = master
        self.table = table
        self.transcoder = transcoder  # the stored events' (encrypt-existing reseals with it)
        self._cache: dict[uuid.UUID, AESGCM] = {}
        self._erased: set[uuid.UUID] = set()

    def key(self, session_id: uuid.UUID, *, create: bool = False) -> AESGCM | None:
        """The session's data key; None when it has none (started before encryption, or
        erased). `create`: make one if it has none (a session that starts)."""
        if session_id in self._cache:
            return self._cache[session_id]
        row = self.table.data_key_row(session_id)
        if row is None and create:
            kid, wrapped = self.master.wrap(session_id, AESGCM.generate_key(bit_length=256))
            # Committed on its own, before the session's first write: a writer that races
            # to start the same session keeps the key stored first (a key whose session
            # write then fails holds nothing).
            self.table.add_data_key_row(session_id, kid, wrapped, datetime.now(UTC))
            row = self.table.data_key_row(session_id)
        if row is None:
            # Not remembered: a session stored clear may be sealed by `encrypt-existing`
            # (another process) at any time, and its next write must then be sealed. The
            # write that races it fails on its version and looks again.
            return None
        key = AESGCM(self.master.unwrap(session_id, *row))
        if len(self._cache) >= self.cache_size:
            self._cache.clear()
        self._cache[session_id] = key
        return key

    def opening_key(self, session_id: uuid.UUID) -> AESGCM | None:
        """The key that opens sealed content read back; None once erased. A session with
        sealed content and no key was erased, for good: that is remembered, so reading
        its events back does not look the key up once per event."""
        if session_id in self._erased:
            return None
        key = self.key(session_id)
        if key is None:
            if len(self._erased) >= self.cache_size:
                self._erased.clear()
            self._erased.add(session_id)
        return key

    def forget(self, session_id: uuid.UUID) -> None:
        self._cache.pop(session_id, None)

    def recheck(self, session_id: uuid.UUID) -> None:
        """Drop the session's cached key if its row is gone: another process may have
        erased the session since this one cached it (one key-row read, only for a key
        this process holds)."""
        if session_id in self._cache and self.table.data_key_row(session_id) is None:
            self._cache.pop(session_id, None)


def seal(key: AESGCM, session_id: uuid.UUID, data: bytes) -> str:
    nonce = os.urandom(NONCE_BYTES)
    sealed = nonce + key.encrypt(nonce, data, session_id.bytes)
    return base64.b64encode(sealed).decode("ascii")


def unseal(key: AESGCM, session_id: uuid.UUID, text: str) -> bytes:
    raw = base64.b64decode(text)
    try:
        return key.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], session_id.bytes)
    except InvalidTag:
        raise SealError(f"sealed content of session {session_id} does not open") from None


def seal_body(key: AESGCM, session_id: uuid.UUID, body: str) -> str:
    return SEALED_BODY + seal(key, session_id, body.encode("utf-8"))


def open_bodies(
    keys: DataKeys | None, session_id: uuid.UUID, rows: Sequence[Sequence[Any]], at: int = 1
) -> Sequence[Sequence[Any]]:
    """`rows` with their body (column `at`) opened where it is sealed."""
    if keys is None or not any(r[at][:1] == SEALED_BODY for r in rows):
        return rows
    key = keys.key(session_id)
    if key is None:
        raise SealError(f"session {session_id} has sealed rows and no data key")
    return [
        (*r[:at], unseal(key, session_id, r[at][1:]).decode("utf-8"), *r[at + 1 :])
        if r[at][:1] == SEALED_BODY
        else r
        for r in rows
    ]


def field_json(value: object) -> bytes:
    """The bytes an event field's value is sealed as, and committed to."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def commitment(salt: bytes, data: bytes) -> str:
    """The clear commitment to a sealed field's JSON (`field_json`): SHA-256(salt | it)."""
    return hashlib.sha256(salt + data).hexdigest()


def seal_fields(state: dict[str, Any], key: AESGCM, session_id: uuid.UUID) -> bool:
    """Seal the content fields of an event's `state` in place (those not sealed yet), each
    with its salt and commitment; whether any was."""
    changed = False
    for f in SEALED_FIELDS:
        value = state.get(f)
        # (a null holds no content: an abort that kept no message stays `null`, and reads
        # as that once erased)
        if value is None or (isinstance(value, dict) and "sealed" in value):
            continue
        salt = os.urandom(SALT_BYTES)
        data = field_json(value)
        envelope: dict[str, Any] = {
            "sealed": seal(key, session_id, salt + data),
            "c": commitment(salt, data),
        }
        if isinstance(value, list):
            envelope["n"] = len(value)
        state[f] = envelope
        changed = True
    return changed


def erased_value(field: str, envelope: Mapping[str, Any]) -> Any:
    """What a sealed field reads as once its key is gone: its shape, no content. (A null
    was sealed too before 2026-12-07: its sealed JSON, `null`, is the one of 4 bytes a
    field holds, a message being an object of a role at least.)"""
    if field == "deltas":
        return [""] * envelope.get("n", 0)
    if "n" in envelope:
        return [dict(ERASED_MESSAGE) for _ in range(envelope["n"])]
    if len(base64.b64decode(envelope["sealed"])) - SEALED_OVERHEAD in (4, SALT_BYTES + 4):
        return None  # `null`, sealed with a salt or (before commitments) without
    return dict(ERASED_MESSAGE)


class SealingMapper(Mapper[uuid.UUID]):
    """The library's mapper, sealing the content fields of each event of a session that
    has a data key (a session that starts gets one)."""

    def __init__(self, transcoder: Any, keys: DataKeys) -> None:
        super().__init__(transcoder)
        self.data_keys = keys

    def to_stored_event(self, domain_event: Any) -> StoredEvent:
        # The library's `to_stored_event`, with the content fields sealed (this store
        # configures no library cipher or compressor).
        sid, version, state = event_state(domain_event)
        fields = [f for f in SEALED_FIELDS if f in state]
        starts = type(domain_event).__name__ == "SessionStarted"
        key = self.data_keys.key(sid, create=starts) if fields or starts else None
        if key is not None:
            seal_fields(state, key, sid)
        return StoredEvent(
            originator_id=sid,
            originator_version=version,
            topic=get_topic(type(domain_event)),
            state=self.transcoder.encode(state),
        )

    def to_domain_event(self, stored_event: StoredEvent) -> Any:
        return self.opened_event(stored_event)[0]

    def opened_event(self, stored_event: StoredEvent) -> tuple[Any, dict[str, str]]:
        """The domain event with its sealed fields opened, and the salt (hex) of each field
        opened that has a commitment: what an export gives to prove the content."""
        event = super().to_domain_event(stored_event)
        state, openings = vars(event), {}
        for f in SEALED_FIELDS:
            value = state.get(f)
            if isinstance(value, dict) and "sealed" in value:
                state[f], salt = self._opened(event.originator_id, value, f)
                if salt is not None:
                    openings[f] = salt.hex()
        return event, openings

    def _opened(
        self, session_id: uuid.UUID, envelope: dict[str, Any], field: str
    ) -> tuple[Any, bytes | None]:
        key = self.data_keys.opening_key(session_id)
        if key is None:  # erased: the content is gone, its shape is not
            return erased_value(field, envelope), None
        data = unseal(key, session_id, envelope["sealed"])
        if "c" not in envelope:  # (sealed before commitments: the JSON alone)
            return json.loads(data), None
        return json.loads(data[SALT_BYTES:]), data[:SALT_BYTES]


class KeylessSeals:
    """Whether the store of a process given no master key holds sealed sessions: asked of
    the data key table once, at the first read that could meet sealed content (the table
    is made by then)."""

    def __init__(self, holds_keys: Callable[[], bool]) -> None:
        self._holds_keys = holds_keys
        self._held: bool | None = None

    def held(self) -> bool:
        if self._held is None:
            self._held = self._holds_keys()
        return self._held


def no_master_key(session_id: uuid.UUID) -> StoreNotReady:
    """The refusal of sealed content in a process given no master key."""
    return StoreNotReady(
        f"session {session_id} is sealed at rest and no master key is configured here: set "
        "LEDGER_MASTER_KEY or LEDGER_MASTER_KEY_FILE (`verify` needs none)"
    )


class KeylessMapper(Mapper[uuid.UUID]):
    """The mapper of a process given no master key: events stored and read as `inner`
    does, and a sealed field met on the way out refused naming the setting (read as
    clear, it was a traceback deep in the domain: `unhashable type: 'slice'`)."""

    def __init__(self, inner: Mapper[uuid.UUID], keyless: KeylessSeals) -> None:
        super().__init__(inner.transcoder)
        self.inner, self.keyless = inner, keyless
        self.to_stored_event = inner.to_stored_event  # type: ignore[method-assign]  # (as is)

    def to_domain_event(self, stored_event: StoredEvent) -> Any:
        event = self.inner.to_domain_event(stored_event)
        if self.keyless.held():
            state = vars(event)
            for f in SEALED_FIELDS:
                value = state.get(f)
                if isinstance(value, dict) and "sealed" in value:
                    raise no_master_key(event.originator_id)
        return event


class SealingFactory:
    """What the ledger's persistence modules add to the library's factories: with
    `MASTER_KEYS` in the environment, one `DataKeys` that the sealing mapper and the
    views' content share."""

    env: Any
    _data_keys: DataKeys | None
    _keyless: KeylessSeals

    def data_keys(self, table: DataKeyStore, transcoder: Any) -> DataKeys | None:
        """The data keys (None: no master key configured), made once, with the store's key
        table and the stored events' transcoder (the mapper's: the library makes the mapper
        before the recorder)."""
        if not hasattr(self, "_data_keys"):
            text = self.env.get("MASTER_KEYS")
            self._data_keys = DataKeys(MasterKeys.parse(text), table, transcoder) if text else None
        return self._data_keys

    def keyless(self, table: DataKeyStore) -> KeylessSeals:
        """With no master key: whether the store holds sealed sessions, one answer shared
        by the mapper and the views' content."""
        if not hasattr(self, "_keyless"):
            self._keyless = KeylessSeals(table.holds_keys)
        return self._keyless

    def sealing_mapper(
        self, table: DataKeyStore, transcoder: Any, plain: Mapper[uuid.UUID]
    ) -> Mapper[uuid.UUID]:
        """The store's mapper: sealing with a master key, else `plain` refusing what is
        sealed."""
        keys = self.data_keys(table, transcoder)
        if keys is not None:
            return SealingMapper(transcoder, keys)
        return KeylessMapper(plain, self.keyless(table))
