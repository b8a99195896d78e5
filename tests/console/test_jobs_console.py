"""The jobs page in a real headless Chromium against a real `serve`: the user's jobs with
live state, a three-role cluster job unfolding into its members (primary first), cancel from
the page, another user's jobs invisible (as in the API), and paging: 50 jobs to a page, the
live refresh reading the shown page only."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
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


def launch(console: Console, token: str, project: str, spec: dict[str, Any]) -> str:
    answer = httpx.post(
        f"{console.url}/api/v2/compute/job/local",
        json=spec,
        timeout=30,
        headers={"Authorization": f"Bearer {token}", "X-IRI-Facility-Project": project},
    )
    assert answer.status_code == 200, answer.text
    job_id: str = answer.json()["id"]
    return job_id


def state_of(driver: WebDriver, job_id: str) -> str:
    return str(
        driver.execute_script(
            "const row = document.querySelector(`tr.job[data-job='${arguments[0]}']`);"
            "return row ? row.querySelector('.state').textContent : null",
            job_id,
        )
    )


def open_jobs(driver: WebDriver, console: Console, token: str) -> None:
    sign_in(driver, console, token)
    driver.find_element(By.LINK_TEXT, "Jobs").click()
    wait_for(driver, "document.body.dataset.loaded === 'true'")


def test_jobs_live_state_cluster_members_cancel_and_privacy(
    page: WebDriver, console: Console
) -> None:
    sleeper = launch(
        console,
        console.admin,
        "demo",
        {"name": "sleeper", "executable": "/bin/sleep", "arguments": ["600"]},
    )
    trio = launch(
        console,
        console.admin,
        "demo",
        {
            "name": "trio",
            "executable": "/bin/sleep",
            "arguments": ["600"],
            "roles": [{"name": "master", "count": 1}, {"name": "worker", "count": 2}],
        },
    )
    bobs = launch(
        console,
        console.bob,
        "bobs",
        {"name": "bobs-job", "executable": "/bin/sleep", "arguments": ["600"]},
    )

    open_jobs(page, console, console.admin)
    # Live: the states move on without a reload (queued -> active, members listed).
    wait_for(page, f"document.querySelector(`tr.job[data-job='{trio}'] button.fold`)", 60)
    wait_for(
        page,
        f"document.querySelector(`tr.job[data-job='{sleeper}'] .state`)?.textContent === 'active'",
        60,
    )
    listed = page.execute_script(
        "return [...document.querySelectorAll('tr.job')].map(r => r.dataset.job)"
    )
    assert set(listed) == {sleeper, trio}, "bob's job is not admin's to see"
    assert bobs not in listed

    fold = page.find_element(By.CSS_SELECTOR, f"tr.job[data-job='{trio}'] button.fold")
    assert fold.text == "▸ 3 members" and fold.get_attribute("aria-expanded") == "false"
    fold.send_keys(Keys.ENTER)  # keyboard: the button unfolds the members
    wait_for(page, f"document.querySelectorAll(`tr.member[data-member-of='{trio}']`).length === 3")
    # Read in one script: a live update redraws the table, its rows then other elements.
    rows = page.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map((r) => ({"
        " name: r.querySelector('.member-name').textContent,"
        " primary: r.querySelector('.primary')?.textContent ?? null, text: r.innerText }))",
        f"tr.member[data-member-of='{trio}']",
    )
    assert [r["name"] for r in rows] == ["master1", "worker1", "worker2"]
    assert [r["primary"] for r in rows] == ["primary", None, None]
    assert "role master #1" in rows[0]["text"] and "role worker #2" in rows[2]["text"]
    assert (
        page.find_element(By.CSS_SELECTOR, f"tr.job[data-job='{trio}'] button.fold").get_attribute(
            "aria-expanded"
        )
        == "true"
    )
    screenshots(page, "jobs")

    page.find_element(By.CSS_SELECTOR, f"tr.job[data-job='{sleeper}'] button.cancel").click()
    wait_for(
        page,
        f"document.querySelector(`tr.job[data-job='{sleeper}'] .state`)"
        "?.textContent === 'canceled'",
        60,
    )
    assert page.find_elements(By.CSS_SELECTOR, f"tr.job[data-job='{sleeper}'] button.cancel") == []
    state = httpx.get(
        f"{console.url}/api/v2/compute/status/local/{sleeper}",
        headers={"Authorization": f"Bearer {console.admin}"},
    ).json()
    assert state["status"]["state"] == "canceled"

    # Live: a job submitted elsewhere (the API) appears and runs without a reload.
    page.execute_script("window.sameDocument = true")
    late = launch(
        console,
        console.admin,
        "demo",
        {
            "name": "late",
            "executable": "/bin/sh",
            "arguments": ["-c", "echo '<b>hello</b> from late'; echo oops >&2; exit 3"],
        },
    )
    wait_for(
        page,
        f"document.querySelector(`tr.job[data-job='{late}'] .state`)?.textContent === 'failed'",
        60,
    )
    assert page.execute_script("return window.sameDocument") is True

    # Detail: the state history as a timeline and the output's tail (as text).
    page.find_element(By.CSS_SELECTOR, f"tr.job[data-job='{late}'] button.details").click()
    wait_for(
        page,
        f"document.querySelector(`tr[data-detail-of='{late}'] .output-stdout pre`)"
        "?.textContent === '<b>hello</b> from late\\n'",
        30,
    )
    steps = page.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map((s) => s.textContent)",
        f"tr[data-detail-of='{late}'] .timeline li .state",
    )
    assert steps[0] == "new" and steps[-1] == "failed", steps
    assert "queued" in steps
    wait_for(
        page,
        f"document.querySelector(`tr[data-detail-of='{late}'] .output-stderr pre`)"
        "?.textContent === 'oops\\n'",
        30,
    )
    assert page.find_elements(By.CSS_SELECTOR, f"tr[data-detail-of='{late}'] pre b") == []
    screenshots(page, "job-detail")

    # Filters: finished jobs only.
    page.find_element(By.ID, "filter-state").send_keys("finished")
    wait_for(page, "document.querySelectorAll('tr.job').length === 2")
    assert (state_of(page, sleeper), state_of(page, late)) == ("canceled", "failed")

    # Bob sees his job and nothing of admin's.
    page.find_element(By.ID, "sign-out").click()
    wait_for(page, "location.pathname === '/console/sign-in'")
    open_jobs(page, console, console.bob)
    wait_for(page, "document.querySelectorAll('tr.job').length === 1")
    assert page.execute_script(
        "return [...document.querySelectorAll('tr.job')].map(r => r.dataset.job)"
    ) == [bobs]

    for token, job_id in ((console.admin, trio), (console.bob, bobs)):
        httpx.delete(
            f"{console.url}/api/v2/compute/cancel/local/{job_id}",
            timeout=30,
            headers={"Authorization": f"Bearer {token}"},
        )


def test_jobs_are_paged_and_live_refresh_reads_the_shown_page_only(
    page: WebDriver, console: Console
) -> None:
    carol = console.token("carol", "carols")
    with ThreadPoolExecutor(4) as pool:
        ids = list(
            pool.map(
                lambda n: launch(
                    console, carol, "carols", {"name": f"carol-{n:02d}", "executable": "/bin/true"}
                ),
                range(53),
            )
        )
    newest_first = [
        job["id"]
        for job in httpx.get(
            f"{console.url}/api/v2/compute/jobs",
            params={"limit": 200},
            timeout=30,
            headers={"Authorization": f"Bearer {carol}"},
        ).json()["jobs"]
    ]
    assert sorted(newest_first) == sorted(ids)

    open_jobs(page, console, carol)
    shown = "[...document.querySelectorAll('tr.job')].map(r => r.dataset.job)"
    count = "document.getElementById('job-count').textContent"
    wait_for(page, f"{count} === 'Showing 1-50 of your 53 jobs.'")
    assert page.execute_script(f"return {shown}") == newest_first[:50]
    previous = page.find_element(By.ID, "page-previous")
    following = page.find_element(By.ID, "page-next")
    assert previous.get_attribute("disabled") is not None and following.is_enabled()
    assert page.find_element(By.ID, "pager").get_attribute("aria-label") == "Pages of your jobs"

    page.execute_script("document.getElementById('page-next').focus()")
    following.send_keys(Keys.ENTER)  # keyboard: the button turns the page
    wait_for(page, f"{count} === 'Showing 51-53 of your 53 jobs.'")
    assert page.execute_script(f"return {shown}") == newest_first[50:]
    assert previous.is_enabled() and following.get_attribute("disabled") is not None

    # Live refresh reads the shown page only: a new job moves the oldest ones down a page.
    page.get_log("performance")
    page.execute_script("window.sameDocument = true")
    late = launch(console, carol, "carols", {"name": "carol-late", "executable": "/bin/true"})
    wait_for(page, f"{count} === 'Showing 51-54 of your 54 jobs.'", 30)
    assert page.execute_script(f"return {shown}") == newest_first[49:]
    asked = [url for url in requested_urls(page) if "/api/v2/" in url]
    assert asked and all("/api/v2/compute/jobs?offset=50&limit=50&" in url for url in asked), asked
    assert page.execute_script("return window.sameDocument") is True

    previous.send_keys(Keys.ENTER)
    wait_for(page, f"{count} === 'Showing 1-50 of your 54 jobs.'")
    assert page.execute_script(f"return {shown}")[:2] == [late, newest_first[0]]

    # A filter is applied by the API before paging: the state, and the name.
    page.find_element(By.ID, "filter-name").send_keys("carol-0")
    wait_for(page, f"{count} === 'Showing 1-10 of 10 jobs matching the filters.'")
    assert page.find_element(By.ID, "pager").get_attribute("hidden") is not None

    # A link to a job beyond the first page finds it by its id, its details open.
    oldest = newest_first[-1]
    page.get(f"{console.url}/console/jobs?job={oldest}")
    wait_for(page, f"document.querySelector(`tr[data-detail-of='{oldest}'] .timeline li`)", 30)
    assert page.execute_script(f"return {shown}") == [oldest]
    assert page.find_element(By.ID, "filter-name").get_attribute("value") == oldest


def test_a_token_that_may_only_read_is_said_and_its_cancel_refused_in_the_apis_words(
    page: WebDriver, console: Console
) -> None:
    job_id = launch(
        console,
        console.admin,
        "demo",
        {"name": "watched", "executable": "/bin/sleep", "arguments": ["120"]},
    )
    reader = token_of(console.data, "admin", "demo", "--read-only", "--expires-in", "1h")
    try:
        open_jobs(page, console, reader)
        who = str(wait_for(page, "document.getElementById('who').textContent", 20))
        assert "may only read" in who and "until 20" in who and who.endswith(" UTC)"), who
        page.find_element(By.CSS_SELECTOR, f"tr.job[data-job='{job_id}'] button.cancel").click()
        said = wait_for(page, "document.getElementById('error').textContent", 20)
        assert "refused" in str(said) and "may only read" in str(said), said
        assert state_of(page, job_id) != "canceled"
    finally:
        httpx.delete(
            f"{console.url}/api/v2/compute/cancel/local/{job_id}",
            headers={"Authorization": f"Bearer {console.admin}"},
            timeout=30,
        )
