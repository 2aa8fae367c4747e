"""What a ledger's collaborators read at each call and its host may change while it runs:
the size limits, the tokenizer whose counts the views keep, and the observer."""

from __future__ import annotations

from dataclasses import dataclass

from .inputs import Limits
from .observer import SILENT, LedgerObserver
from .tokens import NamedTokenizer

# The ledger's defaults, each written here once: `Ledger(...)` takes them when its host
# names none, and the API's settings (api/settings.py) take them as theirs.
DEFAULT_TENANT = "default"  # the tenant of a call that names none
TOKENIZER = "cl100k_base"  # the tokenizer whose counts the views keep
TOKEN_LIMIT = 3000  # tokens of a context window (`get`) that names no limit
WRITE_RETRIES = 100  # attempts of a write that races other writers
SNAPSHOT_INTERVAL = 200  # a snapshot of a session's write state every N events
STREAM_FLUSH_BYTES = 1024  # a stream's deltas are recorded once this many bytes wait
STREAM_FLUSH_MS = 250  # ...or once this many ms passed since the last batch


@dataclass
class Tuning:
    """One object that the ledger and each of its collaborators hold: what `Ledger.limits`,
    `.tokenizer` and `.observer` set here reaches every one of them at once (the API sets
    its observer on a ledger a host built and handed in)."""

    limits: Limits
    tokenizer: NamedTokenizer
    observer: LedgerObserver = SILENT
