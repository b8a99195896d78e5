"""The Profiles page in a real headless Chromium against a real `serve`: a broken profile
pasted in the text area shows its errors with their line numbers (as `profile check` prints
them), markup in a profile is shown as text, and the shipped `local.yaml` picked as a file
shows its check matrix with every cell passing, the outcome in words."""

from __future__ import annotations

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from iri_gateway.shipped import shipped_dir
from tests.console.conftest import Console, screenshots, sign_in, wait_for

LOCAL = shipped_dir("facility_profiles") / "local.yaml"


def open_profiles(driver: WebDriver, console: Console) -> None:
    sign_in(driver, console, console.admin)
    driver.find_element(By.LINK_TEXT, "Profiles").click()
    wait_for(driver, "location.pathname === '/console/profiles'")


def check(driver: WebDriver) -> None:
    driver.find_element(By.ID, "check").click()
    wait_for(driver, "!document.getElementById('problems').hidden"
                     " || !document.getElementById('matrix-section').hidden"
                     " || document.getElementById('error').textContent !== ''")


def test_a_pasted_broken_profile_shows_its_line_numbers(
    page: WebDriver, console: Console
) -> None:
    open_profiles(page, console)
    broken = LOCAL.read_text(encoding="utf-8").replace("  scheduler:", "  schedular:", 1)
    field = page.find_element(By.ID, "profile-text")
    field.send_keys(broken)
    assert page.execute_script("return document.getElementById('profile-text').value") == broken
    check(page)
    assert page.find_element(By.ID, "matrix-section").get_attribute("hidden") is not None
    items = [li.text for li in page.find_elements(By.CSS_SELECTOR, "#problem-list li")]
    assert "line 13 profile.yaml:13: resources[0].schedular: unknown key (check the spelling " \
           "against schema.json)" in items, items
    assert "line 10 profile.yaml:10: resources[0].scheduler: Field required" in items, items
    assert "does not load: 2 error(s)" in page.find_element(By.ID, "check-status").text
    screenshots(page, "profiles-errors")


def test_markup_in_a_profile_is_shown_as_text(page: WebDriver, console: Console) -> None:
    open_profiles(page, console)
    hostile = "facility:\n  id: x\n  name: y\n  '<img src=x onerror=alert(1)>': 1\n"
    page.find_element(By.ID, "profile-text").send_keys(hostile)
    check(page)
    items = [li.text for li in page.find_elements(By.CSS_SELECTOR, "#problem-list li")]
    assert any("line 4" in i and "facility.<img src=x onerror=alert(1)>: unknown key" in i
               for i in items), items
    assert page.find_elements(By.CSS_SELECTOR, "#main img") == []


def test_the_shipped_local_profile_picked_as_a_file_passes_every_cell(
    page: WebDriver, console: Console
) -> None:
    open_profiles(page, console)
    page.find_element(By.ID, "profile-file").send_keys(str(LOCAL))
    wait_for(page, "document.getElementById('profile-text').value.length > 0")
    assert page.execute_script(
        "return document.getElementById('profile-text').value") == LOCAL.read_text(
            encoding="utf-8")
    assert page.find_element(By.ID, "profile-name").text == "local.yaml"
    check(page)
    assert page.find_element(By.ID, "error").text == ""
    rows = page.execute_script(
        "return [...document.querySelectorAll('#matrix tbody tr')].map("
        "r => [...r.cells].map(c => c.textContent))")
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
