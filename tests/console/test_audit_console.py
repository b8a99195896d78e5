"""The Audit log page in a real headless Chromium against a real `serve`: the admin finds it in
the menu and sees the records of changes just made (bob's launch with its request id, his
refused cancel of another's job), filters them by user and operation; markup in a path is
shown as text. Bob (no admin token) is not offered the page, is told so when he opens it by
its address, and his browser never asks for (so never gets) the records."""

from __future__ import annotations

import httpx
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.console.conftest import Console, requested_urls, screenshots, sign_in, wait_for
from tests.console.test_keyboard_console import unnamed

AUDIT_LINK = "nav a[href='/console/audit']"
ROWS = "#audit tbody tr"


def make_changes(console: Console) -> str:
    """bob launches a job (request id `console-launch`), the admin cancels it, and bob tries
    to cancel it again under a path with markup in it; the job's id."""
    api = f"{console.url}/api/v2"
    bob = {"Authorization": f"Bearer {console.bob}", "X-IRI-Facility-Project": "bobs"}
    launched = httpx.post(
        f"{api}/compute/job/local",
        json={"executable": "/bin/sleep", "arguments": ["30"]},
        headers={**bob, "X-Request-ID": "console-launch"},
        timeout=30,
    )
    assert launched.status_code == 200, launched.text
    job_id: str = launched.json()["id"]
    marked = httpx.post(
        f"{api}/filesystem/mkdir/local",
        json={"path": "/nowhere/<img src=x onerror=alert(1)>"},
        headers={**bob, "X-Request-ID": "console-mkdir"},
        timeout=30,
    )
    assert marked.status_code == 404, marked.text
    return job_id


def test_an_admin_sees_the_records_and_filters_them(page: WebDriver, console: Console) -> None:
    job_id = make_changes(console)
    sign_in(page, console, console.admin)
    wait_for(page, f'document.querySelector("{AUDIT_LINK}").checkVisibility()')
    page.find_element(By.CSS_SELECTOR, AUDIT_LINK).click()
    wait_for(page, "location.pathname === '/console/audit'")
    wait_for(page, f"document.querySelectorAll('{ROWS}').length > 0")
    rows = [row.text for row in page.find_elements(By.CSS_SELECTOR, ROWS)]
    launch = next(row for row in rows if "console-launch" in row)
    assert "bob" in launch and "launchJob" in launch and f"job {job_id}" in launch, launch
    assert "succeeded 200" in launch, launch
    refused = next(row for row in rows if "console-mkdir" in row)
    assert "refused 404 Not Found" in refused, refused
    assert "path /nowhere/<img src=x onerror=alert(1)>" in refused, refused
    assert page.find_elements(By.CSS_SELECTOR, "#audit img") == []
    assert unnamed(page) == []  # every shown field, button and region has a name
    screenshots(page, "audit")

    page.find_element(By.ID, "filter-operation").send_keys("mkdir")
    page.find_element(By.ID, "apply").click()
    wait_for(page, f"document.querySelectorAll('{ROWS}').length === 1")
    assert "console-mkdir" in page.find_element(By.CSS_SELECTOR, ROWS).text
    page.find_element(By.ID, "filter-user").send_keys("nobody-at-all")
    page.find_element(By.ID, "apply").click()
    wait_for(page, "document.getElementById('audit-count').textContent === 'No record matches.'")


def test_a_non_admin_gets_neither_the_page_nor_its_records(
    page: WebDriver, console: Console
) -> None:
    make_changes(console)
    sign_in(page, console, console.bob)
    wait_for(page, "document.getElementById('who').textContent !== ''")
    assert not page.find_element(By.CSS_SELECTOR, AUDIT_LINK).is_displayed()
    requested_urls(page)  # forget what came before
    page.get(f"{console.url}/console/audit")
    wait_for(page, "!document.getElementById('admins-only').hidden")
    assert page.find_element(By.ID, "admins-only").text.startswith(
        "Only facility admins can read the audit log"
    )
    assert not page.find_element(By.ID, "audit-page").is_displayed()
    assert page.find_elements(By.CSS_SELECTOR, ROWS) == []
    asked = requested_urls(page)
    assert any(url.endswith("/api/v2/account/me") for url in asked), asked
    assert not any("/api/v2/audit" in url for url in asked), asked
    assert "console-launch" not in page.page_source
    # and had the page asked, the API would have refused him
    refused = httpx.get(
        f"{console.url}/api/v2/audit", headers={"Authorization": f"Bearer {console.bob}"}
    )
    assert refused.status_code == 403 and "console-launch" not in refused.text
