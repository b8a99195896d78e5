"""Array jobs on the jobs page, in a real headless Chromium against a real `serve` running
them on the `local` resource: an array is one row with its elements counted by state; its
fold button (Enter works) unfolds one row per element with its state and exit code; the
state filter shows only the elements in that state; an element's Cancel button cancels that
element alone, and the page follows it to `canceled` (the serve's poller reads the states,
the job event stream tells the page); more than 50 elements are paged, from the keyboard."""

from __future__ import annotations

from typing import Any

import httpx
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.select import Select

from tests.console.conftest import Console, wait_for
from tests.console.test_jobs_console import launch, open_jobs, state_of


def element_rows(driver: WebDriver, job_id: str) -> list[tuple[int, str, str]]:
    """The shown element rows of the job: (index, state, exit code text)."""
    rows = driver.execute_script(
        "return [...document.querySelectorAll(`tr.element[data-element-of='${arguments[0]}']`)]"
        ".map(r => [Number(r.dataset.index), r.querySelector('.state').textContent,"
        " r.querySelector('.exit-code')?.textContent ?? ''])",
        job_id,
    )
    return [(index, state, code) for index, state, code in rows]


def counts_of(driver: WebDriver, job_id: str) -> list[str]:
    """The state badges of the job's row."""
    return list(
        driver.execute_script(
            "return [...document.querySelectorAll("
            "`tr.job[data-job='${arguments[0]}'] .array-count`)].map(b => b.textContent)",
            job_id,
        )
    )


def elements_api(console: Console, job_id: str, **params: str) -> dict[str, Any]:
    answer = httpx.get(
        f"{console.url}/api/v2/compute/job/local/{job_id}/elements",
        params=params,
        headers={"Authorization": f"Bearer {console.admin}"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    page: dict[str, Any] = answer.json()
    return page


def test_an_array_is_one_row_unfolding_to_its_elements_filtered_by_state(
    page: WebDriver, console: Console
) -> None:
    sweep = launch(
        console,
        console.admin,
        "demo",
        {
            "name": "sweep",
            "executable": "/bin/sh",
            "arguments": ["-c", "exit $((IRI_ARRAY_INDEX % 2))"],
            "array": {"indices": "0-5"},
        },
    )
    open_jobs(page, console, console.admin)
    wait_for(page, f"document.querySelector(`tr.job[data-job='{sweep}'] button.fold`)", 60)
    # Once done: one row, its state derived from the elements', and the counts as text.
    wait_for(
        page,
        f"document.querySelectorAll(`tr.job[data-job='{sweep}'] .array-count`)"
        ".length === 2 && "
        f"document.querySelector(`tr.job[data-job='{sweep}'] .state`).textContent"
        " === 'failed'",
        60,
    )
    one_row = f"return document.querySelectorAll(`tr.job[data-job='{sweep}']`).length"
    assert page.execute_script(one_row) == 1
    assert state_of(page, sweep) == "failed"
    assert counts_of(page, sweep) == ["3 completed", "3 failed"]
    message = page.find_element(By.CSS_SELECTOR, f"tr.job[data-job='{sweep}'] td.message")
    assert message.text == "array of 6: 3 completed, 3 failed"
    assert page.find_elements(By.CSS_SELECTOR, "tr.element") == []

    # Keyboard: Enter on the fold button unfolds the elements, and the focus stays on it.
    fold = page.find_element(By.CSS_SELECTOR, f"tr.job[data-job='{sweep}'] button.fold")
    assert fold.text == "▸ 6 elements" and fold.get_attribute("aria-expanded") == "false"
    assert fold.accessible_name == "Unfold the 6 elements of sweep"
    fold.send_keys(Keys.ENTER)
    wait_for(
        page, f"document.querySelectorAll(`tr.element[data-element-of='{sweep}']`).length === 6"
    )
    assert element_rows(page, sweep) == [
        (index, "failed" if index % 2 else "completed", f"exit code {index % 2}")
        for index in range(6)
    ]
    assert page.find_elements(By.CSS_SELECTOR, "tr.element button.cancel-element") == []
    shown = page.find_element(By.CSS_SELECTOR, f"tr[data-elements-of='{sweep}'] .elements-shown")
    assert shown.text == "Showing 1-6 of 6 elements."
    assert (
        page.find_elements(By.CSS_SELECTOR, f"tr[data-elements-of='{sweep}'] .elements-pager") == []
    ), "six elements are one page"
    focused = page.switch_to.active_element
    assert focused.get_attribute("data-key") == f"fold:{sweep}"
    assert focused.get_attribute("aria-expanded") == "true"
    assert focused.accessible_name == "Fold the 6 elements of sweep"

    # The state filter: the failed ones only, as the API pages them.
    choice = page.find_element(By.CSS_SELECTOR, f"tr[data-elements-of='{sweep}'] select")
    assert choice.accessible_name == "Elements in state, for sweep"
    Select(choice).select_by_value("failed")
    wait_for(
        page, f"document.querySelectorAll(`tr.element[data-element-of='{sweep}']`).length === 3"
    )
    assert element_rows(page, sweep) == [
        (1, "failed", "exit code 1"),
        (3, "failed", "exit code 1"),
        (5, "failed", "exit code 1"),
    ]
    failed = elements_api(console, sweep, state="failed")
    assert failed["total"] == 3
    assert (
        page.find_element(By.CSS_SELECTOR, f"tr[data-elements-of='{sweep}'] .elements-shown").text
        == "Showing 1-3 of 3 failed elements."
    )

    # Folded by a click, the focus stays on the redrawn button: Enter unfolds the elements
    # again (the filter kept), and Enter folds them away.
    page.find_element(By.CSS_SELECTOR, f"tr.job[data-job='{sweep}'] button.fold").click()
    wait_for(page, "document.querySelectorAll('tr.element').length === 0")
    ActionChains(page).send_keys(Keys.ENTER).perform()
    wait_for(page, "document.querySelectorAll('tr.element').length === 3")
    assert [index for index, _, _ in element_rows(page, sweep)] == [1, 3, 5]
    ActionChains(page).send_keys(Keys.ENTER).perform()
    wait_for(page, "document.querySelectorAll('tr.element, tr.elements-controls').length === 0")
    assert (
        page.find_element(By.CSS_SELECTOR, f"tr.job[data-job='{sweep}'] button.fold").get_attribute(
            "aria-expanded"
        )
        == "false"
    )


def test_an_elements_cancel_button_cancels_that_element_alone(
    page: WebDriver, console: Console
) -> None:
    slow = launch(
        console,
        console.admin,
        "demo",
        {
            "name": "slow-sweep",
            "executable": "/bin/sh",
            "arguments": ["-c", "sleep 300"],
            "array": {"indices": "0-3", "max_concurrent": 1},
        },
    )
    try:
        open_jobs(page, console, console.admin)
        wait_for(
            page,
            f"document.querySelector(`tr.job[data-job='{slow}'] .state`)?.textContent === 'active'",
            60,
        )
        page.find_element(By.CSS_SELECTOR, f"tr.job[data-job='{slow}'] button.fold").click()
        wait_for(
            page, f"document.querySelectorAll(`tr.element[data-element-of='{slow}']`).length === 4"
        )
        wait_for(
            page,
            f"document.querySelector(`tr.element[data-element-of='{slow}']"
            "[data-index='0'] .state`).textContent === 'active'",
            60,
        )
        cancel = page.find_element(
            By.CSS_SELECTOR,
            f"tr.element[data-element-of='{slow}'][data-index='3'] button.cancel-element",
        )
        assert cancel.accessible_name == "Cancel element 3 of slow-sweep"
        cancel.click()
        wait_for(
            page,
            "document.getElementById('job-notice').textContent === "
            "'Cancel of element 3 of slow-sweep sent; its state follows below.'",
        )
        # The page follows the element to canceled (no reload), and only that element.
        page.execute_script("window.sameDocument = true")
        wait_for(
            page,
            f"document.querySelector(`tr.element[data-element-of='{slow}']"
            "[data-index='3'] .state`).textContent === 'canceled'",
            90,
        )
        assert page.execute_script("return window.sameDocument") is True
        assert (
            page.find_elements(
                By.CSS_SELECTOR, f"tr.element[data-element-of='{slow}'][data-index='3'] button"
            )
            == []
        )
        rows = element_rows(page, slow)
        assert [(index, state) for index, state, _ in rows] == [
            (0, "active"),
            (1, "queued"),
            (2, "queued"),
            (3, "canceled"),
        ]
        assert state_of(page, slow) == "active"
        wait_for(
            page,
            f"[...document.querySelectorAll(`tr.job[data-job='{slow}'] .array-count`)]"
            ".some(b => b.textContent === '1 canceled')",
            30,
        )
        assert page.find_element(By.ID, "error").text == ""
        canceled = elements_api(console, slow, state="canceled")
        assert canceled["total"] == 1
        assert [e["index"] for e in canceled["elements"]] == [3]
    finally:
        httpx.delete(
            f"{console.url}/api/v2/compute/cancel/local/{slow}",
            headers={"Authorization": f"Bearer {console.admin}"},
            timeout=30,
        )


def test_more_than_fifty_elements_are_paged_from_the_keyboard(
    page: WebDriver, console: Console
) -> None:
    many = launch(
        console,
        console.admin,
        "demo",
        {"name": "many", "executable": "/bin/true", "array": {"indices": "0-118:2"}},
    )
    open_jobs(page, console, console.admin)
    wait_for(
        page,
        f"document.querySelector(`tr.job[data-job='{many}'] .state`)?.textContent === 'completed'",
        90,
    )
    assert counts_of(page, many) == ["60 completed"]
    page.find_element(By.CSS_SELECTOR, f"tr.job[data-job='{many}'] button.fold").click()
    shown = f"document.querySelector(`tr[data-elements-of='{many}'] .elements-shown`)?.textContent"
    wait_for(page, f"{shown} === 'Showing 1-50 of 60 elements.'")
    assert [index for index, _, _ in element_rows(page, many)] == list(range(0, 100, 2))
    previous = page.find_element(
        By.CSS_SELECTOR, f"tr[data-elements-of='{many}'] .elements-previous"
    )
    following = page.find_element(By.CSS_SELECTOR, f"tr[data-elements-of='{many}'] .elements-next")
    assert previous.get_attribute("aria-disabled") == "true"
    assert following.accessible_name == "Next 50 elements of many"

    following.send_keys(Keys.ENTER)
    wait_for(page, f"{shown} === 'Showing 51-60 of 60 elements.'")
    assert element_rows(page, many) == [
        (index, "completed", "exit code 0") for index in range(100, 120, 2)
    ]
    # The focus stays on the redrawn button, which says there is no page further on.
    focused = page.switch_to.active_element
    assert focused.get_attribute("data-key") == f"elements-next:{many}"
    assert focused.get_attribute("aria-disabled") == "true"
    ActionChains(page).send_keys(Keys.ENTER).perform()
    ActionChains(page).key_down(Keys.SHIFT).send_keys(Keys.TAB).key_up(Keys.SHIFT).perform()
    assert page.switch_to.active_element.accessible_name == "Previous 50 elements of many"
    ActionChains(page).send_keys(Keys.ENTER).perform()
    wait_for(page, f"{shown} === 'Showing 1-50 of 60 elements.'")
    assert element_rows(page, many)[0] == (0, "completed", "exit code 0")
