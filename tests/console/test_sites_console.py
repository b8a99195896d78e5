"""The console in a real headless Chromium against a real `serve`: sign-in, the sites page,
its filters, profile strings shown as text, and nothing fetched from beyond 127.0.0.1.

Each test takes screenshots at 1280 and 390 px (into docs/console/ with
IRI_UPDATE_SCREENSHOTS=1; the README shows one).
"""

from __future__ import annotations

from typing import Any

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver

from iri_gateway.console.routes import asset_version
from tests.console.conftest import (
    Console,
    requested_urls,
    screenshots,
    set_width,
    sign_in,
    wait_for,
)

SHIPPED = {
    "aurora",
    "polaris",
    "cdi-gpu",
    "oci-cpu",
    "lanl-gpu",
    "lanl-cpu",
    "local",
    "perlmutter-gpu",
    "perlmutter-cpu",
    "frontier",
}


def shown_resources(driver: WebDriver) -> list[str]:
    return [
        th.get_attribute("data-resource") or ""
        for th in driver.find_elements(By.CSS_SELECTOR, "#comparison thead th[data-resource]")
    ]


def row(driver: WebDriver, label: str) -> dict[str, Any]:
    """The row whose header is `label`: its cells by resource and whether it is marked."""
    for tr in driver.find_elements(By.CSS_SELECTOR, "#comparison tbody tr:not(.section)"):
        header = tr.find_element(By.CSS_SELECTOR, "th")
        marked = bool(tr.find_elements(By.CSS_SELECTOR, ".differs-mark"))
        name = header.text.removesuffix("differs").strip().removesuffix("≠").strip()
        if name == label:
            cells = {
                td.get_attribute("data-resource"): td.text
                for td in tr.find_elements(By.CSS_SELECTOR, "td")
            }
            return {"cells": cells, "differs": marked, "header": header.text}
    raise AssertionError(f"no row {label!r}")


def open_sites(driver: WebDriver, console: Console) -> None:
    sign_in(driver, console, console.admin)
    wait_for(driver, "document.body.dataset.loaded === 'true'")


def test_the_printed_address_leads_to_sign_in_and_a_wrong_token_shows_the_api_reason(
    page: WebDriver, console: Console
) -> None:
    assert f"Web console: open {console.url}/ in a browser" in console.served.output()
    page.get(f"{console.url}/")
    wait_for(page, "location.pathname === '/console/sign-in'")
    assert "next=%2Fconsole%2Fsites" in page.current_url

    field = page.find_element(By.ID, "token")
    field.send_keys("not-a-token", Keys.ENTER)
    error = page.find_element(By.ID, "sign-in-error")
    wait_for(page, "document.getElementById('sign-in-error').textContent !== ''")
    assert error.text == ("The gateway refused this token (401): the bearer token is not valid")
    assert page.execute_script("return sessionStorage.length") == 0
    assert page.execute_script("return location.pathname") == "/console/sign-in"
    screenshots(page, "sign-in-refused")

    field.clear()
    field.send_keys(console.admin, Keys.ENTER)
    wait_for(page, "location.pathname === '/console/sites'")
    wait_for(page, "document.getElementById('who').textContent !== ''")
    assert page.find_element(By.ID, "who").text == (
        "Signed in as admin (projects: demo; facility admin)"
    )

    page.find_element(By.ID, "sign-out").click()
    wait_for(page, "location.pathname === '/console/sign-in'")
    assert page.execute_script("return sessionStorage.length") == 0
    assert page.find_element(By.ID, "signed-out").is_displayed()
    page.get(f"{console.url}/console/sites")
    wait_for(page, "location.pathname === '/console/sign-in'")


def test_the_sites_page_shows_every_resource_as_the_api_describes_it(
    page: WebDriver, console: Console
) -> None:
    open_sites(page, console)
    capabilities = {c["resource"]: c for c in console.capabilities()}
    assert set(capabilities) == SHIPPED | {"markup-lab"}
    assert shown_resources(page) == list(capabilities)
    assert page.find_element(By.ID, "count").text == (
        f"Showing {len(capabilities)} of {len(capabilities)} resources."
    )

    vendors = row(page, "GPU vendor")
    assert vendors["cells"] == {
        rid: str(c["hardware"].get("gpu_vendor", "none")) for rid, c in capabilities.items()
    }
    assert vendors["differs"], "NVIDIA, AMD, Intel and none differ"
    cores = row(page, "cores per node")["cells"]
    assert cores == {rid: str(c["hardware"]["cpu_cores"]) for rid, c in capabilities.items()}
    assert row(page, "scheduler")["cells"]["perlmutter-gpu"] == "slurm"
    assert row(page, "queue regular")["cells"]["perlmutter-gpu"].startswith("default · max 48 h")
    assert row(page, "queue regular")["cells"]["aurora"] == "not offered"
    tmpfs = row(page, "apptainer: allowed extra options")["cells"]
    assert tmpfs["frontier"] == "--writable-tmpfs, --contain, --no-home"
    assert row(page, "podman: CDI devices")["cells"]["cdi-gpu"] == "nvidia.com/gpu=*"
    assert row(page, "charliecloud: mount sources")["cells"]["lanl-gpu"] == (
        "/users, /lustre/scratch5 (read-write only: no read-only binds)"
    )
    assert row(page, "MPI flavour")["cells"]["frontier"] == "cray-mpich"
    assert row(page, "interconnect")["cells"]["frontier"] == "slingshot-11"
    same = row(page, "roles at most")
    assert set(same["cells"].values()) == {"16"} and not same["differs"]

    # Every field has a label, and the checkboxes work from the keyboard.
    unlabelled = page.execute_script(
        "return [...document.querySelectorAll('input')].filter(i => !i.labels.length)"
        ".map(i => i.id)"
    )
    assert unlabelled == []
    page.find_element(By.ID, "filter-nvidia").send_keys(Keys.SPACE)
    nvidia = [rid for rid, c in capabilities.items() if c["hardware"].get("gpu_vendor") == "nvidia"]
    wait_for(
        page,
        f"document.querySelectorAll('#comparison thead th[data-resource]').length"
        f" === {len(nvidia)}",
    )
    assert shown_resources(page) == nvidia == ["polaris", "cdi-gpu", "lanl-gpu", "perlmutter-gpu"]
    assert page.find_element(By.ID, "count").text == (
        f"Showing 4 of {len(capabilities)} resources."
    )
    screenshots(page, "sites-nvidia")
    page.find_element(By.ID, "filter-nvidia").send_keys(Keys.SPACE)

    option = page.find_element(By.ID, "filter-option")
    option.send_keys("--writable-tmpfs")
    allowing = [
        rid
        for rid, c in capabilities.items()
        if any("--writable-tmpfs" in r["allowed_extra_options"] for r in c["runtimes"])
    ]
    wait_for(
        page,
        f"document.querySelectorAll('#comparison thead th[data-resource]').length"
        f" === {len(allowing)}",
    )
    assert shown_resources(page) == allowing
    assert set(allowing) == {"aurora", "polaris", "cdi-gpu", "frontier"}
    option.clear()
    option.send_keys("--tmpfs=/scratch")  # matched against the allowed patterns
    wait_for(page, "document.getElementById('count').textContent.startsWith('Showing 2 ')")
    assert shown_resources(page) == ["cdi-gpu", "local"]
    option.clear()
    option.send_keys(Keys.BACKSPACE)
    page.find_element(By.ID, "filter-apptainer").send_keys(Keys.SPACE)
    wait_for(page, "document.getElementById('count').textContent.startsWith('Showing 4 ')")
    assert shown_resources(page) == ["aurora", "polaris", "cdi-gpu", "frontier"]
    page.find_element(By.ID, "filter-apptainer").send_keys(Keys.SPACE)
    wait_for(
        page,
        f"document.getElementById('count').textContent.startsWith('Showing {len(capabilities)} ')",
    )
    screenshots(page, "sites")

    # At phone width the page itself does not scroll sideways: only the table's region does.
    set_width(page, "phone")
    assert page.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")
    region = page.find_element(By.ID, "comparison")
    assert page.execute_script("return arguments[0].scrollWidth > arguments[0].clientWidth", region)
    assert region.get_attribute("tabindex") == "0", "the region scrolls with the keyboard"


def test_profile_strings_are_shown_as_text_and_never_run(page: WebDriver, console: Console) -> None:
    open_sites(page, console)
    page.find_element(By.ID, "filter-text").send_keys("markup")
    wait_for(page, "document.getElementById('count').textContent.startsWith('Showing 1 ')")
    assert shown_resources(page) == ["markup-lab"]
    assert row(page, "name")["cells"]["markup-lab"] == '<img src=x onerror="window.__pwned = 3">'
    assert row(page, "description")["cells"]["markup-lab"] == (
        '<b onmouseover="window.__pwned = 4">bold</b> & <i>italic</i>'
    )
    assert row(page, "site_note")["cells"]["markup-lab"] == (
        '<img src=x onerror="window.__pwned = 5">'
    )
    assert page.find_elements(By.CSS_SELECTOR, "main img, main b, main i, main script") == []
    assert page.execute_script("return window.__pwned") is None
    screenshots(page, "sites-markup-as-text")


def test_the_console_loads_only_from_this_server(page: WebDriver, console: Console) -> None:
    open_sites(page, console)
    urls = requested_urls(page)
    static = f"{console.url}/console/static/{asset_version()}"
    assert f"{static}/console.css" in urls and f"{static}/sites.js" in urls, urls
    assert f"{static}/api.js" in urls, "the module's imports follow its versioned address"
    asked = [u for u in urls if "/api/v2/" in u]
    assert f"{console.url}/api/v2/compute/capabilities" in asked, asked
    assert not [u for u in asked if "/capabilities/" in u], "one request, not one per resource"
    elsewhere = [u for u in urls if not u.startswith(f"{console.url}/")]
    assert elsewhere == [], elsewhere
    # The style sheet applied and the modules ran (a blocked asset would leave neither).
    background = page.execute_script(
        "return getComputedStyle(document.querySelector('header.bar')).backgroundColor"
    )
    assert background == "rgb(29, 78, 137)"
    problems = [e for e in page.get_log("browser") if e["level"] == "SEVERE"]
    assert problems == [], problems
