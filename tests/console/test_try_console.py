"""The Try a job page in a real headless Chromium against a real `serve`: a job a resource
cannot run shows each reason with the field it concerns (as placement gives it), a JSON
syntax error its line and column (the JSON Schema check and a 422: test_try_schema.py),
the script shown for `local` is byte for byte `iri-gateway render` with the serve's profiles,
and a job submitted from the page reaches `completed` on `local` with its output on the Jobs
page."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver

from iri_gateway.console.routes import STATIC_DIR
from tests.console.conftest import (
    HOSTILE_PROFILE,
    ROOT,
    Console,
    screenshots,
    sign_in,
    wait_for,
)
from tests.support.serve import clean_env

CHECKED = "document.getElementById('check-status').textContent"


def open_try(driver: WebDriver, console: Console) -> None:
    sign_in(driver, console, console.admin)
    driver.find_element(By.LINK_TEXT, "Try a job").click()
    wait_for(driver, "location.pathname === '/console/try'")


def example(driver: WebDriver, name: str) -> None:
    """Load an example by its button and wait until the gateway has checked it."""
    driver.find_element(By.CSS_SELECTOR, f"button[data-example='{name}']").click()
    wait_for(driver, f"{CHECKED} === 'Checked.'", 30)


def typed(driver: WebDriver, text: str) -> None:
    field = driver.find_element(By.ID, "spec")
    field.clear()
    field.send_keys(text)


def card_problems(driver: WebDriver, resource: str) -> list[str]:
    return driver.execute_script(
        f"return [...document.querySelectorAll(`article[data-resource='{resource}'] "
        "ol.reasons li`)].map(li => li.textContent)"
    )


def test_a_job_that_cannot_run_shows_every_reason_with_its_field(
    page: WebDriver, console: Console
) -> None:
    open_try(page, console)
    example(page, "gpu-mpi")
    spec = (STATIC_DIR / "example-gpu-mpi.json").read_text(encoding="utf-8")
    assert page.execute_script("return document.getElementById('spec').value") == spec
    placements = httpx.post(
        f"{console.url}/api/v2/compute/placement",
        content=spec,
        headers={"Authorization": f"Bearer {console.admin}", "Content-Type": "application/json"},
    ).json()
    shown = page.execute_script(
        "return [...document.querySelectorAll('article.placement')].map("
        "a => [a.dataset.resource, a.querySelector('.verdict').textContent])"
    )
    assert shown == [
        [p["resource"], "can run" if p["runnable"] else "cannot run"] for p in placements
    ]
    refused = [p for p in placements if not p["runnable"]]
    assert any(p["resource"] == "local" for p in refused), placements
    for placement in refused:
        expected = [
            f"{q['name']}: {q['reason']}" + (f" (offered: {q['offered']})" if q["offered"] else "")
            for q in placement["problems"]
        ]
        assert card_problems(page, placement["resource"]) == expected
    local = next(p for p in refused if p["resource"] == "local")
    fields = page.execute_script(
        "return [...document.querySelectorAll(`article[data-resource='local'] "
        "ol.reasons li .field-path`)].map(c => c.textContent)"
    )
    assert fields == [q["name"] for q in local["problems"]] and all(fields), fields
    assert page.find_elements(By.CSS_SELECTOR, "article[data-resource='local'] pre") == []
    screenshots(page, "try-refused")


def test_a_json_syntax_error_shows_its_line_and_column(page: WebDriver, console: Console) -> None:
    open_try(page, console)
    typed(page, '{\n  "executable": "/bin/echo",\n  "arguments": ["a" "b"]\n}')
    wait_for(page, "document.getElementById('syntax').textContent !== ''", 10)
    message = page.find_element(By.ID, "syntax").text
    assert message.startswith("JSON syntax error at line 3, column 21: "), message
    assert page.find_element(By.ID, "placement-section").get_attribute("hidden") is not None
    screenshots(page, "try-syntax")


def test_the_script_for_local_is_byte_for_byte_iri_gateway_render(
    page: WebDriver, console: Console, tmp_path: Path
) -> None:
    open_try(page, console)
    example(page, "plain")
    wait_for(page, "document.querySelector(`article[data-resource='local'] pre.script-text`)")
    shown = page.execute_script(
        "return document.querySelector(`article[data-resource='local'] pre.script-text`)"
        ".textContent"
    )
    job = tmp_path / "job.json"
    job.write_bytes((STATIC_DIR / "example-plain.json").read_bytes())
    rendered = subprocess.run(
        [
            sys.executable,
            "-m",
            "iri_gateway",
            "render",
            str(job),
            "--resource",
            "local",
            "--profile",
            str(ROOT / "facility_profiles"),
            "--profile",
            str(HOSTILE_PROFILE),
        ],
        capture_output=True,
        env=clean_env(),
        check=True,
        timeout=60,
    )
    assert shown.encode("utf-8") == rendered.stdout
    assert "'$(not a command)'" in shown
    screenshots(page, "try-script")


def test_a_job_submitted_from_the_page_completes_and_shows_its_output(
    page: WebDriver, console: Console
) -> None:
    open_try(page, console)
    example(page, "plain")
    assert page.find_element(By.ID, "project").get_attribute("value") == "demo"
    page.find_element(By.CSS_SELECTOR, "article[data-resource='local'] button.submit").click()
    wait_for(page, "document.getElementById('job-link')", 30)
    status = page.find_element(By.ID, "submitted").text
    assert status.startswith("Submitted to local as job "), status
    job_id = status.removeprefix("Submitted to local as job ").split(":")[0]
    page.find_element(By.ID, "job-link").click()
    wait_for(page, "location.pathname === '/console/jobs'")
    wait_for(
        page,
        f"document.querySelector(`tr.job[data-job='{job_id}'] .state`)"
        "?.textContent === 'completed'",
        90,
    )
    wait_for(
        page,
        f"document.querySelector(`tr[data-detail-of='{job_id}'] .output-stdout pre`)"
        "?.textContent === 'hello from the console $(not a command)\\n'",
        30,
    )
    screenshots(page, "try-submitted")


def test_flavours_show_which_was_chosen_rejected_or_outranked_and_why(
    page: WebDriver, console: Console
) -> None:
    open_try(page, console)
    example(page, "flavours")
    spec = (STATIC_DIR / "example-flavours.json").read_text(encoding="utf-8")
    placements = httpx.post(
        f"{console.url}/api/v2/compute/placement",
        content=spec,
        headers={"Authorization": f"Bearer {console.admin}", "Content-Type": "application/json"},
    ).json()
    statuses = set()
    for placement in placements:
        rows = page.execute_script(
            f"return [...document.querySelectorAll(`article[data-resource='"
            f"{placement['resource']}'] table.flavours tbody tr`)].map("
            "r => [...r.cells].map(c => c.textContent))"
        )
        assert rows == [
            [f["name"], str(f["priority"]), f["status"], f["reason"] or ""]
            for f in placement["flavours"]
        ], placement["resource"]
        statuses |= {f["status"] for f in placement["flavours"]}
    # The shipped sites give each outcome somewhere: cuda on the GPU sites, cpu elsewhere.
    assert statuses == {"chosen", "rejected", "outranked"}, statuses
    local = next(p for p in placements if p["resource"] == "local")
    chosen = page.execute_script(
        "return document.querySelector(`article[data-resource='local'] dl.facts`).textContent"
    )
    assert f"flavour{local['flavour']} (priority {local['priority']})" in chosen
    screenshots(page, "try-flavours")


def test_the_cluster_example_from_the_keyboard_shows_every_plan_as_the_api_gives_it(
    page: WebDriver, console: Console
) -> None:
    """Each runnable resource's script is the plan API's, the members' roles included."""
    open_try(page, console)
    button = page.find_element(By.CSS_SELECTOR, "button[data-example='roles']")
    page.execute_script("arguments[0].focus()", button)
    button.send_keys(Keys.ENTER)
    wait_for(page, f"{CHECKED} === 'Checked.'", 30)
    spec = (STATIC_DIR / "example-roles.json").read_text(encoding="utf-8")
    auth = {"Authorization": f"Bearer {console.admin}", "Content-Type": "application/json"}
    placements = httpx.post(
        f"{console.url}/api/v2/compute/placement", content=spec, headers=auth
    ).json()
    runnable = [p["resource"] for p in placements if p["runnable"]]
    assert runnable, placements
    for resource in runnable:
        plan = httpx.post(
            f"{console.url}/api/v2/compute/plan/{resource}", content=spec, headers=auth
        ).json()
        shown = page.execute_script(
            f"return document.querySelector(`article[data-resource='{resource}'] "
            "pre.script-text`).textContent"
        )
        assert shown == plan["script"], resource
        assert "worker" in shown
