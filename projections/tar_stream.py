"""A tar archive written as a stream of bytes (POSIX pax format), a file at a time, so an
archive of any size is sent or written holding one chunk, never the whole archive nor a
whole member (the standard library's `tarfile` copies each member through one buffer)."""

from __future__ import annotations

import tarfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

BLOCK = 512
CHUNK_BYTES = 64 * 1024  # bytes read (and yielded) at a time
END = bytes(2 * BLOCK)  # two zero blocks close an archive


def member(name: str, path: Path, mtime: float | None = None) -> Iterator[bytes]:
    """One file as a tar member: its header, its bytes in chunks cut at line ends (so a
    consumer counting lines never sees one split), and the padding to a whole block."""
    info = tarfile.TarInfo(name)
    info.size = path.stat().st_size
    info.mtime = int(time.time() if mtime is None else mtime)
    info.mode = 0o644
    yield info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
    with path.open("rb") as f:
        yield from chunks(f)
    if info.size % BLOCK:
        yield bytes(BLOCK - info.size % BLOCK)


def chunks(parts: Iterable[bytes]) -> Iterator[bytes]:
    """`parts` (lines) joined into chunks of about CHUNK_BYTES, in order."""
    pending: list[bytes] = []
    size = 0
    for part in parts:
        pending.append(part)
        size += len(part)
        if size >= CHUNK_BYTES:
            yield b"".join(pending)
            pending, size = [], 0
    if pending:
        yield b"".join(pending)


def write_tar(members: Iterator[tuple[str, Path]], output: Path) -> None:
    """The members as one tar file (written aside, renamed when whole)."""
    partial = output.with_name(output.name + ".partial")
    with partial.open("wb") as out:
        for name, path in members:
            for chunk in member(name, path):
                out.write(chunk)
        out.write(END)
    partial.replace(output)
