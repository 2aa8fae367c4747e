"""The difference between two versions of a session's active history: the runs of
messages added, removed and replaced (what a `set`, a delete or an archive changed)."""

from __future__ import annotations

import json
from difflib import SequenceMatcher
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends
from pydantic import Field

from ..access_log import AccessLoggedRoute
from ..auth import READ
from ..deps import BIG, SessionCall, on_session
from ..errors import ERROR_RESPONSES
from ..inputs import RouteInputs
from ..schemas import HistoryChange, HistoryDiff

router = APIRouter(
    prefix="/v1/sessions", tags=["replay"], responses=ERROR_RESPONSES,
    route_class=AccessLoggedRoute,
)  # fmt: skip
Kind = Literal["added", "removed", "replaced"]
KINDS: dict[str, Kind] = {"insert": "added", "delete": "removed", "replace": "replaced"}


def history_changes(old: list[str], new: list[str]) -> list[HistoryChange]:
    """The runs that differ between two histories of canonical message JSON (equal text is
    an equal message). The common head and tail are matched first: most changes (an
    append, a set that keeps a prefix, one delete) leave little in between to compare."""
    start = 0
    while start < min(len(old), len(new)) and old[start] == new[start]:
        start += 1
    end = 0
    while end < min(len(old), len(new)) - start and old[-1 - end] == new[-1 - end]:
        end += 1
    middle = SequenceMatcher(None, old[start : len(old) - end], new[start : len(new) - end])
    return [
        HistoryChange(
            kind=KINDS[tag], from_position=start + i1, to_position=start + j1,
            removed=_messages(old[start + i1 : start + i2]),
            added=_messages(new[start + j1 : start + j2]),
        )
        for tag, i1, i2, j1, j2 in middle.get_opcodes()
        if tag != "equal"
    ]  # fmt: skip


def _messages(texts: list[str]) -> list[Any]:
    return [json.loads(text) for text in texts]


class DiffInputs(RouteInputs):
    from_version: int = Field(ge=1, le=BIG)
    to_version: int = Field(ge=1, le=BIG)


@router.get("/{key}/diff", response_model=HistoryDiff)
def diff_versions(
    call: Annotated[SessionCall, Depends(on_session(READ, "diff"))],
    inputs: Annotated[DiffInputs, Depends(DiffInputs.parse)],
) -> HistoryDiff:  # fmt: skip
    """What changed in the session's active history from one version to another: runs of
    messages added, removed and replaced, with their positions."""
    key, who, ledger = call
    from_version, to_version = inputs.from_version, inputs.to_version
    old = ledger.history(key, tenant=who.tenant, as_of_version=from_version).json()
    new = ledger.history(key, tenant=who.tenant, as_of_version=to_version).json()
    return HistoryDiff(
        from_version=from_version, to_version=to_version, from_count=len(old),
        to_count=len(new), changes=history_changes(old, new),
    )  # fmt: skip
