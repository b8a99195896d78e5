"""The jobs page updates live from the job event stream, in a real headless Chromium against a
real `serve`: the stream is read with fetch() and the bearer token, a change reaches the page
without the periodic refresh (none while a job runs quietly), and another user's job never
makes the page read anything."""

from __future__ import annotations

from selenium.webdriver.remote.webdriver import WebDriver

from tests.console.conftest import Console, requested_urls, wait_for
from tests.console.test_jobs_console import launch, open_jobs, state_of

READS = "/api/v2/compute/jobs?"


def test_the_jobs_page_follows_the_stream_not_a_timer(page: WebDriver, console: Console) -> None:
    erin = console.token("erin", "erins")
    open_jobs(page, console, erin)
    wait_for(page, "document.body.dataset.live === 'true'", 30)
    job = launch(
        console, erin, "erins", {"name": "live", "executable": "/bin/sleep", "arguments": ["6"]}
    )
    wait_for(page, f"document.querySelector(`tr.job[data-job='{job}']`) !== null", 30)
    wait_for(
        page,
        f"[...document.querySelectorAll(`tr.job[data-job='{job}'] .state`)]"
        ".some(c => c.textContent === 'active')",
        30,
    )
    page.get_log("performance")
    # Another user's job changes nothing on this page: their events never reach it.
    launch(console, console.bob, "bobs", {"name": "bobs", "executable": "/bin/true"})
    wait_for(
        page,
        f"[...document.querySelectorAll(`tr.job[data-job='{job}'] .state`)]"
        ".some(c => c.textContent === 'completed')",
        30,
    )
    reads = [url for url in requested_urls(page) if READS in url]
    # Five quiet seconds of `active` would be two or three reads on the 2 s timer; on the
    # stream the page reads once, for the completion.
    assert 1 <= len(reads) <= 2, reads
    assert state_of(page, job) == "completed"
    assert page.execute_script("return document.body.dataset.live") == "true"
