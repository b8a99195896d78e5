"""The console and the per-user limits, in a real headless Chromium against a real serve
whose read rate is small (20 reads per 2000 s).

Past the rate, the Jobs page and the header show the 429's own message (the limit, the
user's use) and when to try again, not a generic error; the sign-in page does too, instead
of calling the token refused. "Your limits" in the header lists the caller's rates and
quotas with their use, as GET /account/limits says them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from selenium.webdriver.remote.webdriver import WebDriver

from tests.console.conftest import token_of, wait_for
from tests.support.serve import RunningServe, running_serve

V2 = "/api/v2"
TOKEN_KEY = "iri-gateway.token"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServe]:
    data = tmp_path_factory.mktemp("limits-console") / "data"
    # 20 reads per 2000 s: a refused user stays refused through the test (a window boundary
    # passing meanwhile frees 20 x 10 / 2000 of a request in ten seconds, less than one).
    env = {"IRI_GATEWAY_READ_RATE": "0.01", "IRI_GATEWAY_RATE_WINDOW": "2000"}
    with running_serve(data, extra_env=env) as running:
        yield running


def signed_in(driver: WebDriver, served: RunningServe, token: str, page: str) -> None:
    """The console page `page` with `token` in the tab's session (as sign-in leaves it)."""
    driver.get(f"{served.url}/console/sign-in")
    driver.execute_script(f"sessionStorage.setItem('{TOKEN_KEY}', arguments[0])", token)
    driver.get(f"{served.url}/console/{page}")


def exhaust_reads(served: RunningServe, token: str) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    for _ in range(40):
        if (
            httpx.get(f"{served.url}{V2}/account/me", headers=headers, timeout=30).status_code
            == 429
        ):
            return
    raise AssertionError("no 429 after 40 reads")


def test_a_429_shows_its_message_and_when_to_retry(
    browser: WebDriver,
    served: RunningServe,
) -> None:
    data = Path(served.log).parent / "data"
    alice = token_of(data, "alice", "proj1")
    exhaust_reads(served, alice)
    signed_in(browser, served, alice, "jobs")
    shown = str(
        wait_for(
            browser,
            "(() => { const e = document.getElementById('error'); "
            "return e && !e.hidden && e.textContent; })()",
        )
    )
    assert shown.startswith(
        "The gateway refused the request: Too many requests (limit "
        "read_rate: 0.01 per second): alice made"
    ), shown
    assert re.search(r"You may try again after \S+.* \(in \d+ s\)\.$", shown), shown
    assert "try again in" in shown  # the problem's own detail, kept whole
    who = str(wait_for(browser, "document.getElementById('who').textContent"))
    assert who.startswith("Too many requests"), who
    # The sign-in page says the same, not "the gateway refused this token".
    browser.get(f"{served.url}/console/sign-in")
    browser.execute_script("sessionStorage.clear()")
    browser.find_element("id", "token").send_keys(alice)
    browser.find_element("css selector", "#sign-in button[type=submit]").click()
    refusal = str(
        wait_for(
            browser,
            "(() => { const e = document.getElementById("
            "'sign-in-error'); return !e.hidden && e.textContent; })()",
        )
    )
    assert refusal.startswith("Too many requests (limit read_rate"), refusal
    assert "refused this token" not in refusal


def test_your_limits_lists_the_rates_and_quotas_with_their_use(
    browser: WebDriver, served: RunningServe
) -> None:
    data = Path(served.log).parent / "data"
    carol = token_of(data, "carol", "proj1")
    signed_in(browser, served, carol, "sites")
    wait_for(browser, "!document.getElementById('limits').hidden")
    browser.find_element("css selector", "#limits summary").click()
    items = wait_for(
        browser,
        "(() => { const items = [...document.querySelectorAll("
        "'#limits-list li')].map((li) => li.textContent); "
        "return items.length >= 4 && items; })()",
    )
    assert isinstance(items, list)
    reads = next(item for item in items if item.startswith("Reads: "))
    assert re.fullmatch(r"Reads: \d+ of 20 per 2000 s \(0.01 per second\)", reads), items
    assert "Changes: 0 of 100000 per 2000 s (50 per second)" in items, items
    assert "Unfinished file tasks: 0 of 32" in items, items
    assert "Unfinished jobs on local: 0 of 1000" in items, items
