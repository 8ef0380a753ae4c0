"""Odd and hostile identities through a real app: addresses with ports and
brackets, users whose ids are broken, addresses that are not addresses, and
request values in log lines."""

from __future__ import annotations

import logging

import pytest
from conftest import install
from flask import Flask, Request

from flask_redis_throttle import limit
from flask_redis_throttle.keys import MAX_VALUE_LENGTH, loggable

#: How long a warning may be besides the request value it quotes.
MESSAGE_TEXT = 300


#: A request value that would forge a log line, and make a megabyte of one.
HOSTILE = "evil\nWARNING forged line\r\x1b[31m" + "x" * 1_000_000


def assert_one_short_line(message: str) -> None:
    for control in "\n\r\x1b":
        assert control not in message, message[:400]
    assert len(message) <= MAX_VALUE_LENGTH + MESSAGE_TEXT, len(message)
    assert "evil\\nWARNING forged line\\r\\x1b[31mxxx" in message  # still says what it was


def body(request: Request) -> str:
    return request.get_data(as_text=True)


def test_the_shadow_warning_escapes_and_cuts_the_identity(app: Flask, caplog: pytest.LogCaptureFixture) -> None:
    @app.post("/")
    @limit("1/m", identities=[body], shadow=True)
    def index() -> str:
        return "ok"

    install(app)
    client = app.test_client()
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        assert [client.post("/", data=HOSTILE).status_code for _ in range(2)] == [200, 200]
    [warning] = [r.getMessage() for r in caplog.records if "shadow" in r.getMessage()]
    assert_one_short_line(warning)


def test_the_cost_warning_escapes_and_cuts_the_value(app: Flask, caplog: pytest.LogCaptureFixture) -> None:
    @app.post("/")
    @limit("5/m", cost=body)
    def index() -> str:
        return "ok"

    install(app)
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        assert app.test_client().post("/", data=HOSTILE).status_code == 200
    [warning] = [r.getMessage() for r in caplog.records if "cost function" in r.getMessage()]
    assert_one_short_line(warning)


def test_the_dynamic_limit_warning_escapes_and_cuts_the_value(app: Flask, caplog: pytest.LogCaptureFixture) -> None:
    @app.post("/")
    @limit(body)
    def index() -> str:
        return "ok"

    install(app)
    with caplog.at_level(logging.WARNING, "flask_redis_throttle"):
        assert app.test_client().post("/", data=HOSTILE).status_code == 200
    [warning] = [r.getMessage() for r in caplog.records if "dynamic" in r.getMessage()]
    assert_one_short_line(warning)


def test_the_refusals_command_escapes_identities(app: Flask) -> None:
    @app.post("/")
    @limit("1/m", identities=[body])
    def index() -> str:
        return "ok"

    install(app)
    client = app.test_client()
    assert [client.post("/", data=HOSTILE).status_code for _ in range(2)] == [200, 429]
    result = app.test_cli_runner().invoke(args=["ratelimit", "refusals"])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output
    assert "\r" not in result.output
    lines = result.output.splitlines()
    # A title, a header and one row for each table, a blank line between.
    assert len(lines) == 7, lines
    assert all(len(line) < 2 * MAX_VALUE_LENGTH + MESSAGE_TEXT for line in lines)
    assert "evil\\nWARNING forged line\\r\\x1b[31mxxx" in lines[2]


@pytest.mark.parametrize(
    ("value", "logged"),
    [
        ("ip:192.0.2.1", "ip:192.0.2.1"),
        ("é☃😀 it's \\n", "é☃😀 it's \\n"),  # printable, backslashes included, stay
        ("a\nb\r\tc\x1b\x7f\x85\u2028\ud800", "a\\nb\\r\\tc\\x1b\\x7f\\x85\\u2028\\ud800"),
        ("x" * MAX_VALUE_LENGTH, "x" * MAX_VALUE_LENGTH),
        ("x" * (MAX_VALUE_LENGTH + 1), "x" * (MAX_VALUE_LENGTH - 1) + "…"),
        ("\n" * 1_000_000, "\\n" * (MAX_VALUE_LENGTH // 2 - 1) + "\\…"),
    ],
)
def test_loggable_values_are_one_short_line(value: str, logged: str) -> None:
    assert loggable(value) == logged
    assert len(loggable(value)) <= MAX_VALUE_LENGTH
