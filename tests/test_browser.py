"""The dashboard in a real browser: headless Chromium, driven by Selenium,
against the app served on a real local port by werkzeug in a thread.

Chromium and its driver come from Debian's ``chromium`` and
``chromium-driver`` packages, Selenium from the ``browser`` extra; CI
installs all three. Without them the test is skipped on a laptop, but fails
under ``CI=true``: nothing may be skipped in CI.

The test saves a screenshot; with ``FRT_DASHBOARD_SCREENSHOT=<path>`` it
saves it there too, which is how ``docs/_static/dashboard.png`` is made::

    FRT_DASHBOARD_SCREENSHOT=docs/_static/dashboard.png python -m pytest tests/test_browser.py
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import shop as docs_shop  # tests/shop.py, the docs' app
from flask import Flask
from helpers import get, join_all
from test_dashboard import PREFIX, shop
from werkzeug.serving import make_server

from flask_redis_throttle import dashboard
from flask_redis_throttle.core.engine.keys import MAX_VALUE_LENGTH
from flask_redis_throttle.extension import RateLimitState

#: The browser window's width: every column of the page must fit in it.
WIDTH = 1280

#: A user id a client chose: as long as the refusal log keeps, with no space
#: where a line could break.
LONG = "u" * (MAX_VALUE_LENGTH - len("user:"))


def _need(what: str) -> None:
    """Skip for want of ``what``, or fail under CI, where nothing is skipped."""
    message = f"the browser test needs {what}"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{message}; CI installs it (see .ci/run)")
    pytest.skip(message)


@pytest.fixture
def browser() -> Iterator[Any]:
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _need("selenium (pip install -e '.[browser]')")
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if binary is None or driver_path is None:
        _need("Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={WIDTH},1400"):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    # A click that submits a form returns before the next page is there, on
    # a loaded machine well before: finding an element of the next page
    # waits for it, for up to 10 s, rather than fail at once.
    driver.implicitly_wait(10)
    try:
        yield driver
    finally:
        driver.quit()


@contextmanager
def serving(app: Flask) -> Iterator[str]:
    """``app`` served on a free local port in the block: its base URL."""
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="werkzeug", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        join_all([thread], 10, "the app's server")
        server.server_close()


@pytest.fixture
def served(app: Flask) -> Iterator[tuple[Flask, str]]:
    """The dashboard's shop app, served on a free local port until the test ends."""
    shop(app, authorize=lambda: True)
    with serving(app) as base:
        yield app, base


def seed(state: RateLimitState) -> None:
    """Refusals spread over the last hour, as a busy app would have logged
    them, so that the chart (and the docs' screenshot) shows something."""
    assert state.refusals is not None
    now = time.time()
    client, key = state.refusals.client, state.refusals.key
    for minute in range(58, 1, -1):
        # Oldest first, as XADD wants its IDs.
        for n in reversed(range((minute * 7) % 5 + (3 if 20 <= minute <= 26 else 0))):
            stamp = int((now - minute * 60 - n) * 1000)
            who = f"ip:198.51.100.{minute % 4 + 1}"
            present = [who]
            if minute % 3 == 0:  # a user over its limit, from its IP
                who, present = "user:1042", ["ip:203.0.113.7", "user:1042"]
            client.xadd(
                key,
                {
                    "endpoint": "items",
                    "scope": "items",
                    "layer": "1/1m",
                    "strategy": "fixed-window",
                    "identity": who,
                    "identities": json.dumps(present),
                    "retry_after": "30.000000",
                },
                id=f"{stamp}-0",
            )


@pytest.mark.redis
@pytest.mark.parametrize("storage_url", ["redis"], indirect=True)
def test_the_dashboard_in_a_real_browser(served: tuple[Flask, str], browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    app, base = served
    state: RateLimitState = app.extensions["ratelimit"]
    seed(state)
    client = app.test_client()
    # The long user id is refused, and present on a refusal by an IP.
    assert get(client, "/items", ip="192.0.2.50", user=LONG).status_code == 200
    assert get(client, "/items", ip="192.0.2.51", user=LONG).status_code == 429
    assert get(client, "/items", ip="192.0.2.50", user=LONG).status_code == 429
    assert get(client, "/items", ip="192.0.2.1", user="alice").status_code == 200
    assert get(client, "/items", ip="192.0.2.2", user="alice").status_code == 429

    # It renders, with the refusal, the one who refused it apart, and the chart.
    browser.get(f"{base}{PREFIX}/")
    assert browser.title == "Rate limits"
    latest = browser.find_element(By.CSS_SELECTOR, "#recent-table tr:nth-child(2)")
    cells = [cell.text for cell in latest.find_elements(By.TAG_NAME, "td")]
    assert cells[1:6] == ["items", "items", "1/1m", "user:alice", "ip:192.0.2.2"]
    chart = browser.find_element(By.CSS_SELECTOR, "svg.chart")
    assert chart.is_displayed()
    assert chart.size["width"] > 300
    bars = browser.find_elements(By.CSS_SELECTOR, "svg.chart rect.bar")
    assert len(bars) >= 2
    limits = browser.find_element(By.ID, "limits-table").text
    assert "1/1m" in limits
    # The long id wraps, whole, in each table, and every column is on the page.
    tables = ("top-table", "recent-table", "limits-table")
    assert all(f"user:{LONG}" in browser.find_element(By.ID, table).text for table in tables[:2])
    assert_on_the_page(browser, tables)

    # The lookup, from the refusal's link: alice's counter is full.
    latest.find_element(By.LINK_TEXT, "user:alice").click()
    assert browser.find_element(By.ID, "who").text == "user:alice"
    row = [cell.text for cell in browser.find_elements(By.CSS_SELECTOR, "#status tr:nth-child(2) td")]
    assert row[:6] == ["items", "items", "fixed-window", "1/1m", "1", "0"]

    assert_on_the_page(browser, ("status", "top-table", "recent-table", "limits-table"))

    screenshot = tmp_path / "dashboard.png"
    browser.execute_script("window.scrollTo(0, 0)")
    assert browser.save_screenshot(str(screenshot))
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    target = os.environ.get("FRT_DASHBOARD_SCREENSHOT")
    if target:
        shutil.copyfile(screenshot, target)

    # The reset button: alice's counter is empty, and she is let through.
    browser.find_element(By.ID, "reset").click()
    assert browser.find_element(By.ID, "reset-done").text == "Deleted 1 counter key of user:alice in every scope."
    row = [cell.text for cell in browser.find_elements(By.CSS_SELECTOR, "#status tr:nth-child(2) td")]
    assert row[4:6] == ["0", "1"]
    assert get(client, "/items", ip="192.0.2.3", user="alice").status_code == 200

    # The long id's lookup, from its link, fits the page too, its reset button included.
    browser.get(f"{base}{PREFIX}/")
    browser.find_element(By.CSS_SELECTOR, "#top-table a[href*=uuuu]").click()
    assert browser.find_element(By.ID, "who").text == f"user:{LONG}"
    row = [cell.text for cell in browser.find_elements(By.CSS_SELECTOR, "#status tr:nth-child(2) td")]
    assert row[4:6] == ["1", "0"]
    assert_on_the_page(browser, ("status", "top-table", "recent-table"))
    width = browser.execute_script("return document.documentElement.clientWidth")
    reset = browser.find_element(By.ID, "reset").rect
    assert reset["x"] + reset["width"] <= width

    # The 429 page a browser gets, from the same server.
    browser.get(f"{base}/items")  # from 127.0.0.1: admitted
    assert "Too many requests" not in browser.page_source
    browser.get(f"{base}/items")
    assert browser.find_element(By.TAG_NAME, "h1").text == "Too many requests"
    assert browser.find_element(By.ID, "retry-after").text == "60"


def assert_on_the_page(browser: Any, tables: tuple[str, ...]) -> None:
    """No part of the page is out of the window's width, nor any cell of
    ``tables`` out of the page's column (the body's content box, which is
    narrower than a wide window)."""
    width = browser.execute_script("return document.documentElement.clientWidth")
    assert browser.execute_script("return document.documentElement.scrollWidth") <= width
    column = browser.execute_script(
        "const body = document.body;"
        "return body.getBoundingClientRect().right - parseFloat(getComputedStyle(body).paddingRight)"
    )
    assert column <= width
    for table in tables:
        rights = browser.execute_script(
            "return Array.from(document.querySelectorAll(arguments[0]), c => c.getBoundingClientRect().right)",
            f"#{table} td, #{table} th",
        )
        assert rights, table
        assert max(rights) <= column + 0.5, (table, max(rights) - column)


@pytest.mark.redis
@pytest.mark.parametrize("storage_url", ["redis"], indirect=True)
def test_the_limits_table_keeps_to_the_page_s_column(storage_url: str, browser: Any) -> None:
    """The docs' app (tests/shop.py), whose default limit reaches the
    dashboard's own routes: endpoint and scope names such as
    ``ratelimit_dashboard.remove_override``, with no space to break at,
    stretched the limits table past the page's column (by 283 px at this
    width), since a cell that breaks words only to fit ("break-word")
    still widens its column to its longest word."""
    from selenium.webdriver.common.by import By

    app = docs_shop.create_app(storage_url)
    app.register_blueprint(dashboard.blueprint(authorize=lambda: True), url_prefix=PREFIX)
    try:
        with serving(app) as base:
            browser.get(f"{base}{PREFIX}/")
            limits = browser.find_element(By.ID, "limits-table").text
            assert "ratelimit_dashboard.remove_override" in limits.replace("\n", "")
            assert "1000/1d (5 concurrent, lease 60s)" in limits
            assert_on_the_page(browser, ("limits-table",))
    finally:
        state = app.extensions["ratelimit"]
        state.throttle.storage.close()


def gone(element: Any) -> bool:
    """Whether ``element`` has left the document, as after the page it was on
    was replaced. Selenium's ``staleness_of`` waits for a stale element
    error only, but Chromium, asked about an element while its page is
    being replaced, may answer with another error ("Node with given id
    does not belong to the document"): either means it is gone."""
    from selenium.common.exceptions import WebDriverException

    try:
        element.is_enabled()
    except WebDriverException:
        return True
    return False


@pytest.mark.redis
@pytest.mark.parametrize("storage_url", ["redis"], indirect=True)
def test_the_dashboards_override_controls_in_a_real_browser(served: tuple[Flask, str], browser: Any) -> None:
    """Set a block on a network from the form, see it refuse and listed with
    its change, then lift it with its row's button (docs/overrides.rst)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    app, base = served
    client = app.test_client()
    browser.get(f"{base}{PREFIX}/")
    assert browser.find_element(By.ID, "overrides").text == "Overrides"
    form = browser.find_element(By.ID, "override-form")
    form.find_element(By.NAME, "identity").send_keys("ip:203.0.113.0/24")
    Select(form.find_element(By.NAME, "action")).select_by_value("block")
    Select(form.find_element(By.NAME, "scope")).select_by_value("items")
    form.find_element(By.NAME, "for").send_keys("2h")
    browser.find_element(By.ID, "set-override").click()
    done = browser.find_element(By.ID, "reset-done").text
    assert done.startswith("ip:203.0.113.0/24 blocked on scope 'items' until ")
    row = [cell.text for cell in browser.find_elements(By.CSS_SELECTOR, "#overrides-table tr:nth-child(2) td")]
    assert row[:3] == ["ip:203.0.113.0/24", "items", "block"]
    change = [cell.text for cell in browser.find_elements(By.CSS_SELECTOR, "#changes-table tr:nth-child(2) td")]
    assert change[1:4] == ["dashboard", "set", "ip:203.0.113.0/24 blocked on scope 'items'"]
    assert_on_the_page(browser, ("overrides-table", "changes-table", "limits-table"))
    assert get(client, "/items", ip="203.0.113.8").status_code == 429

    # The page that answers has a #reset-done of its own: wait until the old
    # page's is gone, or the old one may be read, or go stale while read.
    shown = browser.find_element(By.ID, "reset-done")
    browser.find_element(By.CSS_SELECTOR, "#overrides-table button.remove").click()
    WebDriverWait(browser, 10).until(lambda _: gone(shown))
    assert browser.find_element(By.ID, "reset-done").text == "Removed: ip:203.0.113.0/24 blocked on scope 'items'."
    assert not browser.find_elements(By.ID, "overrides-table")
    assert get(client, "/items", ip="203.0.113.8").status_code == 200
