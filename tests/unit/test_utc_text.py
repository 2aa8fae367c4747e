"""utc_text: the stored time text of any datetime is isoformat's in UTC, six digits of
microseconds and "Z" (orjson writes it; a zero microsecond, a zone other than UTC and a
subclass of datetime included)."""

from __future__ import annotations

import random
import zoneinfo
from datetime import UTC, datetime, timedelta, timezone

from session_ledger.projections.sql import TIME_FORMAT, utc_text


class _Moment(datetime):
    pass


def _isoformat_text(value: datetime) -> str:
    return value.astimezone(UTC).isoformat(timespec="microseconds")[:-6] + "Z"


def test_utc_text_is_isoformats_in_utc() -> None:
    rng = random.Random(53)
    zones = [UTC, timezone(timedelta(hours=5, minutes=30)),
             zoneinfo.ZoneInfo("America/New_York"), None]  # fmt: skip
    for i in range(20_000):
        value = datetime(
            rng.randint(2, 9998), rng.randint(1, 12), rng.randint(1, 28), rng.randint(0, 23),
            rng.randint(0, 59), rng.randint(0, 59), rng.choice([0, rng.randint(0, 999_999)]),
            tzinfo=rng.choice(zones),
        )  # fmt: skip
        if i % 3 == 0:
            value = _Moment.fromisoformat(value.isoformat())
        text = utc_text(value)
        assert text == _isoformat_text(value), value
        assert datetime.strptime(text, TIME_FORMAT).replace(tzinfo=UTC) == value.astimezone(UTC)


def test_utc_text_keeps_four_digit_years_and_zero_microseconds() -> None:
    assert utc_text(datetime(1, 1, 1, tzinfo=UTC)) == "0001-01-01T00:00:00.000000Z"
    assert utc_text(datetime(999, 12, 31, 23, 59, 59, 1, tzinfo=UTC)) == (
        "0999-12-31T23:59:59.000001Z"
    )
    assert utc_text(datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)) == (
        "9999-12-31T23:59:59.999999Z"
    )
