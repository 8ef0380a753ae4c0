"""``flask ratelimit``: limits, status, reset and refusals, run through
Flask's CLI runner against each storage."""

from __future__ import annotations

import re
from importlib.metadata import entry_points
from typing import Any

import click
import pytest
import redis
from click.testing import Result
from flask import Flask, Request
from helpers import ELSEWHERE, Clock, add_login, flask_command, get, install, run_elsewhere

from flask_redis_throttle import Identity, limit
from flask_redis_throttle._ops import cli as ops_cli
from flask_redis_throttle._ops.cli import ratelimit
from flask_redis_throttle._request.identity import parse_identity, resolvers, spec_name
from flask_redis_throttle.core.engine.keys import identity_tag
from flask_redis_throttle.core.engine.scripts import STRATEGIES
from flask_redis_throttle.core.stores.reset import BATCH, counter_pattern
from flask_redis_throttle.extension import RateLimitState
from flask_redis_throttle.testing import free_port


def api_key(request: Request) -> str | None:
    return request.headers.get("X-Api-Key")


def run(app: Flask, *args: str) -> Result:
    return flask_command(app, "ratelimit", *args)


def test_the_group_comes_with_the_package_not_with_the_extension() -> None:
    """``flask ratelimit`` is registered through the ``flask.commands`` entry
    point: the extension imports no CLI, so nothing is added to ``app.cli``."""
    [entry] = [entry for entry in entry_points(group="flask.commands") if entry.name == "ratelimit"]
    assert entry.load() is ratelimit
    app = Flask(__name__)
    install(app)
    assert "ratelimit" not in app.cli.commands


def test_on_an_app_without_the_extension_the_commands_say_so() -> None:
    result = flask_command(Flask(__name__), "ratelimit", "limits")
    assert result.exit_code == 1
    assert result.output == "Error: rate limiting is not set up on this app (RateLimit(app) or init_app(app))\n"


def ok(app: Flask, *args: str) -> str:
    result = run(app, *args)
    assert result.exit_code == 0, result.output
    return result.stdout


def fails(app: Flask, *args: str, code: int = 1) -> str:
    """Run a command that must fail with a message, not a traceback."""
    result = run(app, *args)
    assert result.exit_code == code, result.output
    assert isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    return result.stderr


def table(text: str, first: str) -> list[dict[str, str]]:
    """The rows of the table whose header starts with ``first``, by column,
    cut at the header's column positions (so misaligned columns show)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first))
    header = lines[start]
    columns = [(m.start(), m.group()) for m in re.finditer(r"\S+(?: \S+)*", header)]
    rows = []
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        bounds = [*(position for position, _ in columns[1:]), None]
        rows.append({name: line[s:e].strip() for (s, name), e in zip(columns, bounds, strict=True)})
    return rows


def counters(state: RateLimitState) -> dict[Any, Any]:
    """Every counter key, with its serialized value."""
    assert state.throttle is not None
    client = state.throttle.storage.client
    return {key: client.dump(key) for key in client.scan_iter(match=state.throttle.prefix + "{*")}


def shop(app: Flask) -> None:
    """Views with one, two and no limits, and a key function."""

    @app.get("/items")
    @limit("5/s;10/m")
    @limit("100/d", scope="api", identities=[api_key], strategy="gcra")
    def items() -> str:
        return "ok"

    @app.route("/login", methods=["GET", "POST"])
    @limit("3/m", identities=["ip"], strategy="sliding-window")
    def login() -> str:
        return "ok"

    @app.get("/")
    def home() -> str:
        return "ok"


# limits


def test_limits_lists_every_route(app: Flask) -> None:
    shop(app)
    install(app, RATELIMIT_DEFAULT="100/h")
    assert ok(app, "limits").splitlines() == [
        "RULE                     METHODS   ENDPOINT  LIMIT                       STRATEGY        SCOPE  IDENTITIES",
        "/                        GET       home      100/1h (RATELIMIT_DEFAULT)  fixed-window    home   ip, user",
        "/items                   GET       items     5/1s;10/1m                  fixed-window    items  ip, user",
        " " * 45 + f"100/1d                      gcra            api    {spec_name(api_key)}",
        "/login                   GET,POST  login     3/1m                        sliding-window  login  ip",
        "/static/<path:filename>  GET       static    no limit",
    ]


def test_limits_can_hide_unlimited_routes(app: Flask) -> None:
    shop(app)
    install(app)  # no RATELIMIT_DEFAULT: home has no limit
    everything = table(ok(app, "limits"), "RULE")
    assert [(row["RULE"], row["LIMIT"]) for row in everything if row["RULE"] in ("/", "/static/<path:filename>")] == [
        ("/", "no limit"),
        ("/static/<path:filename>", "no limit"),
    ]
    limited = table(ok(app, "limits", "--limited"), "RULE")
    assert [row["RULE"] for row in limited] == ["/items", "", "/login"]


def test_limits_of_a_disabled_app_say_they_are_not_enforced(app: Flask) -> None:
    shop(app)
    install(app, RATELIMIT_ENABLED=False)
    result = run(app, "limits", "--limited")
    assert result.exit_code == 0
    assert "RATELIMIT_ENABLED is False" in result.stderr
    assert [row["ENDPOINT"] for row in table(result.stdout, "RULE")] == ["items", "", "login"]


def test_plan_is_the_one_requests_use(app: Flask) -> None:
    shop(app)
    state = install(app)
    get(app.test_client(), "/items")
    plan = state.plan("items", "GET")
    assert plan is not None
    assert plan is state._plans["items", "GET"]  # compiled once, by the request
    assert [limit.scope for limit in plan.limits] == ["items", "api"]
    assert [limit.identities for limit in plan.limits] == [("ip", "user"), (api_key,)]
    assert state.plan("home") is None
    assert state.plan("static") is None
    assert state.plan("nowhere") is None


# status


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_status_matches_requests_and_counts_nothing(app: Flask, strategy: str, clock: Clock) -> None:
    shop(app)
    state = install(app, RATELIMIT_STRATEGY=strategy)
    client = app.test_client()
    clock.set(0.25)
    for _ in range(3):
        assert get(client, "/items").status_code == 200
    before = counters(state)
    first = ok(app, "status", "ip:192.0.2.1", "--endpoint", "items")
    assert ok(app, "status", "ip:192.0.2.1", "--endpoint", "items") == first
    assert counters(state) == before  # read, never written
    rows = table(first, "ENDPOINT")
    assert [(r["LAYER"], r["USED"], r["REMAINING"]) for r in rows] == [("5/1s", "3", "2"), ("10/1m", "3", "7")]
    assert rows[0]["ENDPOINT"] == "items"
    assert rows[0]["STRATEGY"] == strategy
    # The next request finds what status said, and status then sees it.
    response = get(client, "/items")
    assert response.headers["RateLimit"].startswith('"1s";r=1;')
    rows = table(ok(app, "status", "ip:192.0.2.1", "--endpoint", "items"), "ENDPOINT")
    assert [(r["USED"], r["REMAINING"]) for r in rows] == [("4", "1"), ("4", "6")]


def test_status_of_a_full_layer_says_when_it_resets(app: Flask, clock: Clock) -> None:
    shop(app)
    state = install(app)
    client = app.test_client()
    clock.set(0.25)
    codes = [get(client, "/items").status_code for _ in range(6)]
    assert codes == [200] * 5 + [429]
    assert state.throttle is not None
    assert state.throttle.blocks is not None
    blocks = dict(state.throttle.blocks._blocks)
    output = ok(app, "status", "ip:192.0.2.1")
    assert state.throttle.blocks._blocks == blocks  # neither added to nor cleared
    assert output.splitlines()[0] == f"ip:192.0.2.1  (keys rl:{{{identity_tag('ip', '192.0.2.1')}}}:*)"
    rows = table(output, "ENDPOINT")
    assert rows == [
        {
            "ENDPOINT": "items",
            "SCOPE": "items",
            "STRATEGY": "fixed-window",
            "LAYER": "5/1s",
            "USED": "5",
            "REMAINING": "0",
            "RESETS IN": "0.8s",  # 0.75 s, rounded up
        },
        {
            "ENDPOINT": "",
            "SCOPE": "",
            "STRATEGY": "",
            "LAYER": "10/1m",
            "USED": "5",
            "REMAINING": "5",
            "RESETS IN": "59.8s",
        },
        {
            "ENDPOINT": "login",
            "SCOPE": "login",
            "STRATEGY": "sliding-window",
            "LAYER": "3/1m",
            "USED": "0",
            "REMAINING": "3",
            "RESETS IN": "-",
        },
    ]


def test_status_of_an_unseen_identity_creates_no_counter(app: Flask) -> None:
    shop(app)
    state = install(app)
    rows = table(ok(app, "status", "ip:198.51.100.7"), "ENDPOINT")
    assert {(r["USED"], r["RESETS IN"]) for r in rows} == {("0", "-")}
    assert counters(state) == {}


def test_status_groups_ipv6_like_requests(app: Flask) -> None:
    shop(app)
    install(app, RATELIMIT_IPV6_PREFIX=56)
    client = app.test_client()
    get(client, "/login", ip="2001:db8:0:1::1")
    get(client, "/login", ip="2001:db8:0:2::2")  # the same /56
    for written in ("ip:2001:db8:0:3::9", "ip:2001:db8::/56", "ip:2001:db8::/64"):
        output = ok(app, "status", written, "-e", "login")
        assert output.startswith("ip:2001:db8::/56  ")
        assert table(output, "ENDPOINT")[0]["USED"] == "2"
    assert table(ok(app, "status", "ip:2001:db8:0:100::1", "-e", "login"), "ENDPOINT")[0]["USED"] == "0"
    assert "wider than the /56" in fails(app, "status", "ip:2001:db8::/48", code=2)


def test_status_of_users_and_key_functions(app: Flask) -> None:
    add_login(app)
    shop(app)
    install(app)
    client = app.test_client()
    for _ in range(2):
        get(client, "/items", user="alice", headers={"X-Api-Key": "k1"})
    rows = table(ok(app, "status", "user:alice"), "ENDPOINT")
    assert [(r["SCOPE"], r["LAYER"], r["USED"]) for r in rows] == [("items", "5/1s", "2"), ("", "10/1m", "2")]
    for written in (f"{spec_name(api_key)}:k1", "api_key:k1", "test_cli.api_key:k1"):
        rows = table(ok(app, "status", written), "ENDPOINT")
        assert [(r["SCOPE"], r["STRATEGY"], r["LAYER"], r["USED"]) for r in rows] == [("api", "gcra", "100/1d", "2")]
    assert ok(app, "status", "user:alice", "-e", "login") == "No limit of endpoint 'login' counts user identities.\n"
    assert ok(app, "status", "key:gone.key:k1") == "No limit of this app counts key:gone.key identities.\n"


def test_status_rejects_what_it_cannot_read(app: Flask) -> None:
    shop(app)
    install(app)
    assert "Invalid value for 'IDENTITY': '192.0.2.1' has no kind" in fails(app, "status", "192.0.2.1", code=2)
    assert "'nope' is not an IP address" in fails(app, "status", "ip:nope", code=2)
    assert "unknown identity kind 'token'" in fails(app, "status", "token:x", code=2)
    message = fails(app, "status", "ip:192.0.2.1", "--endpoint", "item", code=2)
    assert "Invalid value for '--endpoint': no endpoint 'item'; did you mean 'items'?" in message


def test_status_of_a_disabled_app(app: Flask) -> None:
    shop(app)
    install(app, RATELIMIT_ENABLED=False)
    assert "rate limiting is disabled on this app" in fails(app, "status", "ip:192.0.2.1")
    assert "rate limiting is disabled on this app" in fails(app, "reset", "ip:192.0.2.1")
    assert "rate limiting is disabled on this app" in fails(app, "refusals")


# reset


def test_reset_deletes_that_identity_only(app: Flask) -> None:
    shop(app)
    state = install(app)
    client = app.test_client()
    for ip in ("192.0.2.1", "192.0.2.2"):
        for _ in range(3):
            get(client, "/login", ip=ip)
        get(client, "/items", ip=ip)
    assert get(client, "/login").status_code == 429
    other = ok(app, "status", "ip:192.0.2.2")
    output = ok(app, "reset", "ip:192.0.2.1")
    assert output.splitlines() == [
        "Deleted 2 counter keys of ip:192.0.2.1 in every scope.",  # login's key, and items' (two layers)
        "App servers' block caches may go on refusing it for up to 1 second.",
    ]
    assert ok(app, "status", "ip:192.0.2.2") == other
    assert {r["USED"] for r in table(ok(app, "status", "ip:192.0.2.1"), "ENDPOINT")} == {"0"}
    # This process's block cache is cleared too, so the client is admitted at once.
    assert get(client, "/login").status_code == 200
    assert ok(app, "reset", "ip:192.0.2.1").startswith("Deleted 1 counter key of")
    assert ok(app, "reset", "ip:203.0.113.9") == "Deleted 0 counter keys of ip:203.0.113.9 in every scope.\n"
    assert len(counters(state)) == 2  # the other IP's login and items keys


def test_reset_looks_the_throttle_up_once(app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    """``reset`` got the app's throttle twice, once for the identity and once
    for the check that app servers read the change: one lookup does both."""
    shop(app)
    install(app)
    get(app.test_client(), "/login")
    lookups: list[RateLimitState] = []
    looked_up = ops_cli.throttle_of

    def throttle_of(state: RateLimitState) -> Any:
        lookups.append(state)
        return looked_up(state)

    monkeypatch.setattr(ops_cli, "throttle_of", throttle_of)
    assert ok(app, "reset", "ip:192.0.2.1", "-e", "login").startswith("Deleted 1 counter key of")
    assert len(lookups) == 1


@pytest.mark.parametrize("way", ELSEWHERE)
@pytest.mark.parametrize("storage_url", ["memory"], indirect=True)
def test_reset_on_memory_from_the_flask_command_changes_nothing_and_says_so(app: Flask, way: str) -> None:
    """A command run where the app serves no request (the ``flask``
    command, a script with its own group, ``app.cli`` or ``app.cli.main``)
    has a memory:// store no app server reads: ``reset`` printed "Deleted 0
    counter keys", exited 0, and the running app's counters stayed. It is
    refused there whatever group runs it, as the override commands are;
    where the app is under test (TESTING), its test client serves requests
    in this process, and it resets the store they are decided in."""
    shop(app)
    state = install(app)
    client = app.test_client()
    for _ in range(3):
        get(client, "/login")
    app.testing = False
    code, output = run_elsewhere(way, app, "reset", "ip:192.0.2.1")
    assert code == 2, output
    assert "memory://, which keeps counters and overrides in each process's memory" in output
    assert counters(state)
    app.testing = True
    assert ok(app, "reset", "ip:192.0.2.1").startswith("Deleted 1 counter key of")
    assert not counters(state)


def test_reset_one_endpoint(app: Flask) -> None:
    shop(app)
    install(app)
    client = app.test_client()
    get(client, "/login")
    get(client, "/items", headers={"X-Api-Key": "k1"})
    output = ok(app, "reset", "ip:192.0.2.1", "--endpoint", "login")
    assert output.startswith("Deleted 1 counter key of ip:192.0.2.1 in scope 'login'.")
    rows = table(ok(app, "status", "ip:192.0.2.1"), "ENDPOINT")
    assert [(r["ENDPOINT"], r["USED"]) for r in rows] == [("items", "1"), ("", "1"), ("login", "0")]
    assert ok(app, "reset", "api_key:k1", "-e", "items").startswith("Deleted 1 counter key of ")
    assert ok(app, "reset", "ip:192.0.2.1", "-e", "home") == "Endpoint 'home' has no limits. Nothing to reset.\n"
    assert ok(app, "status", "ip:192.0.2.1", "-e", "home") == "Endpoint 'home' has no limits.\n"
    message = "No limit of endpoint 'login' counts user identities. Nothing to reset.\n"
    assert ok(app, "reset", "user:alice", "-e", "login") == message
    assert "no endpoint ''" in fails(app, "reset", "ip:192.0.2.1", "-e", "", code=2)


def test_reset_scans_in_batches_and_never_lists_all_keys(app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    shop(app)
    state = install(app)
    assert state.throttle is not None
    client = state.throttle.storage.client
    tag = identity_tag("ip", "192.0.2.1")
    count = 2 * BATCH + 7
    client.mset({f"rl:{{{tag}}}:scope{i}:fw:1m": "1" for i in range(count)})
    client.set(f"rl:{{{identity_tag('ip', '192.0.2.2')}}}:scope0:fw:1m", "1")

    def keys(*args: object, **kwargs: object) -> None:
        raise AssertionError("KEYS blocks Redis")

    deletes: list[int] = []
    delete = client.delete

    def counted_delete(*names: Any) -> Any:
        deletes.append(len(names))
        return delete(*names)

    monkeypatch.setattr(client, "keys", keys)
    monkeypatch.setattr(client, "delete", counted_delete)
    assert ok(app, "reset", "ip:192.0.2.1").startswith(f"Deleted {count} counter keys of ip:192.0.2.1")
    assert sum(deletes) == count
    assert max(deletes) <= BATCH
    assert len(counters(state)) == 1


def test_reset_escapes_glob_characters_in_the_prefix(app: Flask) -> None:
    shop(app)
    state = install(app, RATELIMIT_KEY_PREFIX="r*[a]?\\:")
    assert state.throttle is not None
    client = state.throttle.storage.client
    get(app.test_client(), "/login")
    tag = identity_tag("ip", "192.0.2.1")
    # Keys that the unescaped pattern would match: another app's, with a similar prefix.
    neighbours = [f"rX[a]?\\:{{{tag}}}:login:sw:1m", f"ra!\\:{{{tag}}}:login:sw:1m"]
    for key in neighbours:
        client.set(key, "1")
    assert ok(app, "reset", "ip:192.0.2.1").startswith("Deleted 1 counter key of ")
    assert sorted(k.decode() for k in client.scan_iter()) == sorted(neighbours)


# refusals


def test_refusals_rank_identities_and_list_the_latest(app: Flask) -> None:
    add_login(app)
    shop(app)
    install(app, RATELIMIT_BLOCK_CACHE_SIZE=0)  # every refusal asks Redis, and is logged
    client = app.test_client()
    for ip, user, refusals in [("192.0.2.1", None, 3), ("192.0.2.2", "bob", 1)]:
        for _ in range(3 + refusals):
            get(client, "/login", ip=ip, user=user)
    output = ok(app, "refusals")
    assert table(output, "IDENTITY") == [
        {"IDENTITY": "ip:192.0.2.1", "REFUSALS": "3"},
        {"IDENTITY": "ip:192.0.2.2", "REFUSALS": "1"},
    ]
    latest = table(output, "TIME (UTC)")
    assert [(r["ENDPOINT"], r["SCOPE"], r["LAYER"], r["STRATEGY"], r["REFUSED BY"]) for r in latest] == [
        ("login", "login", "3/1m", "sliding-window", "ip:192.0.2.2"),
        *[("login", "login", "3/1m", "sliding-window", "ip:192.0.2.1")] * 3,
    ]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", r["TIME (UTC)"]) for r in latest)
    assert all(re.fullmatch(r"\d+\.\ds|1m\d\ds", r["RETRY AFTER"]) for r in latest)
    # Login's limit counts IPs only: bob is not present on its refusals.
    assert latest[0]["ALSO PRESENT"] == ""

    output = ok(app, "refusals", "--top", "1", "--recent", "2")
    assert [r["IDENTITY"] for r in table(output, "IDENTITY")] == ["ip:192.0.2.1"]
    assert len(table(output, "TIME (UTC)")) == 2
    output = ok(app, "refusals", "--recent", "0", "--since", "10m")
    assert "Latest" not in output
    assert output.startswith("Most refused identities since ")
    assert len(table(output, "IDENTITY")) == 2


def test_refusals_count_only_the_identity_whose_counter_refused(app: Flask) -> None:
    add_login(app)
    shop(app)
    install(app)
    client = app.test_client()
    for n in range(6):  # alice, from a new IP each time: only her 5/s counter fills
        get(client, "/items", ip=f"192.0.2.{n}", user="alice")
    output = ok(app, "refusals")
    assert table(output, "IDENTITY") == [{"IDENTITY": "user:alice", "REFUSALS": "1"}]
    [latest] = table(output, "TIME (UTC)")
    assert (latest["REFUSED BY"], latest["ALSO PRESENT"]) == ("user:alice", "ip:192.0.2.5")


def test_refusals_since_a_time(app: Flask) -> None:
    shop(app)
    install(app)
    client = app.test_client()
    for _ in range(4):
        get(client, "/login")
    assert "ip:192.0.2.1" in ok(app, "refusals", "--since", "2000-01-01")
    assert ok(app, "refusals", "--since", "2999-01-01T00:00:00Z") == "No refusals since 2999-01-01 00:00:00 UTC.\n"
    local = ok(app, "refusals", "--since", "2999-01-01T02:00:00+02:00")
    assert local == "No refusals since 2999-01-01 00:00:00 UTC.\n"
    assert "'yesterday' is neither a span" in fails(app, "refusals", "--since", "yesterday", code=2)


def test_refusals_when_the_log_is_off(app: Flask) -> None:
    shop(app)
    install(app, RATELIMIT_REFUSAL_LOG_SIZE=0)
    assert "this app keeps no refusal log (RATELIMIT_REFUSAL_LOG_SIZE is 0)" in fails(app, "refusals")


def test_an_empty_log(app: Flask) -> None:
    shop(app)
    install(app)
    assert ok(app, "refusals") == "No refusals.\n"


# near-limit


def sent(client: Any, path: str, ip: str) -> int:
    """GET ``path`` from ``ip`` and close the response, as a server does
    once it is sent: the near-limit entry is written then."""
    response = get(client, path, ip=ip)
    response.close()
    return int(response.status_code)


def test_near_limit_lists_who_came_near_the_latest_first(app: Flask) -> None:
    shop(app)
    install(app)
    client = app.test_client()
    assert ok(app, "near-limit") == "No identity came near its limit.\n"
    # 3/m: the third request uses all of it, past 80 %; the refusal after it is not signalled.
    assert [sent(client, "/login", "192.0.2.1") for _ in range(4)] == [200, 200, 200, 429]
    # 5/s: the fourth request uses 4 of 5.
    assert [sent(client, "/items", "192.0.2.2") for _ in range(4)] == [200] * 4
    output = ok(app, "near-limit")
    assert output.startswith("Near the limit, newest first:\n")
    latest = table(output, "TIME (UTC)")
    assert [(r["ENDPOINT"], r["SCOPE"], r["LAYER"], r["STRATEGY"], r["IDENTITY"]) for r in latest] == [
        ("items", "items", "5/1s", "fixed-window", "ip:192.0.2.2"),
        ("login", "login", "3/1m", "sliding-window", "ip:192.0.2.1"),
    ]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", r["TIME (UTC)"]) for r in latest)
    assert "RETRY AFTER" not in output  # the requests were admitted
    assert [r["IDENTITY"] for r in table(ok(app, "near-limit", "--recent", "1"), "TIME (UTC)")] == ["ip:192.0.2.2"]
    assert len(table(ok(app, "near-limit", "--since", "10m"), "TIME (UTC)")) == 2
    future = ok(app, "near-limit", "--since", "2999-01-01")
    assert future == "No identity came near its limit since 2999-01-01 00:00:00 UTC.\n"
    assert "'yesterday' is neither a span" in fails(app, "near-limit", "--since", "yesterday", code=2)


@pytest.mark.parametrize(
    ("config", "setting"),
    [
        ({"RATELIMIT_NEAR_LIMIT": None}, "RATELIMIT_NEAR_LIMIT is None"),
        ({"RATELIMIT_REFUSAL_LOG_SIZE": 0}, "RATELIMIT_REFUSAL_LOG_SIZE is 0"),
    ],
)
def test_near_limit_when_the_log_is_off(app: Flask, config: dict[str, Any], setting: str) -> None:
    shop(app)
    install(app, **config)
    assert f"this app keeps no near-limit log ({setting})" in fails(app, "near-limit")


# Redis down


@pytest.mark.parametrize(
    "command",
    [
        ["status", "ip:192.0.2.1"],
        ["reset", "ip:192.0.2.1"],
        ["reset", "ip:192.0.2.1", "-e", "items"],
        ["refusals"],
        ["near-limit"],
    ],
)
def test_redis_down_is_a_message(command: list[str]) -> None:
    app = Flask("tests")
    port = free_port()
    app.config.update(RATELIMIT_STORAGE_URL=f"redis://:hunter2@127.0.0.1:{port}/0")
    shop(app)
    install(app)
    message = fails(app, *command)
    assert f"Error: rate limit storage unavailable at redis://:***@127.0.0.1:{port}/0: " in message
    assert "hunter2" not in message


@pytest.mark.redis
@pytest.mark.parametrize("storage_url", ["redis"], indirect=True)
def test_a_redis_error_is_a_message(app: Flask, redis_client: redis.Redis) -> None:
    """A failure other than the connection's (here a key of the wrong type) is reported the same way."""
    shop(app)
    state = install(app)
    assert state.throttle is not None
    plan = state.plan("login")
    assert plan is not None
    key = state.throttle.key(plan.limits[0].policy, Identity("ip", "192.0.2.1"))
    redis_client.lpush(key, "not a counter")
    assert "Error: rate limit storage unavailable at redis://" in fails(app, "status", "ip:192.0.2.1", "-e", "login")


# identities as written


@pytest.mark.parametrize(
    ("written", "prefix", "identity"),
    [
        ("ip:192.0.2.1", 64, Identity("ip", "192.0.2.1")),
        ("ip:192.0.2.1/32", 64, Identity("ip", "192.0.2.1")),
        ("ip:2001:db8::1", 64, Identity("ip", "2001:db8::/64")),
        ("ip:2001:DB8:0:0:ffff::1", 48, Identity("ip", "2001:db8::/48")),
        ("ip:2001:db8::/64", 64, Identity("ip", "2001:db8::/64")),
        ("ip:2001:db8::1/128", 128, Identity("ip", "2001:db8::1/128")),
        ("ip:::ffff:192.0.2.1", 64, Identity("ip", "192.0.2.1")),  # IPv4-mapped, as requests count it
        ("ip:", 64, Identity("ip", "")),  # requests that came with no address
        ("user:42", 64, Identity("user", "42")),
        ("user:a:b", 64, Identity("user", "a:b")),
        ("key:app.limits.api_key:k:1", 64, Identity("key:app.limits.api_key", "k:1")),
        ("api_key:k1", 64, Identity("key:app.limits.api_key", "k1")),
        ("limits.api_key:k1", 64, Identity("key:app.limits.api_key", "k1")),
    ],
)
def test_identities_are_read_as_requests_count_them(written: str, prefix: int, identity: Identity) -> None:
    kinds = ["key:app.limits.api_key", "key:app.other.token"]
    assert parse_identity(written, prefix, kinds) == identity


def test_an_ip_identity_counts_as_a_request_from_it() -> None:
    from werkzeug.test import EnvironBuilder

    for address in ("2001:db8::abcd", "::ffff:192.0.2.1", "192.0.2.1"):
        request = Request(EnvironBuilder(environ_base={"REMOTE_ADDR": address}).get_environ())
        [resolve] = resolvers(["ip"], 60, logins=False)
        assert parse_identity(f"ip:{address}", 60) == resolve(request)


@pytest.mark.parametrize(
    ("written", "message"),
    [
        ("192.0.2.1", "'192.0.2.1' has no kind"),
        ("ip:192.0.2.300", "'192.0.2.300' is not an IP address"),
        ("ip:10.0.0.0/8", "IPv4 clients are counted by address, not by network"),
        ("ip:2001:db8::/32", "'2001:db8::/32' is wider than the /64 networks"),
        ("key:api_key", "'key:api_key' is not key:<module>.<function>:<value>"),
        ("key::v", "'key::v' is not key:<module>.<function>:<value>"),
        ("api:k", "unknown identity kind 'api': expected ip, user, or a key function (this app's: key:a.api_key"),
        ("token:k", "'token' could be any of the key functions key:a.token, key:b.token; write one in full"),
    ],
)
def test_malformed_identities_say_what_is_wrong(written: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_identity(written, 64, ["key:a.api_key", "key:a.token", "key:b.token"])


def test_counter_patterns_match_one_identity_and_scope() -> None:
    assert counter_pattern("rl:", "ip:abc") == "rl:{ip:abc}:*"
    assert counter_pattern("rl:", "ip:abc", "api") == "rl:{ip:abc}:api:*"
    # Scopes are escaped as in keys; glob characters in either part are escaped for SCAN.
    assert counter_pattern("a*[?]\\", "ip:abc", "x y*") == "a\\*\\[\\?\\]\\\\{ip:abc}:x%20y%2A:*"


def plan_limit(request: Request) -> str:
    return "7/m"


def test_limits_and_status_show_dynamic_shadow_and_blueprint_limits(app: Flask) -> None:
    from flask import Blueprint

    api = Blueprint("api", __name__)

    @api.get("/plans")
    @limit(plan_limit)
    @limit("9/m", shadow=True)
    def plans() -> str:
        return "ok"

    limit("50/h")(api)
    app.register_blueprint(api, url_prefix="/api")
    install(app)
    rows = table(ok(app, "limits", "--limited"), "RULE")
    assert [row["LIMIT"] for row in rows] == [
        "dynamic: plan_limit()",
        "9/1m (shadow)",
        "50/1h (blueprint api)",
    ]
    status = ok(app, "status", "ip:192.0.2.1", "--endpoint", "api.plans")
    assert "dynamic: not known outside a request" in status
    assert "9/1m" in status
    assert "50/1h" in status


def test_limits_show_a_concurrency_cap_and_its_lease(app: Flask) -> None:
    @app.get("/export")
    @limit("10/s;100/m", concurrent=3)
    def export() -> str:
        return "ok"

    @app.get("/archive")
    @limit("100/h", concurrent=2, lease=300, shadow=True)
    def archive() -> str:
        return "ok"

    install(app, RATELIMIT_CONCURRENCY_LEASE=30)
    rows = table(ok(app, "limits", "--limited"), "RULE")
    assert [(row["RULE"], row["LIMIT"]) for row in rows] == [
        ("/archive", "100/1h (2 concurrent, lease 300s, shadow)"),
        ("/export", "10/1s;100/1m (3 concurrent, lease 30s)"),
    ]


def test_the_report_functions_other_command_lines_share_are_public(url: str) -> None:
    """``flask_redis_throttle.cli`` gives another command line (``flask
    limiter``) the routes, exemptions, identity kinds and storage errors as
    ``flask ratelimit`` reads them."""
    from flask import Blueprint

    from flask_redis_throttle import exempt
    from flask_redis_throttle.cli import (
        counted_kinds,
        duration,
        is_exempt,
        methods_of,
        storage_errors,
        table,
        throttle_of,
    )

    app = Flask(__name__)
    admin = Blueprint("admin", __name__, url_prefix="/admin")
    admin.add_url_rule("/", "ping", lambda: "pong")
    exempt(admin)
    app.register_blueprint(admin)
    app.add_url_rule("/", "home", limit("2/minute", identities=["user-or-ip", api_key])(lambda: "home"))
    app.add_url_rule("/items", "items", lambda: "items", methods=["GET", "POST"])
    state = install(app, RATELIMIT_STORAGE_URL=url)
    with app.app_context():
        assert [methods_of(rule) for rule in app.url_map.iter_rules("items")] == [["GET", "POST"]]
        assert (is_exempt("admin.ping"), is_exempt("home")) == (True, False)
        [home] = state.plan("home", "GET").limits
        assert counted_kinds(home) == ("user", "ip", f"key:{__name__}.api_key")
        throttle = throttle_of(state)
        with storage_errors(throttle):
            assert throttle.storage.client.ping()
    assert table(("A", "B"), [("1", "22")]).splitlines() == ["A  B", "1  22"]
    assert duration(90) == "1m30s"
    disabled = Flask(__name__)
    with pytest.raises(click.ClickException, match="RATELIMIT_ENABLED is False"):
        throttle_of(install(disabled, RATELIMIT_ENABLED=False))
    refused = r"rate limit storage unavailable at .*: Connection refused"
    with pytest.raises(click.ClickException, match=refused), storage_errors(throttle):
        raise redis.ConnectionError("Connection refused")


def test_route_limits_are_the_rows_of_flask_ratelimit_limits_grouped_by_route(url: str) -> None:
    """What ``flask ratelimit limits`` lists and ``flask limiter limits``
    draws: each rule, its methods with the same limits together, each
    limit with where it came from."""
    from flask_redis_throttle.cli import route_limits

    app = Flask(__name__)
    app.add_url_rule("/", "home", lambda: "home")
    cart = limit("2/minute", methods=["POST"])(lambda: "cart")
    app.add_url_rule("/cart", "cart", cart, methods=["GET", "POST"])
    state = install(app, RATELIMIT_STORAGE_URL=url, RATELIMIT_DEFAULT="10/minute", RATELIMIT_APPLICATION="1000/day")
    with app.app_context():
        found = {
            (route.rule.endpoint, route.methods): [limit.source for limit in route.limits]
            for route in route_limits(state)
        }
        only_post = route_limits(state, "cart", "POST")
        with pytest.raises(KeyError):
            route_limits(state, "carts")
        rows = ok(app, "limits")
    assert found == {
        ("home", ("GET",)): ["RATELIMIT_DEFAULT", "RATELIMIT_APPLICATION"],
        ("cart", ("GET",)): ["RATELIMIT_DEFAULT", "RATELIMIT_APPLICATION"],
        ("cart", ("POST",)): ["view", "RATELIMIT_APPLICATION"],
        ("static", ("GET",)): [],
    }
    assert [(route.methods, len(route.limits)) for route in only_post] == [(("POST",), 2)]
    assert [line.split()[:3] for line in rows.splitlines() if line.startswith("/cart")] == [
        ["/cart", "GET", "cart"],
        ["/cart", "POST", "cart"],
    ]
