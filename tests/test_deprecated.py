"""The old names of renamed things still work, with a DeprecationWarning
that names the new one. The rename script leaves this file alone."""

from __future__ import annotations

import importlib

import pytest

import flask_redis_throttle
from flask_redis_throttle import InputError, Layer, RefusalEvent, request_refused
from flask_redis_throttle._headers import LayerNames
from flask_redis_throttle.core.penalties import parse_penalty
from flask_redis_throttle.core.rates import MAX_QUOTA, MAX_WINDOW
from flask_redis_throttle.core.throttle import Policy
from flask_redis_throttle.decorators import RefusalHook, make_spec

OLD_NAMES = [
    ("flask_redis_throttle", "Breach", RefusalEvent),
    ("flask_redis_throttle", "Rate", Layer),
    ("flask_redis_throttle", "RateLimitError", InputError),
    ("flask_redis_throttle", "rate_limited", request_refused),
    ("flask_redis_throttle.signals", "Breach", RefusalEvent),
    ("flask_redis_throttle.signals", "rate_limited", request_refused),
    ("flask_redis_throttle.errors", "RateLimitError", InputError),
    ("flask_redis_throttle.core.rates", "Rate", Layer),
    ("flask_redis_throttle.core.rates", "MAX_AMOUNT", MAX_QUOTA),
    ("flask_redis_throttle.core.rates", "MAX_PERIOD", MAX_WINDOW),
    ("flask_redis_throttle._headers", "Labels", LayerNames),
    ("flask_redis_throttle.decorators", "BreachHook", RefusalHook),
]


@pytest.mark.parametrize(("module", "old", "new"), OLD_NAMES)
def test_an_old_name_is_the_new_thing_with_a_warning(module: str, old: str, new: object) -> None:
    with pytest.warns(DeprecationWarning, match=rf"^{module}\.{old} is deprecated; use {module}\.\w+$"):
        found = getattr(importlib.import_module(module), old)
    assert found is new


def test_an_old_name_can_be_imported_from_the_package() -> None:
    with pytest.warns(
        DeprecationWarning, match="flask_redis_throttle.Rate is deprecated; use flask_redis_throttle.Layer"
    ):
        from flask_redis_throttle import Rate
    assert Rate is Layer
    assert Rate(10, 60) == Layer(quota=10, window=60)


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="module 'flask_redis_throttle' has no attribute 'Nope'"):
        flask_redis_throttle.Nope  # noqa: B018


@pytest.mark.parametrize(
    ("thing", "old", "new", "value"),
    [
        (Layer(10, 60), "amount", "Layer.quota", 10),
        (Layer(10, 60), "period", "Layer.window", 60),
        (Policy((Layer(10, 60),), "api"), "rates", "Policy.layers", (Layer(10, 60),)),
        (make_spec("10/m"), "rates", "LimitSpec.layers", (Layer(10, 60),)),
        (make_spec("10/m"), "spec", "LimitSpec.limit", "10/m"),
    ],
)
def test_an_old_attribute_is_the_new_one_with_a_warning(thing: object, old: str, new: str, value: object) -> None:
    with pytest.warns(DeprecationWarning, match=rf"\.{old} is deprecated; use {new}$"):
        assert getattr(thing, old) == value


def test_an_old_method_is_the_new_one_with_a_warning() -> None:
    with pytest.warns(DeprecationWarning, match=r"^Penalty\.block is deprecated; use Penalty\.duration$"):
        assert parse_penalty("1m;x2").block(3) == 240
