"""The README's promise, walked as a newcomer walks it: run the README's first command, open
the address it prints in a browser, sign in with the token it prints and, guided only by
what the pages show (links and buttons by their visible words, fields by their labels),
compare the sites, try a job, submit it and read its output.

The server is the README's command itself, on a fresh home (a first start: it creates the
data folder and prints the token), in a real headless Chromium; no address is typed after
the first one.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement

from tests.console.conftest import ROOT, chromium, wait_for
from tests.support.serve import clean_env, free_port, serve_process

PRINTED_TOKEN = re.compile(r"\(shown once\):\n\s+(\S+)\n")
PRINTED_ADDRESS = re.compile(
    r"Web console: open (http://\S+?)/? in a browser and sign in "
    r"with the token above\."
)


def readme_first_command() -> str:
    """The README's first shell block, which must be the install and the serve."""
    block = re.search(
        r"```sh\n(.+?)\n```", (ROOT / "README.md").read_text(encoding="utf-8"), re.DOTALL
    )
    assert block is not None
    return block.group(1).strip()


def serve_argv(port: int) -> list[str]:
    """The README's serve command, as installed (`pip install .` is this venv's editable
    install: the same `iri-gateway` entry point), with one option added: `--port` on a free
    port, because the README's 8000 may be taken on a shared test machine by something
    else. The address the browser opens is still the one serve prints."""
    install, serve = readme_first_command().split(" && ")
    assert install == "pip install .", install
    words = shlex.split(serve)
    assert words[:2] == ["iri-gateway", "serve"], words
    entry_point = Path(sys.executable).parent / "iri-gateway"
    assert entry_point.exists(), f"{entry_point}: the package's entry point is not installed"
    return [str(entry_point), *words[1:], "--port", str(port)]


def printed(log: Path, process: subprocess.Popen[bytes], timeout: float = 60) -> tuple[str, str]:
    """The console address and the token serve printed, once both are out."""
    deadline = time.monotonic() + timeout
    while True:
        output = log.read_text(errors="replace")
        address, token = PRINTED_ADDRESS.search(output), PRINTED_TOKEN.search(output)
        if address and token:
            return address.group(1), token.group(1)
        assert process.poll() is None, f"serve exited: {output}"
        assert time.monotonic() < deadline, f"serve printed no address and token: {output}"
        time.sleep(0.1)


@pytest.fixture
def newcomer(tmp_path: Path) -> Iterator[WebDriver]:
    driver = chromium(tmp_path / "chromium-profile")
    try:
        yield driver
    finally:
        driver.quit()


def labelled(driver: WebDriver, label: str) -> WebElement:
    """The form field whose label reads `label`, found as a person finds it."""
    found = driver.find_element(By.XPATH, f"//label[normalize-space()='{label}']")
    return driver.find_element(By.ID, found.get_attribute("for") or "")


def button(driver: WebDriver, words: str) -> WebElement:
    return driver.find_element(By.XPATH, f"//button[normalize-space()='{words}']")


def test_a_newcomer_signs_in_compares_sites_tries_and_submits_a_job_and_reads_its_output(
    tmp_path: Path, newcomer: WebDriver
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in clean_env().items() if not k.startswith("XDG_")}
    env["HOME"] = str(home)
    log = tmp_path / "serve.log"
    with serve_process(serve_argv(free_port()), log, env) as process:
        address, token = printed(log, process)
        assert (home / ".local" / "share" / "iri-gateway" / "tokens.json").exists()
        deadline = time.monotonic() + 60
        while True:  # serve prints before its server listens
            try:
                httpx.get(address, timeout=2)
                break
            except httpx.TransportError:
                assert process.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "the printed address never answered"
                time.sleep(0.1)
        driver = newcomer

        driver.get(address)  # the only address typed: the rest is links and buttons
        labelled(driver, "Bearer token").send_keys(token)
        button(driver, "Sign in").click()

        wait_for(driver, "document.body.dataset.loaded === 'true'")
        assert driver.find_element(By.TAG_NAME, "h1").text == "Sites"
        columns = [
            th.text.split("\n")[0]
            for th in driver.find_elements(By.CSS_SELECTOR, "#comparison thead th")
        ]
        assert "local" in columns, columns
        # One column only on a first start: the page says how to get sites to compare.
        assert driver.find_element(
            By.XPATH, "//p[starts-with(normalize-space(), 'Showing 1 of 1 resources.')]"
        ).text == (
            "Showing 1 of 1 resources. Only local is loaded: to compare sites, start the "
            "gateway with their profiles (iri-gateway serve --profiles DIR)."
        )
        assert driver.find_element(By.ID, "who").text == (
            "Signed in as admin (projects: demo; facility admin)"
        )

        driver.find_element(By.LINK_TEXT, "Try a job").click()
        wait_for(driver, "document.querySelector('h1')?.textContent === 'Try a job'")
        button(driver, "Plain job").click()
        wait_for(driver, "document.getElementById('check-status').textContent === 'Checked.'", 30)
        local = driver.find_element(By.XPATH, "//article[@aria-label='local: can run']")
        script = local.find_element(By.XPATH, ".//pre[@aria-label='Batch script for local']")
        assert "/bin/echo" in script.text and script.is_displayed(), script.text
        assert (
            labelled(
                driver, "project to charge (when the JobSpec has no attributes.account)"
            ).get_attribute("value")
            == "demo"
        )
        button(driver, "Submit to local").click()

        link = wait_for(
            driver,
            "[...document.querySelectorAll('a')].find("
            "a => a.textContent === 'its state and output on the Jobs page')",
            30,
        )
        assert isinstance(link, WebElement)
        said = driver.find_element(
            By.XPATH, "//p[starts-with(normalize-space(),'Submitted to local as job ')]"
        ).text
        job_id = said.removeprefix("Submitted to local as job ").split(":")[0]
        link.click()

        wait_for(driver, "document.querySelector('h1')?.textContent === 'Jobs'")
        row = "[...document.querySelectorAll('tr')].find(r => r.textContent.includes("
        wait_for(driver, f"{row}'{job_id}'))?.textContent.includes('completed')", 90)
        wait_for(
            driver,
            "[...document.querySelectorAll('pre')].some(p => p.textContent === "
            "'hello from the console $(not a command)\\n')",
            30,
        )
        assert "stdout: last 20 lines of" in driver.find_element(By.TAG_NAME, "main").text
