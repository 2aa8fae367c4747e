"""A SQLite database file made private to its owner before SQLite first opens it.

SQLite makes a database file with the mode the process's umask leaves (usually 0644:
everyone on the host may read the conversations), and makes its `-wal` and `-shm` files
with the database file's mode. So the file is made here first, 0600, by whichever
opens it first (the ledger, the key or the limit store, a check of its settings). The
umask is left as it is: it is the host process's, not a library's to change.
"""

from __future__ import annotations

import contextlib
import os
from urllib.parse import parse_qs, unquote, urlsplit

PRIVATE = 0o600


def create_private(db_name: str) -> None:
    """Make the database `db_name` names (a path, or a `file:` URI as sqlite3 opens it
    with `uri=True`) as an empty file of mode 0600, unless it exists or lives in memory."""
    path = db_name
    if db_name.startswith("file:"):
        parts = urlsplit(db_name)
        if parse_qs(parts.query).get("mode") == ["memory"]:
            return
        path = unquote(parts.path)
    if not path or path == ":memory:":
        return
    # OSError: there already; or not to be made here, which SQLite's own open then reports.
    with contextlib.suppress(OSError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE))
