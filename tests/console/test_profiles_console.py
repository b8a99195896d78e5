"""The Profiles page in a real headless Chromium against a real `serve`: a broken profile
pasted in the text area shows its errors with their line numbers (as `profile check` prints
them), markup in a profile is shown as text, and the shipped `local.yaml` picked as a file
shows its check matrix with every cell passing, the outcome in words. The page is for facility
admins: bob (no admin token) is not offered it, is told so when he opens it by its address,
and the API refuses him even if he brings the form back."""

from __future__ import annotations

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from iri_gateway.shipped import shipped_dir
from tests.console.conftest import Console, screenshots, sign_in, wait_for

LOCAL = shipped_dir("facility_profiles") / "local.yaml"


PROFILES_LINK = "nav a[href='/console/profiles']"
ADMINS_ONLY = (
    "Only facility admins can check profiles; ask an administrator for an admin "
    "token (iri-gateway token USER --admin)."
)


def open_profiles(driver: WebDriver, console: Console) -> None:
    sign_in(driver, console, console.admin)
    link = driver.find_element(By.CSS_SELECTOR, PROFILES_LINK)
    wait_for(driver, f'document.querySelector("{PROFILES_LINK}").checkVisibility()')
    link.click()
    wait_for(driver, "location.pathname === '/console/profiles'")
    wait_for(driver, "document.getElementById('who').textContent !== ''")
    assert not driver.find_element(By.ID, "admins-only").is_displayed()
    assert driver.find_element(By.ID, "profile-form").is_displayed()


def test_a_non_admin_is_not_offered_the_page_and_is_told_why(
    page: WebDriver, console: Console
) -> None:
    sign_in(page, console, console.bob)
    wait_for(page, "document.getElementById('who').textContent !== ''")
    assert page.find_element(By.ID, "who").text == "Signed in as bob (projects: bobs)"
    assert not page.find_element(By.CSS_SELECTOR, PROFILES_LINK).is_displayed()
    assert [a.text for a in page.find_elements(By.CSS_SELECTOR, "nav a") if a.is_displayed()] == [
        "Sites",
        "Try a job",
        "Jobs",
    ]

    page.get(f"{console.url}/console/profiles")
    wait_for(page, "!document.getElementById('admins-only').hidden")
    notice = page.find_element(By.ID, "admins-only")
    assert notice.is_displayed() and notice.text == ADMINS_ONLY
    assert not page.find_element(By.ID, "profile-form").is_displayed()
    assert not page.find_element(By.CSS_SELECTOR, PROFILES_LINK).is_displayed()
    screenshots(page, "profiles-not-admin")

    # Bringing the form back changes nothing: the API refuses him, and the page says why.
    page.execute_script("document.getElementById('profile-form').hidden = false")
    page.find_element(By.ID, "profile-text").send_keys("facility: {id: x}\n")
    check(page)
    error = page.find_element(By.ID, "error").text
    assert "403" in error and "user 'bob' is not a facility admin" in error, error
    assert "iri-gateway token bob --admin" in error, error
    assert page.find_element(By.ID, "matrix-section").get_attribute("hidden") is not None


def check(driver: WebDriver) -> None:
    driver.find_element(By.ID, "check").click()
    wait_for(
        driver,
        "!document.getElementById('problems').hidden"
        " || !document.getElementById('matrix-section').hidden"
        " || document.getElementById('error').textContent !== ''",
    )


def test_a_pasted_broken_profile_shows_its_line_numbers(page: WebDriver, console: Console) -> None:
    open_profiles(page, console)
    broken = LOCAL.read_text(encoding="utf-8").replace("  scheduler:", "  schedular:", 1)
    field = page.find_element(By.ID, "profile-text")
    field.send_keys(broken)
    assert page.execute_script("return document.getElementById('profile-text').value") == broken
    check(page)
    assert page.find_element(By.ID, "matrix-section").get_attribute("hidden") is not None
    items = [li.text for li in page.find_elements(By.CSS_SELECTOR, "#problem-list li")]
    assert (
        "line 13 profile.yaml:13: resources[0].schedular: unknown key (check the spelling "
        "against schema.json)" in items
    ), items
    assert "line 10 profile.yaml:10: resources[0].scheduler: Field required" in items, items
    assert "does not load: 2 error(s)" in page.find_element(By.ID, "check-status").text
    screenshots(page, "profiles-errors")


def test_markup_in_a_profile_is_shown_as_text(page: WebDriver, console: Console) -> None:
    open_profiles(page, console)
    hostile = "facility:\n  id: x\n  name: y\n  '<img src=x onerror=alert(1)>': 1\n"
    page.find_element(By.ID, "profile-text").send_keys(hostile)
    check(page)
    items = [li.text for li in page.find_elements(By.CSS_SELECTOR, "#problem-list li")]
    assert any(
        "line 4" in i and "facility.<img src=x onerror=alert(1)>: unknown key" in i for i in items
    ), items
    assert page.find_elements(By.CSS_SELECTOR, "#main img") == []


def test_the_shipped_local_profile_picked_as_a_file_passes_every_cell(
    page: WebDriver, console: Console
) -> None:
    open_profiles(page, console)
    page.find_element(By.ID, "profile-file").send_keys(str(LOCAL))
    wait_for(page, "document.getElementById('profile-text').value.length > 0")
    assert page.execute_script(
        "return document.getElementById('profile-text').value"
    ) == LOCAL.read_text(encoding="utf-8")
    assert page.find_element(By.ID, "profile-name").text == "local.yaml"
    check(page)
    assert page.find_element(By.ID, "error").text == ""
    rows = page.execute_script(
        "return [...document.querySelectorAll('#matrix tbody tr')].map("
        "r => [...r.cells].map(c => c.textContent))"
    )
    # local: podman and bare execution, four sample jobs each; the ones local cannot run
    # (GPU, MPI) are "not applicable", none fails, and the CPU job passes on both.
    assert len(rows) == 8, rows
    assert not any("FAIL" in row[3] for row in rows), rows
    passing = {(row[0], row[1], row[2]) for row in rows if row[3] == "pass (ok)"}
    assert passing == {("local", "podman", "cpu"), ("local", "none", "cpu")}, rows
    assert all(row[3] in ("pass (ok)", "not applicable (unsupported)") for row in rows), rows
    summary = page.find_element(By.ID, "matrix-summary").text
    assert summary.startswith("Passed: no cell failed.")
    assert "bash -n and shellcheck -S warning" in summary
    screenshots(page, "profiles-matrix")
