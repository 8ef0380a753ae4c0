"""The limit grammar, without Flask or Redis."""

from __future__ import annotations

import pytest

from flask_redis_throttle import InvalidLimit, Rate, limit, parse_limits


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("10/s", [(10, 1)]),
        ("10 per second", [(10, 1)]),
        ("10 per 1 second", [(10, 1)]),
        ("5/2s", [(5, 2)]),
        ("5 / 2 s", [(5, 2)]),
        ("5 per 2 minutes", [(5, 120)]),
        ("1/d", [(1, 86_400)]),
        ("3 per day", [(3, 86_400)]),
        ("7/sec", [(7, 1)]),
        ("7/min", [(7, 60)]),
        ("7 per hour", [(7, 3_600)]),
        ("2 per 3 hours", [(2, 10_800)]),
        ("4 PER Minute", [(4, 60)]),
        ("10/s;120/m;240/h", [(10, 1), (120, 60), (240, 3_600)]),
        ("10/s, 120/m , 240/h", [(10, 1), (120, 60), (240, 3_600)]),
        ("10/s;120/m,240/h", [(10, 1), (120, 60), (240, 3_600)]),
        ("1000000000/366d", [(1_000_000_000, 366 * 86_400)]),
    ],
)
def test_valid(spec: str, expected: list[tuple[int, int]]) -> None:
    assert parse_limits(spec) == tuple(Rate(amount, period) for amount, period in expected)


@pytest.mark.parametrize(
    ("spec", "quoted"),
    [
        ("0/s", "0/s"),
        ("-1/m", "-1/m"),
        ("5/", "5/"),
        ("/s", "/s"),
        ("5/s;;", "5/s;;"),
        ("5/s;", "5/s;"),
        ("5 per", "5 per"),
        ("ten per fortnight", "ten per fortnight"),
        ("10/fortnight", "10/fortnight"),
        ("10/0s", "10/0s"),
        ("1.5/s", "1.5/s"),
        ("10/s 5/m", "10/s 5/m"),
        ("10 per", "10 per"),
        ("10per second", "10per second"),
        ("\u0661\u0660/s", "\u0661\u0660/s"),  # Arabic-Indic digits are not numbers here
        ("99999999999999999999999/s", "99999999999999999999999/s"),
        ("1000000001/s", "1000000001/s"),
        ("1/367d", "1/367d"),
        ("1/9999999999999h", "1/9999999999999h"),
        ("10/s;20/s", "10/s;20/s"),
        ("10/m;5/60s", "10/m;5/60s"),
        ("", ""),
        ("   ", "   "),
        (";", ";"),
    ],
)
def test_invalid_quotes_the_bad_text(spec: str, quoted: str) -> None:
    with pytest.raises(InvalidLimit) as info:
        parse_limits(spec)
    assert repr(quoted) in str(info.value)
    assert isinstance(info.value, ValueError)
    assert info.value.spec == spec


def test_invalid_message_says_what_is_valid() -> None:
    with pytest.raises(InvalidLimit, match=r"'10/s', '10 per second'.*units are s, sec"):
        parse_limits("ten per fortnight")


@pytest.mark.parametrize("spec", [None, 10, b"10/s", ["10/s"]])
def test_not_a_string(spec: object) -> None:
    with pytest.raises(InvalidLimit, match="must be a string"):
        parse_limits(spec)  # type: ignore[arg-type]


def test_decorator_validates_when_applied() -> None:
    with pytest.raises(InvalidLimit, match="'5 per'"):
        limit("5 per")


@pytest.mark.parametrize(
    ("rate", "name", "text"),
    [
        (Rate(10, 1), "1s", "10 per 1 second"),
        (Rate(5, 2), "2s", "5 per 2 seconds"),
        (Rate(5, 90), "90s", "5 per 90 seconds"),
        (Rate(120, 60), "1m", "120 per 1 minute"),
        (Rate(5, 120), "2m", "5 per 2 minutes"),
        (Rate(1, 3_600), "1h", "1 per 1 hour"),
        (Rate(1, 86_400), "1d", "1 per 1 day"),
        (Rate(1, 172_800), "2d", "1 per 2 days"),
    ],
)
def test_names(rate: Rate, name: str, text: str) -> None:
    assert rate.name == name
    assert str(rate) == text
