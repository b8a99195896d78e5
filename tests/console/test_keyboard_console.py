"""Every page without a mouse: each form field, button, link and focusable region has an
accessible name (as Chromium computes it for screen readers), and the main actions (sign in,
the pages' menu, the sites filters, the example picker, submit, the jobs filters, cancel,
the profile check) are reached with Tab and work with Enter or Space."""

from __future__ import annotations

import httpx
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement

from tests.console.conftest import Console, wait_for

FOCUSABLE = "input, select, textarea, button, a[href], [tabindex]:not([tabindex='-1'])"
TAB_LIMIT = 80


def unnamed(driver: WebDriver) -> list[str]:
    """The shown controls whose accessible name is empty, as their markup."""
    return [
        element.get_attribute("outerHTML")[:160]
        for element in driver.find_elements(By.CSS_SELECTOR, FOCUSABLE)
        if element.is_displayed() and not element.accessible_name.strip()
    ]


def tab_to(driver: WebDriver, name: str) -> WebElement:
    """Press Tab until the focused element's accessible name is `name`."""
    seen = []
    for _ in range(TAB_LIMIT):
        ActionChains(driver).send_keys(Keys.TAB).perform()
        focused = driver.switch_to.active_element
        if focused.accessible_name == name:
            return focused
        seen.append(focused.accessible_name)
    raise AssertionError(f"{name!r} is not reached with Tab; reached: {seen}")


def from_the_top(driver: WebDriver) -> None:
    """Put the keyboard at the page's start (its first stop, "Skip to content"), as a person
    who has just opened it; the next Tab goes on from there."""
    driver.execute_script("document.querySelector('a.skip').focus()")


def press(driver: WebDriver, key: str) -> None:
    ActionChains(driver).send_keys(key).perform()


def shown_resources(driver: WebDriver) -> int:
    return len(driver.find_elements(By.CSS_SELECTOR, "#comparison thead th[data-resource]"))


def test_every_page_is_labelled_and_its_main_actions_work_from_the_keyboard(
    page: WebDriver, console: Console
) -> None:
    auth = {"Authorization": f"Bearer {console.admin}", "X-IRI-Facility-Project": "demo"}
    sleeper = httpx.post(
        f"{console.url}/api/v2/compute/job/local",
        headers=auth,
        json={"name": "sleeper", "executable": "/bin/sleep", "arguments": ["300"]},
    ).json()["id"]

    # Sign in: the token field has the focus; Tab to the button, Enter.
    page.get(f"{console.url}/console/sign-in")
    assert unnamed(page) == []
    assert page.switch_to.active_element.accessible_name == "Bearer token"
    page.switch_to.active_element.send_keys(console.admin)
    tab_to(page, "Sign in")
    press(page, Keys.ENTER)
    wait_for(page, "location.pathname === '/console/sites'")
    wait_for(page, "document.body.dataset.loaded === 'true'")

    # Sites: the menu and every filter are in the Tab order; Space ticks a box.
    assert unnamed(page) == []
    for name in ("Sites", "Try a job", "Jobs", "Profiles", "Sign out"):
        from_the_top(page)
        tab_to(page, name)
    everything = shown_resources(page)
    from_the_top(page)
    tab_to(page, "have NVIDIA GPUs")
    press(page, Keys.SPACE)
    wait_for(
        page,
        f"document.querySelectorAll('#comparison thead th[data-resource]').length < {everything}",
    )
    press(page, Keys.SPACE)
    wait_for(
        page,
        f"document.querySelectorAll('#comparison thead th[data-resource]').length === {everything}",
    )
    tab_to(page, "allow the container option")
    press(page, "--writable-tmpfs")
    wait_for(
        page,
        f"document.querySelectorAll('#comparison thead th[data-resource]').length < {everything}",
    )

    # The menu by Enter: Try a job; Space picks an example; Enter submits it.
    from_the_top(page)
    tab_to(page, "Try a job")
    press(page, Keys.ENTER)
    wait_for(page, "location.pathname === '/console/try'")
    tab_to(page, "Plain job")
    press(page, Keys.SPACE)
    wait_for(page, "document.getElementById('check-status').textContent === 'Checked.'", 30)
    assert unnamed(page) == []
    tab_to(page, "Submit to local")
    press(page, Keys.ENTER)
    wait_for(page, "document.activeElement.id === 'job-link'", 30)
    press(page, Keys.ENTER)

    # Jobs: the filters by keyboard, and Cancel by Space.
    wait_for(page, "location.pathname === '/console/jobs'")
    wait_for(page, f"document.querySelector(`tr.job[data-job='{sleeper}']`)")
    assert unnamed(page) == []
    tab_to(page, "state")
    press(page, Keys.ARROW_DOWN)  # "not finished"
    wait_for(page, "document.getElementById('filter-state').value === 'unfinished'")
    tab_to(page, "Cancel sleeper")
    press(page, Keys.SPACE)
    wait_for(
        page,
        f"document.querySelector(`tr.job[data-job='{sleeper}'] .state`)"
        "?.textContent === 'canceled'"
        f" || !document.querySelector(`tr.job[data-job='{sleeper}']`)",
        60,
    )
    state = httpx.get(f"{console.url}/api/v2/compute/status/local/{sleeper}", headers=auth).json()[
        "status"
    ]["state"]
    assert state == "canceled", state

    # Profiles: type into the text area, Tab to Check, Enter.
    from_the_top(page)
    tab_to(page, "Profiles")
    press(page, Keys.ENTER)
    wait_for(page, "location.pathname === '/console/profiles'")
    assert unnamed(page) == []
    tab_to(page, "profile YAML")
    press(page, "facility: [")
    tab_to(page, "Check")
    press(page, Keys.ENTER)
    wait_for(page, "!document.getElementById('problems').hidden", 30)
