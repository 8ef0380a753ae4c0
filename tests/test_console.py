"""Text for the command line: tables, durations and times."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from flask_redis_throttle._ops.console import duration, parse_moment, table, utc

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=timezone.utc).timestamp()


def test_tables_align_columns_and_trim_lines() -> None:
    assert table(("A", "LONG HEADER", "C"), [("wide cell", "x", ""), ("", "", "last")]).splitlines() == [
        "A          LONG HEADER  C",
        "wide cell  x",
        "                        last",
    ]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0.0s"),
        (0.01, "0.1s"),
        (0.75, "0.8s"),
        (42, "42.0s"),
        (59.9, "59.9s"),
        (59.91, "1m00s"),
        (185, "3m05s"),
        (3599.5, "1h00m"),
        (7201, "2h01m"),
        (86_399, "1d00h"),
        (86_400 + 6 * 3_600, "1d06h"),
    ],
)
def test_durations_are_short_and_rounded_up(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def test_times_are_shown_in_utc() -> None:
    assert utc(NOW + 3) == "2025-06-01 12:00:03"


@pytest.mark.parametrize(
    ("text", "moment"),
    [
        ("90s", NOW - 90),
        ("10m", NOW - 600),
        ("1h30m", NOW - 5_400),
        ("2d", NOW - 172_800),
        ("2025-06-01T11:00:00Z", NOW - 3_600),
        ("2025-06-01T11:00:00", NOW - 3_600),  # no offset: UTC, as the times shown
        ("2025-06-01 13:00:00+02:00", NOW - 3_600),
        ("2025-06-01", NOW - 12 * 3_600),
    ],
)
def test_moments_are_spans_before_now_or_iso_times(text: str, moment: float) -> None:
    assert parse_moment(text, NOW) == moment


@pytest.mark.parametrize("text", ["", "10", "m", "10x", "-5m", "1.5h", "yesterday", "2025-13-01"])
def test_other_moments_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="is neither a span"):
        parse_moment(text, NOW)


def test_a_naive_iso_time_is_not_local_time() -> None:
    assert parse_moment("2025-06-01T12:00:00", NOW) == datetime(2025, 6, 1, 12, 0, tzinfo=timezone.utc).timestamp()
    assert timedelta(seconds=NOW - parse_moment("1d", NOW)) == timedelta(days=1)
