"""The limit grammar, without Flask or Redis; and once through an app, for
limit strings that a dynamic limit returns from data."""

from __future__ import annotations

import logging
import sys

import pytest
from flask import Flask
from helpers import get, install

from flask_redis_throttle import InvalidLimit, Layer, limit, parse_limits
from flask_redis_throttle.core.engine.rates import MAX_LAYERS, MAX_LIMIT_LENGTH
from flask_redis_throttle.core.engine.throttle import Policy


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
    assert parse_limits(spec) == tuple(Layer(amount, period) for amount, period in expected)


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
    ("layer", "name", "text"),
    [
        (Layer(10, 1), "1s", "10 per 1 second"),
        (Layer(5, 2), "2s", "5 per 2 seconds"),
        (Layer(5, 90), "90s", "5 per 90 seconds"),
        (Layer(120, 60), "1m", "120 per 1 minute"),
        (Layer(5, 120), "2m", "5 per 2 minutes"),
        (Layer(1, 3_600), "1h", "1 per 1 hour"),
        (Layer(1, 86_400), "1d", "1 per 1 day"),
        (Layer(1, 172_800), "2d", "1 per 2 days"),
    ],
)
def test_names(layer: Layer, name: str, text: str) -> None:
    assert layer.name == name
    assert str(layer) == text


# Limit strings can come from data (dynamic limits), so the parser has
# documented maximum sizes and rejects anything larger by its length alone,
# before looking at it: no input can make it slow. These tests check the
# maximums themselves, never the time taken.


def test_a_huge_number_is_an_invalid_limit_not_a_bare_value_error() -> None:
    with pytest.raises(InvalidLimit, match="is 5002 characters long; a limit has at most 1000"):
        parse_limits("9" * 5000 + "/s")


@pytest.mark.parametrize(
    "spec",
    [
        "9" * 900 + "/s",  # the quota
        "1/" + "9" * 900 + "s",  # the multiple of the unit
        "1 per " + "9" * 900 + " seconds",
    ],
)
def test_numbers_are_never_converted_in_full(spec: str) -> None:
    # Python refuses to convert more digits than this (4300 by default; an
    # app may lower it to 640): a long number must be out of range, not a crash.
    original = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(640)
    try:
        with pytest.raises(InvalidLimit, match="must be from 1"):
            parse_limits(spec)
    finally:
        sys.set_int_max_str_digits(original)


def test_leading_zeros_do_not_count_against_a_number() -> None:
    assert parse_limits("0" * 900 + "5/0" + "0" * 90 + "2m") == (Layer(5, 120),)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("1/s" + " " * (MAX_LIMIT_LENGTH - 3), (Layer(1, 1),)),
        ("1" + " " * (MAX_LIMIT_LENGTH - 3) + "/s", (Layer(1, 1),)),
        ("1" + " " * (MAX_LIMIT_LENGTH - 9) + "per    s", (Layer(1, 1),)),
    ],
)
def test_the_longest_limit_string_is_parsed(spec: str, expected: tuple[Layer, ...]) -> None:
    assert len(spec) == MAX_LIMIT_LENGTH
    assert parse_limits(spec) == expected


@pytest.mark.parametrize(
    "spec",
    [
        "1" + " " * (MAX_LIMIT_LENGTH - 2) + "s",  # a space where '/' or 'per' should be
        "1" + " " * (MAX_LIMIT_LENGTH - 5) + "pers",  # 'per' with no space after it
        " " * (MAX_LIMIT_LENGTH - 1) + ";",
        ";" * MAX_LIMIT_LENGTH,
    ],
)
def test_malformed_limit_strings_of_the_longest_length_are_invalid(spec: str) -> None:
    assert len(spec) == MAX_LIMIT_LENGTH
    with pytest.raises(InvalidLimit):
        parse_limits(spec)


@pytest.mark.parametrize(
    "spec",
    [
        "1/s" + " " * (MAX_LIMIT_LENGTH - 2),  # valid but for its length
        " " * 20_000,
        "1" + " " * 20_000 + "s",
        ";".join(f"1/{n}s" for n in range(1, 20_001)),
    ],
)
def test_a_limit_string_over_the_longest_is_rejected_by_its_length(spec: str) -> None:
    with pytest.raises(InvalidLimit, match=f"is {len(spec)} characters long; a limit has at most 1000") as info:
        parse_limits(spec)
    assert info.value.spec == spec
    assert len(str(info.value)) < 200  # quotes its start, not all of it


def test_the_most_layers() -> None:
    spec = ";".join(f"1/{n}s" for n in range(1, MAX_LAYERS + 1))
    assert [layer.window for layer in parse_limits(spec)] == list(range(1, MAX_LAYERS + 1))


def test_more_layers_than_the_most_are_rejected_before_any_is_parsed() -> None:
    # The last layer is malformed, but the count is what is reported.
    spec = ";".join(["1/s"] * MAX_LAYERS + ["nonsense"])
    with pytest.raises(InvalidLimit, match=f"has {MAX_LAYERS + 1} layers; a limit has at most {MAX_LAYERS}"):
        parse_limits(spec)


def test_the_documented_maximums() -> None:
    assert (MAX_LIMIT_LENGTH, MAX_LAYERS) == (1000, 32)


@pytest.mark.parametrize(
    "returned", ["9" * 5000 + "/s", ";".join(f"1/{n}s" for n in range(1, 20_001)), "1" + " " * 20_000 + "s"]
)
def test_a_dynamic_limit_over_the_maximums_is_skipped_with_a_warning(app: Flask, caplog, returned: str) -> None:
    # What a dynamic limit returns can come from data: a huge string is an
    # unusable limit like any other bad one (skipped when failing open),
    # never a 500, and the warning quotes only its start.
    @app.get("/")
    @limit(lambda request: returned)
    @limit("2/m", scope="fixed")
    def index() -> str:
        return "ok"

    install(app)
    client = app.test_client()
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        assert [get(client).status_code for _ in range(3)] == [200, 200, 429]
    [warning] = [r.getMessage() for r in caplog.records if "unusable" in r.getMessage()]
    assert f"is {len(returned)} characters long; a limit has at most {MAX_LIMIT_LENGTH}" in warning
    assert len(warning) < 400


@pytest.mark.parametrize(
    ("quota", "window"),
    [(0, 60), (10**10, 60), (5, 0), (5, 10**10), (True, 60), (5.0, 60), (-1, 60)],
)
def test_a_layer_made_in_code_out_of_range_is_refused_when_made(quota: object, window: object) -> None:
    """A layer is packed into the scripts' plan as 4-byte integers, and a
    quota of 0 would divide by 0 there: one made in code rather than parsed
    is refused with the same error a limit string gets, when it is made,
    not by its first request."""
    with pytest.raises(InvalidLimit, match="the quota must be a whole number from 1 to 1000000000"):
        Layer(quota, window)  # type: ignore[arg-type]


def test_a_policy_made_in_code_with_too_many_layers_is_refused_when_made() -> None:
    """The plan counts a limit's layers in one byte: a policy made in code
    with more layers than a limit string may have gets the same error, not
    a ValueError from bytes()."""
    layers = tuple(Layer(1, window) for window in range(1, MAX_LAYERS + 2))
    assert len(Policy(layers[:MAX_LAYERS], "s").layers) == MAX_LAYERS
    with pytest.raises(InvalidLimit, match=f"a limit has at most {MAX_LAYERS} layers, not {MAX_LAYERS + 1}"):
        Policy(layers, "s")
