"""A tenant-wide export package (e-discovery): every session of a tenant that a query
selects, each as its verifiable JSONL export, one CSV of all their events, and
`manifest.json`, written a session at a time (memory does not grow with messages).

    manifest.sha256 the SHA-256 of manifest.json, as `sha256sum -c` reads it
    manifest.json   {"format": "session-ledger-package", "format_version": 1, "tenant",
                     "query": {prefix, from, to, actor, access_log}, "exported_by",
                     "exported_at",
                     "counts": {"sessions", "events"},
                     "sessions": [{"key", "file", "to_version", "chain_head"}, ...],
                     "checkpoint": the tree head the exports prove against (or null),
                     "files": {name: sha256 hex, ...}}
    sessions/NNNNNN.jsonl   a session's export (projections/export.py), with its proof
    events.csv      key, version, type, recorded_at, actor, reason: one row per event

A query selects whole sessions (each export holds every event, so its chain verifies):
those whose key starts with `prefix` and, given `from`/`to`, that changed in [from, to),
and, given `actor`, that the actor changed in that range (found by the audit search's
index). `verify_package` checks a package offline: every file's SHA-256, nothing added or
missing, each session export whole (and its checkpoint), the manifest's heads and counts.
"""

from __future__ import annotations

import collections
import contextlib
import csv
import hashlib
import io
import json
import tarfile
import tempfile
import uuid
import zlib
from collections.abc import Generator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from session_ledger.domain.ledger import Ledger
from session_ledger.domain.ports import SessionViews
from session_ledger.domain.session import session_id

from . import strict_json, tar_stream
from .export import export_jsonl, plan_export, plan_proof
from .export_verify import verify_export

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

FORMAT = "session-ledger-package"
FORMAT_VERSION = 1
CSV_COLUMNS = ("key", "version", "type", "recorded_at", "actor", "reason")  # (line fields)
KEYS_PAGE = 1000
# The manifest's own digest, so that no byte of it changes unseen (keyless like the chain:
# what a forger cannot recompute is the checkpoint's signature each session proves to).
DIGEST = "manifest.sha256"
TICK = timedelta(microseconds=1)
TEMP_PREFIX = "ledger-package-"  # the temporary folder a streamed package is written in


def selected_keys(
    views: SessionViews, ledger: Ledger, tenant: str, prefix: str,
    start: datetime | None, end: datetime | None, actor: str | None,
) -> Iterator[str]:  # fmt: skip
    """The keys the query selects, in key order (an actor's: in the order first found)."""
    if actor is not None:
        seen: set[str] = set()
        cursor = None
        while True:
            found, cursor = views.evidence.search_events(
                tenant, actor=actor, start=start, end=end, prefix=prefix, cursor=cursor, limit=1000
            )
            for event in found:
                if event.key not in seen:
                    seen.add(event.key)
                    yield event.key
            if cursor is None:
                return
    after: str | None = None
    while keys := ledger.keys(tenant=tenant, prefix=prefix, after=after, limit=KEYS_PAGE):
        for key in keys:
            if start is None and end is None:
                yield key
                continue
            sid = session_id(tenant, key)
            before = _version_before(views, sid, start) if start else 0
            until = (
                _version_before(views, sid, end) if end else ledger.head(key, tenant=tenant).version
            )
            if (until or 0) > (before or 0):  # an event in [start, end)
                yield key
        after = keys[-1]


def _version_before(views: SessionViews, sid: uuid.UUID, moment: datetime) -> int | None:
    """The session's version just before `moment`: 0 before the first moment a time can
    hold (year 1's first microsecond, which has no moment before it)."""
    if moment.replace(tzinfo=None) == datetime.min:
        return 0
    return views.version_at(sid, moment - TICK)


def package_files(
    ledger: Ledger, tenant: str, folder: Path, *, exported_by: str,
    prefix: str = "", start: datetime | None = None, end: datetime | None = None,
    actor: str | None = None, checkpoint_dir: Path | None = None, access_log: bool = False,
) -> Generator[str, None, None]:  # fmt: skip
    """Write the package into `folder` (made, and empty) a file at a time, naming each
    file as soon as it is whole: the sessions' exports in turn, then `events.csv`,
    `manifest.json` and its digest. A consumer may take each file away once named (the
    HTTP stream does): what the writer holds is one page of events and, for the manifest,
    a line per session, never a session's or the package's content. With `access_log`,
    each session's export also carries the access log's entries about it."""
    views = ledger.views
    (folder / "sessions").mkdir(parents=True)
    files: dict[str, str] = {}
    sessions: list[dict[str, Any]] = []
    checkpoint: dict[str, Any] | None = None
    events = 0
    with (folder / "events.csv").open("w", encoding="utf-8", newline="") as table:
        rows = csv.writer(table)
        rows.writerow(CSV_COLUMNS)
        for key in selected_keys(views, ledger, tenant, prefix, start, end, actor):
            plan = plan_export(ledger, key, tenant=tenant, access_log=access_log)
            proof = plan_proof(plan, checkpoint_dir)
            if proof is not None:
                checkpoint = checkpoint or proof["tree_head"]
            name = f"sessions/{len(sessions):06d}.jsonl"
            digest, head = hashlib.sha256(), None
            with (folder / name).open("wb") as out:
                for line in export_jsonl(ledger, plan, proof=proof):
                    out.write(line)
                    digest.update(line)
                    record = json.loads(line)
                    if record["record"] == "event":
                        rows.writerow([key, *(record[c] for c in CSV_COLUMNS[1:])])
                        events += 1
                    elif record["record"] == "trailer":
                        head = record["chain_head"]
            files[name] = digest.hexdigest()
            sessions.append({"key": key, "file": name, "to_version": plan.to_version,
                             "chain_head": head})  # fmt: skip
            yield name
    files["events.csv"] = _sha256(folder / "events.csv")
    yield "events.csv"
    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "tenant": tenant,
        "query": {"prefix": prefix, "from": start and start.isoformat(),
                  "to": end and end.isoformat(), "actor": actor, "access_log": access_log},
        "exported_by": exported_by, "exported_at": datetime.now(UTC).isoformat(),
        "counts": {"sessions": len(sessions), "events": events}, "sessions": sessions,
        "checkpoint": checkpoint, "files": files,
    }  # fmt: skip
    (folder / "manifest.json").write_text(json.dumps(manifest, ensure_ascii=False, indent=1))
    yield "manifest.json"
    (folder / DIGEST).write_text(_digest_line(_sha256(folder / "manifest.json")))
    yield DIGEST


def write_package(ledger: Ledger, tenant: str, folder: Path, **query: Any) -> dict[str, Any]:
    """Write the package into `folder` (made, and empty); its manifest. `query`: the
    keyword arguments of `package_files`."""
    for _ in package_files(ledger, tenant, folder, **query):
        pass
    manifest: dict[str, Any] = json.loads((folder / "manifest.json").read_text())
    return manifest


def stream_package(ledger: Ledger, tenant: str, **query: Any) -> Iterator[bytes]:
    """The package as a tar stream, written in a temporary folder a file at a time and
    each session's file removed once sent: its disk holds one session export and the
    CSV, its memory one chunk. A consumer that stops early must `close()` it (the HTTP
    answer does, however it ends): that closes its files and removes the folder at once,
    where an abandoned generator would keep them until the garbage collector found it."""
    with tempfile.TemporaryDirectory(prefix=TEMP_PREFIX) as tmp:
        folder = Path(tmp) / "package"
        files = package_files(ledger, tenant, folder, **query)
        with contextlib.closing(files):  # (its open CSV closed before the folder goes)
            for name in files:
                yield from tar_stream.member(name, folder / name)
                if name.startswith("sessions/"):
                    (folder / name).unlink()
        yield tar_stream.END


def _digest_line(sha256: str) -> str:
    return f"{sha256}  manifest.json\n"  # the format of `sha256sum -c`


def tar_folder(folder: Path, output: Path) -> None:
    """A package folder as one tar file (written aside, renamed when whole)."""
    paths = sorted(p for p in folder.rglob("*") if p.is_file())
    tar_stream.write_tar(((str(p.relative_to(folder)), p) for p in paths), output)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


class _Files:
    """A package's files, from a folder or a tar, each read as a stream: its regular files
    only (a link could point anywhere, in the package or out of it)."""

    def __init__(self, path: Path) -> None:
        # (closed by `close`: the tar is read member by member while checking)
        self.tar = tarfile.open(path) if path.is_file() else None  # noqa: SIM115
        self.folder = path
        self.members = {} if self.tar is None else {
            m.name: m for m in self.tar.getmembers() if m.isfile()
        }  # fmt: skip

    def close(self) -> None:
        if self.tar is not None:
            self.tar.close()

    def problems(self) -> list[str]:
        """What no package holds, whatever its manifest says: a name twice in a tar (which
        copy a reader takes depends on the reader: one copy could be checked and the other
        extracted), and a link, device or pipe where a file should be."""
        if self.tar is None:
            return [f"{p.relative_to(self.folder)}: a symbolic link, not a file"
                    for p in sorted(self.folder.rglob("*")) if p.is_symlink()]  # fmt: skip
        members = self.tar.getmembers()
        found = collections.Counter(m.name for m in members)
        problems = [f"{name}: {n} members of this name in the tar"
                    for name, n in sorted(found.items()) if n > 1]  # fmt: skip
        problems += [f"{m.name}: not a regular file (tar member type {m.type!r})"
                     for m in members if not (m.isfile() or m.isdir())]  # fmt: skip
        problems += [f"{m.name}: a path outside the package"
                     for m in members if _outside(m.name)]  # fmt: skip
        return problems

    def names(self) -> set[str]:
        if self.tar is not None:
            return set(self.members)
        return {str(p.relative_to(self.folder)) for p in self.folder.rglob("*")
                if p.is_file() and not p.is_symlink()}  # fmt: skip

    def open(self, name: str) -> io.BufferedIOBase:
        if self.tar is not None:
            member = self.tar.extractfile(self.members[name])  # (KeyError: none of the name)
            assert member is not None  # (a regular file's)
            return member  # type: ignore[return-value]
        path = self.folder / name
        if path.is_symlink():
            raise KeyError(name)
        return path.open("rb")


def _outside(name: str) -> bool:
    """Whether a tar member's name would be extracted outside the folder it goes into."""
    path = PurePosixPath(name)
    return path.is_absolute() or ".." in path.parts


def verify_package(path: Path, public_key: Ed25519PublicKey | None = None) -> list[str]:
    """The problems of a package (a folder or a tar): empty when it is whole."""
    if not path.exists():
        return [f"{path}: no such file or folder"]
    try:
        files = _Files(path)
    except (tarfile.TarError, EOFError, zlib.error, OSError):  # (a compressed one cut short)
        return [f"{path}: not a tar file, or one cut short"]
    try:
        return _problems(files, public_key)
    except (tarfile.TarError, EOFError, OSError) as e:  # (a tar cut short, a file unreadable)
        return [f"{path}: could not be read whole: {e}"]
    finally:
        files.close()


def _problems(files: _Files, public_key: Ed25519PublicKey | None) -> list[str]:
    problems = files.problems()
    try:
        with files.open("manifest.json") as f:
            text = f.read()
        with files.open(DIGEST) as f:
            digest_text = f.read()
        manifest = strict_json.loads(text)
    except KeyError as e:
        return [*problems, f"no {e.args[0]} in the package"]
    except (OSError, ValueError) as e:
        return [*problems, f"no readable manifest.json and {DIGEST}: {e}"]
    if digest_text != _digest_line(hashlib.sha256(text).hexdigest()).encode():
        return [*problems, f"{DIGEST} is not the digest of manifest.json"]
    version = manifest.get("format_version")
    if manifest.get("format") != FORMAT or type(version) is not int or version != FORMAT_VERSION:
        return [*problems, f"not a {FORMAT} version {FORMAT_VERSION}"]
    listed = dict(manifest.get("files", {}))
    present = files.names() - {"manifest.json", DIGEST}
    problems += [f"{n}: in the package, not in the manifest" for n in sorted(present - set(listed))]
    problems += [f"{n}: in the manifest, not in the package" for n in sorted(set(listed) - present)]
    for name in sorted(set(listed) & present):
        digest = hashlib.sha256()
        with files.open(name) as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
        if digest.hexdigest() != listed[name]:
            problems.append(f"{name}: its sha256 is not the manifest's")
    events = 0
    for entry in manifest.get("sessions", []):
        if entry.get("file") not in present:
            continue
        with files.open(entry["file"]) as f:
            report = verify_export(f, public_key)
        if not report.ok:
            problems.append(f"{entry['file']}: {report.summary()}")
        elif (report.tenant, report.key, report.chain_head) != (
            manifest.get("tenant"),
            entry.get("key"),
            entry.get("chain_head"),
        ):
            problems.append(f"{entry['file']}: not the session and head the manifest lists")
        events += report.events
    counts = manifest.get("counts", {})
    if counts != {"sessions": len(manifest.get("sessions", [])), "events": events}:
        problems.append(f"the manifest's counts {counts} are not the package's")
    return problems
