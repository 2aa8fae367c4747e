"""The difference between two versions of a session's active history: the runs of
messages added, removed and replaced (what a `set`, a delete or an archive changed).

What one diff costs is bounded whatever the histories hold: each side holds at most
`MAX_DIFF_MESSAGES` messages (a longer one is refused before any message is read), the
comparison takes at most `MAX_DIFF_STEPS` steps (histories that differ in so many places
are refused), and the changes' messages at most `max_answer_bytes` (refused before their
text is read). Each history is read a page at a time, once to compare, and the text of
the runs that differ from the pages of that read or, for histories too large to hold,
in one more pass over the pages that hold them."""

from __future__ import annotations

import json
from collections.abc import Hashable, Sequence
from difflib import Match, SequenceMatcher
from itertools import accumulate
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Response
from pydantic import Field

from session_ledger.domain.errors import AnswerTooLarge, LedgerError
from session_ledger.domain.ledger import Ledger

from ..access_logging import AccessLoggedRoute
from ..auth import READ
from ..deps import BIG, SessionCall, on_session
from ..http_errors import ERROR_RESPONSES
from ..route_inputs import RouteInputs
from ..schemas import HistoryChange, HistoryDiff
from ..session_responses import counted, encoded

router = APIRouter(
    prefix="/v1/sessions", tags=["replay"], responses=ERROR_RESPONSES,
    route_class=AccessLoggedRoute,
)  # fmt: skip
Kind = Literal["added", "removed", "replaced"]
KINDS: dict[str, Kind] = {"insert": "added", "delete": "removed", "replace": "replaced"}
# The most messages a history compared holds (docs/http-api.md#pages): reading a key
# of each, and the comparison, grow with them.
MAX_DIFF_MESSAGES = 10_000
# The most steps of the comparison (`_Matcher`): about half a second of CPU. Two random
# orderings of 10,000 messages take about 7 million; a history whose neighbouring pairs
# were all swapped, compared with the original, would take quadratic time (10,000
# messages: 125 million, over 6 seconds) and is refused instead.
MAX_DIFF_STEPS = 10_000_000
Run = tuple[str, int, int, int, int]  # (opcode, old start, old stop, new start, new stop)


def changed_runs(
    old: Sequence[Hashable], new: Sequence[Hashable], steps: int | None = None
) -> list[Run]:
    """The runs that differ between two histories (of message JSON, or of keys of it: an
    equal key is an equal message), as difflib's opcodes with positions in the whole
    histories. The common head and tail are matched first: most changes (an append, a set
    that keeps a prefix, one delete) leave little in between to compare. AnswerTooLarge
    past `steps` steps of the comparison (default `MAX_DIFF_STEPS`)."""
    start = 0
    while start < min(len(old), len(new)) and old[start] == new[start]:
        start += 1
    end = 0
    while end < min(len(old), len(new)) - start and old[-1 - end] == new[-1 - end]:
        end += 1
    steps = MAX_DIFF_STEPS if steps is None else steps
    middle = _Matcher(old[start : len(old) - end], new[start : len(new) - end], steps)
    return [
        (tag, start + i1, start + i2, start + j1, start + j2)
        for tag, i1, i2, j1, j2 in middle.get_opcodes()
        if tag != "equal"
    ]


def history_changes(old: Sequence[str], new: Sequence[str]) -> list[HistoryChange]:
    """The changes between two histories of canonical message JSON (equal text is an
    equal message)."""
    runs = changed_runs(old, new)
    return _changes(runs, [list(old[i1:i2]) for _, i1, i2, _, _ in runs],
                    [list(new[j1:j2]) for _, _, _, j1, j2 in runs])  # fmt: skip


def _changes(
    runs: list[Run], removed: list[list[str]], added: list[list[str]]
) -> list[HistoryChange]:
    return [
        HistoryChange(
            kind=KINDS[tag], from_position=i1, to_position=j1,
            removed=_messages(gone), added=_messages(new),
        )
        for (tag, i1, _, j1, _), gone, new in zip(runs, removed, added, strict=True)
    ]  # fmt: skip


def _messages(texts: list[str]) -> list[Any]:
    return [json.loads(text) for text in texts]


class _Matcher(SequenceMatcher[Hashable]):
    """difflib's SequenceMatcher, counting the steps of its search for the longest
    matches: each search looks at every item of its range of `a` (4 steps each, what one
    costs beside one step) and at every place of `b` that item is found (one step each;
    items difflib treats as junk are found nowhere). Past `steps`, AnswerTooLarge, found
    before the search that would pass it is made. The matches are difflib's, unchanged."""

    b2j: dict[Hashable, list[int]]  # (difflib's: where each item of `b` is, junk left out)

    def __init__(self, a: Sequence[Hashable], b: Sequence[Hashable], steps: int) -> None:
        super().__init__(None, a, b)
        self._found = list(accumulate((len(self.b2j.get(x, ())) for x in a), initial=0))
        self._steps = steps

    def find_longest_match(
        self, alo: int = 0, ahi: int | None = None, blo: int = 0, bhi: int | None = None
    ) -> Match:
        ahi = len(self._found) - 1 if ahi is None else ahi
        self._steps -= 4 * (ahi - alo) + self._found[ahi] - self._found[alo]
        if self._steps < 0:
            raise AnswerTooLarge(
                "the two histories differ in too many places to compare in one answer: "
                "compare nearer versions, or read the histories page by page"
            )
        return super().find_longest_match(alo, ahi, blo, bhi)


class DiffInputs(RouteInputs):
    from_version: int = Field(ge=1, le=BIG)
    to_version: int = Field(ge=1, le=BIG)


@router.get("/{key}/diff", response_model=HistoryDiff)
def diff_versions(
    call: Annotated[SessionCall, Depends(on_session(READ, "diff"))],
    inputs: Annotated[DiffInputs, Depends(DiffInputs.parse)],
) -> Response:  # fmt: skip
    """What changed in the session's active history from one version to another: runs of
    messages added, removed and replaced, with their positions. Each history may hold at
    most 10,000 messages, and the changes' messages at most the server's answer bytes
    (LEDGER_MAX_ANSWER_BYTES); more is 413 answer_too_large."""
    key, who, ledger = call
    from_version, to_version = inputs.from_version, inputs.to_version
    room = [ledger.limits.max_answer_bytes]  # what the two histories may hold of text
    old = _History(ledger, key, who.tenant, from_version, room)
    new = _History(ledger, key, who.tenant, to_version, room)
    runs = changed_runs(old.keys, new.keys)
    size = sum(sum(old.sizes[i1:i2]) + sum(new.sizes[j1:j2]) for _, i1, i2, j1, j2 in runs)
    if size > ledger.limits.max_answer_bytes:
        raise AnswerTooLarge(
            f"the changes hold over {ledger.limits.max_answer_bytes} bytes of "
            "messages, more than one answer holds: compare nearer versions, or read "
            "the histories page by page"
        )
    removed = old.texts([(i1, i2) for _, i1, i2, _, _ in runs])
    added = new.texts([(j1, j2) for _, _, _, j1, j2 in runs])
    answer = encoded(HistoryDiff(
        from_version=from_version, to_version=to_version, from_count=len(old.keys),
        to_count=len(new.keys), changes=_changes(runs, removed, added),
    ))  # fmt: skip
    return counted(answer, sum(map(len, removed)) + sum(map(len, added)))


class _History:
    """A history at a version as the diff holds it: a key and a size per message, read a
    page at a time, and the messages' text while the two histories' together fit `room`
    (one answer's bytes); else the text of the runs asked for is read again (`texts`).
    A history of more than `MAX_DIFF_MESSAGES` is refused (AnswerTooLarge) unread."""

    def __init__(
        self, ledger: Ledger, key: str, tenant: str, version: int, room: list[int]
    ) -> None:
        self.ledger, self.key, self.tenant, self.version = ledger, key, tenant, version
        count = ledger.head(key, tenant=tenant, as_of_version=version).message_count
        if count > MAX_DIFF_MESSAGES:
            raise AnswerTooLarge(
                f"the history at version {version} holds {count} messages, more than a "
                f"diff compares ({MAX_DIFF_MESSAGES}): read the histories page by page"
            )
        self.keys: list[int] = []  # Python's keyed string hash: equal text, equal key
        self.sizes: list[int] = []
        self.held: list[str] | None = []  # every message's text, or None: not held
        page = ledger.page(key, tenant=tenant, as_of_version=version)
        while True:
            found = page.json()
            for text in found:
                self.keys.append(hash(text))
                self.sizes.append(len(text))
            if self.held is not None:
                room[0] -= sum(map(len, found))
                if room[0] < 0:
                    self.held = None
                else:
                    self.held += found
            if page.next_after is None:
                break
            page = ledger.page(key, tenant=tenant, after=page.next_after, as_of_version=version)

    def texts(self, runs: list[tuple[int, int]]) -> list[list[str]]:
        """The text of each run (start, stop), in order and apart: from the held texts,
        or else read in one pass from the first run on, a page from the start of a run
        reaching the runs that follow it within the page (`_reach`), the next page after
        it by its cursor, or from the next run's start past a gap."""
        if self.held is not None:
            return [self.held[start:stop] for start, stop in runs]
        found: list[list[str]] = []
        page: list[str] = []
        first, following = 0, None  # where `page` starts, and its cursor (next_after)
        for number, (start, stop) in enumerate(runs):
            run: list[str] = []
            while start < stop:
                if not first <= start < first + len(page):
                    ends = start == first + len(page) and following is not None
                    at = {"after": following} if ends else {"offset": start}
                    read = self.ledger.page(
                        self.key, tenant=self.tenant, as_of_version=self.version,
                        limit=self._reach(runs, number, start), **at,
                    )  # fmt: skip
                    first, page, following = start, read.json(), read.next_after
                    if not page:
                        raise LedgerError(f"session {self.key!r}: the history at version "
                                          f"{self.version} ends before {start}")  # fmt: skip
                taken = page[start - first : stop - first]
                run += taken
                start += len(taken)
            found.append(run)
        return found

    def _reach(self, runs: list[tuple[int, int]], number: int, start: int) -> int:
        """The messages a page read at `start` (in run `number`) takes: to the end of the
        last run that starts within a page's messages of it, read or not, so that a page
        reaches the runs near it and no message past them."""
        most = self.ledger.limits.max_page_messages
        stop = runs[number][1]
        for later, end in runs[number + 1 :]:
            if later >= start + most:
                break
            stop = end
        return min(stop - start, most)
