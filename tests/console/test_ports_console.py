"""A running job's service ports on the jobs page, in a real headless Chromium against a real
`serve` with a port proxy (its origin `localhost` on the serve's port, the console used on
`127.0.0.1`): the Open button of a job's port opens the service in a new tab on the proxy's
origin, with no token in any address; a cluster job's member has its own; a port of a job
that ended offers no Open, and a refusal is shown in the gateway's words.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver

from tests.console.conftest import (
    Console,
    requested_urls,
    screenshots,
    sign_in,
    token_of,
    wait_for,
)
from tests.support.serve import free_port, running_serve

SERVICE = Path(__file__).parent.parent / "support" / "service_echo.py"


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    """The console's server, with a port proxy on `localhost` (see the module's text)."""
    data = tmp_path_factory.mktemp("ports-console") / "data"
    port = free_port()
    env = {"IRI_GATEWAY_PROXY_URL": f"http://localhost:{port}", "IRI_GATEWAY_POLL_FAST": "0.2"}
    with running_serve(data, port=port, extra_env=env) as served:
        printed = re.search(r"\(shown once\):\n\s+(\S+)", served.output())
        assert printed is not None, served.output()
        yield Console(served, printed.group(1), token_of(data, "bob", "bobs"), data)


def launch(console: Console, spec: dict[str, Any]) -> str:
    answer = httpx.post(
        f"{console.url}/api/v2/compute/job/local",
        json=spec,
        timeout=30,
        headers={"Authorization": f"Bearer {console.admin}", "X-IRI-Facility-Project": "demo"},
    )
    assert answer.status_code == 200, answer.text
    job_id: str = answer.json()["id"]
    return job_id


def cancel(console: Console, job_id: str) -> None:
    httpx.delete(
        f"{console.url}/api/v2/compute/cancel/local/{job_id}",
        headers={"Authorization": f"Bearer {console.admin}"},
        timeout=30,
    )


def echo_command(variable: str, seconds: int) -> str:
    """The echo service on the port `$IRI_PORT_<variable>`, under its proxy path."""
    return (
        f'timeout {seconds} {sys.executable} {SERVICE} --port "$IRI_PORT_{variable}" '
        f'--prefix "$IRI_PROXY_PATH_{variable}"'
    )


def serving(console: Console, path: str) -> None:
    """Wait until the service answers through the proxy (the job runs before it listens)."""
    proxy = console.url.replace("127.0.0.1", "localhost")
    deadline = time.monotonic() + 30
    while True:
        answer = httpx.get(
            f"{proxy}{path}ping", headers={"Authorization": f"Bearer {console.admin}"}
        )
        if answer.status_code == 200:
            return
        assert time.monotonic() < deadline, answer.text
        time.sleep(0.2)


def open_jobs(driver: WebDriver, console: Console) -> None:
    sign_in(driver, console, console.admin)
    driver.find_element(By.LINK_TEXT, "Jobs").click()
    wait_for(driver, "document.body.dataset.loaded === 'true'")


def enabled(selector: str) -> str:
    """A script: the element `selector` is on the page and enabled."""
    return f"document.querySelector(`{selector}`)?.disabled === false"


def press(driver: WebDriver, selector: str, *, keyboard: bool = False) -> None:
    """Click the element `selector` (or press Enter on it), found again if the page redrew it
    in between: the live updates replace the jobs table (a details row twice when opened, once
    its output is read), and a redrawn button is another element. A stale element refuses the
    input before it is sent, so the retry presses once."""
    for _ in range(5):
        try:
            button = driver.find_element(By.CSS_SELECTOR, selector)
            if keyboard:
                button.send_keys(Keys.ENTER)
            else:
                button.click()
            return
        except StaleElementReferenceException:
            time.sleep(0.1)
    raise AssertionError(f"{selector} was redrawn five times in a row")


def table_cells(driver: WebDriver, rows: str, columns: int) -> list[list[str]]:
    """The first `columns` cells' text of each of the rows `rows`, read in one script so a
    redraw cannot come between the rows and their cells."""
    cells: list[list[str]] = driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map((row) =>"
        " [...row.querySelectorAll('td')].slice(0, arguments[1]).map((td) => td.innerText))",
        rows,
        columns,
    )
    return cells


def refused_tab_closed(driver: WebDriver, tabs: set[str]) -> None:
    """The tab a refused Open opened is closed again: the window handles are `tabs` once more."""
    deadline = time.monotonic() + 10
    while set(driver.window_handles) != tabs:
        assert time.monotonic() < deadline, "the refused link's tab stayed open"
        time.sleep(0.1)


def open_in_new_tab(driver: WebDriver, selector: str, *, keyboard: bool = False) -> dict[str, Any]:
    """Click the Open button `selector` (or press Enter on it); the new tab's address, origin
    and what the service answered there (its JSON echo of the request). The console's tab is
    current again afterwards."""
    console_tab = driver.current_window_handle
    before = set(driver.window_handles)
    press(driver, selector, keyboard=keyboard)
    deadline = time.monotonic() + 20
    while not set(driver.window_handles) - before:
        assert time.monotonic() < deadline, "no new tab opened"
        time.sleep(0.1)
    (tab,) = set(driver.window_handles) - before
    driver.switch_to.window(tab)
    try:
        wait_for(driver, "document.body && document.body.innerText.includes('\"path\"')", 20)
        seen = {
            "url": driver.current_url,
            "origin": driver.execute_script("return location.origin"),
            "text": driver.find_element(By.TAG_NAME, "body").text,
            "opener": driver.execute_script("return window.opener === null"),
        }
    finally:
        driver.close()
        driver.switch_to.window(console_tab)
    return seen


def test_open_buttons_lead_to_each_running_port_on_the_proxys_origin(
    page: WebDriver, console: Console
) -> None:
    plain = launch(
        console,
        {
            "name": "notebook",
            "executable": "/bin/bash",
            "arguments": ["-c", echo_command("HTTP", 300)],
            "ports": {"http": free_port()},
        },
    )
    base = free_port()
    cluster = launch(
        console,
        {
            "name": "pair",
            "executable": "/bin/bash",
            "arguments": [
                "-c",
                f'timeout 300 {sys.executable} {SERVICE} --port "$IRI_CLUSTER_PORT_UI" '
                '--prefix "${IRI_PROXY_BASE}${IRI_CLUSTER_ROLE}${IRI_CLUSTER_ROLE_INDEX}/ui/"',
            ],
            "roles": [{"name": "head", "count": 1, "ports": {"ui": base}}],
        },
    )
    try:
        serving(console, f"/{plain}/main/http/")
        serving(console, f"/{cluster}/head1/ui/")
        open_jobs(page, console)
        button = f"tr.job[data-job='{plain}'] button.open-port[data-port='http']"
        wait_for(page, enabled(button), 30)
        page.get_log("performance")
        seen = open_in_new_tab(page, button)
        where = urlsplit(seen["url"])
        assert (where.hostname, where.path) == ("localhost", f"/{plain}/main/http/"), seen
        assert f'"path": "/{plain}/main/http/"' in seen["text"]
        assert seen["opener"] is True  # the service's page has no handle on the console
        # No address the browser asked for carries the console's token.
        assert not [url for url in requested_urls(page) if console.admin in url]
        assert console.admin not in seen["text"]

        # The cluster job's member has its own button, in its row once unfolded.
        press(page, f"tr.job[data-job='{cluster}'] button.fold")
        member_button = f"tr.member[data-member-of='{cluster}'] button.open-port[data-port='ui']"
        wait_for(page, enabled(member_button), 30)
        member = open_in_new_tab(page, member_button)
        assert urlsplit(member["url"]).path == f"/{cluster}/head1/ui/", member
    finally:
        cancel(console, plain)
        cancel(console, cluster)


def test_an_ended_jobs_port_offers_no_open_and_a_refusal_is_shown(
    page: WebDriver, console: Console
) -> None:
    job_id = launch(
        console,
        {
            "name": "short-lived",
            "executable": "/bin/bash",
            "arguments": ["-c", echo_command("HTTP", 300)],
            "ports": {"http": free_port()},
        },
    )
    try:
        serving(console, f"/{job_id}/main/http/")
        open_jobs(page, console)
        button = f"tr.job[data-job='{job_id}'] button.open-port[data-port='http']"
        wait_for(page, enabled(button), 30)
        # The job ends between the page's last look and the click: the gateway's 410 is shown
        # beside the button, and the tab opened for it is closed again.
        tabs = set(page.window_handles)
        cancel(console, job_id)
        deadline = time.monotonic() + 30
        while (
            httpx.get(
                f"{console.url}/api/v2/compute/status/local/{job_id}",
                headers={"Authorization": f"Bearer {console.admin}"},
            ).json()["status"]["state"]
            != "canceled"
        ):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        # As if the page had not read the end yet: the button enabled and clicked at once.
        page.execute_script(
            "const b = document.querySelector(arguments[0]); b.disabled = false; b.click()",
            button,
        )
        note = wait_for(
            page,
            f"document.querySelector(`tr.job[data-job='{job_id}'] .port-note`)?.textContent",
            20,
        )
        assert "ended" in str(note), note
        refused_tab_closed(page, tabs)
        # Once the page has read the end, the button is disabled.
        wait_for(page, f"document.querySelector(`{button}`).disabled", 30)
    finally:
        cancel(console, job_id)


def test_the_details_list_every_port_and_open_it_from_the_keyboard(
    page: WebDriver, console: Console
) -> None:
    numbers = {"http": free_port(), "admin": free_port()}
    job_id = launch(
        console,
        {
            "name": "two-ports",
            "executable": "/bin/bash",
            "arguments": ["-c", echo_command("HTTP", 300)],
            "ports": numbers,
        },
    )
    detail = f"tr.detail[data-detail-of='{job_id}'] table.ports"
    button = f"{detail} tr[data-port-row='main:http'] button.open-port"
    try:
        serving(console, f"/{job_id}/main/http/")
        open_jobs(page, console)
        press(page, f"tr.job[data-job='{job_id}'] button.details")
        wait_for(page, enabled(button), 30)
        # One row per member and port: member, name, number, and its Open button.
        cells = table_cells(page, f"{detail} tbody tr", 3)
        assert sorted(cells) == sorted(
            [["main", "admin", str(numbers["admin"])], ["main", "http", str(numbers["http"])]]
        ), cells
        screenshots(page, "job-ports")

        # A real button: focused and pressed with Enter, it opens the service in a new tab on
        # the proxy's origin (localhost), not the console's (127.0.0.1).
        page.get_log("performance")
        seen = open_in_new_tab(page, button, keyboard=True)
        where, origin, text = urlsplit(seen["url"]), seen["origin"], seen["text"]
        assert (where.hostname, where.path) == ("localhost", f"/{job_id}/main/http/")
        assert origin == f"http://localhost:{urlsplit(console.url).port}" != console.url
        assert f'"path": "/{job_id}/main/http/"' in text
        assert not [url for url in requested_urls(page) if console.admin in url]

        # The job ends: the live update redraws the list, its buttons disabled.
        cancel(console, job_id)
        wait_for(page, f"document.querySelector(`{button}`)?.disabled === true", 30)
        assert len(table_cells(page, f"{detail} tbody tr", 3)) == 2
        # A click the page let through before it read the end: the gateway's 410, in its
        # words, beside that button (announced there), and no tab left open.
        tabs = set(page.window_handles)
        page.execute_script(
            "const b = document.querySelector(arguments[0]); b.disabled = false; b.click()",
            button,
        )
        note = wait_for(
            page,
            f"document.querySelector(`{detail} tr[data-port-row='main:http'] "
            ".port-note[role=status]`)?.textContent",
            20,
        )
        assert "ended" in str(note), note
        refused_tab_closed(page, tabs)
        # The row's own button shows the same words, not announced a second time.
        row_note = page.execute_script(
            "const n = document.querySelector(arguments[0]);"
            " return [n.textContent, n.getAttribute('role')]",
            f"tr.job[data-job='{job_id}'] .port-note",
        )
        assert row_note == [note, None], row_note
    finally:
        cancel(console, job_id)
