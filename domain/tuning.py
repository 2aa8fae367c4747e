"""What a ledger's collaborators read at each call and its host may change while it runs:
the size limits, the tokenizer whose counts the views keep, and the observer."""

from __future__ import annotations

from dataclasses import dataclass

from .inputs import Limits
from .observer import SILENT, LedgerObserver
from .tokens import NamedTokenizer


@dataclass
class Tuning:
    """One object that the ledger and each of its collaborators hold: what `Ledger.limits`,
    `.tokenizer` and `.observer` set here reaches every one of them at once (the API sets
    its observer on a ledger a host built and handed in)."""

    limits: Limits
    tokenizer: NamedTokenizer
    observer: LedgerObserver = SILENT
