"""The difference between two versions of a session's active history: the runs of
messages added, removed and replaced (what a `set`, a delete or an archive changed)."""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Sequence
from difflib import SequenceMatcher
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends
from pydantic import Field

from session_ledger.domain.errors import AnswerTooLarge
from session_ledger.domain.ledger import Ledger

from ..access_logging import AccessLoggedRoute
from ..auth import READ
from ..deps import BIG, SessionCall, on_session
from ..http_errors import ERROR_RESPONSES
from ..route_inputs import RouteInputs
from ..schemas import HistoryChange, HistoryDiff

router = APIRouter(
    prefix="/v1/sessions", tags=["replay"], responses=ERROR_RESPONSES,
    route_class=AccessLoggedRoute,
)  # fmt: skip
Kind = Literal["added", "removed", "replaced"]
KINDS: dict[str, Kind] = {"insert": "added", "delete": "removed", "replace": "replaced"}
Texts = Callable[[str, int, int], list[str]]  # ("old" or "new", start, stop) -> a run's JSON


def history_changes(
    old: Sequence[Hashable], new: Sequence[Hashable], texts: Texts | None = None
) -> list[HistoryChange]:
    """The runs that differ between two histories: of canonical message JSON (equal text
    is an equal message), or of keys of it with `texts(which, start, stop)` giving the
    JSON of a run ("old" or "new"). The common head and tail are matched first: most
    changes (an append, a set that keeps a prefix, one delete) leave little in between
    to compare."""
    start = 0
    while start < min(len(old), len(new)) and old[start] == new[start]:
        start += 1
    end = 0
    while end < min(len(old), len(new)) - start and old[-1 - end] == new[-1 - end]:
        end += 1
    middle = SequenceMatcher(None, old[start : len(old) - end], new[start : len(new) - end])

    def run(which: str, i: int, j: int) -> list[str]:
        if texts is not None:
            return texts(which, i, j)
        return [str(text) for text in (old if which == "old" else new)[i:j]]

    return [
        HistoryChange(
            kind=KINDS[tag], from_position=start + i1, to_position=start + j1,
            removed=_messages(run("old", start + i1, start + i2)),
            added=_messages(run("new", start + j1, start + j2)),
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
    room = [ledger.limits.max_answer_bytes]  # the answer's bytes, both sides' runs together
    old = _History(ledger, key, who.tenant, from_version, room)
    new = _History(ledger, key, who.tenant, to_version, room)
    changes = history_changes(old.keys, new.keys, lambda which, i, j: (
        old if which == "old" else new).texts(i, j))  # fmt: skip
    return HistoryDiff(
        from_version=from_version, to_version=to_version, from_count=len(old.keys),
        to_count=len(new.keys), changes=changes,
    )  # fmt: skip


class _History:
    """A history at a version as the diff holds it: a key and a size per message, read a
    page at a time (never the whole history's text); the text of a run read when asked,
    and refused (AnswerTooLarge) past what one answer holds."""

    def __init__(
        self, ledger: Ledger, key: str, tenant: str, version: int, room: list[int]
    ) -> None:
        self.ledger, self.key, self.tenant, self.version = ledger, key, tenant, version
        self.room = room
        self.keys: list[int] = []  # Python's keyed string hash: equal text, equal key
        self.sizes: list[int] = []
        page = ledger.page(key, tenant=tenant, as_of_version=version)
        while True:
            for text in page.json():
                self.keys.append(hash(text))
                self.sizes.append(len(text))
            if page.next_after is None:
                break
            page = ledger.page(key, tenant=tenant, after=page.next_after, as_of_version=version)

    def texts(self, start: int, stop: int) -> list[str]:
        self.room[0] -= sum(self.sizes[start:stop])
        if self.room[0] < 0:
            raise AnswerTooLarge(
                f"the changes hold over {self.ledger.limits.max_answer_bytes} bytes of "
                "messages, more than one answer holds: compare nearer versions, or read "
                "the histories page by page"
            )
        found: list[str] = []
        at: dict[str, Any] = {"offset": start}
        while True:  # (a page may end before its limit: its cursor goes on)
            page = self.ledger.page(self.key, tenant=self.tenant, limit=stop - start - len(found),
                                    as_of_version=self.version, **at)  # fmt: skip
            found += page.json()
            if len(found) >= stop - start or page.next_after is None:
                return found[: stop - start]
            at = {"after": page.next_after}
