"""The console's stream reader (static/events.js) in a real headless Chromium against a real
HTTP server speaking the job event stream's format (tests/support/event_server.py): the
bearer token sent with fetch() (EventSource cannot), every event parsed, reconnection with
Last-Event-ID after a dropped connection and nothing missed, and the end of it on a server
without the stream (the page then keeps its periodic refresh)."""

from __future__ import annotations

from selenium.webdriver.remote.webdriver import WebDriver

from tests.console.conftest import wait_for
from tests.support.event_server import event_server, until

EVENTS = "/api/v2/compute/events"


def test_events_js_follows_reconnects_and_misses_nothing(browser: WebDriver) -> None:
    with event_server() as (url, state):
        for name in ("a", "b"):
            state.add_job(name)
        browser.get(f"{url}/follow")
        wait_for(browser, "window.ups === 1")
        state.change("a", "active")
        wait_for(browser, "window.got.length === 1")
        state.drop()  # the connection is cut; changes happen while the page is away
        state.change("b", "active")
        state.change("a", "completed")
        wait_for(browser, "window.got.length === 3 && window.ups === 2")
        got = browser.execute_script("return window.got")
        browser.execute_script("window.stopEvents()")
        opened = [headers for path, headers in state.requests if path == EVENTS]
    assert got == [["job", 1, "active"], ["job", 2, "active"], ["job", 3, "completed"]]
    assert all(h.get("Authorization") == "Bearer browser-token" for h in opened)
    assert "Last-Event-ID" not in opened[0] and opened[1]["Last-Event-ID"] == "1"


def test_events_js_gives_up_on_a_server_without_the_stream(browser: WebDriver) -> None:
    with event_server() as (url, state):
        state.has_stream = False
        browser.get(f"{url}/follow")
        wait_for(browser, "window.downs !== undefined && window.downs.length === 1")
        assert browser.execute_script("return [window.downs, window.ups]") == [[True], 0]
        until(lambda: state.count(EVENTS) == 1)


def test_events_js_refuses_a_line_without_end(browser: WebDriver) -> None:
    with event_server() as (url, state):
        state.hostile = b"retry: 60000\n\n" + b"x" * (3 * 1024 * 1024)
        browser.get(f"{url}/follow")
        wait_for(browser, "window.downs !== undefined && window.downs.length === 1")
        assert browser.execute_script("return [window.got, window.downs]") == [[], [False]]
