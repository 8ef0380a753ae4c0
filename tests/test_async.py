"""``async def`` views (Flask's async support, flask[async]) take every kind of limit."""

from __future__ import annotations

import asyncio

import pytest
from flask import Blueprint, Flask, Response, request
from helpers import get, install

from flask_redis_throttle import exempt, limit

pytest.importorskip("asgiref")


def test_async_views_take_limits_of_every_kind(app: Flask, statuses) -> None:
    api = Blueprint("api", __name__)

    @api.get("/items")
    @limit("5/m", cost=lambda request: int(request.args.get("n", 1)))
    async def items() -> str:
        await asyncio.sleep(0)
        return "ok"

    @api.get("/found")
    @limit("1/m", deduct_when=lambda response: response.status_code == 200)
    async def found() -> Response:
        await asyncio.sleep(0)
        return Response("ok", status=int(request.args.get("status", 200)))

    @api.get("/trial")
    @limit("1/m", shadow=True)
    async def trial() -> str:
        return "ok"

    @api.get("/health")
    @exempt
    async def health() -> str:
        return "ok"

    @app.get("/")
    @limit("1/m")
    async def index() -> str:
        return "ok"

    limit("10/m", scope="api")(api)
    app.register_blueprint(api, url_prefix="/api")
    install(app)
    client = app.test_client()
    assert statuses(client, 2, "/") == [200, 429]
    assert statuses(client, 2, "/api/items?n=3") == [200, 429]
    assert statuses(client, 2, "/api/found?status=404") == [404, 404]
    assert statuses(client, 2, "/api/found") == [200, 429]
    assert statuses(client, 2, "/api/trial") == [200, 200]
    assert statuses(client, 12, "/api/health") == [200] * 12
    assert get(client, "/api/trial").headers["RateLimit"].startswith('"1m";r=0;')
    # items' own 5/m has 2 left after the first 3.
    assert statuses(client, 3, "/api/items") == [200, 200, 429]
    # The blueprint's shared 10/m counted each admitted request once: 1 item
    # call, 3 found, 3 trial and 2 items make 9, and /health none.
    assert statuses(client, 2, "/api/trial") == [200, 429]
